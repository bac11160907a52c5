"""A store whose database is lost is never silently reset (issue 15, F2).

Before: deleting or truncating ``fedrank.sqlite3`` and restarting started again at version
0 without a word, accepted acknowledged ids a second time and overwrote the audit log's
first partition. Now the store carries an identity file; a store with an identity file or
a Parquet audit log but no database refuses to start and says how to recover;
``fedrank store recover`` rebuilds the database from the audit log (the models the server
published, the message ids of every closed iteration), and ``fedrank serve --new-store``
starts an empty store after moving the old files aside."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest

from fedrank.errors import FedrankError
from fedrank.server.process import ServerProcess
from fedrank.server.store import DATABASE, IDENTITY
from tests.cli.clirun import assert_clean_failure, ok, run
from tests.server.serverkit import ADMIN_TOKEN, admin, es_message, status, write_config

CONFIG = f"""
[server]
workload = "foltr-es"
admin_token = "{ADMIN_TOKEN}"
max_staleness = 3  # every stored message's id is remembered (server/recent_ids.py)
[iteration]
seconds = 0
min_updates = 1000000
"""


def _model(client: httpx.Client) -> np.ndarray:
    return np.array(client.get("/v1/model").json()["params"], dtype=np.float64)


def _run_and_lose(tmp_path: Path) -> tuple[Path, Path, dict[str, object]]:
    """Three closed iterations and two messages in the open one, then the database is
    deleted; returns the store, the config and what the server had published."""
    config = write_config(tmp_path, CONFIG)
    store = tmp_path / "store"
    with ServerProcess(store, config=config) as server, httpx.Client(base_url=server.url) as c:
        for iteration in range(3):
            for i in range(4):
                msg = es_message(f"m-{iteration}-{i}", iteration, 10 * iteration + i, 0.25 * i, 0.5)
                assert c.post("/v1/updates", json=msg).status_code == 202
            assert admin(c, "close").status_code == 200
        for i in range(2):
            assert (
                c.post("/v1/updates", json=es_message(f"open-{i}", 3, 90 + i, 0.5, 0.1)).status_code
                == 202
            )
        published = {"version": status(c)["model_version"], "params": _model(c)}
    partitions = sorted(store.glob("parquet/iteration=*/updates.parquet"))
    published["audit"] = [pq.read_table(p).to_pylist() for p in partitions]
    for name in (DATABASE, DATABASE + "-wal", DATABASE + "-shm"):
        (store / name).unlink(missing_ok=True)
    return store, config, published


def test_a_lost_database_is_refused_then_recovered_from_the_audit_log(tmp_path: Path) -> None:
    store, config, published = _run_and_lose(tmp_path)
    assert (store / IDENTITY).exists() and published["version"] == 3
    refused = run(["serve", "--store", str(store), "--config", str(config)])
    assert_clean_failure(refused, "fedrank store recover")
    assert "3 closed iterations" in refused.output and "is missing" in refused.output
    (store / DATABASE).write_bytes(b"")  # truncated to nothing: the same refusal
    assert_clean_failure(run(["serve", "--store", str(store), "--config", str(config)]), "empty")

    done = ok(["store", "recover", "--store", str(store), "--config", str(config)])
    assert "3 iterations, 12 messages" in done.output and "version 3" in done.output
    audit = [pq.read_table(p).to_pylist() for p in sorted(store.glob("parquet/*/updates.parquet"))]
    assert audit == published["audit"]  # the audit log is rewritten exactly as it was

    with ServerProcess(store, config=config) as server, httpx.Client(base_url=server.url) as c:
        assert status(c)["model_version"] == 3
        np.testing.assert_allclose(_model(c), published["params"], rtol=1e-12, atol=1e-15)
        again = c.post("/v1/updates", json=es_message("m-1-2", 1, 12, 0.5, 0.5))
        assert again.status_code == 200  # acknowledged before the loss: still a duplicate
        lost = c.post("/v1/updates", json=es_message("open-0", 3, 90, 0.5, 0.1))
        assert lost.status_code == 202  # the open iteration's messages are what was lost
    identity = json.loads((store / IDENTITY).read_text())
    assert identity["workload"] == "foltr-es"


def test_new_store_moves_the_old_files_aside_and_starts_empty(tmp_path: Path) -> None:
    store, config, _ = _run_and_lose(tmp_path)
    with (
        ServerProcess(store, config=config, new_store=True) as server,
        httpx.Client(base_url=server.url) as c,
    ):
        assert status(c)["model_version"] == 0
    (abandoned,) = store.glob("abandoned-*")
    assert (abandoned / IDENTITY).exists()
    assert len(list(abandoned.glob("parquet/iteration=*/updates.parquet"))) == 3
    # A store with its database is not abandoned, and there is nothing to recover.
    assert_clean_failure(
        run(["serve", "--store", str(store), "--config", str(config), "--new-store"]),
        "has a database",
    )
    assert_clean_failure(
        run(["store", "recover", "--store", str(store), "--config", str(config)]),
        "nothing to recover",
    )


def test_a_database_of_another_store_is_refused(tmp_path: Path) -> None:
    config = write_config(tmp_path, CONFIG)
    one, two = tmp_path / "one", tmp_path / "two"
    for store in (one, two):
        with ServerProcess(store, config=config):
            pass
    (two / DATABASE).unlink()
    (one / DATABASE).rename(two / DATABASE)
    with pytest.raises(FedrankError, match="exited"):
        ServerProcess(two, config=config).start(timeout=15)
    assert "the database was replaced" in (tmp_path / "two.log").read_text()


def test_a_partition_that_cannot_be_written_does_not_stop_the_start(tmp_path: Path) -> None:
    """Issue 15, F11: a restart on a full disk failed in the Parquet export although the
    database was intact. A partition that cannot be written (here a file stands where its
    directory goes: a real OSError) is logged and written at a later start."""
    config = write_config(tmp_path, CONFIG)
    store = tmp_path / "store"
    with ServerProcess(store, config=config) as server, httpx.Client(base_url=server.url) as c:
        assert c.post("/v1/updates", json=es_message("p-0", 0, 1, 0.5, 0.5)).status_code == 202
        assert admin(c, "close").status_code == 200
    partition = store / "parquet" / "iteration=000000"
    table = pq.read_table(partition / "updates.parquet")
    (partition / "updates.parquet").unlink()
    partition.rmdir()
    partition.write_text("not a directory")
    with ServerProcess(store, config=config) as server, httpx.Client(base_url=server.url) as c:
        assert status(c)["model_version"] == 1  # started, from the intact database
    assert (
        "writing the Parquet partition of iteration 0 failed"
        in (tmp_path / "store.log").read_text()
    )
    partition.unlink()
    with ServerProcess(store, config=config):
        pass
    assert pq.read_table(partition / "updates.parquet").equals(table)
