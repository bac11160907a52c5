"""One chain, three places, every system of the registry: a fixed list of client messages
applied (a) in process by a :class:`~fedrank.federation.round.Round` of the system's
strategy, (b) through a real ``fedrank serve`` over HTTP (message by message, and as one
columnar ``MessageBatch`` per iteration sent by the client SDK) and (c) folded in two
blocks on the workers of a real 2-worker Dask cluster into the round, gives the same model
after several iterations -- equal to 1e-12 relative: the server folds messages in as they
arrive (one group commit may hold several) and the cluster merges per-block states, so
floating-point sums may be ordered differently from the in-process fold; every step is
otherwise the same code. And the
frecency model the server publishes moves the way the paper says (against the clients'
gradients, within the safeguards), so a flipped update or a dropped safeguard in the
server's chain fails here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedrank.client.sdk import Client
from fedrank.core.message import MessageBatch
from fedrank.experiments.executors import dask_client, fold_on_cluster
from fedrank.federation.registry import SYSTEMS
from fedrank.federation.round import Round
from fedrank.models.frecency.weights import classic_defaults
from fedrank.server.workloads import make_workload
from tests.server.serverkit import ADMIN_TOKEN, Live, admin, live_server

NO_CLOSE = {"iteration_seconds": 0, "iteration_min_updates": 10**9}
ITERATIONS = 3
MESSAGES = 12

TOML = {
    "frecency": f"""
[server]
workload = "frecency"
admin_token = "{ADMIN_TOKEN}"
[frecency]
significance_z = 0.5
""",
    "foltr-es": f"""
[server]
workload = "foltr-es"
admin_token = "{ADMIN_TOKEN}"
[foltr_es]
n_features = 6
learning_rate = 0.01
""",
    "fedavg": f"""
[server]
workload = "fedavg"
admin_token = "{ADMIN_TOKEN}"
[fedavg]
dim = 9
server_learning_rate = 0.7
""",
    "fpdgd": f"""
[server]
workload = "fpdgd"
admin_token = "{ADMIN_TOKEN}"
[fpdgd]
ranker = "two-layer"
n_features = 5
server_learning_rate = 0.9
seed = 3
""",
}


def _payloads(workload: str, dim: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    """One iteration's client messages (seeded, so both places see the same ones)."""
    if workload == "frecency":
        return [
            {"gradient": rng.normal(-0.3, 1.0, size=dim).tolist(), "n": int(rng.integers(1, 9))}
            for _ in range(MESSAGES)
        ]
    if workload in ("fedavg", "fpdgd"):
        return [
            {"delta": rng.normal(size=dim).tolist(), "n": int(rng.integers(1, 9))}
            for _ in range(MESSAGES)
        ]
    return [
        {
            "seed": int(rng.integers(2**32)),
            "metric": float(rng.integers(0, 11) / 10),
            "antithetic_metric": float(rng.integers(0, 11) / 10),
        }
        for _ in range(MESSAGES)
    ]


def _in_process(live: Live, iterations: list[list[dict[str, Any]]]) -> np.ndarray:
    workload = make_workload(live.config)
    round_ = Round(workload.strategy)
    for payloads in iterations:
        for p in payloads:
            round_.fold(workload.wire.columns([workload.wire.parse(p)]))
        round_.close()
    return round_.model()


def _on_dask(live: Live, iterations: list[list[dict[str, Any]]], client: Any) -> np.ndarray:
    workload = make_workload(live.config)
    round_ = Round(workload.strategy)
    for payloads in iterations:
        batch = workload.wire.columns([workload.wire.parse(p) for p in payloads])
        half = batch.size // 2
        fold_on_cluster(
            client, round_, [batch.take(np.arange(half)), batch.take(np.arange(half, batch.size))]
        )
        round_.close()
    return round_.model()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with dask_client(2, None) as client:
        yield client


def _columnar(payloads: list[dict[str, Any]]) -> MessageBatch:
    """The payloads as a client-side columnar batch, built from plain arrays."""
    if "seed" in payloads[0]:
        return MessageBatch.of_es(
            np.array([p["seed"] for p in payloads], dtype=np.uint64),
            np.array([p["metric"] for p in payloads]),
            np.array([p["antithetic_metric"] for p in payloads]),
        )
    key = "gradient" if "gradient" in payloads[0] else "delta"
    return MessageBatch.of_vectors(
        np.array([p[key] for p in payloads]), np.array([p["n"] for p in payloads], dtype=float)
    )


def _over_http(live: Live, iterations: list[list[dict[str, Any]]], tag: str) -> np.ndarray:
    """Even iterations message by message (JSON), odd ones as one columnar batch through
    the client SDK."""
    sdk = Client(live.process.url, enrollment_id=f"{tag}-proxy", http=live.client)
    for i, payloads in enumerate(iterations):
        version = live.version()
        if i % 2:
            ids = [f"{tag}-{i}-{k}" for k in range(len(payloads))]
            answer = sdk.send_batch(_columnar(payloads), version, message_ids=ids)
            assert answer["statuses"] == [202] * len(payloads), answer
        for k, payload in enumerate([] if i % 2 else payloads):
            msg = {"message_id": f"{tag}-{i}-{k}", "model_version": version, "payload": payload}
            response = live.client.post("/v1/updates", json=msg)
            assert response.status_code == 202, response.text
        closed = admin(live.client, "close")
        assert closed.status_code == 200, closed.text
    model = live.client.get("/v1/model").json()  # no enrollment: the trained branch
    assert model["served"] == "trained"
    return np.array(model["params"], dtype=np.float64)


def test_the_chain_is_tested_for_every_system_of_the_registry() -> None:
    assert set(TOML) == set(SYSTEMS)


@pytest.mark.parametrize("workload", sorted(TOML))
def test_the_same_messages_give_the_same_model_in_process_over_http_and_on_dask(
    tmp_path: Path, workload: str, cluster: Any
) -> None:
    with live_server(tmp_path, TOML[workload], **NO_CLOSE) as live:
        dim = make_workload(live.config).dim
        rng = np.random.default_rng(7)
        iterations = [_payloads(workload, dim, rng) for _ in range(ITERATIONS)]
        served = _over_http(live, iterations, workload)
        expected = _in_process(live, iterations)
        on_dask = _on_dask(live, iterations, cluster)
    assert not np.array_equal(expected, make_workload(live.config).initial_params())
    np.testing.assert_allclose(served, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(on_dask, expected, rtol=1e-12, atol=1e-12)


def test_the_served_frecency_model_follows_the_paper(tmp_path: Path) -> None:
    """Through the real server: gradients that all point down raise every weight by Rprop's
    first step (1); gradients that then all point up lower every weight by 0.5 (the step
    halves on a sign change, eta-) and then by 0.6 (it grows by eta+ = 1.2): the weights
    that Firefox sets to 0 would reach -0.1, and non-negativity (Sec. 5.6) holds them at 0."""
    with live_server(tmp_path, TOML["frecency"], **NO_CLOSE) as live:
        down = [{"gradient": [-1.0] * 22, "n": 3}] * 4
        up = [{"gradient": [1.0] * 22, "n": 3}] * 4
        raised = _over_http(live, [down], "down")
        lowered = _over_http(live, [up, up], "up")
    defaults = classic_defaults()
    np.testing.assert_array_equal(raised, defaults + 1.0)
    expected = np.maximum((defaults + 1.0 - 0.5) - 0.5 * 1.2, 0.0)
    np.testing.assert_array_equal(lowered, expected)
    assert np.sum(lowered == 0.0) == 7
