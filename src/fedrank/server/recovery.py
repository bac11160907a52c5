"""``fedrank store recover``: rebuild a store's database from its Parquet audit log.

A store whose database was lost (deleted, or truncated to nothing), or replaced by an older
backup (behind its audit log: :func:`~fedrank.server.store.check_not_behind`; that database
is moved to ``superseded-<time>/``), keeps, per closed iteration, every accepted message in
``parquet/iteration=<n>/updates.parquet``. Recovery
replays them through the server's own engine (:class:`~fedrank.server.engine.Engine`):
iteration by iteration the messages are stored again, folded into the aggregate exactly as
a restart replays an open iteration, and the iteration is closed with the strategy's server
step, so the recovered models are the ones the server published (equal up to the order of
float summation: the server folded each group commit as it arrived). The store keeps its
id (the identity file's), so the directory stays one store, and its noise secret (a file
beside the database, :meth:`~fedrank.server.store.Store.noise_secret`): each recovered
close under ``[privacy]`` draws the noise the server drew then, so the recovered models are
the released ones bit for bit and nothing is released twice with different noise. The
audit log is read, never rewritten. Each message's ``client`` comes back too, so the
per-device privacy ledger counts what it counted before.

What cannot come back: the messages of the iteration that was open when the database was
lost (they were acknowledged but never reached the audit log), the close reasons (each
recovered iteration records ``recovered``) and the original time stamps of the closes.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from fedrank.errors import ConfigError
from fedrank.server.config import ServerConfig
from fedrank.server.engine import Engine
from fedrank.server.store import (
    DATABASE,
    IDENTITY,
    Row,
    Store,
    database_files,
    last_iteration,
    move_aside,
    partitions,
)


def audit_partitions(directory: Path) -> list[tuple[int, Path]]:
    """``(iteration, path)`` of every Parquet partition, in iteration order; refuses a log
    with a gap (an iteration's messages missing: its close cannot be recomputed)."""
    found = partitions(directory)
    numbers = [n for n, _ in found]
    if numbers != list(range(len(numbers))):
        missing = sorted(set(range(max(numbers, default=-1) + 1)) - set(numbers))
        raise ConfigError(
            f"the audit log of {directory} lacks the partitions of iterations {missing}; the "
            "models after them cannot be recomputed"
        )
    return found


def recover_store(config: ServerConfig) -> dict[str, Any]:
    """Rebuild the database of ``config.server.store`` from its audit log (module
    docstring); returns what was recovered (``superseded``: where a database behind the
    log was moved). Refuses a store whose database is up to date with its log."""
    directory = Path(config.server.store)
    database = directory / DATABASE
    superseded = None
    if database.exists() and database.stat().st_size > 0:
        found = partitions(directory)
        if not found or found[-1][0] < last_iteration(directory):
            raise ConfigError(
                f"the store {directory} has a database that is not behind its audit log: "
                "there is nothing to recover"
            )
        superseded = move_aside(directory, database_files(directory), "superseded")
    log = audit_partitions(directory)
    if not log:
        raise ConfigError(f"the store {directory} has no Parquet audit log to recover from")
    for stale in (database, database.with_name(DATABASE + "-wal")):
        stale.unlink(missing_ok=True)  # an empty (truncated) file, or a WAL of the lost one
    identity = directory / IDENTITY
    store_id = json.loads(identity.read_text())["store_id"] if identity.exists() else None
    seed = Store(directory, recovering=True)
    if store_id is not None:
        seed.db.execute("INSERT INTO meta VALUES ('store_id', ?)", (store_id,))
    seed.close()
    loop = asyncio.new_event_loop()
    engine = Engine(config, loop, recovering=True)
    try:
        messages = 0
        for iteration, path in log:
            table = pq.read_table(path).to_pylist()
            rows = [
                Row(r["message_id"], iteration, r["model_version"], r["branch"], r["kind"],
                    r["payload"], r["metrics"], r["count"], r["received_at"], r.get("client"))
                for r in table
            ]  # fmt: skip
            engine.recover_iteration(rows)
            messages += len(rows)
        return {
            "store": str(directory),
            "iterations": len(log),
            "messages": messages,
            "model_version": engine.round.version,
            "superseded": None if superseded is None else str(superseded),
        }
    finally:
        engine.stop()
        loop.close()
