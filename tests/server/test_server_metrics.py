"""The metrics clients report come from the server's schema (issue 15, F1 and F7): unknown
names and values outside their range are refused with 422 and the reason, on the single,
batch and fast batch paths; a custom ``[metrics]`` table replaces the workload's defaults;
summaries of the largest allowed values stay finite and are stored as standard JSON.

Before the schema, a 1,000-message batch whose pings carried 32 distinct names each took
9.6 s and grew the server by 300 MB (the summary had one column per name ever seen, filled
message by message); now such a batch is refused message by message and stores nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedrank.errors import ConfigError
from fedrank.federation.registry import SYSTEMS
from fedrank.server.config import load_config
from tests.server.serverkit import (
    ADMIN_TOKEN,
    Live,
    admin,
    assert_error,
    closed_iteration,
    live_server,
    row_count,
    store_query,
)

NO_CLOSE = {"iteration_seconds": 0, "iteration_min_updates": 10**9}
SCHEMA = f"""
[server]
workload = "fedavg"
admin_token = "{ADMIN_TOKEN}"
[fedavg]
dim = 3
[metrics]
map = [0.0, 1.0]
queries = [0, 1e12]
"""


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_server(tmp_path_factory.mktemp("metrics"), SCHEMA, **NO_CLOSE) as server:
        yield server


def _ping(message_id: str, version: int, metrics: dict[str, object]) -> dict[str, object]:
    return {"message_id": message_id, "model_version": version, "metrics": metrics}


def test_the_metrics_table_replaces_the_workload_defaults(live: Live) -> None:
    assert load_config(workload="fedavg").metrics == SYSTEMS["fedavg"].metrics
    version = live.version()
    ok = live.client.post("/v1/updates", json=_ping("m-ok", version, {"map": 0.5}))
    assert ok.status_code == 202
    default_name = live.client.post("/v1/updates", json=_ping("m-tl", version, {"train_loss": 1}))
    assert_error(default_name, 422, "unknown_metric", "'train_loss' is not one this server")
    assert "map, queries" in default_name.json()["detail"]


@pytest.mark.parametrize(
    ("metrics", "code", "detail"),
    [
        ({"nope": 1.0}, "unknown_metric", "[metrics] in its configuration"),
        ({"map": 1.5}, "metric_range", "'map' = 1.5 is outside its range [0, 1]"),
        ({"map": -1e-9}, "metric_range", "outside its range [0, 1]"),
        ({"queries": 1e308}, "metric_range", "outside its range [0, 1e+12]"),
    ],
)
def test_unknown_names_and_values_out_of_range_are_refused(
    live: Live, metrics: dict[str, float], code: str, detail: str
) -> None:
    before = row_count(live.store)
    bad = _ping(f"m-bad-{code}", live.version(), metrics)
    assert_error(live.client.post("/v1/updates", json=bad), 422, code, detail)
    # In a batch (the fast path falls back to say why) it is refused alone.
    good = _ping(f"m-good-{code}-{len(detail)}", live.version(), {"map": 0.25})
    answer = live.client.post("/v1/updates:batch", json={"messages": [good, bad]})
    assert answer.status_code == 200, answer.text
    assert answer.json()["statuses"] == [202, 422]
    (error,) = answer.json()["errors"]
    assert error["index"] == 1 and error["error"] == code and detail in error["detail"]
    assert row_count(live.store) == before + 1  # the good message only


def test_a_batch_of_many_distinct_names_is_refused_and_stores_nothing(live: Live) -> None:
    """F1's attack: 1,000 pings with 32 distinct names each."""
    version = live.version()
    messages = [
        _ping(f"m-flood-{i}", version, {f"n{i}-{j}": 1.0 for j in range(32)}) for i in range(1000)
    ]
    before = row_count(live.store)
    answer = live.client.post("/v1/updates:batch", json={"messages": messages})
    assert answer.status_code == 200
    assert answer.json()["statuses"] == [422] * 1000
    assert {e["error"] for e in answer.json()["errors"]} == {"unknown_metric"}
    assert row_count(live.store) == before


def test_summaries_of_the_largest_values_stay_finite_and_standard_json(live: Live) -> None:
    version = live.version()
    messages = [_ping(f"m-big-{i}", version, {"queries": 1e12, "map": 1.0}) for i in range(500)]
    assert live.client.post("/v1/updates:batch", json={"messages": messages}).status_code == 200
    update = {
        "message_id": "m-up",
        "model_version": version,
        "payload": {"delta": [0.1] * 3, "n": 1},
    }
    assert live.client.post("/v1/updates", json=update).status_code == 202
    summary = live.client.get("/v1/summary")
    assert summary.status_code == 200
    closed = admin(live.client, "close")
    assert closed.status_code == 200, closed.text
    assert closed_iteration(live.store, version)["n_updates"] == 1
    sql = "SELECT summary FROM iterations WHERE iteration = ?"
    ((text,),) = store_query(live.store, sql, (version,))

    def refuse(constant: str) -> float:
        raise AssertionError(f"stored JSON holds {constant}")

    means = json.loads(text, parse_constant=refuse)["treatment"]["metrics"]
    assert means["queries"] == 1e12 and 0.0 <= means["map"] <= 1.0


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("loss = 3", "must be [low, high]"),
        ("loss = [1, 0]", "need low <= high"),
        ("loss = [0, 1e300]", "within +-1e+12"),
        ('"bad name" = [0, 1]', "names have 1-64 characters"),
        ('loss = ["a", 1]', "must be a number"),
        ("\n".join(f"m{i} = [0, 1]" for i in range(33)), "at most 32 metrics"),
    ],
)
def test_bad_metric_tables_are_refused_at_start(tmp_path: Path, table: str, message: str) -> None:
    path = tmp_path / "server.toml"
    path.write_text(f"[metrics]\n{table}\n")
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("+", r"\+")):
        load_config(path)
