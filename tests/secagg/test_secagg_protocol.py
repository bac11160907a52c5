"""The rounds of Bonawitz et al. 2017 (fedrank.secagg.client and fedrank.secagg.server):
exact sums with dropouts at every round, aborts below the threshold, masked inputs that look
uniform, a delayed client still hidden by its self mask, detected tampering, and a server
that never holds an individual unmasked vector."""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest
from scipy import stats

from fedrank.errors import ConfigError, DataFormatError
from fedrank.secagg import field, masks, shamir, signing
from fedrank.secagg.client import SecAggClient
from fedrank.secagg.errors import (
    DuplicateKeyError,
    ProtocolError,
    RoundAbortedError,
    ShareReconstructionError,
    SignatureError,
)
from fedrank.secagg.field import FixedPointEncoder
from fedrank.secagg.inprocess import run_session
from fedrank.secagg.messages import (
    AggregationResult,
    ForwardedShares,
    KeyDirectory,
    MaskedInput,
    MaskingSet,
    ShareCheck,
    ShareKeys,
    UnmaskingShares,
    UnmaskRequest,
)
from fedrank.secagg.protocol import SecAggParams
from fedrank.secagg.server import SecAggServer, exclusions

SESSION = b"fedrank-test-session"


def seeded(seed: int):
    return random.Random(seed).getrandbits


def float_inputs(n: int, d: int, seed: int) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    # Some coordinates beyond the bound 1, so that clipping is part of what is checked.
    return {u: rng.uniform(-1.2, 1.2, size=d) for u in range(1, n + 1)}


class Session:
    """A hand-driven session: each round's messages are visible (and can be altered)."""

    def __init__(self, n: int, t: int, d: int, seed: int = 0) -> None:
        self.params = SecAggParams(SESSION, t, d)
        rnd = seeded(seed)
        self.clients = {u: SecAggClient(u, self.params, randbits=rnd) for u in range(1, n + 1)}
        self.server = SecAggServer(self.params)

    def advertise(self, ids: list[int]) -> KeyDirectory:
        for u in ids:
            self.server.receive_advertise(self.clients[u].advertise_keys())
        return self.server.close_advertise()

    def share(self, ids: list[int], directory: KeyDirectory) -> dict[int, ForwardedShares]:
        for u in ids:
            self.server.receive_share_keys(self.clients[u].share_keys(directory))
        return self.server.close_share_keys()

    def check(self, forwarded: dict[int, ForwardedShares]) -> MaskingSet:
        """Every client that shared keys (and has not aborted) checks the shares it got."""
        for u, f in forwarded.items():
            if not self.clients[u].aborted:
                self.server.receive_share_check(self.clients[u].check_shares(f))
        return self.server.close_share_check()

    def mask(
        self, ids: list[int], masking: MaskingSet, inputs: dict[int, np.ndarray]
    ) -> tuple[UnmaskRequest, dict[int, MaskedInput]]:
        sent = {u: self.clients[u].masked_input(masking, inputs[u]) for u in ids}
        for message in sent.values():
            self.server.receive_masked_input(message)
        return self.server.close_masked_input(), sent

    def unmask(
        self, ids: list[int], request: UnmaskRequest
    ) -> tuple[AggregationResult, dict[int, UnmaskingShares]]:
        sent = {u: self.clients[u].unmask(request) for u in ids}
        for message in sent.values():
            self.server.receive_unmasking(message)
        return self.server.finish(), sent


# --- correctness ---------------------------------------------------------------------------


def test_20_clients_t11_30_percent_drop_after_sending_masked_input() -> None:
    n, t, d = 20, 11, 22
    xs = float_inputs(n, d, seed=1)
    enc = FixedPointEncoder.with_max_scale(n, max_abs=1.0)
    inputs = {u: enc.encode(x) for u, x in xs.items()}
    drop = {u: "unmasking" for u in (2, 5, 8, 11, 14, 17)}  # 6 of 20 = 30%
    result, _ = run_session(SecAggParams(SESSION, t, d), inputs, drop_before=drop)
    assert result.contributors == tuple(range(1, n + 1))  # their inputs arrived: counted
    assert result.dropped == ()
    assert result.responders == tuple(u for u in range(1, n + 1) if u not in drop)
    # Exact in the field ...
    assert np.array_equal(result.total, field.sum_vectors(list(inputs.values())))
    # ... and within the stated bound of the float sum of the clipped inputs.
    clipped = np.array([enc.clip(xs[u]) for u in result.contributors])
    exact = np.array([math.fsum(col) for col in clipped.T])
    decoded = enc.decode(result.total, len(result.contributors))
    assert np.max(np.abs(decoded - exact)) <= enc.error_bound(n)


def test_clients_dropping_before_masked_input_are_left_out_and_their_masks_removed() -> None:
    n, t, d = 20, 11, 22
    xs = float_inputs(n, d, seed=2)
    enc = FixedPointEncoder.with_max_scale(n, max_abs=1.0)
    inputs = {u: enc.encode(x) for u, x in xs.items()}
    drop = {u: "masked_input" for u in (1, 4, 9, 13, 16, 20)}
    result, _ = run_session(SecAggParams(SESSION, t, d), inputs, drop_before=drop)
    survivors = tuple(u for u in range(1, n + 1) if u not in drop)
    assert result.contributors == survivors and result.dropped == tuple(sorted(drop))
    assert np.array_equal(result.total, field.sum_vectors([inputs[u] for u in survivors]))
    clipped = np.array([enc.clip(xs[u]) for u in survivors])
    decoded = enc.decode(result.total, len(survivors))
    exact = np.array([math.fsum(col) for col in clipped.T])
    assert np.max(np.abs(decoded - exact)) <= enc.error_bound(len(survivors))


def test_dropouts_at_every_round_at_once() -> None:
    n, t, d = 20, 10, 7
    inputs = {u: masks.prg(bytes([u]) * 32, d) for u in range(1, n + 1)}  # any field vectors
    drop = {1: "advertise_keys", 2: "advertise_keys", 3: "share_keys", 4: "share_keys"}
    drop |= {5: "masked_input", 6: "masked_input", 7: "masked_input"}
    drop |= {8: "unmasking", 9: "unmasking", 10: "unmasking"}
    result, trace = run_session(
        SecAggParams(SESSION, t, d), inputs, drop_before=drop, randbits=seeded(3)
    )
    assert result.contributors == tuple(range(8, 21)) and result.dropped == (5, 6, 7)
    assert result.responders == tuple(range(11, 21))
    assert np.array_equal(result.total, field.sum_vectors([inputs[u] for u in range(8, 21)]))
    assert [len(trace.client_seconds[r]) for r in trace.client_seconds] == [18, 16, 16, 13, 10]


@pytest.mark.parametrize(
    "stage", ["advertise_keys", "share_keys", "check_shares", "masked_input", "unmasking"]
)
def test_too_many_dropouts_abort_the_round(stage: str) -> None:
    n, t, d = 20, 11, 4
    inputs = {u: np.zeros(d, dtype=np.uint64) for u in range(1, n + 1)}
    drop = dict.fromkeys(range(1, 11), stage)  # 10 left < t = 11
    with pytest.raises(RoundAbortedError, match="only 10 clients remain .* threshold t=11"):
        run_session(SecAggParams(SESSION, t, d), inputs, drop_before=drop)


@pytest.mark.parametrize(
    ("rule", "cancels"),
    [
        (lambda u, v: 1 if u > v else -1, True),  # flipped but antisymmetric: still cancels
        (lambda u, v: 1, False),  # not antisymmetric: the pair's masks add up
        (lambda u, v: -1, False),
    ],
)
def test_the_sum_is_right_only_if_the_sign_rule_cancels_each_pair(
    monkeypatch: pytest.MonkeyPatch, rule, cancels: bool
) -> None:
    """Guards the test above: with a broken sign rule the same check fails."""
    n, t, d = 12, 7, 16
    inputs = {u: masks.prg(bytes([u]) * 32, d) for u in range(1, n + 1)}
    drop = {3: "masked_input", 8: "unmasking"}
    monkeypatch.setattr(masks, "pairwise_sign", rule)
    result, _ = run_session(SecAggParams(SESSION, t, d), inputs, drop_before=drop)
    expected = field.sum_vectors([inputs[u] for u in result.contributors])
    assert np.array_equal(result.total, expected) == cancels


# --- privacy -------------------------------------------------------------------------------


def _assert_uniform_and_unlike(masked: np.ndarray, x: np.ndarray) -> None:
    assert np.all(masked != x)
    assert stats.kstest(masked / field.MODULUS, "uniform").pvalue > 1e-4
    byte_counts = np.bincount(masked.astype("<u4").view(np.uint8), minlength=256)
    assert stats.chisquare(byte_counts).pvalue > 1e-4


def test_a_masked_input_looks_uniform_and_differs_from_the_input_everywhere() -> None:
    n, t, d = 5, 3, 4096
    enc = FixedPointEncoder.with_max_scale(n, max_abs=1.0)
    x = enc.encode(np.linspace(-1.0, 1.0, d))  # a very non-uniform vector
    inputs = {u: x for u in range(1, n + 1)}
    s = Session(n, t, d, seed=4)
    ids = list(range(1, n + 1))
    forwarded = s.share(ids, s.advertise(ids))
    _, sent = s.mask(ids, s.check(forwarded), inputs)
    _assert_uniform_and_unlike(sent[1].masked, x)


def test_a_delayed_client_is_still_hidden_by_its_self_mask() -> None:
    """Client 10's masked input reaches the server after Round 2 closed: the server has
    declared it dropped and learns its mask key (so all its pairwise masks), yet
    ``y_10 - pairwise masks = x_10 + PRG(b_10)`` still looks uniform."""
    n, t, d = 10, 6, 2048
    x = np.zeros(d, dtype=np.uint64)
    s = Session(n, t, d, seed=5)
    ids = list(range(1, n + 1))
    directory = s.advertise(ids)
    forwarded = s.share(ids, directory)
    masking = s.check(forwarded)
    late = s.clients[10].masked_input(masking, x)
    request, _ = s.mask(ids[:-1], masking, dict.fromkeys(ids, x))
    with pytest.raises(ProtocolError, match="late message"):
        s.server.receive_masked_input(late)
    result, revealed = s.unmask(ids[:-1], request)
    assert result.dropped == (10,) and not result.total.any()
    # Everything the server saw about client 10: reconstruct its key as the server did.
    key_shares = [shamir.Share(w, m.key_shares[10]) for w, m in revealed.items()]
    key = masks.private_key_from_int(shamir.reconstruct(key_shares, t))
    unmasked = late.masked.copy()
    for v in range(1, 10):
        seed = masks.pairwise_seed(
            key, directory.keys[v].mask_public_key, session_id=SESSION, u=10, v=v
        )
        unmasked = field.subtract(unmasked, masks.pairwise_mask(seed, d, 10, v))
    _assert_uniform_and_unlike(unmasked, x)
    # No survivor revealed a share of b_10: the self mask cannot be removed.
    assert all(10 not in m.self_mask_shares for m in revealed.values())


def _arrays(obj: object, seen: set[int] | None = None) -> list[np.ndarray]:
    """Every numpy array reachable from ``obj`` through attributes and containers."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return [obj]
    if isinstance(obj, dict):
        children = [*obj.keys(), *obj.values()]
    elif isinstance(obj, list | tuple | set | frozenset):
        children = list(obj)
    elif dataclasses.is_dataclass(obj) or hasattr(obj, "__dict__"):
        children = list(vars(obj).values()) if hasattr(obj, "__dict__") else []
    else:
        return []
    return [a for child in children for a in _arrays(child, seen)]


def test_the_server_never_holds_an_individual_unmasked_vector() -> None:
    n, t, d = 12, 7, 16
    enc = FixedPointEncoder.with_max_scale(n, max_abs=1.0)
    inputs = {u: enc.encode(x) for u, x in float_inputs(n, d, seed=6).items()}
    s = Session(n, t, d, seed=6)
    ids = list(range(1, n + 1))
    forwarded = s.share(ids, s.advertise(ids))
    request, sent = s.mask(ids[1:], s.check(forwarded), inputs)  # 1 drops before masking
    for stage in ("after MaskedInputCollection", "after Unmasking"):
        held = _arrays(s.server)
        assert len(held) == 1, stage  # the running sum of masked inputs, nothing else
        for u in ids:
            assert not any(np.array_equal(a, inputs[u]) for a in held), (stage, u)
        # Nor does it keep the individual masked inputs: only their sum.
        assert not any(np.array_equal(a, m.masked) for m in sent.values() for a in held)
        if stage.endswith("Collection"):
            result, revealed = s.unmask(ids[4:], request)
    # Never both secrets of one client: b shares for U3, key shares for U2 - U3 only.
    for m in revealed.values():
        assert set(m.self_mask_shares) == set(ids[1:]) and set(m.key_shares) == {1}
    assert np.array_equal(result.total, field.sum_vectors([inputs[u] for u in ids[1:]]))


# --- tampering -----------------------------------------------------------------------------


def test_an_altered_encrypted_share_is_detected_and_the_round_continues_without_it() -> None:
    """One accusation between two clients: the server cannot tell which one lies, so both
    leave the round; the others get their exact sum, and nothing of either is revealed."""
    n, t, d = 8, 5, 6
    inputs = {u: masks.prg(bytes([u]) * 32, d) for u in range(1, n + 1)}
    s = Session(n, t, d, seed=7)
    ids = list(range(1, n + 1))
    forwarded = s.share(ids, s.advertise(ids))
    tampered = bytearray(forwarded[2].ciphertexts[5])
    tampered[30] ^= 0x01
    forwarded[2] = ForwardedShares(2, {**forwarded[2].ciphertexts, 5: bytes(tampered)})
    assert s.clients[2].check_shares(forwarded[2]) == ShareCheck(2, (5,))
    assert not s.clients[2].aborted
    with pytest.raises(ProtocolError, match="Round 1b"):
        s.clients[2].check_shares(forwarded[2])
    for u in ids:
        if u != 2:
            s.server.receive_share_check(s.clients[u].check_shares(forwarded[u]))
    s.server.receive_share_check(ShareCheck(2, (5,)))
    masking = s.server.close_share_check()
    assert masking == MaskingSet((1, 3, 4, 6, 7, 8), (2, 5))
    others = list(masking.members)
    request, _ = s.mask(others, masking, inputs)
    result, revealed = s.unmask(others, request)
    assert result.dropped == () and result.excluded == (2, 5)
    assert np.array_equal(result.total, field.sum_vectors([inputs[u] for u in others]))
    for m in revealed.values():  # nothing of the excluded: neither b nor the mask key
        assert not {2, 5} & (set(m.self_mask_shares) | set(m.key_shares))


def test_a_share_relayed_under_another_sender_is_named() -> None:
    n, t, d = 5, 3, 4
    s = Session(n, t, d, seed=8)
    ids = list(range(1, n + 1))
    forwarded = s.share(ids, s.advertise(ids))
    cts = dict(forwarded[1].ciphertexts)
    cts[2], cts[3] = cts[3], cts[2]
    assert s.clients[1].check_shares(ForwardedShares(1, cts)).rejected == (2, 3)
    with pytest.raises(ProtocolError, match="keeps clients \\[2, 3\\]"):
        s.clients[1].masked_input(MaskingSet(tuple(ids), ()), np.zeros(d, dtype=np.uint64))
    assert s.clients[1].aborted


def test_a_client_that_zeroes_its_ciphertexts_is_excluded_alone() -> None:
    """Client 3 sends zeroed ciphertexts (finding 4 of issue 51): every other client names
    it, the server excludes it alone and the round gives the others' exact sum."""
    n, t, d = 6, 4, 5
    inputs = {u: masks.prg(bytes([u]) * 32, d) for u in range(1, n + 1)}
    s = Session(n, t, d, seed=9)
    ids = list(range(1, n + 1))
    directory = s.advertise(ids)
    for u in ids:
        message = s.clients[u].share_keys(directory)
        if u == 3:
            message = ShareKeys(3, {v: bytes(len(c)) for v, c in message.ciphertexts.items()})
        s.server.receive_share_keys(message)
    masking = s.check(s.server.close_share_keys())
    assert masking == MaskingSet((1, 2, 4, 5, 6), (3,))
    with pytest.raises(ProtocolError, match="must list this client"):
        s.clients[3].masked_input(masking, inputs[3])
    with pytest.raises(ProtocolError, match="not in U2"):
        s.server.receive_masked_input(MaskedInput(3, inputs[3], b""))
    request, _ = s.mask(list(masking.members), masking, inputs)
    result, _ = s.unmask(list(masking.members), request)
    assert result.excluded == (3,) and result.contributors == masking.members
    assert np.array_equal(result.total, field.sum_vectors([inputs[u] for u in masking.members]))


@pytest.mark.parametrize(
    ("accusations", "excluded"),
    [
        ({}, set()),
        ({1: (2,)}, {1, 2}),  # one edge: either may lie
        ({1: (3,), 2: (3,), 4: (3,)}, {3}),  # a liar named by three
        ({5: (1, 2, 3, 4)}, {5}),  # a false accuser of four
        ({1: (2,), 2: (1,)}, {1, 2}),  # both ways: one edge
        ({5: (1, 2), 6: (1,)}, {1, 5}),  # 1 and 5 have two edges each; then no edge is left
    ],
)
def test_exclusions_remove_the_most_accused_until_no_accusation_is_left(
    accusations: dict[int, tuple[int, ...]], excluded: set[int]
) -> None:
    assert exclusions(accusations) == excluded


def test_the_server_refuses_duplicate_keys_and_bad_signatures() -> None:
    """A second client advertising keys already in the directory (finding 4 of issue 51) is
    refused; so is an advert or a masked input not signed by its sender's key."""
    n, t, d = 4, 3, 2
    s = Session(n, t, d, seed=10)
    adverts = {u: s.clients[u].advertise_keys() for u in range(1, n + 1)}
    s.server.receive_advertise(adverts[1])
    own = signing.generate_signing_key()
    public = signing.public_bytes(own)
    for replay in (
        dataclasses.replace(adverts[2], mask_public_key=adverts[1].mask_public_key),
        dataclasses.replace(adverts[2], share_public_key=adverts[1].share_public_key),
        dataclasses.replace(adverts[1], sender=2),  # 1's whole advert under id 2
    ):
        signed = dataclasses.replace(replay, signing_public_key=public, signature=b"")
        signed = dataclasses.replace(
            signed,
            signature=signing.sign(
                own, session_id=SESSION, sender=2, stage="AdvertiseKeys", digest=signed.digest
            ),
        )
        with pytest.raises(DuplicateKeyError, match="client 2 advertised a public key of client 1"):
            s.server.receive_advertise(signed)
    with pytest.raises(SignatureError, match="client 2's AdvertiseKeys"):
        s.server.receive_advertise(dataclasses.replace(adverts[1], sender=2))
    with pytest.raises(SignatureError, match="client 2's AdvertiseKeys"):
        s.server.receive_advertise(dataclasses.replace(adverts[2], signing_public_key=public))
    for u in (2, 3, 4):
        s.server.receive_advertise(adverts[u])
    directory = s.server.close_advertise()
    forwarded = s.share(list(range(1, n + 1)), directory)
    masking = s.check(forwarded)
    zero = np.zeros(d, dtype=np.uint64)
    y1 = s.clients[1].masked_input(masking, zero)
    with pytest.raises(SignatureError, match="client 2's MaskedInputCollection"):
        s.server.receive_masked_input(dataclasses.replace(y1, sender=2))
    with pytest.raises(SignatureError, match="client 1's MaskedInputCollection"):
        s.server.receive_masked_input(MaskedInput(1, y1.masked + np.uint64(1), y1.signature))
    s.server.receive_masked_input(y1)


@pytest.mark.parametrize("which", ["self_mask", "key"])
def test_an_altered_revealed_share_fails_reconstruction(which: str) -> None:
    n, t, d = 9, 5, 4
    s = Session(n, t, d, seed=9)
    ids = list(range(1, n + 1))
    forwarded = s.share(ids, s.advertise(ids))
    zeros = dict.fromkeys(ids, np.zeros(d, dtype=np.uint64))
    request, _ = s.mask(ids[1:], s.check(forwarded), zeros)
    replies = {u: s.clients[u].unmask(request) for u in ids[1:]}
    target = replies[3]  # among the first t + 1 responders, which the server uses
    if which == "self_mask":
        altered = {**target.self_mask_shares, 7: (target.self_mask_shares[7] + 1) % shamir.PRIME}
        replies[3] = dataclasses.replace(target, self_mask_shares=altered)
        match = "client 7"
    else:
        altered = {1: (target.key_shares[1] + 1) % shamir.PRIME}
        replies[3] = dataclasses.replace(target, key_shares=altered)
        match = "client 1"
    for message in replies.values():
        s.server.receive_unmasking(message)
    with pytest.raises(ShareReconstructionError, match=match):
        s.server.finish()


def test_with_exactly_t_responders_an_altered_key_share_fails_the_public_key_check() -> None:
    n, t, d = 7, 5, 4
    s = Session(n, t, d, seed=10)
    ids = list(range(1, n + 1))
    forwarded = s.share(ids, s.advertise(ids))
    zeros = dict.fromkeys(ids, np.zeros(d, dtype=np.uint64))
    request, _ = s.mask(ids[1:], s.check(forwarded), zeros)
    replies = {u: s.clients[u].unmask(request) for u in ids[2:]}  # 5 = t responders
    replies[4] = dataclasses.replace(replies[4], key_shares={1: 12345})
    for message in replies.values():
        s.server.receive_unmasking(message)
    with pytest.raises(ShareReconstructionError, match="advertised public key"):
        s.server.finish()


# --- protocol discipline -------------------------------------------------------------------


def test_each_round_runs_once_and_in_order() -> None:
    n, t, d = 4, 3, 2
    s = Session(n, t, d, seed=11)
    ids = list(range(1, n + 1))
    with pytest.raises(ProtocolError, match="expecting Round 0"):
        s.clients[1].unmask(UnmaskRequest((1, 2, 3)))
    directory = s.advertise(ids)
    with pytest.raises(ProtocolError, match="advertised keys twice|Round 0"):
        s.server.receive_advertise(s.clients[1].advertise_keys())
    forwarded = s.share(ids, directory)
    request, _ = s.mask(ids, s.check(forwarded), dict.fromkeys(ids, np.zeros(d, dtype=np.uint64)))
    s.clients[1].unmask(request)
    with pytest.raises(ProtocolError, match="cannot run Round 4"):
        s.clients[1].unmask(request)  # a second answer could reveal both secrets
    result, _ = s.unmask(ids[1:], request)
    assert not result.total.any()
    with pytest.raises(ProtocolError, match="finished"):
        s.server.finish()


def test_the_client_checks_what_the_server_tells_it() -> None:
    n, t, d = 5, 3, 2
    s = Session(n, t, d, seed=12)
    ids = list(range(1, n + 1))
    forwarded = s.share(ids, s.advertise(ids))
    few = ForwardedShares(1, {2: forwarded[1].ciphertexts[2]})  # |U2| = 2 < t
    with pytest.raises(RoundAbortedError, match="client 1: only 2 clients remain"):
        s.clients[1].check_shares(few)
    zeros = dict.fromkeys(ids, np.zeros(d, dtype=np.uint64))
    request, _ = s.mask(ids[1:], s.check(forwarded), zeros)
    with pytest.raises(ProtocolError, match="must contain this client"):
        s.clients[2].unmask(UnmaskRequest((3, 4, 5)))
    with pytest.raises(ProtocolError, match="aborted"):
        s.clients[2].unmask(request)


def test_the_server_refuses_messages_from_outside_the_round_set() -> None:
    n, t, d = 5, 3, 3
    s = Session(n, t, d, seed=13)
    ids = list(range(1, n + 1))
    directory = s.advertise(ids[:-1])  # client 5 never advertised
    with pytest.raises(ProtocolError, match="not in U1"):
        s.server.receive_share_keys(
            dataclasses.replace(s.clients[1].share_keys(directory), sender=5)
        )
    forwarded = s.share(ids[1:-1], directory)  # client 1 drops: not in U2
    with pytest.raises(ProtocolError, match="Round 2"):  # the share check is open
        s.server.receive_masked_input(MaskedInput(2, np.zeros(d, dtype=np.uint64), b""))
    with pytest.raises(ProtocolError, match="did not share keys"):
        s.server.receive_share_check(ShareCheck(1, ()))
    with pytest.raises(ProtocolError, match="only other clients that shared keys"):
        s.server.receive_share_check(ShareCheck(2, (1,)))
    masking = s.check(forwarded)
    with pytest.raises(ProtocolError, match="not in U2"):
        s.server.receive_masked_input(MaskedInput(1, np.zeros(d, dtype=np.uint64), b""))
    with pytest.raises(DataFormatError, match="length 3"):
        s.server.receive_masked_input(MaskedInput(2, np.zeros(d + 1, dtype=np.uint64), b""))
    with pytest.raises(DataFormatError, match="encode floats"):
        s.clients[2].masked_input(masking, np.zeros(d))


def test_duplicate_or_replayed_keys_are_refused_by_clients() -> None:
    n, t, d = 4, 3, 2
    s = Session(n, t, d, seed=14)
    adverts = {u: s.clients[u].advertise_keys() for u in range(1, n + 1)}
    adverts[4] = dataclasses.replace(adverts[3], sender=4)  # 4 replays 3's keys
    with pytest.raises(ProtocolError, match="equal"):
        s.clients[1].share_keys(KeyDirectory(adverts))


def test_parameters_are_validated() -> None:
    with pytest.raises(ConfigError, match="session_id"):
        SecAggParams(b"short", 3, 4)
    with pytest.raises(ConfigError, match="threshold"):
        SecAggParams(SESSION, 1, 4)
    with pytest.raises(ConfigError, match="dimension"):
        SecAggParams(SESSION, 3, 0)
    with pytest.raises(ProtocolError, match="client ids"):
        SecAggClient(0, SecAggParams(SESSION, 3, 4))
    assert len(SecAggParams.new_session_id()) == 16


def test_seeded_randomness_makes_a_session_reproducible() -> None:
    def masked(seed: int) -> np.ndarray:
        s = Session(4, 3, 8, seed=seed)
        ids = [1, 2, 3, 4]
        forwarded = s.share(ids, s.advertise(ids))
        zeros = dict.fromkeys(ids, np.zeros(8, dtype=np.uint64))
        return s.mask(ids, s.check(forwarded), zeros)[1][2].masked

    assert np.array_equal(masked(15), masked(15))
    assert not np.array_equal(masked(15), masked(16))


def test_message_sizes() -> None:
    n, t, d = 10, 6, 22
    inputs = {u: np.zeros(d, dtype=np.uint64) for u in range(1, n + 1)}
    _, trace = run_session(SecAggParams(SESSION, t, d), inputs, drop_before={1: "masked_input"})
    summary = trace.summary()
    # Three 32-byte keys and a 64-byte signature.
    assert summary["advertise_keys"]["upload_bytes_per_client"] == 4 + 3 * 32 + 64
    # n - 1 ciphertexts of 4 + 4 + 66 + 66 plaintext bytes + 28 (nonce, tag), with 4-byte ids.
    assert summary["share_keys"]["upload_bytes_per_client"] == 4 + (n - 1) * (4 + 168)
    assert summary["check_shares"]["upload_bytes_per_client"] == 4  # no one is named
    assert summary["masked_input"]["upload_bytes_per_client"] == 4 + 4 * d + 64
    # 9 shares of b (U3) and 1 of a key (U2 - U3), each 4 + 66 bytes.
    assert summary["unmasking"]["upload_bytes_per_client"] == 4 + 10 * 70
