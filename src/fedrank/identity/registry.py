"""The enrolled devices and the enrollment tokens of a server, in ``devices.sqlite`` in its
store directory (docs/devices.md).

Its own file, so the operator's ``fedrank devices enroll|list|revoke --store DIR`` works
while the server runs (SQLite in WAL mode; the server notices another process's changes by
``PRAGMA data_version``). The file is created with mode 0600: it holds the tokens' hashes,
the devices' public keys and the secret the session keys are derived from.

Tokens are random 128-bit strings given to the operator once and stored only as their
SHA-256; each admits one device, before its expiry. A device whose token is used again by
the same key gets its id again (an enrollment whose answer was lost may be retried); by
another key, the token is refused.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from fedrank.errors import ConfigError, FedrankError
from fedrank.identity.protocol import device_id

#: The registry's file in a store directory.
FILE = "devices.sqlite"
#: Most tokens one call issues.
MAX_TOKENS = 10_000
#: Longest token lifetime (hours): a year.
MAX_EXPIRY_HOURS = 24 * 366

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (
    hash TEXT PRIMARY KEY,
    label TEXT NOT NULL,
    created REAL NOT NULL,
    expires REAL NOT NULL,
    device TEXT
);
CREATE TABLE IF NOT EXISTS devices (
    id TEXT PRIMARY KEY,
    public_key BLOB NOT NULL,
    label TEXT NOT NULL,
    enrolled REAL NOT NULL,
    revoked REAL,
    last_seen REAL
);
"""


class EnrollmentRefused(FedrankError):
    """A token that is unknown, expired or used by another device."""


@dataclass(frozen=True)
class Device:
    """One enrolled device, as ``fedrank devices list`` shows it."""

    id: str
    label: str
    enrolled: float
    revoked: float | None
    last_seen: float | None


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class DeviceRegistry:
    """``devices.sqlite`` of the store directory ``directory`` (created on first use)."""

    def __init__(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / FILE
        if not path.exists():  # created 0600 before SQLite writes anything to it
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        self.path = path
        self.db = sqlite3.connect(path, timeout=30.0, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        # durable against a crash of the process; an OS crash may lose the last moments'
        # enrollments and last-seen times, and the server writes these on its event loop
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(_SCHEMA)
        self.db.commit()

    def close(self) -> None:
        self.db.close()

    def secret(self) -> bytes:
        """The 256-bit secret the session keys are derived from, drawn once."""
        with self.db:
            drawn = secrets.token_bytes(32)
            self.db.execute("INSERT OR IGNORE INTO meta VALUES ('session_secret', ?)", (drawn,))
        row = self.db.execute("SELECT value FROM meta WHERE key = 'session_secret'").fetchone()
        return bytes(row[0])

    def data_version(self) -> int:
        """Changes whenever another connection (the operator's CLI) commits."""
        return int(self.db.execute("PRAGMA data_version").fetchone()[0])

    # -- tokens ---------------------------------------------------------------------------

    def issue(self, count: int, label: str, expires_hours: float) -> list[str]:
        """``count`` new single-use tokens labelled ``label``, valid ``expires_hours``."""
        if not 1 <= count <= MAX_TOKENS:
            raise ConfigError(
                f"count must be in 1..{MAX_TOKENS}, got {count}",
                field="count",
                requirement=f"must be in 1..{MAX_TOKENS}, got {count}",
                value=count,
            )
        if not 0 < expires_hours <= MAX_EXPIRY_HOURS:
            raise ConfigError(
                f"expires-hours must be > 0 and at most {MAX_EXPIRY_HOURS}, got {expires_hours}",
                field="expires_hours",
                requirement=f"must be > 0 and at most {MAX_EXPIRY_HOURS}, got {expires_hours}",
                value=expires_hours,
            )
        if len(label) > 128:
            raise FedrankError(f"a label has at most 128 characters, got {len(label)}")
        now = time.time()
        tokens = [secrets.token_urlsafe(16) for _ in range(count)]
        with self.db:
            self.db.executemany(
                "INSERT INTO tokens VALUES (?, ?, ?, ?, NULL)",
                [(_hash(t), label, now, now + expires_hours * 3600) for t in tokens],
            )
        return tokens

    def enroll(self, token: str | None, public_key: bytes, label: str = "") -> str:
        """Enroll ``public_key`` with ``token`` (``None``: admitted by attestation);
        returns the device id. Raises :class:`EnrollmentRefused`."""
        device = device_id(public_key)
        now = time.time()
        with self.db:
            if token is not None:
                row = self.db.execute(
                    "SELECT label, expires, device FROM tokens WHERE hash = ?", (_hash(token),)
                ).fetchone()
                if row is None:
                    raise EnrollmentRefused("unknown enrollment token")
                label, expires, used_by = row
                if used_by is not None and used_by != device:
                    raise EnrollmentRefused("this enrollment token was already used")
                if used_by is None and expires < now:
                    raise EnrollmentRefused("this enrollment token has expired")
                self.db.execute(
                    "UPDATE tokens SET device = ? WHERE hash = ?", (device, _hash(token))
                )
            known = self.db.execute(
                "SELECT revoked FROM devices WHERE id = ?", (device,)
            ).fetchone()
            if known is not None and known[0] is not None:
                raise EnrollmentRefused(f"device {device} was revoked; make a new key")
            self.db.execute(
                "INSERT OR IGNORE INTO devices VALUES (?, ?, ?, ?, NULL, NULL)",
                (device, public_key, label, now),
            )
        return device

    # -- devices --------------------------------------------------------------------------

    def active(self) -> dict[str, bytes]:
        """Every enrolled, unrevoked device: id -> raw public key."""
        rows = self.db.execute("SELECT id, public_key FROM devices WHERE revoked IS NULL")
        return {d: bytes(k) for d, k in rows}

    def devices(self) -> list[Device]:
        """Every enrolled device, in order of enrollment."""
        rows = self.db.execute(
            "SELECT id, label, enrolled, revoked, last_seen FROM devices ORDER BY enrolled, id"
        )
        return [Device(*r) for r in rows]

    def revoke(self, device: str) -> bool:
        """Revoke ``device``; ``False`` when no such device is enrolled (or already revoked)."""
        with self.db:
            cursor = self.db.execute(
                "UPDATE devices SET revoked = ? WHERE id = ? AND revoked IS NULL",
                (time.time(), device),
            )
        return cursor.rowcount == 1

    def seen(self, device: str, when: float) -> None:
        """Record that ``device`` opened a session at ``when``."""
        with self.db:
            self.db.execute("UPDATE devices SET last_seen = ? WHERE id = ?", (when, device))
