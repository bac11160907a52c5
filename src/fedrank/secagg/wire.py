"""JSON forms of the secure-aggregation messages (:mod:`fedrank.secagg.messages`), for the
service (:mod:`fedrank.server.secagg_round`) and the SDK (:mod:`fedrank.client.secagg`).

Bytes (keys, ciphertexts, digests, Ed25519 signatures) travel as base64, Shamir shares
(integers below ``2**521 - 1``) as hexadecimal, client ids as JSON integers and masked
vectors as base64 of little-endian ``uint32``. Every reader checks types, sizes and ranges
against the session (``dimension``, the ids of the round) and raises :class:`WireError` with
what is wrong: a peer or a client controls every field.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedrank.errors import FedrankError
from fedrank.secagg import channel, field, masks, shamir, signing
from fedrank.secagg.messages import (
    AdvertiseKeys,
    ForwardedShares,
    KeyDirectory,
    MaskedInput,
    MaskedSum,
    MaskingSet,
    ShareCheck,
    ShareKeys,
    UnmaskingShares,
    UnmaskRequest,
)
from fedrank.secagg.protocol import MAX_CLIENT_ID

#: Bytes of one encrypted share message: nonce, ``u || v || two shares``, tag.
CIPHERTEXT_BYTES = channel.OVERHEAD_BYTES + 8 + 2 * shamir.SHARE_BYTES
#: Hex digits of a share (at most).
SHARE_HEX = 2 * shamir.SHARE_BYTES


class WireError(FedrankError, ValueError):
    """A secure-aggregation message that does not parse; ``str(err)`` says why."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _bytes(value: Any, size: int, what: str) -> bytes:
    if not isinstance(value, str) or len(value) > 4 * (size + 2) // 3 + 4:
        raise WireError(f"{what} must be base64 of {size} bytes")
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise WireError(f"{what} is not valid base64") from exc
    if len(data) != size:
        raise WireError(f"{what} must be {size} bytes, got {len(data)}")
    return data


def _id(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < MAX_CLIENT_ID:
        raise WireError(f"{what} must be a client id in 1..{MAX_CLIENT_ID - 1}")
    return value


def _table(value: Any, keys: frozenset[int] | None, what: str) -> dict[int, Any]:
    """A JSON object keyed by decimal client ids (exactly ``keys``, when given)."""
    if not isinstance(value, dict):
        raise WireError(f"{what} must be an object keyed by client id")
    if keys is not None and len(value) != len(keys):
        raise WireError(f"{what} must have {len(keys)} entries, got {len(value)}")
    out: dict[int, Any] = {}
    for key, item in value.items():
        if not (isinstance(key, str) and key.isdecimal() and len(key) <= 10):
            raise WireError(f"{what}: keys must be client ids, got {key[:20]!r}")
        out[_id(int(key), f"{what} key")] = item
    if keys is not None and out.keys() != keys:
        raise WireError(f"{what} must be keyed by exactly the round's clients")
    return out


def _object(value: Any, keys: set[str], what: str) -> dict[str, Any]:
    if not isinstance(value, dict) or set(value) != keys:
        raise WireError(f"{what} must be an object with exactly {sorted(keys)}")
    return value


# ---------------------------------------------------------------------- Round 0


_ADVERTISE = {"sender", "mask_public_key", "share_public_key", "signing_public_key", "signature"}


def advertise_to_json(m: AdvertiseKeys) -> dict[str, Any]:
    return {
        "sender": m.sender,
        "mask_public_key": _b64(m.mask_public_key),
        "share_public_key": _b64(m.share_public_key),
        "signing_public_key": _b64(m.signing_public_key),
        "signature": _b64(m.signature),
    }


def advertise_from_json(value: Any) -> AdvertiseKeys:
    v = _object(value, _ADVERTISE, "advertise")
    return AdvertiseKeys(
        _id(v["sender"], "sender"),
        _bytes(v["mask_public_key"], masks.KEY_BYTES, "mask_public_key"),
        _bytes(v["share_public_key"], masks.KEY_BYTES, "share_public_key"),
        _bytes(v["signing_public_key"], signing.PUBLIC_KEY_BYTES, "signing_public_key"),
        _bytes(v["signature"], signing.SIGNATURE_BYTES, "signature"),
    )


def directory_to_json(d: KeyDirectory) -> list[dict[str, Any]]:
    return [advertise_to_json(k) for k in d.keys.values()]


def directory_from_json(value: Any, limit: int) -> KeyDirectory:
    if not isinstance(value, list) or not 1 <= len(value) <= limit:
        raise WireError(f"the key directory must be a list of 1..{limit} entries")
    keys = [advertise_from_json(v) for v in value]
    return KeyDirectory({k.sender: k for k in keys})


# ---------------------------------------------------------------------- Round 1


def share_keys_to_json(m: ShareKeys) -> dict[str, Any]:
    return {"sender": m.sender, "ciphertexts": {str(v): _b64(c) for v, c in m.ciphertexts.items()}}


def share_keys_from_json(value: Any, peers: frozenset[int]) -> ShareKeys:
    """``peers``: ``U1`` without the sender."""
    v = _object(value, {"sender", "ciphertexts"}, "share_keys")
    table = _table(v["ciphertexts"], peers, "ciphertexts")
    return ShareKeys(
        _id(v["sender"], "sender"),
        {k: _bytes(c, CIPHERTEXT_BYTES, "a ciphertext") for k, c in table.items()},
    )


def forwarded_to_json(f: ForwardedShares) -> dict[str, Any]:
    return {
        "recipient": f.recipient,
        "ciphertexts": {str(u): _b64(c) for u, c in f.ciphertexts.items()},
    }


def forwarded_from_json(value: Any, limit: int) -> ForwardedShares:
    v = _object(value, {"recipient", "ciphertexts"}, "forwarded shares")
    table = _table(v["ciphertexts"], None, "ciphertexts")
    if len(table) > limit:
        raise WireError(f"at most {limit} forwarded ciphertexts, got {len(table)}")
    return ForwardedShares(
        _id(v["recipient"], "recipient"),
        {k: _bytes(c, CIPHERTEXT_BYTES, "a ciphertext") for k, c in table.items()},
    )


# ---------------------------------------------------------------------- Round 1b


def _ids(value: Any, limit: int, what: str, low: int = 0) -> tuple[int, ...]:
    """A sorted list of ``low..limit`` distinct client ids."""
    if not isinstance(value, list) or not low <= len(value) <= limit:
        raise WireError(f"{what} must be a list of {low}..{limit} client ids")
    ids = [_id(v, f"{what}: an entry") for v in value]
    if ids != sorted(set(ids)):
        raise WireError(f"{what} must be sorted and distinct")
    return tuple(ids)


def share_check_to_json(m: ShareCheck) -> dict[str, Any]:
    return {"sender": m.sender, "rejected": list(m.rejected)}


def share_check_from_json(value: Any, limit: int) -> ShareCheck:
    v = _object(value, {"sender", "rejected"}, "share_check")
    return ShareCheck(_id(v["sender"], "sender"), _ids(v["rejected"], limit, "rejected"))


def masking_to_json(m: MaskingSet) -> dict[str, Any]:
    return {"members": list(m.members), "excluded": list(m.excluded)}


def masking_from_json(value: Any, limit: int) -> MaskingSet:
    v = _object(value, {"members", "excluded"}, "the masking set")
    return MaskingSet(
        _ids(v["members"], limit, "members", 1), _ids(v["excluded"], limit, "excluded")
    )


# ---------------------------------------------------------------------- Round 2


def _vector(value: Any, dimension: int) -> np.ndarray:
    data = _bytes(value, field.ELEMENT_BYTES * dimension, "masked")
    return np.frombuffer(data, dtype="<u4").astype(np.uint64)


def masked_to_json(m: MaskedInput) -> dict[str, Any]:
    data = np.asarray(m.masked, dtype="<u4").tobytes()
    return {"sender": m.sender, "masked": _b64(data), "signature": _b64(m.signature)}


def masked_from_json(value: Any, dimension: int) -> MaskedInput:
    v = _object(value, {"sender", "masked", "signature"}, "masked_input")
    return MaskedInput(
        _id(v["sender"], "sender"),
        _vector(v["masked"], dimension),
        _bytes(v["signature"], signing.SIGNATURE_BYTES, "signature"),
    )


def masked_sum_to_json(m: MaskedSum) -> dict[str, Any]:
    data = np.asarray(m.masked, dtype="<u4").tobytes()
    return {
        "senders": list(m.senders),
        "masked": _b64(data),
        "digests": [_b64(d) for d in m.digests],
        "signatures": [_b64(s) for s in m.signatures],
    }


def masked_sum_from_json(value: Any, dimension: int, limit: int) -> MaskedSum:
    """A proxy's sum (:class:`~fedrank.secagg.proxy.MaskedInputProxy`): 1..``limit`` sorted,
    distinct senders, one masked vector, and each sender's digest and signature of its
    masked input (in the order of the senders)."""
    v = _object(value, {"senders", "masked", "digests", "signatures"}, "masked_sum")
    senders = _ids(v["senders"], limit, "a masked sum's senders", 1)
    signed = []
    for name, size in (("digests", signing.DIGEST_BYTES), ("signatures", signing.SIGNATURE_BYTES)):
        items = v[name]
        if not isinstance(items, list) or len(items) != len(senders):
            raise WireError(f"a masked sum's {name} must be a list of one per sender")
        signed.append(tuple(_bytes(item, size, f"one of {name}") for item in items))
    return MaskedSum(senders, _vector(v["masked"], dimension), signed[0], signed[1])


def request_to_json(r: UnmaskRequest) -> list[int]:
    return list(r.contributors)


def request_from_json(value: Any, limit: int) -> UnmaskRequest:
    return UnmaskRequest(_ids(value, limit, "the contributors", 1))


# ---------------------------------------------------------------------- Round 4


def _shares(value: Mapping[int, int]) -> dict[str, str]:
    return {str(k): format(y, "x") for k, y in value.items()}


def unmasking_to_json(m: UnmaskingShares) -> dict[str, Any]:
    return {
        "sender": m.sender,
        "self_mask_shares": _shares(m.self_mask_shares),
        "key_shares": _shares(m.key_shares),
    }


def _share(value: Any) -> int:
    if not isinstance(value, str) or not 1 <= len(value) <= SHARE_HEX:
        raise WireError(f"a share must be at most {SHARE_HEX} hex digits")
    try:
        y = int(value, 16)
    except ValueError as exc:
        raise WireError("a share must be hexadecimal") from exc
    if y >= shamir.PRIME:
        raise WireError("a share must be below the field's prime 2**521 - 1")
    return y


def unmasking_from_json(
    value: Any, contributors: frozenset[int], dropped: frozenset[int]
) -> UnmaskingShares:
    """``contributors``: ``U3``; ``dropped``: ``U2 - U3``."""
    v = _object(value, {"sender", "self_mask_shares", "key_shares"}, "unmasking")
    own = _table(v["self_mask_shares"], contributors, "self_mask_shares")
    keys = _table(v["key_shares"], dropped, "key_shares")
    return UnmaskingShares(
        _id(v["sender"], "sender"),
        {k: _share(y) for k, y in own.items()},
        {k: _share(y) for k, y in keys.items()},
    )
