"""A store whose database is lost, or restored from an older backup, is never silently reset
(issue 15, F2; issue 51, findings 6 and 7).

Before: deleting or truncating ``fedrank.sqlite3`` and restarting started again at version
0 without a word, accepted acknowledged ids a second time and overwrote the audit log's
first partition. Now the store carries an identity file; a store with an identity file or
a Parquet audit log but no database refuses to start and says how to recover;
``fedrank store recover`` rebuilds the database from the audit log (the models the server
published, the message ids of every closed iteration), and ``fedrank serve --new-store``
starts an empty store after moving the old files aside."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest

from fedrank.errors import FedrankError
from fedrank.server.process import ServerProcess
from fedrank.server.store import DATABASE, IDENTITY, NOISE_SECRET, Store
from tests.cli.clirun import assert_clean_failure, ok, run
from tests.server.serverkit import (
    ADMIN_TOKEN,
    NamedDevices,
    admin,
    es_message,
    status,
    write_config,
)

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


PRIVATE = f"""
[server]
workload = "fedavg"
admin_token = "{ADMIN_TOKEN}"
max_staleness = 3
[iteration]
seconds = 0
min_updates = 1000000
[fedavg]
dim = 4
[privacy]
epsilon = 4.0
delta = 1e-6
clip = 1.0
rounds = 5
"""


def _private_run(c: httpx.Client, iterations: range) -> list[bytes]:
    """Three updates (from the devices ``dev-0`` to ``dev-2``: ``c`` signs with
    :class:`NamedDevices`) and a close per iteration of ``iterations``; each published
    model's bytes (``/v1/model``'s parameters as sent)."""
    published = []
    for iteration in iterations:
        for i in range(3):
            delta = [0.1 * (i + 1), -0.2, 0.05 * iteration, 0.3]
            body = {"message_id": f"p-{iteration}-{i}", "model_version": iteration,
                    "payload": {"delta": delta, "n": 1}, "client_id": f"dev-{i}"}  # fmt: skip
            assert c.post("/v1/updates", json=body).status_code == 202
        assert admin(c, "close").status_code == 200
        published.append(np.array(c.get("/v1/model").json()["params"]).tobytes())
    return published


@pytest.mark.parametrize("noise", ["numpy", "secure"])
def test_recovery_reproduces_released_private_models_bit_for_bit(
    tmp_path: Path, noise: str
) -> None:
    """Issue 51, finding 6: the DP noise derives from a secret kept beside the database
    (mode 0600), so recovering a lost database closes v1..v3 with the noise the server
    drew (numpy's or the secure discrete one): the same bytes, the same epsilon; nothing
    released twice with other noise."""
    extra = f'noise = "{noise}"\naccountant = "rdp"\n' if noise == "secure" else ""
    config = write_config(tmp_path, PRIVATE + extra)
    store = tmp_path / "store"
    with ServerProcess(store, config=config) as server:
        devices = NamedDevices(store, server.url)
        with httpx.Client(base_url=server.url, auth=devices) as c:
            published = _private_run(c, range(3))
            before = status(c)["privacy"]
    secret = store / NOISE_SECRET
    assert secret.stat().st_mode & 0o777 == 0o600
    for name in (DATABASE, DATABASE + "-wal", DATABASE + "-shm"):
        (store / name).unlink(missing_ok=True)
    ok(["store", "recover", "--store", str(store), "--config", str(config)])
    with ServerProcess(store, config=config) as server, httpx.Client(base_url=server.url) as c:
        after = status(c)["privacy"]
        recovered = [
            np.array(c.get(f"/v1/model/{v}").json()["params"]).tobytes() for v in (1, 2, 3)
        ]
        text = json.dumps(c.get("/v1/status").json())
    assert recovered == published
    assert after["epsilon"] == before["epsilon"] and after["devices"] == before["devices"]
    assert secret.read_text() not in text  # the secret is never served


def test_a_database_restored_from_an_older_backup_is_refused_then_recovered(
    tmp_path: Path,
) -> None:
    """Issue 51, finding 7: a database copied after v1 and restored when the audit log
    holds v1..v4 is refused at start with one line naming `fedrank store recover`;
    recovery rebuilds the database from the log (the backup is kept aside); an id
    acknowledged after the backup stays a duplicate and no partition is overwritten."""
    config = write_config(tmp_path, PRIVATE)
    store = tmp_path / "store"
    # One process object restarted (it keeps its port): the same three devices throughout.
    server = ServerProcess(store, config=config)
    with server:
        devices = NamedDevices(store, server.url)
        with httpx.Client(base_url=server.url, auth=devices) as c:
            _private_run(c, range(1))
    backup = tmp_path / "backup.sqlite3"
    shutil.copy(store / DATABASE, backup)
    with server, httpx.Client(base_url=server.url, auth=devices) as c:
        published = _private_run(c, range(1, 4))
    audit = {p: p.read_bytes() for p in store.glob("parquet/*/updates.parquet")}
    for name in (DATABASE + "-wal", DATABASE + "-shm"):
        (store / name).unlink(missing_ok=True)
    shutil.copy(backup, store / DATABASE)
    refused = run(["serve", "--store", str(store), "--config", str(config)])
    assert_clean_failure(refused, "fedrank store recover")
    assert "behind its audit log" in refused.output

    done = ok(["store", "recover", "--store", str(store), "--config", str(config)])
    assert "4 iterations" in done.output and "superseded-" in done.output
    (superseded,) = store.glob("superseded-*")
    assert (superseded / DATABASE).read_bytes() == backup.read_bytes()
    with server, httpx.Client(base_url=server.url, auth=devices) as c:
        assert status(c)["model_version"] == 4
        last = np.array(c.get("/v1/model").json()["params"]).tobytes()
        again = {"message_id": "p-3-0", "model_version": 3, "client_id": "dev-0",
                 "payload": {"delta": [0.1, -0.2, 0.15, 0.3], "n": 1}}  # fmt: skip
        assert c.post("/v1/updates", json=again).status_code == 200  # still a duplicate
        _private_run(c, range(4, 5))
    assert last == published[-1]
    assert {p: p.read_bytes() for p in audit} == audit  # never overwritten


def test_the_next_close_never_overwrites_a_partition(tmp_path: Path) -> None:
    """Defence in depth for finding 7: a partition already in the audit log is kept."""
    store = Store(tmp_path / "store")
    try:
        store.publish_first(np.zeros(2), {})
        store.export_parquet(0)
        with pytest.raises(FileExistsError):
            store.export_parquet(0)
    finally:
        store.close()
