"""fedrank.secagg.wire: every message of a real session survives its JSON form exactly, and
the readers refuse what a peer could send wrong (sizes, ranges, ids, keys)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from fedrank.secagg import (
    FixedPointEncoder,
    SecAggClient,
    SecAggParams,
    SecAggServer,
    wire,
)
from fedrank.secagg.shamir import PRIME


def _session() -> dict[str, Any]:
    """One session of 4 clients (client 4 drops before its masked input), every message
    written to JSON and read back before the next step uses it."""
    params = SecAggParams(b"s" * 16, threshold=2, dimension=5)
    clients = {u: SecAggClient(u, params) for u in (1, 2, 3, 4)}
    server = SecAggServer(params)
    encoder = FixedPointEncoder.with_max_scale(4, l2_bound=1.0)
    x = {u: np.random.default_rng(u).uniform(-0.3, 0.3, 5) for u in clients}

    def trip(value: Any) -> Any:
        return json.loads(json.dumps(value))

    for c in clients.values():
        server.receive_advertise(
            wire.advertise_from_json(trip(wire.advertise_to_json(c.advertise_keys())))
        )
    directory = wire.directory_from_json(trip(wire.directory_to_json(server.close_advertise())), 4)
    for u, c in clients.items():
        text = trip(wire.share_keys_to_json(c.share_keys(directory)))
        server.receive_share_keys(wire.share_keys_from_json(text, frozenset(clients) - {u}))
    forwarded = server.close_share_keys()
    for u, c in clients.items():
        f = wire.forwarded_from_json(trip(wire.forwarded_to_json(forwarded[u])), 4)
        check = trip(wire.share_check_to_json(c.check_shares(f)))
        server.receive_share_check(wire.share_check_from_json(check, 4))
    masking = wire.masking_from_json(trip(wire.masking_to_json(server.close_share_check())), 4)
    for u in (1, 2, 3):
        masked = clients[u].masked_input(masking, encoder.encode(x[u]))
        server.receive_masked_input(wire.masked_from_json(trip(wire.masked_to_json(masked)), 5))
    request = wire.request_from_json(trip(wire.request_to_json(server.close_masked_input())), 4)
    for u in request.contributors:
        text = trip(wire.unmasking_to_json(clients[u].unmask(request)))
        server.receive_unmasking(
            wire.unmasking_from_json(text, frozenset({1, 2, 3}), frozenset({4}))
        )
    result = server.finish()
    return {"total": encoder.decode(result.total, 3), "x": x, "encoder": encoder}


def test_a_session_through_json_gives_the_sum() -> None:
    s = _session()
    expected = s["x"][1] + s["x"][2] + s["x"][3]
    assert np.max(np.abs(s["total"] - expected)) <= s["encoder"].error_bound(3)


KEY = "A" * 43 + "="  # 32 bytes
SIGNATURE = "A" * 86 + "=="  # 64 bytes
KEYS = {"mask_public_key": KEY, "share_public_key": KEY, "signing_public_key": KEY,
        "signature": SIGNATURE}  # fmt: skip
MASKED = {"senders": [1, 2], "masked": "A" * 27 + "=", "digests": [KEY, KEY],
          "signatures": [SIGNATURE, SIGNATURE]}  # fmt: skip


@pytest.mark.parametrize(
    ("reader", "value", "reason"),
    [
        (lambda v: wire.advertise_from_json(v), {"sender": 1}, "exactly"),
        (lambda v: wire.advertise_from_json(v), {**KEYS, "sender": True}, "client id"),
        (lambda v: wire.advertise_from_json(v), {**KEYS, "sender": 2**32}, "client id"),
        (lambda v: wire.advertise_from_json(v),
         {**KEYS, "sender": 1, "mask_public_key": "AAAA"}, "32 bytes"),
        (lambda v: wire.advertise_from_json(v),
         {**KEYS, "sender": 1, "mask_public_key": "!" * 44}, "base64"),
        (lambda v: wire.advertise_from_json(v),
         {**KEYS, "sender": 1, "signature": KEY}, "64 bytes"),
        (lambda v: wire.directory_from_json(v, 2), [{}] * 3, "1..2 entries"),
        (lambda v: wire.share_keys_from_json(v, frozenset({2, 3})),
         {"sender": 1, "ciphertexts": {"2": "AAAA"}}, "2 entries"),
        (lambda v: wire.share_keys_from_json(v, frozenset({2})),
         {"sender": 1, "ciphertexts": {"x": "AAAA"}}, "client ids"),
        (lambda v: wire.share_keys_from_json(v, frozenset({2})),
         {"sender": 1, "ciphertexts": {"3": "AAAA"}}, "exactly the round's clients"),
        (lambda v: wire.share_keys_from_json(v, frozenset({2})),
         {"sender": 1, "ciphertexts": {"2": "AAAA"}}, f"{wire.CIPHERTEXT_BYTES} bytes"),
        (lambda v: wire.masked_from_json(v, 5),
         {"sender": 1, "masked": "AAAA", "signature": SIGNATURE}, "20 bytes"),
        (lambda v: wire.masked_from_json(v, 5), {"sender": 1, "masked": "AAAA"}, "exactly"),
        (lambda v: wire.masked_sum_from_json(v, 5, 4), {**MASKED, "digests": [KEY]},
         "digests must be a list of one per sender"),
        (lambda v: wire.masked_sum_from_json(v, 5, 4), {**MASKED, "signatures": [KEY, KEY]},
         "64 bytes"),
        (lambda v: wire.masked_sum_from_json(v, 5, 1), MASKED, "1..1"),
        (lambda v: wire.share_check_from_json(v, 4), {"sender": 1, "rejected": [3, 2]},
         "sorted"),
        (lambda v: wire.share_check_from_json(v, 2), {"sender": 1, "rejected": [2, 3, 4]},
         "0..2"),
        (lambda v: wire.masking_from_json(v, 4), {"members": [], "excluded": []}, "1..4"),
        (lambda v: wire.request_from_json(v, 4), [3, 1], "sorted"),
        (lambda v: wire.request_from_json(v, 4), [1, 1], "sorted and distinct"),
        (lambda v: wire.request_from_json(v, 2), [1, 2, 3], "1..2"),
        (lambda v: wire.unmasking_from_json(v, frozenset({1}), frozenset()),
         {"sender": 1, "self_mask_shares": {"1": format(PRIME, "x")}, "key_shares": {}},
         "below the field's prime"),
        (lambda v: wire.unmasking_from_json(v, frozenset({1}), frozenset()),
         {"sender": 1, "self_mask_shares": {"1": "xyz"}, "key_shares": {}}, "hexadecimal"),
        (lambda v: wire.unmasking_from_json(v, frozenset({1}), frozenset()),
         {"sender": 1, "self_mask_shares": {"1": "f" * 200}, "key_shares": {}}, "hex digits"),
    ],
)  # fmt: skip
def test_readers_refuse_bad_messages(reader: Any, value: Any, reason: str) -> None:
    with pytest.raises(wire.WireError, match=reason):
        reader(value)
