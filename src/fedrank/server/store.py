"""The server's durable state: one SQLite database (WAL mode, ``synchronous=FULL``) and a
Parquet audit log, in the ``store`` directory.

What is stored, and why it is enough to resume exactly after ``kill -9``:

* ``groups``: every accepted message, with the iteration it was counted in. Each group
  commit of the writer (the messages of many requests, decided together) is *one* row
  holding its messages as a JSON array ``[message_id, model_version, branch, kind, payload,
  metrics, count]``: one small write per group instead of one indexed row per message. The
  view ``updates`` shows one row per message (what readers, audits and the Parquet export
  use). ``message_id`` is unique because the single writer decides every message against
  the ids stored in the iterations whose model versions it still accepts (rebuilt from the
  store at start, :mod:`fedrank.server.recent_ids`); an older message is refused as stale.
  An update is acknowledged only after the
  transaction holding it has committed, and SQLite's WAL with ``synchronous=FULL`` makes a
  commit durable (fsync) before it returns.
* ``models``: every published version: parameters and optimizer state as exact JSON
  (:mod:`fedrank.core.state_json`), and the iteration that produced it.
* ``iterations``: when each opened and closed, the model it served, and on close the final
  aggregate and the per-branch metric summary.

The running aggregate of the open iteration is a pure function of the open iteration's
stored updates (aggregators are order-independent monoids, tested), so a restart replays
them (:meth:`Store.iteration_rows`) and reaches the state the server had,
counting every acknowledged update exactly once. Closing an iteration (new model, closed
iteration, next iteration opened) is one transaction: a crash leaves either the old or the
new state, never half.

Parquet: when an iteration closes, its updates are written to
``parquet/iteration=<n>/updates.parquet`` (Hive-style partitions, readable by pyarrow,
pandas, Spark or DuckDB) for audit and offline analysis, as the paper did. A partition
missing after a crash is written at the next start; an existing one is never replaced
(:meth:`Store.export_parquet`). A database restored from an older backup is behind its
audit log: the server refuses to start on it (:func:`check_not_behind`) and
``fedrank store recover`` rebuilds it from the log (:mod:`fedrank.server.recovery`).

Under ``[privacy]`` each stored message names its ``client`` (the authenticated device;
without ``[privacy]`` who sent what is not kept): the privacy ledger counts a device's
contributions from it (:mod:`fedrank.server.privacy`), so they survive a restart and,
through the audit log's ``client`` column, a recovery.

The secret of the DP noise lives next to the database, in its own file
(:data:`NOISE_SECRET`, mode 0600; :meth:`Store.noise_secret`), not in it: a recovery or a
restored backup keeps it, and so draws exactly the noise the server released.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from fedrank.core.state_json import array_from_json, array_to_json
from fedrank.errors import ConfigError
from fedrank.server.log_limit import RateLimit

log = logging.getLogger(__name__)
log.addFilter(RateLimit())  # a failure that repeats per request logs once per 10 s

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS models (
    version INTEGER PRIMARY KEY,
    iteration INTEGER NOT NULL,
    params TEXT NOT NULL,
    optimizer_state TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS iterations (
    iteration INTEGER PRIMARY KEY,
    model_version INTEGER NOT NULL,
    opened_at REAL NOT NULL,
    closed_at REAL,
    n_updates INTEGER,
    aggregate TEXT,
    summary TEXT,
    reason TEXT
);
CREATE TABLE IF NOT EXISTS groups (
    seq INTEGER PRIMARY KEY,
    iteration INTEGER NOT NULL,
    received_at REAL NOT NULL,
    n INTEGER NOT NULL,
    messages TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS groups_by_iteration ON groups (iteration);
CREATE VIEW IF NOT EXISTS updates AS
SELECT g.seq * 1000000 + j.key AS seq,
       j.value ->> 0 AS message_id,
       g.iteration AS iteration,
       j.value ->> 1 AS model_version,
       j.value ->> 2 AS branch,
       j.value ->> 3 AS kind,
       j.value ->> 4 AS payload,
       j.value ->> 5 AS metrics,
       j.value ->> 6 AS count,
       g.received_at AS received_at,
       j.value ->> 7 AS client
FROM groups AS g, json_each(g.messages) AS j;
"""

#: Update kinds: a client update, a metrics-only ping, a proxy's merged aggregate state.
KINDS = ("update", "ping", "aggregate")
#: The database file and the identity file of a store directory.
DATABASE = "fedrank.sqlite3"
IDENTITY = "STORE.json"
#: The name of a Parquet partition's directory.
_PARTITION = re.compile(r"iteration=(\d{6})")
#: The file of the DP noise's secret (:meth:`Store.noise_secret`): 32 hex digits, mode 0600.
NOISE_SECRET = "noise.secret"


def leftovers(directory: Path) -> list[Path]:
    """What a store directory holds besides its database: the identity file and the
    Parquet partitions (evidence that a database existed)."""
    directory = Path(directory)
    found = sorted(directory.glob("parquet/iteration=*/updates.parquet"))
    files = [directory / name for name in (IDENTITY, NOISE_SECRET)]
    return [f for f in files if f.exists()] + found


def partitions(directory: Path) -> list[tuple[int, Path]]:
    """``(iteration, path)`` of every partition of the audit log, in iteration order."""
    found = []
    for path in Path(directory).glob("parquet/iteration=*/updates.parquet"):
        match = _PARTITION.fullmatch(path.parent.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def last_iteration(directory: Path) -> int:
    """The newest iteration the store's database has opened (-1: none yet)."""
    db = sqlite3.connect(Path(directory) / DATABASE, isolation_level=None)
    try:
        row = db.execute("SELECT MAX(iteration) FROM iterations").fetchone()
    except sqlite3.OperationalError:  # a database without the schema yet
        return -1
    finally:
        db.close()
    return -1 if row[0] is None else int(row[0])


def check_not_behind(directory: Path, open_iteration: int) -> None:
    """Refuse a database that is behind its audit log: the log holds the partition of an
    iteration the database has not closed (``open_iteration`` or later), so the database
    was restored from an older backup (or replaced). Starting on it would accept again the
    message ids acknowledged after the backup and overwrite the log. Raises
    :class:`~fedrank.errors.ConfigError` naming the way out, ``fedrank store recover``."""
    ahead = [n for n, _ in partitions(directory) if n >= open_iteration]
    if ahead:
        raise ConfigError(
            f"the database of {directory} is behind its audit log: it has closed "
            f"{open_iteration} iterations, the audit log {ahead[-1] + 1} (restored from an "
            f"older backup?). Run `fedrank store recover --store {directory} --config "
            "<server.toml>` to rebuild the database from the audit log (the old one is kept "
            "in superseded-<time>/)."
        )


def check_directory(directory: Path) -> None:
    """Refuse to start on a store whose database is gone (deleted, or truncated to
    nothing) while its identity file or Parquet audit log remain, or is behind its audit
    log (:func:`check_not_behind`): starting anyway would begin again at an older version,
    accept acknowledged message ids a second time and overwrite the audit log. Raises
    :class:`~fedrank.errors.ConfigError` saying how to recover."""
    directory = Path(directory)
    database = directory / DATABASE
    if database.exists() and database.stat().st_size > 0:
        check_not_behind(directory, last_iteration(directory))
        return
    left = leftovers(directory)
    if not left:
        return
    partitions = sum(1 for p in left if p.name == "updates.parquet")
    state = "is missing" if not database.exists() else "is empty (truncated)"
    raise ConfigError(
        f"the store {directory} has an identity file or a Parquet audit log ({partitions} "
        f"closed iterations) but its database {DATABASE} {state}. Starting would begin again "
        "at version 0 and count acknowledged updates twice. Restore the database from a "
        f"backup; or rebuild it from the audit log with `fedrank store recover --store "
        f"{directory} --config <server.toml>`; or start an empty store with `fedrank serve "
        "--new-store` (the old files are moved to abandoned-<time>/ in the store)."
    )


def abandon(directory: Path) -> Path | None:
    """For ``fedrank serve --new-store``: move the leftovers of a store whose database is
    gone into ``abandoned-<UTC time>/`` in the store directory (kept, never deleted) and
    return that directory (``None`` if there was nothing to move). Refuses a store whose
    database is there: that one is not abandoned, use another ``--store``."""
    directory = Path(directory)
    database = directory / DATABASE
    if database.exists() and database.stat().st_size > 0:
        raise ConfigError(
            f"the store {directory} has a database; --new-store only replaces a store whose "
            "database is gone. Use another --store directory for a new store."
        )
    moved = [p for p in (directory / IDENTITY, directory / NOISE_SECRET, directory / "parquet",
                         *database_files(directory)) if p.exists()]  # fmt: skip
    return move_aside(directory, moved, "abandoned") if moved else None


def database_files(directory: Path) -> list[Path]:
    """The database of a store directory and its WAL and shared-memory files."""
    database = Path(directory) / DATABASE
    return [database, database.with_name(DATABASE + "-wal"), database.with_name(DATABASE + "-shm")]


def move_aside(directory: Path, paths: list[Path], label: str) -> Path:
    """Move ``paths`` (those that exist) into ``<label>-<UTC time>/`` in ``directory``
    (kept, never deleted); returns that directory."""
    target = Path(directory) / time.strftime(f"{label}-%Y%m%dT%H%M%SZ", time.gmtime())
    target.mkdir()
    for path in paths:
        if path.exists():
            path.rename(target / path.name)
    return target


def _fsync_directory(directory: Path) -> None:
    """Make a file created or renamed in ``directory`` durable (POSIX: fsync the
    directory)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Row(NamedTuple):
    """One stored message (``payload`` and ``metrics`` are JSON text; ``client`` the
    device that sent it, ``None`` when unknown); a tuple, so rows go to ``executemany`` as
    they are."""

    message_id: str
    iteration: int
    model_version: int
    branch: str
    kind: str
    payload: str
    metrics: str
    count: int
    received_at: float
    client: str | None = None


@dataclass(frozen=True)
class ModelVersion:
    version: int
    iteration: int
    params: np.ndarray
    optimizer_state: dict[str, Any]
    created_at: float


class Store:
    """The SQLite database and Parquet log of one server. The writer uses one instance from
    one thread; readers open their own with ``read_only=True``. A directory whose database
    is gone but whose identity file or audit log remain is refused (:func:`check_directory`)
    and so is one behind its audit log, unless ``recovering`` (:mod:`fedrank.server.recovery`
    rebuilds the database from the log)."""

    def __init__(self, directory: Path, read_only: bool = False, recovering: bool = False) -> None:
        self.directory = Path(directory)
        path = self.directory / DATABASE
        if read_only:
            # A second connection for readers; WAL lets it read while the writer commits.
            self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        if not recovering:  # only recovery creates a database among leftovers
            check_directory(self.directory)
        # Opened at start-up, then used by the writer thread alone.
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        # Checkpoints (copying the WAL back into the database, with fsyncs of their own)
        # run in a background thread, off the commit path that clients wait on.
        self.db.execute("PRAGMA wal_autocheckpoint=0")
        self.db.executescript(SCHEMA)
        self._checkpointer = _Checkpointer(path)

    def close(self) -> None:
        if hasattr(self, "_checkpointer"):
            self._checkpointer.stop()
        self.db.close()

    # -- identity ------------------------------------------------------------------------

    def check_identity(self, identity: dict[str, Any]) -> bool:
        """Record what this store is for (workload, model size) on first use, with a random
        store id that the identity file (``STORE.json``) repeats; on later starts refuse a
        different workload, or a database and an identity file of different stores. Returns
        True for a fresh store."""
        row = self.db.execute("SELECT value FROM meta WHERE key = 'identity'").fetchone()
        text = json.dumps(identity, sort_keys=True)
        fresh = row is None
        if fresh:
            self.db.execute("INSERT INTO meta VALUES ('identity', ?)", (text,))
        elif row[0] != text:
            raise ConfigError(
                f"the store {self.directory} was created for {row[0]}, not {text}; use another "
                "--store directory for a different workload or model"
            )
        self._check_identity_file(identity)
        return fresh

    def _check_identity_file(self, identity: dict[str, Any]) -> None:
        row = self.db.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
        store_id = row[0] if row is not None else uuid.uuid4().hex
        if row is None:
            self.db.execute("INSERT INTO meta VALUES ('store_id', ?)", (store_id,))
        path = self.directory / IDENTITY
        if path.exists():
            written = json.loads(path.read_text()).get("store_id")
            if written != store_id:
                raise ConfigError(
                    f"the database of {self.directory} belongs to store {store_id}, but its "
                    f"{IDENTITY} names store {written}: the database was replaced. Put the "
                    "right database back, or move the directory's files aside and start anew"
                )
            return
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps({"store_id": store_id, **identity}, sort_keys=True))
        partial.replace(path)

    def noise_secret(self) -> int:
        """The store's secret seed of the DP noise (128 random bits, drawn on first use from
        the OS, never served or logged): each close's noise is drawn from it and the
        iteration, so a restart, a recovery or a restored backup replays neither more nor
        other noise than was released (:mod:`fedrank.server.privacy`).

        It is kept in :data:`NOISE_SECRET` beside the database (created once, mode 0600,
        fsynced), not in the database, which a recovery rebuilds and a backup may replace.
        A store whose database still holds the secret (as stores once did) has it moved to
        the file."""
        path = self.directory / NOISE_SECRET
        if path.exists():
            text = path.read_text().strip()
            if len(text) != 32 or not all(c in "0123456789abcdef" for c in text):
                raise ConfigError(
                    f"{path} must hold the store's noise secret (32 hex digits); it was "
                    "changed: put the original back, or the noise of released models is lost"
                )
            return int(text, 16)
        row = self.db.execute("SELECT value FROM meta WHERE key = 'noise_secret'").fetchone()
        secret = secrets.token_hex(16) if row is None else str(row[0])
        partial = path.with_suffix(".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, secret.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        partial.replace(path)
        _fsync_directory(self.directory)
        if row is not None:
            self.db.execute("DELETE FROM meta WHERE key = 'noise_secret'")
        return int(secret, 16)

    def paused(self) -> bool:
        """Whether the operator paused the server (kept across restarts)."""
        row = self.db.execute("SELECT value FROM meta WHERE key = 'paused'").fetchone()
        return row is not None and row[0] == "1"

    def set_paused(self, paused: bool) -> None:
        """Record a pause or a resume durably (one committed write)."""
        self.db.execute(
            "INSERT INTO meta VALUES ('paused', ?) ON CONFLICT(key) DO UPDATE SET value = ?",
            ("1" if paused else "0",) * 2,
        )

    # -- models and iterations ----------------------------------------------------------

    def publish_first(self, params: np.ndarray, optimizer_state: dict[str, Any]) -> None:
        """Version 0 and iteration 0, in one transaction."""
        now = time.time()
        with self._transaction():
            self._insert_model(0, 0, params, optimizer_state, now)
            self.db.execute(
                "INSERT INTO iterations (iteration, model_version, opened_at) VALUES (0, 0, ?)",
                (now,),
            )

    def _insert_model(
        self, version: int, iteration: int, params: np.ndarray, state: dict[str, Any], now: float
    ) -> None:
        self.db.execute(
            "INSERT INTO models VALUES (?, ?, ?, ?, ?)",
            (version, iteration, json.dumps(array_to_json(params)), json.dumps(state), now),
        )

    def close_iteration(
        self,
        iteration: int,
        n_updates: int,
        aggregate: dict[str, Any],
        summary: dict[str, Any],
        reason: str,
        new_version: int,
        params: np.ndarray,
        optimizer_state: dict[str, Any],
    ) -> float:
        """Close ``iteration``, publish ``new_version`` and open the next iteration, in one
        transaction; returns the time stamp."""
        now = time.time()
        with self._transaction():
            self.db.execute(
                "UPDATE iterations SET closed_at = ?, n_updates = ?, aggregate = ?, summary = ?, "
                "reason = ? WHERE iteration = ?",
                (now, n_updates, json.dumps(aggregate), json.dumps(summary), reason, iteration),
            )
            self._insert_model(new_version, iteration + 1, params, optimizer_state, now)
            self.db.execute(
                "INSERT INTO iterations (iteration, model_version, opened_at) VALUES (?, ?, ?)",
                (iteration + 1, new_version, now),
            )
        return now

    def latest_model(self) -> ModelVersion:
        row = self.db.execute("SELECT * FROM models ORDER BY version DESC LIMIT 1").fetchone()
        return self._model(row)

    def model(self, version: int) -> ModelVersion | None:
        row = self.db.execute("SELECT * FROM models WHERE version = ?", (version,)).fetchone()
        return None if row is None else self._model(row)

    @staticmethod
    def _model(row: tuple[Any, ...]) -> ModelVersion:
        version, iteration, params, state, created = row
        return ModelVersion(
            version, iteration, array_from_json(json.loads(params)), json.loads(state), created
        )

    def open_iteration(self) -> tuple[int, int, float]:
        """``(iteration, model_version, opened_at)`` of the open iteration."""
        row = self.db.execute(
            "SELECT iteration, model_version, opened_at FROM iterations "
            "WHERE closed_at IS NULL ORDER BY iteration DESC LIMIT 1"
        ).fetchone()
        if row is None:
            raise ConfigError(f"the store {self.directory} has no open iteration (corrupt?)")
        return int(row[0]), int(row[1]), float(row[2])

    def closed_aggregate(self, iteration: int) -> dict[str, Any] | None:
        """The final aggregator state (its JSON form) stored when ``iteration`` closed;
        ``None`` if it is not closed. The engine starts the next iteration from it when the
        aggregator carries something over (an adaptive norm bound)."""
        row = self.db.execute(
            "SELECT aggregate FROM iterations WHERE iteration = ? AND closed_at IS NOT NULL",
            (iteration,),
        ).fetchone()
        return None if row is None or row[0] is None else json.loads(row[0])

    def closed_iterations(self) -> list[dict[str, Any]]:
        rows = self.db.execute(
            "SELECT iteration, model_version, opened_at, closed_at, n_updates, summary, reason "
            "FROM iterations WHERE closed_at IS NOT NULL ORDER BY iteration"
        ).fetchall()
        return [
            {
                "iteration": r[0],
                "model_version": r[1],
                "opened_at": r[2],
                "closed_at": r[3],
                "n_updates": r[4],
                "branches": json.loads(r[5]),
                "reason": r[6],
            }
            for r in rows
        ]

    # -- updates ------------------------------------------------------------------------

    def insert_group(self, iteration: int, received_at: float, messages: bytes, n: int) -> None:
        """Store one group of ``n`` messages (a JSON array, see the module docstring) in one
        durable transaction: the group commit."""
        with self._transaction():
            self.db.execute(
                "INSERT INTO groups (iteration, received_at, n, messages) VALUES (?, ?, ?, ?)",
                (iteration, received_at, n, messages),
            )

    def insert(self, rows: Sequence[Row]) -> None:
        """Store ``rows`` (all of one iteration and time) as one group."""
        if not rows:
            return
        first = rows[0]
        if any(r.iteration != first.iteration for r in rows):
            raise ValueError("a group holds the messages of one iteration")
        messages = orjson.dumps(
            [
                [
                    r.message_id,
                    r.model_version,
                    r.branch,
                    r.kind,
                    orjson.Fragment(r.payload),
                    orjson.Fragment(r.metrics),
                    r.count,
                    r.client,
                ]
                for r in rows
            ]
        )
        self.insert_group(first.iteration, first.received_at, messages, len(rows))

    def message_ids(self, since_iteration: int = 0) -> dict[int, set[str]]:
        """The ids of the messages stored in iterations ``>= since_iteration``, by
        iteration."""
        out: dict[int, set[str]] = {}
        cursor = self.db.execute(
            "SELECT g.iteration, j.value ->> 0 FROM groups AS g, json_each(g.messages) AS j "
            "WHERE g.iteration >= ?",
            (since_iteration,),
        )
        for iteration, message_id in cursor:
            out.setdefault(int(iteration), set()).add(message_id)
        return out

    def iteration_groups(self, iteration: int) -> Iterator[list[list[Any]]]:
        """The stored groups of ``iteration``, each its list of messages (in order)."""
        cursor = self.db.execute(
            "SELECT messages FROM groups WHERE iteration = ? ORDER BY seq", (iteration,)
        )
        for (text,) in cursor:
            yield orjson.loads(text)

    def iteration_rows(self, iteration: int) -> Iterator[Row]:
        cursor = self.db.execute(
            "SELECT j.value ->> 0, g.iteration, j.value ->> 1, j.value ->> 2, j.value ->> 3, "
            "j.value ->> 4, j.value ->> 5, j.value ->> 6, g.received_at, j.value ->> 7 "
            "FROM groups AS g, json_each(g.messages) AS j WHERE g.iteration = ? "
            "ORDER BY g.seq, j.key",
            (iteration,),
        )
        for r in cursor:
            yield Row(*r)

    def contributions(self, open_iteration: int) -> dict[str, int]:
        """Per client (device), the number of closed iterations (before
        ``open_iteration``) it sent at least one update in (pings do not count): what the
        privacy ledger counts (:mod:`fedrank.server.privacy`)."""
        closed: dict[str, int] = {}
        cursor = self.db.execute(
            "SELECT DISTINCT g.iteration, j.value ->> 7 FROM groups AS g, "
            "json_each(g.messages) AS j WHERE g.iteration < ? AND j.value ->> 7 IS NOT NULL "
            "AND j.value ->> 3 = 'update'",
            (open_iteration,),
        )
        for _, client in cursor:
            closed[client] = closed.get(client, 0) + 1
        return closed

    def counts(self) -> tuple[int, int]:
        """``(stored messages, updates they count for)`` over all iterations."""
        n, total = self.db.execute(
            "SELECT COUNT(*), COALESCE(SUM(j.value ->> 6), 0) "
            "FROM groups AS g, json_each(g.messages) AS j"
        ).fetchone()
        return int(n), int(total)

    # -- Parquet ------------------------------------------------------------------------

    def parquet_path(self, iteration: int) -> Path:
        return self.directory / "parquet" / f"iteration={iteration:06d}" / "updates.parquet"

    def export_parquet(self, iteration: int) -> Path:
        """Write the updates of ``iteration`` to its Parquet partition (atomically), never
        replacing one that exists: the audit log outlives the database (a restored backup,
        :func:`check_not_behind`), so a partition already there is the original record.
        Raises :class:`FileExistsError` then."""
        rows = list(self.iteration_rows(iteration))
        table = pa.table(
            {
                "message_id": [r.message_id for r in rows],
                "model_version": pa.array([r.model_version for r in rows], pa.int64()),
                "branch": [r.branch for r in rows],
                "kind": [r.kind for r in rows],
                "payload": [r.payload for r in rows],
                "metrics": [r.metrics for r in rows],
                "count": pa.array([r.count for r in rows], pa.int64()),
                "received_at": pa.array([r.received_at for r in rows], pa.float64()),
                "client": pa.array([r.client for r in rows], pa.string()),
            }
        )
        path = self.parquet_path(iteration)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".parquet.partial")
        pq.write_table(table, partial)
        try:
            os.link(partial, path)  # atomic, and fails where the partition exists
        finally:
            partial.unlink()
        return path

    def export_missing_parquet(self) -> list[Path]:
        """Write the partitions of closed iterations that a crash left unwritten; returns
        them. A partition that cannot be written now (a full disk) is logged and left for
        the next start: the database holds its messages, so the server still starts."""
        written = []
        for it in self.closed_iterations():
            if self.parquet_path(it["iteration"]).exists():
                continue
            try:
                written.append(self.export_parquet(it["iteration"]))
            except OSError:
                log.exception(
                    "writing the Parquet partition of iteration %d failed; the database holds "
                    "its messages and the next start tries again",
                    it["iteration"],
                )
        return written

    # -- internals ----------------------------------------------------------------------

    def _transaction(self) -> _Transaction:
        return _Transaction(self.db)


class _Checkpointer:
    """Checkpoints the WAL every ``interval`` seconds from its own connection and thread.

    SQLite's automatic checkpoint runs inside the commit that crosses 1,000 WAL pages, so
    that commit (and every client waiting on it) also waits for the database file's fsync,
    and on a disk with occasional slow fsyncs every such commit is an outlier of the
    acknowledgement latency (benchmarks/bench_service.py measures it). A PASSIVE checkpoint
    never blocks the writer, and an acknowledged update is durable in the WAL whether or not
    it has been checkpointed.
    """

    def __init__(self, path: Path, interval: float = 0.5) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._interval = interval
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fedrank-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.wait(self._interval):
            try:
                self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            except sqlite3.Error:
                # The WAL only grows until the next checkpoint succeeds; nothing is lost.
                log.exception("WAL checkpoint failed; retrying in %.1f s", self._interval)

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        self._db.close()


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")
