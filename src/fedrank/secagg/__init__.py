"""Secure aggregation (Bonawitz et al., CCS 2017): the server learns the sum of the clients'
vectors and nothing else about any one of them, even when clients drop out.

* :mod:`.field`: fixed-point encoding of float vectors into ``Z_q``, ``q = 2**32``, with a
  no-wrap guarantee (:class:`FixedPointEncoder`).
* :mod:`.shamir`: Shamir ``t``-of-``n`` secret sharing over ``GF(2**521 - 1)``.
* :mod:`.masks`: X25519 + HKDF pairwise seeds, AES-CTR PRG, pairwise and self masks.
* :mod:`.channel`: AES-GCM encryption of shares between clients through the server.
* :mod:`.signing`: Ed25519 signatures of the key adverts and masked inputs.
* :mod:`.protocol`: the rounds' overview and the session's parameters (:class:`SecAggParams`).
* :mod:`.messages`: the messages of the rounds and the session's result.
* :mod:`.client`, :mod:`.server`: the two sides, :class:`SecAggClient` and
  :class:`SecAggServer` (the server also decides the share check's exclusions).
* :mod:`.proxy`: a proxy that sums its clients' masked inputs (:class:`MaskedInputProxy`).
* :mod:`.inprocess`: one session with every client in this process (:func:`run_session`).
* :mod:`.wire`: the messages' JSON forms, for the service and the SDK.

See ``docs/secagg.md`` for the parameters, the threat model and the measured costs.
"""

from fedrank.secagg.client import SecAggClient
from fedrank.secagg.errors import (
    DuplicateKeyError,
    ProtocolError,
    RoundAbortedError,
    SecAggError,
    ShareAuthenticationError,
    ShareReconstructionError,
    SignatureError,
)
from fedrank.secagg.field import MODULUS, FixedPointEncoder
from fedrank.secagg.inprocess import SessionTrace, run_session
from fedrank.secagg.messages import (
    AdvertiseKeys,
    AggregationResult,
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
from fedrank.secagg.protocol import SecAggParams
from fedrank.secagg.proxy import MaskedInputProxy
from fedrank.secagg.server import SecAggServer

__all__ = [
    "MODULUS",
    "AdvertiseKeys",
    "AggregationResult",
    "DuplicateKeyError",
    "FixedPointEncoder",
    "ForwardedShares",
    "KeyDirectory",
    "MaskedInput",
    "MaskedInputProxy",
    "MaskedSum",
    "MaskingSet",
    "ProtocolError",
    "RoundAbortedError",
    "SecAggClient",
    "SecAggError",
    "SecAggParams",
    "SecAggServer",
    "SessionTrace",
    "ShareCheck",
    "ShareAuthenticationError",
    "ShareKeys",
    "ShareReconstructionError",
    "SignatureError",
    "UnmaskRequest",
    "UnmaskingShares",
    "run_session",
]
