"""The server's durable store in-process: identity, models and iterations, group commits
that are all-or-nothing, the close as one transaction, exact round trips of parameters,
the Parquet audit log (and the partitions a crash left unwritten), read-only readers."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from fedrank.errors import ConfigError
from fedrank.server.store import NOISE_SECRET, Row, Store


def _row(message_id: str, iteration: int = 0, kind: str = "update", count: int = 1) -> Row:
    return Row(message_id, iteration, 0, "treatment", kind, '{"x": 1}', "{}", count, time.time())


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "store")
    assert s.check_identity({"workload": "fedavg", "dim": 3}) is True
    s.publish_first(np.array([0.5, -0.0, 5e-324]), {"type": "SGD"})
    return s


def test_identity_is_recorded_once_and_checked(tmp_path: Path) -> None:
    s = Store(tmp_path / "s")
    assert s.check_identity({"workload": "frecency", "dim": 22}) is True
    assert s.check_identity({"dim": 22, "workload": "frecency"}) is False  # key order is moot
    with pytest.raises(ConfigError, match="was created for"):
        s.check_identity({"workload": "fedavg", "dim": 22})
    s.close()


def test_durability_settings(store: Store) -> None:
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_first_model_and_exact_round_trips(store: Store) -> None:
    model = store.latest_model()
    assert model.version == 0 and model.iteration == 0
    assert model.optimizer_state == {"type": "SGD"}
    np.testing.assert_array_equal(model.params, [0.5, -0.0, 5e-324])
    assert np.signbit(model.params[1])  # -0.0 survives
    assert store.open_iteration()[:2] == (0, 0)
    assert store.model(7) is None
    assert store.counts() == (0, 0)


def test_a_group_commit_is_one_row_and_the_view_gives_one_row_per_message(store: Store) -> None:
    store.insert([_row("a"), _row("b", kind="aggregate", count=5), _row("c", kind="ping")])
    assert store.counts() == (3, 7)
    assert store.db.execute("SELECT COUNT(*) FROM groups").fetchone()[0] == 1
    rows = list(store.iteration_rows(0))
    assert [r.message_id for r in rows] == ["a", "b", "c"]
    assert rows[1].count == 5 and isinstance(rows[1].model_version, int)
    assert rows[0].payload == '{"x":1}' and rows[0].metrics == "{}"  # JSON text, as given
    view = store.db.execute("SELECT message_id, count FROM updates ORDER BY seq").fetchall()
    assert view == [("a", 1), ("b", 5), ("c", 1)]
    store.insert([_row("d"), _row("e")])
    assert store.message_ids() == {0: {"a", "b", "c", "d", "e"}}
    store.insert([_row("h", iteration=1)])
    assert store.message_ids(1) == {1: {"h"}}
    assert [r.message_id for r in store.iteration_rows(0)] == ["a", "b", "c", "d", "e"]
    with pytest.raises(ValueError, match="one iteration"):
        store.insert([_row("f"), _row("g", iteration=1)])
    assert store.counts() == (6, 10)


def test_a_failed_group_commit_stores_nothing(store: Store) -> None:
    store.insert([_row("a")])
    store.db.execute("CREATE TRIGGER refuse BEFORE INSERT ON groups BEGIN "
                     "SELECT RAISE(ABORT, 'disk full'); END")  # fmt: skip
    with pytest.raises(sqlite3.IntegrityError, match="disk full"):
        store.insert([_row("b"), _row("c")])
    assert store.message_ids() == {0: {"a"}} and store.counts() == (1, 1)


def test_close_is_one_transaction(store: Store) -> None:
    store.insert([_row("a"), _row("b")])
    store.close_iteration(0, 2, {"count": 2}, {"treatment": {}}, "admin", 1, np.ones(3), {"s": 1})
    assert store.open_iteration()[:2] == (1, 1)
    assert store.latest_model().version == 1
    (closed,) = store.closed_iterations()
    assert closed["iteration"] == 0 and closed["n_updates"] == 2 and closed["reason"] == "admin"
    # A close that fails half-way (version 1 exists) leaves the store as it was.
    with pytest.raises(sqlite3.IntegrityError):
        store.close_iteration(1, 0, {}, {}, "x", 1, np.zeros(3), {})
    assert store.open_iteration()[:2] == (1, 1)
    assert len(store.closed_iterations()) == 1
    np.testing.assert_array_equal(store.latest_model().params, np.ones(3))


def test_parquet_partitions(store: Store) -> None:
    store.insert([_row("a"), _row("b", count=4)])
    store.close_iteration(0, 5, {}, {}, "admin", 1, np.ones(3), {})
    store.insert([_row("c", iteration=1)])
    store.close_iteration(1, 1, {}, {}, "admin", 2, np.ones(3), {})
    path = store.export_parquet(0)
    assert path == store.directory / "parquet" / "iteration=000000" / "updates.parquet"
    assert not list(path.parent.glob("*.partial"))
    table = pq.read_table(path)
    assert table.column("message_id").to_pylist() == ["a", "b"]
    assert table.column("count").to_pylist() == [1, 4]
    assert set(table.column_names) >= {"payload", "metrics", "branch", "kind", "received_at"}
    # Iteration 1's partition is missing (a crash after its close): written on request, once.
    written = store.export_missing_parquet()
    assert written == [store.parquet_path(1)]
    assert pq.read_table(written[0]).column("message_id").to_pylist() == ["c"]
    assert store.export_missing_parquet() == []


def test_readers_cannot_write(store: Store) -> None:
    store.insert([_row("a")])
    reader = Store(store.directory, read_only=True)
    try:
        assert reader.counts() == (1, 1)
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reader.insert([_row("b")])
    finally:
        reader.close()


def test_a_store_without_an_open_iteration_is_refused(tmp_path: Path) -> None:
    s = Store(tmp_path / "empty")
    with pytest.raises(ConfigError, match="no open iteration"):
        s.open_iteration()
    s.close()


def test_the_wal_is_checkpointed_in_the_background_and_truncated_on_close(tmp_path: Path) -> None:
    s = Store(tmp_path / "s")
    s.check_identity({"workload": "fedavg", "dim": 3})
    s.publish_first(np.zeros(3), {"type": "SGD"})
    db_file = tmp_path / "s" / "fedrank.sqlite3"
    wal = db_file.with_name(db_file.name + "-wal")
    # automatic checkpoints are off: commits never wait for the database file's fsync
    assert s.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    size_before = db_file.stat().st_size
    blob = b'["m", 0, "treatment", "update", "' + b"x" * 4000 + b'", "{}", 1]'
    for k in range(300):  # about 1.2 MB through the WAL
        s.insert_group(0, time.time(), b"[" + blob.replace(b'"m"', f'"m{k}"'.encode()) + b"]", 1)
    # the checkpointer (every 0.5 s) copies the WAL's pages into the database file
    deadline = time.monotonic() + 10
    while db_file.stat().st_size < size_before + 1_000_000 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert db_file.stat().st_size >= size_before + 1_000_000
    s.close()
    assert not wal.exists() or wal.stat().st_size == 0
    reopened = Store(tmp_path / "s", read_only=True)
    assert reopened.counts()[0] == 300
    reopened.close()


def test_the_noise_secret_is_a_private_file_beside_the_database(tmp_path: Path) -> None:
    """Created once (0600) and read back; a secret a database still holds (as stores once
    kept it) moves to the file; a changed file is refused, not replaced."""
    store = Store(tmp_path / "a")
    try:
        secret = store.noise_secret()
        assert store.noise_secret() == secret
    finally:
        store.close()
    path = tmp_path / "a" / NOISE_SECRET
    assert path.stat().st_mode & 0o777 == 0o600 and int(path.read_text(), 16) == secret
    old = Store(tmp_path / "b")
    try:
        old.db.execute("INSERT INTO meta VALUES ('noise_secret', ?)", ("ab" * 16,))
        assert old.noise_secret() == int("ab" * 16, 16)
        assert (
            old.db.execute("SELECT value FROM meta WHERE key = 'noise_secret'").fetchone() is None
        )
        assert (tmp_path / "b" / NOISE_SECRET).read_text() == "ab" * 16
        (tmp_path / "b" / NOISE_SECRET).write_text("not a secret")
        with pytest.raises(ConfigError, match="32 hex digits"):
            old.noise_secret()
    finally:
        old.close()
