"""Many concurrent clients against one real server: 32 threads x 200 messages (JSON, the
binary form and batches), with message ids deliberately shared across threads.

Afterwards every distinct id was answered 202 exactly once and 200 every other time, the
status counts the distinct ids, the SQLite store (read read-only) holds exactly those rows,
and the running aggregate equals the one recomputed offline from the stored rows.
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

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
    status,
    stored_ids,
    stored_rows,
)

THREADS = 32
PER_THREAD = 200
SHARED_EVERY = 10  # every 10th message of each thread uses an id all threads send
BATCH = 20

CONFIG = f"""
[server]
workload = "foltr-es"
admin_token = "{ADMIN_TOKEN}"
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    directory: Path = tmp_path_factory.mktemp("concurrent")
    with live_server(directory, CONFIG, iteration_seconds=0, iteration_min_updates=10**9) as live:
        yield live


def _plan(thread: int) -> list[tuple[str, dict[str, float | int], bool]]:
    """The messages of one thread: ``(message_id, stored payload, binary?)``, seeded."""
    rng = np.random.default_rng([2024, thread])
    binary = thread % 2 == 1
    plan = []
    for k in range(PER_THREAD):
        message_id = f"shared-{k}" if k % SHARED_EVERY == 0 else f"t{thread}-{k}"
        seed = int(rng.integers(0, 2**32))
        metric, anti = (float(x) for x in rng.random(2))
        if binary:
            metric, anti = f32(metric), f32(anti)
        plan.append(
            (message_id, {"seed": seed, "metric": metric, "antithetic_metric": anti}, binary)
        )
    return plan


def _client_thread(
    url: str, thread: int, out: list[tuple[str, int, int]], errors: list[str]
) -> None:
    """Send this thread's plan; threads ``t % 4 == 2`` use the batch endpoint."""
    plan = _plan(thread)
    with httpx.Client(base_url=url, timeout=60.0) as client:
        if thread % 4 == 2:
            for start in range(0, PER_THREAD, BATCH):
                chunk = plan[start : start + BATCH]
                messages = [
                    {"message_id": mid, "model_version": 0, "payload": payload}
                    for mid, payload, _ in chunk
                ]
                response = client.post("/v1/updates:batch", json={"messages": messages})
                if response.status_code != 200:
                    errors.append(response.text)
                    continue
                codes = response.json()["statuses"]
                for (mid, _, _), code in zip(chunk, codes, strict=True):
                    out.append((mid, thread, code))
            return
        for mid, payload, binary in plan:
            if binary:
                body = es_bytes(payload["seed"], payload["metric"], payload["antithetic_metric"])
                response = client.post("/v1/updates", content=body, headers=binary_headers(mid, 0))
            else:
                response = client.post(
                    "/v1/updates",
                    json=es_message(
                        mid, 0, payload["seed"], payload["metric"], payload["antithetic_metric"]
                    ),
                )
            out.append((mid, thread, response.status_code))


def test_many_concurrent_clients_count_each_message_once(server: Live) -> None:
    results: list[tuple[str, int, int]] = []
    errors: list[str] = []
    threads = [
        threading.Thread(target=_client_thread, args=(server.process.url, t, results, errors))
        for t in range(THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert len(results) == THREADS * PER_THREAD

    by_status = Counter(code for _, _, code in results)
    assert set(by_status) <= {200, 202}, by_status
    accepted: dict[str, list[int]] = defaultdict(list)
    for mid, thread, code in results:
        if code == 202:
            accepted[mid].append(thread)
    distinct = {mid for mid, _, _ in results}
    expected_distinct = THREADS * (PER_THREAD - PER_THREAD // SHARED_EVERY) + PER_THREAD // (
        SHARED_EVERY
    )
    assert len(distinct) == expected_distinct
    # Exactly one 202 per distinct id, a 200 for every other send of it.
    assert set(accepted) == distinct
    assert all(len(threads_) == 1 for threads_ in accepted.values())
    assert by_status[202] == len(distinct)
    assert by_status[200] == len(results) - len(distinct)

    now = status(server.client)
    assert now["updates_accepted_total"] == len(distinct)
    assert now["updates_counted_total"] == len(distinct)
    assert now["updates_in_iteration"] == len(distinct)
    assert now["updates_duplicate_total"] == len(results) - len(distinct)
    assert now["updates_rejected_total"] == 0

    ids = stored_ids(server.store)
    assert len(ids) == len(set(ids)) == len(distinct)
    assert set(ids) == distinct
    # A shared id holds the payload of the thread whose send was accepted.
    rows = {r["message_id"]: r for r in stored_rows(server.store)}
    for k in range(0, PER_THREAD, SHARED_EVERY):
        mid = f"shared-{k}"
        (winner,) = accepted[mid]
        assert rows[mid]["payload"] == _plan(winner)[k][1]

    # The running aggregate built under concurrency equals the offline one.
    closed = admin(server.client, "close")
    assert closed.status_code == 200, closed.text
    assert closed.json()["updates"] == len(distinct)
    record = closed_iteration(server.store, 0)
    offline = recompute_state(server.config, list(rows.values()))
    assert record["aggregate"]["count"] == offline.count == len(distinct)
    np.testing.assert_allclose(
        record["aggregate"]["weighted_noise"]["data"], offline.weighted_noise, rtol=1e-9, atol=1e-9
    )
    published = server.client.get("/v1/model/1").json()["params"]
    np.testing.assert_allclose(
        published, recompute_step(server.config, server.store, 0, offline), rtol=1e-9, atol=1e-12
    )
