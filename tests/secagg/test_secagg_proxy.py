"""Secure aggregation through proxies (:mod:`fedrank.secagg.proxy`): proxies add their
clients' masked inputs and forward one sum each; the server's result is the same exact sum
as without proxies (with dropouts before and after the masked input), a proxy's forwarded
sum looks uniform (the senders' self masks), and malformed sums are refused."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.secagg import field
from fedrank.secagg.errors import ProtocolError, SignatureError
from fedrank.secagg.field import FixedPointEncoder
from fedrank.secagg.inprocess import run_session
from fedrank.secagg.messages import MaskedSum
from fedrank.secagg.protocol import SecAggParams
from fedrank.secagg.proxy import MaskedInputProxy
from tests.secagg.test_secagg_protocol import (
    SESSION,
    Session,
    _assert_uniform_and_unlike,
    float_inputs,
    seeded,
)


def test_proxies_summing_masked_inputs_give_the_exact_sum_with_dropouts() -> None:
    n, t, d = 24, 13, 22
    enc = FixedPointEncoder.with_max_scale(n, max_abs=1.0)
    inputs = {u: enc.encode(x) for u, x in float_inputs(n, d, seed=2).items()}
    proxies = {u: (u - 1) // 8 for u in range(1, 21)}  # 3 proxies of 8; 21..24 direct
    drop = {3: "masked_input", 12: "masked_input", 5: "unmasking", 22: "unmasking"}
    params = SecAggParams(SESSION, t, d)
    result, trace = run_session(
        params, inputs, drop_before=drop, randbits=seeded(1), proxies=proxies
    )
    contributors = [u for u in range(1, n + 1) if drop.get(u) != "masked_input"]
    assert result.contributors == tuple(contributors)
    assert result.dropped == (3, 12)
    assert np.array_equal(result.total, field.sum_vectors([inputs[u] for u in contributors]))
    plain, _ = run_session(params, inputs, drop_before=drop, randbits=seeded(1))
    assert np.array_equal(plain.total, result.total)
    assert len(trace.upload_bytes["masked_input"]) == len(contributors)


def test_a_proxys_sum_looks_uniform_to_the_proxy() -> None:
    """The proxy adds four clients' masked inputs of the same very non-uniform vector: the
    sum still carries their self masks."""
    n, t, d = 6, 4, 4096
    enc = FixedPointEncoder.with_max_scale(n, max_abs=1.0)
    x = enc.encode(np.linspace(-1.0, 1.0, d))
    s = Session(n, t, d, seed=6)
    ids = list(range(1, n + 1))
    masking = s.check(s.share(ids, s.advertise(ids)))
    proxy = MaskedInputProxy(d)
    for u in ids[:4]:
        proxy.receive(s.clients[u].masked_input(masking, x))
    forwarded_sum = proxy.forward()
    assert forwarded_sum.senders == (1, 2, 3, 4)
    _assert_uniform_and_unlike(forwarded_sum.masked, field.sum_vectors([x] * 4))
    s.server.receive_masked_sum(forwarded_sum)
    for u in ids[4:]:
        s.server.receive_masked_input(s.clients[u].masked_input(masking, x))
    request = s.server.close_masked_input()
    result, _ = s.unmask(ids, request)
    assert np.array_equal(result.total, field.sum_vectors([x] * n))


def test_malformed_masked_sums_are_refused() -> None:
    n, t, d = 5, 3, 8
    s = Session(n, t, d, seed=7)
    ids = [1, 2, 3, 4]  # client 5 never shares keys: not in U2
    masking = s.check(s.share(ids, s.advertise(list(range(1, n + 1))[:4])))
    x = np.zeros(d, dtype=np.uint64)
    y = {u: s.clients[u].masked_input(masking, x) for u in ids}
    zero = np.zeros(d, dtype=np.uint64)

    def signed(senders: tuple[int, ...]) -> MaskedSum:
        digests = tuple(y[u].digest if u in y else b"" for u in senders)
        return MaskedSum(senders, zero, digests, tuple(y[u].signature for u in senders))

    for message, match in ((MaskedSum((), zero, (), ()), "distinct senders"),
                           (MaskedSum((2, 2), zero, (), ()), "distinct senders"),
                           (MaskedSum((2,), zero, (), ()), "one digest and one signature"),
                           (MaskedSum((2, 5), zero, (b"", b""), (b"", b"")),
                            r"\[5\].*not in U2")):  # fmt: skip
        with pytest.raises(ProtocolError, match=match):
            s.server.receive_masked_sum(message)
    # A sender whose signature is not its own (the proxy claims client 3 with 2's): refused,
    # naming it; client 3's own input is still accepted.
    forged = MaskedSum((2, 3), zero, (y[2].digest, y[2].digest), (y[2].signature,) * 2)
    with pytest.raises(SignatureError, match="client 3's MaskedInputCollection"):
        s.server.receive_masked_sum(forged)
    s.server.receive_masked_input(y[3])
    s.server.receive_masked_input(y[1])
    with pytest.raises(ProtocolError, match=r"\[1\] sent a masked input twice"):
        s.server.receive_masked_sum(signed((1, 2)))
    proxy = MaskedInputProxy(d)
    with pytest.raises(ProtocolError, match="nothing to forward"):
        proxy.forward()
    proxy.receive(y[2])
    with pytest.raises(ProtocolError, match="twice"):
        proxy.receive(y[2])
    s.server.receive_masked_sum(proxy.forward())
    with pytest.raises(ProtocolError, match="once"):
        proxy.forward()
    with pytest.raises(ProtocolError, match="Round 2 is over"):
        proxy.receive(y[4])
