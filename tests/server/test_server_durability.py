"""``kill -9`` of a real server while clients send, then restarts on the same store and
port: every acknowledged message is stored and counted exactly once, the replayed running
aggregate equals the one recomputed offline, model versions continue in order, and every
closed iteration has its Parquet partition.

The clients behave like the SDK: each message is retried (same id, same payload) until the
server answers 202 or 200, so after the last restart every message a client attempted has
been acknowledged. Kill moments are drawn from a seeded generator; what the tests assert
holds whenever the kill lands.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pyarrow.parquet as pq

from fedrank.server.store import Store
from tests.server.serverkit import (
    ADMIN_TOKEN,
    Live,
    admin,
    binary_headers,
    closed_iteration,
    es_bytes,
    es_message,
    f32,
    live_server,
    recompute_state,
    recompute_step,
    row_count,
    status,
    store_query,
    stored_ids,
    stored_rows,
    wait_until,
)

CLIENTS = 6
KILLS = 3

CONFIG = f"""
[server]
workload = "foltr-es"
admin_token = "{ADMIN_TOKEN}"
[iteration]
tick_seconds = 0.02
"""


@dataclass
class Ledger:
    """What the clients saw, shared by their threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    answers: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    acked: set[str] = field(default_factory=set)
    attempted: set[str] = field(default_factory=set)
    stale: set[str] = field(default_factory=set)  # answered 409 stale: maybe stored before
    failures: list[str] = field(default_factory=list)

    def record(self, message_id: str, code: int) -> None:
        with self.lock:
            self.answers[message_id].append(code)
            if code in (200, 202):
                self.acked.add(message_id)

    def n_acked(self) -> int:
        with self.lock:
            return len(self.acked)

    def acked_now(self) -> set[str]:
        with self.lock:
            return set(self.acked)


def _client(
    url: str, index: int, ledger: Ledger, stop: threading.Event, abort: threading.Event
) -> None:
    """Send messages until ``stop``; retry each one until it is acknowledged; on 409 stale
    take the current version and go on with a new message (as the SDK does: a report
    recomputed on the new model is a new message, with a new id). A message whose
    acknowledgement a kill lost may have been stored and then be answered stale: the server
    remembers ids for its staleness window only. ``abort`` (the test failed) ends the
    thread at once."""
    rng = np.random.default_rng([7, index])
    version = 0
    k = 0
    client = httpx.Client(base_url=url, timeout=5.0)
    try:
        while not stop.is_set():
            mid = f"c{index}-{k}"
            seed = int(rng.integers(0, 2**32))
            metric, anti = f32(rng.random()), f32(rng.random())
            binary = k % 3 == 0
            with ledger.lock:
                ledger.attempted.add(mid)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not abort.is_set():
                try:
                    if binary:
                        response = client.post(
                            "/v1/updates",
                            content=es_bytes(seed, metric, anti),
                            headers=binary_headers(mid, version),
                        )
                    else:
                        response = client.post(
                            "/v1/updates", json=es_message(mid, version, seed, metric, anti)
                        )
                except httpx.TransportError:
                    time.sleep(0.02)  # the server is down: retry the same message
                    continue
                ledger.record(mid, response.status_code)
                if response.status_code in (200, 202):
                    break
                if response.status_code == 503:  # paused by the test: retry later
                    time.sleep(0.02)
                    continue
                if response.status_code == 409 and response.json()["error"] == "stale":
                    version = int(response.json()["current_version"])
                    with ledger.lock:
                        ledger.stale.add(mid)
                    break
                with ledger.lock:
                    ledger.failures.append(f"{mid}: {response.status_code} {response.text}")
                return
            else:
                with ledger.lock:
                    ledger.failures.append(f"{mid}: never acknowledged")
                return
            if abort.is_set():
                return
            k += 1
    finally:
        client.close()


@contextlib.contextmanager
def sending_clients(url: str, ledger: Ledger) -> Iterator[None]:
    """Client threads sending until the block ends (the server must be up then, so that
    every message in flight gets its answer)."""
    stop, abort = threading.Event(), threading.Event()
    threads = [
        threading.Thread(target=_client, args=(url, i, ledger, stop, abort), daemon=True)
        for i in range(CLIENTS)
    ]
    for t in threads:
        t.start()
    try:
        yield
    except BaseException:
        abort.set()
        raise
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)


def _quiescent(live: Live) -> dict[str, int]:
    """Pause the server and wait until nothing more is being stored and no close is under
    way (the published version is the store's newest); returns the status."""
    assert admin(live.client, "pause").status_code == 200

    def settled() -> dict[str, int] | None:
        first = status(live.client)
        rows = row_count(live.store)
        ((newest,),) = store_query(live.store, "SELECT MAX(version) FROM models")
        second = status(live.client)
        if (
            first == second
            and first["updates_accepted_total"] == rows
            and first["model_version"] == newest
        ):
            return first
        return None

    return wait_until(settled, timeout=30, what="the store and the status to agree")


def _check_counts(live: Live, now: dict[str, int]) -> None:
    """The status equals what the store holds."""
    ((n, total),) = store_query(live.store, "SELECT COUNT(*), SUM(count) FROM updates")
    (in_iteration,) = store_query(
        live.store,
        "SELECT COALESCE(SUM(count), 0) FROM updates WHERE iteration = ? AND kind != 'ping'",
        (now["iteration"],),
    )[0]
    assert now["updates_accepted_total"] == n
    assert now["updates_counted_total"] == total
    assert now["updates_in_iteration"] == in_iteration


def _kill_at_random(live: Live, ledger: Ledger, rng: random.Random) -> set[str]:
    """Wait for fresh acknowledgements, wait a seeded random moment, SIGKILL; returns the ids
    acknowledged before the kill."""
    target = ledger.n_acked() + 120
    wait_until(lambda: ledger.n_acked() >= target, timeout=60, what="clients to make progress")
    time.sleep(rng.uniform(0.0, 0.25))
    live.process.kill()
    return ledger.acked_now()


def _check_acked_stored_once(live: Live, acked: set[str]) -> None:
    ids = stored_ids(live.store)
    assert len(ids) == len(set(ids)), "a message is stored twice"
    missing = acked - set(ids)
    assert not missing, f"acknowledged but not stored: {sorted(missing)[:5]}"


def test_kill9_during_ingestion_loses_and_repeats_nothing(tmp_path: Path) -> None:
    rng = random.Random(20240607)
    ledger = Ledger()
    with live_server(tmp_path, CONFIG, iteration_seconds=0, iteration_min_updates=10**9) as live:
        with sending_clients(live.process.url, ledger):
            for _ in range(KILLS):
                acked = _kill_at_random(live, ledger, rng)
                # With the server dead, the store already holds every acknowledged message.
                _check_acked_stored_once(live, acked)
                live.process.start()
                now = _quiescent(live)
                assert (now["iteration"], now["model_version"]) == (0, 0)
                _check_counts(live, now)
                _check_acked_stored_once(live, acked)
                assert admin(live.client, "resume").status_code == 200
        assert ledger.failures == []
        now = _quiescent(live)
        _check_counts(live, now)
        ids = set(stored_ids(live.store))
        # Every message a client attempted was acknowledged in the end, and is stored once.
        assert ledger.acked == ledger.attempted == ids and not ledger.stale
        assert all(codes.count(202) <= 1 for codes in ledger.answers.values())
        assert now["updates_in_iteration"] == len(ids)
        assert admin(live.client, "resume").status_code == 200

        # Re-sending acknowledged ids (even with another payload) gives 200 duplicate.
        before = status(live.client)
        for mid in rng.sample(sorted(ids), 40):
            response = live.client.post("/v1/updates", json=es_message(mid, 0, 1, 0.5, 0.5))
            assert response.status_code == 200 and response.json()["status"] == "duplicate"
        after = status(live.client)
        assert after["updates_accepted_total"] == before["updates_accepted_total"]
        assert after["updates_duplicate_total"] == before["updates_duplicate_total"] + 40

        # The replayed running aggregate is the one the stored rows make: close and compare.
        closed = admin(live.client, "close")
        assert closed.status_code == 200, closed.text
        assert closed.json() == {"closed_iteration": 0, "model_version": 1, "updates": len(ids)}
        rows = stored_rows(live.store, 0)
        offline = recompute_state(live.config, rows)
        record = closed_iteration(live.store, 0)
        assert record["aggregate"]["count"] == offline.count == len(ids)
        np.testing.assert_allclose(
            record["aggregate"]["weighted_noise"]["data"],
            offline.weighted_noise,
            rtol=1e-9,
            atol=1e-9,
        )
        expected = recompute_step(live.config, live.store, 0, offline)
        published = np.array(live.client.get("/v1/model/1").json()["params"])
        np.testing.assert_allclose(published, expected, rtol=1e-9, atol=1e-12)

        # A crash after the close: the new version and the Parquet partition survive.
        live.process.kill()
        live.process.start()
        now = status(live.client)
        assert (now["model_version"], now["iteration"], now["updates_in_iteration"]) == (1, 1, 0)
        np.testing.assert_array_equal(
            live.client.get("/v1/model").json()["params"], published.tolist()
        )
        table = pq.read_table(Store(live.store).parquet_path(0))
        assert sorted(table.column("message_id").to_pylist()) == sorted(ids)


def _check_history(live: Live) -> int:
    """Versions and iterations are 0..V without gap or repeat, each closed iteration has
    its Parquet partition with exactly its rows, its stored aggregate equals the one
    recomputed from those rows and the next version is the optimizer's step on it.
    Returns V."""
    versions = store_query(live.store, "SELECT version, iteration FROM models ORDER BY version")
    top = versions[-1][0]
    assert [v for v, _ in versions] == list(range(top + 1))
    assert all(v == it for v, it in versions)
    iterations = store_query(
        live.store,
        "SELECT iteration, model_version, closed_at FROM iterations ORDER BY iteration",
    )
    assert [it for it, _, _ in iterations] == list(range(top + 1))
    assert all(it == v for it, v, _ in iterations)
    assert all(closed is not None for _, _, closed in iterations[:-1])
    assert iterations[-1][2] is None
    paths = Store(live.store, read_only=True)
    try:
        for iteration in range(top):
            rows = stored_rows(live.store, iteration)
            path = paths.parquet_path(iteration)
            assert path.exists(), f"no Parquet partition for iteration {iteration}"
            assert pq.read_table(path).column("message_id").to_pylist() == [
                r["message_id"] for r in rows
            ]
            record = closed_iteration(live.store, iteration)
            offline = recompute_state(live.config, rows)
            assert (
                record["n_updates"]
                == offline.count
                == sum(1 for r in rows if r["kind"] == "update")
            )
            np.testing.assert_allclose(
                record["aggregate"]["weighted_noise"]["data"],
                offline.weighted_noise,
                rtol=1e-9,
                atol=1e-9,
            )
            params = np.array(live.client.get(f"/v1/model/{iteration + 1}").json()["params"])
            np.testing.assert_allclose(
                params,
                recompute_step(live.config, live.store, iteration, offline),
                rtol=1e-9,
                atol=1e-12,
            )
    finally:
        paths.close()
    return top


def test_kill9_while_iterations_close_keeps_versions_in_order(tmp_path: Path) -> None:
    rng = random.Random(99)
    ledger = Ledger()
    with live_server(tmp_path, CONFIG, iteration_seconds=0, iteration_min_updates=5) as live:
        last = 0
        with sending_clients(live.process.url, ledger):
            for _ in range(KILLS):
                acked = _kill_at_random(live, ledger, rng)
                _check_acked_stored_once(live, acked)
                live.process.start()  # writes the partitions a crash left unwritten
                now = _quiescent(live)
                _check_counts(live, now)
                _check_acked_stored_once(live, acked)
                top = _check_history(live)
                assert top == now["model_version"] >= last
                assert top > last, "no iteration closed between two kills"
                last = top
                assert admin(live.client, "resume").status_code == 200
        assert ledger.failures == []
        now = _quiescent(live)
        _check_counts(live, now)
        # Every message was acknowledged or answered stale (a new message went instead);
        # every acknowledged one is stored, and nothing else but stale-answered ones whose
        # acknowledgement a kill lost (stored once: _check_acked_stored_once).
        stored = set(stored_ids(live.store))
        assert ledger.attempted == ledger.acked | ledger.stale
        assert ledger.acked <= stored <= ledger.attempted
        top = _check_history(live)

        # A crash between the close's commit and its Parquet export leaves a partition
        # missing; the next start writes it, with the same rows.
        store = Store(live.store, read_only=True)
        lost = [store.parquet_path(i) for i in (0, top // 2, top - 1)]
        store.close()
        before = [pq.read_table(p) for p in lost]
        live.process.kill()
        for path in lost:
            path.unlink(missing_ok=True)
        live.process.start()
        for path, table in zip(lost, before, strict=True):
            assert path.exists()
            assert pq.read_table(path).equals(table)
        # The operator's pause (set by _quiescent before the kill) survives the restart
        # (issue 15, F9): the open iteration, with >= 5 updates, stays open.
        assert status(live.client)["paused"] is True
        _quiescent(live)
        assert _check_history(live) == top
        assert admin(live.client, "resume").status_code == 200
        assert status(live.client)["paused"] is False


def test_kill9_during_an_iteration_close(tmp_path: Path) -> None:
    """SIGKILL a few milliseconds (seeded) after asking for a close of a large iteration:
    the kill lands before the close's commit (the iteration stays open with every update,
    replayed), or between the commit and the Parquet export (the partition is written at
    the next start), or after both. Each case resumes consistently."""
    rng = random.Random(31337)
    with live_server(tmp_path, CONFIG, iteration_seconds=0, iteration_min_updates=10**9) as live:
        for trial in range(5):
            version = live.version()
            messages = [
                es_message(f"close{trial}-{i}", version, trial * 10_000 + i, 0.5, i / 2000)
                for i in range(1500)
            ]
            batch = live.client.post("/v1/updates:batch", json={"messages": messages})
            assert batch.json()["accepted"] == 1500
            in_iteration = status(live.client)["updates_in_iteration"]

            def close() -> None:
                with (
                    httpx.Client(base_url=live.process.url, timeout=10) as client,
                    contextlib.suppress(httpx.HTTPError),
                ):
                    admin(client, "close")

            closer = threading.Thread(target=close)
            closer.start()
            time.sleep(rng.uniform(0.0, 0.05))
            live.process.kill()
            closer.join()
            committed = store_query(live.store, "SELECT MAX(version) FROM models")[0][0]
            live.process.start()
            now = status(live.client)
            _check_counts(live, now)
            if committed > version:
                assert (now["model_version"], now["updates_in_iteration"]) == (version + 1, 0)
            else:
                assert now["model_version"] == version
                assert now["updates_in_iteration"] == in_iteration
                assert admin(live.client, "close").status_code == 200
            assert _check_history(live) == live.version()
