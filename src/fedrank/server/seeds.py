"""Server-issued FOLtR-ES seeds (``[foltr_es] server_seeds = true``).

In FOLtR-ES (Kharitonov, WSDM 2019, Sec. 3.2) a client reports only its random seed ``s``
and its metric ``f``; the server rebuilds the noise ``v_s`` from the seed and adds
``f v_s`` to the gradient estimate (Eq. 6). The paper lets clients draw their seeds (it
"requires less synchronization"). A client that chooses its seed can search many seeds for
one whose noise points where it wants the model to go, report a high metric, and steer
the model ("seed shopping"). Here the server issues the seed instead:

* At check-in (:class:`~fedrank.server.cohort.Cohort`) a selected client receives ``seed``
  and ``seed_token``. The seed is derived from the store's secret and a random 64-bit nonce,
  ``HMAC-SHA256(secret, "seed" | version | nonce)[:4]``: a client cannot predict it.
* The token is :data:`TOKEN_BYTES` bytes (hex on JSON): ``model_version`` u64 | ``nonce``
  8 bytes | ``HMAC-SHA256(secret, "token" | version | seed | nonce | client)`` truncated to
  16 bytes. It names the version it was issued for, and only a holder of the secret can
  make one, so a token vouches for exactly one (version, seed, client): the client it was
  issued to (its ``client_id``, or the device identity that stands for it).
* An update must carry its token and the client it was issued to: a token that does not
  match the seed, version and client is refused (422 ``bad_seed_token``; another client
  cannot spend it, nor a report that names no client, like a binary batch's record), a
  token issued for another version than the message names like a stale update (409
  ``stale``), and a token already reported under another ``message_id`` as a duplicate
  (409 ``duplicate_seed``, :class:`SeedClaims`).

The secret (32 random bytes) is made once per store and kept in its database's ``meta``
table (key :data:`SECRET_KEY`), beside the store's identity and pause flag, so tokens stay
valid across restarts and a new store (or a database rebuilt by ``fedrank store
recover``) has a secret of its own. The claims are rebuilt at start from the stored
updates of the versions the server still accepts.

The front door checks every update's seed (:class:`SeedChecks`) before it goes to the
writer, in every form an update arrives in that names its client (a single update, JSON or
binary, and a JSON batch's messages); the forms that name none (binary and columnar
batches) are refused under ``[rounds]``, which server-issued seeds need.
"""

from __future__ import annotations

import hmac
import re
import secrets
import sqlite3
import struct
from collections.abc import Container, Iterable
from dataclasses import dataclass
from pathlib import Path

import orjson

from fedrank.core.hmac_sha256 import hmac_sha256
from fedrank.errors import ConfigError
from fedrank.server.envelope import BadRequest
from fedrank.server.messages import Incoming
from fedrank.server.store import DATABASE

#: Key of the secret in the store's ``meta`` table.
SECRET_KEY = "foltr_es_seed_secret"
#: Bytes of the secret.
SECRET_BYTES = 32
#: Bytes of a token: model version u64, nonce, truncated MAC.
TOKEN_BYTES = 32
#: Characters of a token in JSON: lowercase hex of :data:`TOKEN_BYTES`.
TOKEN_HEX = 2 * TOKEN_BYTES
_TOKEN = struct.Struct("<Q8s16s")
_SEED_INPUT = struct.Struct("<Q8s")
_MAC_INPUT = struct.Struct("<QI8s")
_SEED_LABEL = b"fedrank/foltr-es/seed/v1\x00"
_MAC_LABEL = b"fedrank/foltr-es/seed-token/v2\x00"
_HEX_TOKEN = re.compile(rf"[0-9a-f]{{{TOKEN_HEX}}}")

#: A refusal: HTTP status, error code, what is wrong and how to fix it.
Refusal = tuple[int, str, str]
#: What a claim is keyed by: the token's model version and nonce (one issued seed).
ClaimKey = tuple[int, bytes]
#: What an update reports of its seed: message id, model version, seed, raw token or None,
#: and the client it was sent by (or None).
Report = tuple[str, int, int, bytes | None, str | None]
#: A claim to make once every other check has passed: the claim's key and the message id.
Claim = tuple[ClaimKey, str]


def token_from_hex(value: object) -> bytes | None:
    """The raw token of a JSON ``seed_token`` (exactly :data:`TOKEN_HEX` lowercase hex
    characters), or ``None`` if ``value`` is anything else."""
    if not isinstance(value, str) or len(value) != TOKEN_HEX or not _HEX_TOKEN.fullmatch(value):
        return None
    return bytes.fromhex(value)


@dataclass(frozen=True)
class IssuedSeed:
    """A seed issued to a selected client, for the model version it was issued at (its
    token bound to that client)."""

    model_version: int
    seed: int
    token: str  # hex, :data:`TOKEN_HEX` characters


class SeedIssuer:
    """Issues seeds and verifies their tokens with one secret (module docstring)."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) != SECRET_BYTES:
            raise ConfigError(f"the seed secret must have {SECRET_BYTES} bytes, got {len(secret)}")
        self._secret = secret

    def __repr__(self) -> str:  # never print the secret
        return "SeedIssuer(<secret>)"

    def seed_for(self, model_version: int, nonce: bytes) -> int:
        """The uint32 seed of ``nonce`` at ``model_version`` (a pseudo-random function of
        both under the secret)."""
        data = _SEED_LABEL + _SEED_INPUT.pack(model_version, nonce)
        return int.from_bytes(hmac_sha256(self._secret, data)[:4], "little")

    def _mac(self, model_version: int, seed: int, nonce: bytes, client: str) -> bytes:
        data = _MAC_LABEL + _MAC_INPUT.pack(model_version, seed, nonce) + client.encode()
        return hmac_sha256(self._secret, data)[:16]

    def issue(self, model_version: int, client: str, nonce: bytes | None = None) -> IssuedSeed:
        """A fresh seed and its token for ``model_version``, bound to ``client``; ``nonce``
        (8 bytes) defaults to random bytes from the operating system."""
        nonce = secrets.token_bytes(8) if nonce is None else nonce
        seed = self.seed_for(model_version, nonce)
        mac = self._mac(model_version, seed, nonce, client)
        return IssuedSeed(model_version, seed, _TOKEN.pack(model_version, nonce, mac).hex())

    def refusal(
        self, token: bytes, seed: int, model_version: int, client: str | None
    ) -> Refusal | None:
        """Why an update from ``client`` reporting ``seed`` on ``model_version`` with
        ``token`` (raw :data:`TOKEN_BYTES` bytes) cannot be accepted, or ``None`` if the
        token vouches for them."""
        if len(token) != TOKEN_BYTES:
            return 422, "bad_seed_token", f"a seed_token has {TOKEN_BYTES} bytes, got {len(token)}"
        if client is None:
            detail = (
                "a seed_token is bound to the client it was issued to: send it with that "
                "client_id (X-Client-Id on the binary form)"
            )
            return 422, "bad_seed_token", detail
        issued_version, nonce, mac = _TOKEN.unpack(token)
        if not hmac.compare_digest(mac, self._mac(issued_version, seed, nonce, client)):
            detail = (
                f"the seed_token was not issued by this server for seed {seed} to client "
                f"{client!r}: send the seed and seed_token your check-in (POST /v1/checkin) "
                "returned, unchanged, with the client_id you checked in with"
            )
            return 422, "bad_seed_token", detail
        if issued_version != model_version:
            detail = (
                f"the seed_token was issued for model version {issued_version}, but the "
                f"message names version {model_version}; check in again for a seed of the "
                "current model and compute the report on it"
            )
            return 409, "stale", detail
        return None

    @staticmethod
    def claim_key(token: bytes) -> ClaimKey:
        """What one issued seed is claimed by (its version and nonce)."""
        version, nonce, _ = _TOKEN.unpack(token)
        return int(version), bytes(nonce)


class SeedClaims:
    """Which issued seeds have been reported, by which ``message_id``: each seed counts
    once. A claim is made before an update goes to the writer and kept when the update was
    stored (or may have been: a 500); it is released when the writer refused it (stale,
    paused, a storage failure that stored nothing). The ``message_id`` that made a claim
    may be resent (the writer then answers 200 duplicate); any other id reporting the same
    seed is refused. Claims of versions the server no longer accepts are forgotten.
    """

    def __init__(self, claims: Iterable[tuple[ClaimKey, str]] = ()) -> None:
        self._by_version: dict[int, dict[bytes, str]] = {}
        for (version, nonce), message_id in claims:
            self._by_version.setdefault(version, {})[nonce] = message_id

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_version.values())

    def refusal(self, key: ClaimKey, message_id: str) -> Refusal | None:
        """Why ``message_id`` may not report the seed of ``key``, or ``None``."""
        version, nonce = key
        holder = self._by_version.get(version, {}).get(nonce)
        if holder is None or holder == message_id:
            return None
        detail = (
            f"this issued seed (model version {version}) was already reported, as message "
            f"{holder!r}; each issued seed counts once: check in for another"
        )
        return 409, "duplicate_seed", detail

    def claim(self, key: ClaimKey, message_id: str) -> None:
        version, nonce = key
        self._by_version.setdefault(version, {})[nonce] = message_id

    def settle(self, key: ClaimKey, message_id: str, status: int) -> None:
        """The writer answered ``status`` to the update that claimed ``key``: a 4xx or a
        503 stored nothing and releases the claim; anything else keeps it."""
        if 400 <= status < 500 or status == 503:
            version, nonce = key
            held = self._by_version.get(version, {})
            if held.get(nonce) == message_id:
                del held[nonce]

    def forget_before(self, version: int) -> None:
        """Drop the claims of versions below ``version`` (refused as stale anyway)."""
        for old in [v for v in self._by_version if v < version]:
            del self._by_version[old]


def open_seeds(directory: Path, oldest_version: int) -> tuple[SeedIssuer, SeedClaims]:
    """The store's issuer (its secret made on first use) and the claims of the stored
    updates of versions ``>= oldest_version``. Call once at start, after the engine has
    opened the store (the database and its tables exist)."""
    db = sqlite3.connect(Path(directory) / DATABASE, isolation_level=None, timeout=30.0)
    try:
        db.execute("PRAGMA synchronous=FULL")
        secret = _secret(db, Path(directory))
        issuer = SeedIssuer(secret)
        return issuer, SeedClaims(_stored_claims(db, oldest_version))
    finally:
        db.close()


def _secret(db: sqlite3.Connection, directory: Path) -> bytes:
    """Read the store's secret, or make and durably store one (one transaction)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        row = db.execute("SELECT value FROM meta WHERE key = ?", (SECRET_KEY,)).fetchone()
        if row is None:
            text = secrets.token_hex(SECRET_BYTES)
            db.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (SECRET_KEY, text))
        else:
            text = row[0]
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    if not (isinstance(text, str) and re.fullmatch(rf"[0-9a-f]{{{2 * SECRET_BYTES}}}", text)):
        raise ConfigError(
            f"the store {directory} holds a corrupt FOLtR-ES seed secret (meta key "
            f"{SECRET_KEY!r}); restore the database from a backup, or delete that row to make "
            "a new secret (the tokens issued so far then stop being valid)"
        )
    return bytes.fromhex(text)


def _stored_claims(db: sqlite3.Connection, oldest_version: int) -> list[tuple[ClaimKey, str]]:
    """``(claim key, message_id)`` of every stored update carrying a seed token, in the
    iterations that served a version ``>= oldest_version`` (an update of version ``v`` is
    stored while a version ``>= v`` is served, so no accepted version is missed)."""
    cursor = db.execute(
        "SELECT j.value ->> 0, j.value ->> 4 FROM iterations AS i "
        "JOIN groups AS g ON g.iteration = i.iteration, json_each(g.messages) AS j "
        "WHERE i.model_version >= ? AND j.value ->> 3 = 'update'",
        (oldest_version,),
    )
    out = []
    for message_id, payload_text in cursor:
        payload = orjson.loads(payload_text)
        if "seed_token" not in payload:
            continue  # stored before the server issued seeds
        token = token_from_hex(payload["seed_token"])
        if token is None:
            raise ConfigError(
                f"the stored update {message_id!r} holds a malformed seed_token; the store "
                "was modified outside the server: restore it from a backup"
            )
        out.append((SeedIssuer.claim_key(token), str(message_id)))
    return out


def report_of(item: Incoming, client: str | None) -> Report | None:
    """What a message sent by ``client`` reports of its seed (``None`` for a ping or an
    aggregate)."""
    if item.kind != "update":
        return None
    parsed = item.parsed
    return item.message_id, item.model_version, parsed.seed, parsed.seed_token, client


class SeedChecks:
    """The seeds reported by updates, checked before the updates go to the writer (module
    docstring): with ``issuer`` and ``claims`` (``[foltr_es] server_seeds``) every update
    must carry a token issued for its seed, its version and its client, and no other
    message may have reported it; without them (clients draw their own seeds) a token is
    refused."""

    def __init__(self, issuer: SeedIssuer | None = None, claims: SeedClaims | None = None):
        self.issuer = issuer
        self.claims = claims

    def check(self, report: Report | None, known: Container[str], oldest: int) -> Claim | None:
        """Refuse an update whose ``seed_token`` is missing or was not issued for its seed
        and client (422 ``bad_seed_token``), was issued for another model version than the
        message names (409 ``stale``), or whose seed was already reported under another
        ``message_id`` (409 ``duplicate_seed``). Returns the claim to make with
        :meth:`claim` once every other check has passed (nothing is reserved here). A
        server that does not issue seeds refuses a token. A message already stored (its id
        in ``known``) is a retry, answered 200 duplicate by the writer: not checked. The
        claims of versions below ``oldest`` are forgotten first."""
        if report is None or report[0] in known:
            return None
        message_id, version, seed, token, client = report
        if self.issuer is None or self.claims is None:
            if token is not None:
                raise BadRequest(
                    422,
                    "invalid_payload",
                    "this server does not issue seeds ([foltr_es] server_seeds = false): drop "
                    "seed_token and report the seed you drew",
                )
            return None
        self.claims.forget_before(oldest)
        if token is None:
            raise BadRequest(
                422,
                "bad_seed_token",
                "this server issues the seeds ([foltr_es] server_seeds): check in "
                "(POST /v1/checkin) and send the seed and seed_token it returned",
            )
        refused = self.issuer.refusal(token, seed, version, client)
        if refused is not None:
            raise BadRequest(*refused)
        key = SeedIssuer.claim_key(token)
        refused = self.claims.refusal(key, message_id)
        if refused is not None:
            raise BadRequest(*refused)
        return key, message_id

    def claim(self, claim: Claim | None) -> None:
        """Claim the seed :meth:`check` passed (its update goes to the writer)."""
        if self.claims is not None and claim is not None:
            self.claims.claim(*claim)

    def settle(self, claim: Claim | None, status: int) -> None:
        """The writer answered: keep the claim of a stored update, release it otherwise."""
        if self.claims is not None and claim is not None:
            self.claims.settle(*claim, status)
