"""The product's main path, end to end, against a real server on loopback (issue 15, tests):
``fedrank client --places`` on the real Firefox profiles sends a treatment update (a
22-weight gradient that the server stores and folds) or a control branch's metrics, each
within the server's schema and weight bound; and ``max_staleness > 0`` accepts updates up
to that many versions back and no further."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedrank.server.branches import branch_of
from tests.cli.clirun import ok
from tests.server.serverkit import (
    ADMIN_TOKEN,
    Live,
    admin,
    assert_error,
    live_server,
    status,
    stored_rows,
)

FRECENCY = f"""
[server]
workload = "frecency"
admin_token = "{ADMIN_TOKEN}"
max_staleness = 1
[iteration]
seconds = 0
min_updates = 1000000
"""


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_server(tmp_path_factory.mktemp("e2e"), FRECENCY) as server:
        yield server


def _state_in(live: Live, branch: str, directory: Path) -> Path:
    """A client state directory whose enrollment id the server puts in ``branch``."""
    shares = [(b.name, b.share) for b in live.config.branches]
    enrollment = next(f"e2e-{i}" for i in range(10_000) if branch_of(f"e2e-{i}", shares) == branch)
    directory.mkdir(parents=True)
    (directory / "enrollment.json").write_text(json.dumps({"enrollment_id": enrollment}))
    return directory


@pytest.mark.parametrize("profile", ["places.sqlite", "places-aged.sqlite"])
def test_fedrank_client_on_a_real_profile(
    live: Live, firefox_dir: Path, tmp_path: Path, profile: str
) -> None:
    before = status(live.client)
    for branch, sent in (("treatment", "update"), ("control", "metrics")):
        out = tmp_path / f"{branch}.json"
        state = _state_in(live, branch, tmp_path / branch)
        result = ok(
            ["client", "--server", live.process.url, "--places", str(firefox_dir / profile),
             "--state", str(state), "--json", str(out)]
        )  # fmt: skip
        report = json.loads(out.read_text())
        assert report["branch"] == branch and report["sent"] == sent, result.output
        assert report["status"] == "accepted"
        assert report["metrics"]["searches"] > 0 and 0 <= report["metrics"]["loss"] < 1e9
        row = next(r for r in stored_rows(live.store) if r["message_id"] == report["message_id"])
        assert row["branch"] == branch and row["metrics"] == report["metrics"]
        if sent == "update":
            assert len(row["payload"]["gradient"]) == 22
            assert 1 <= row["payload"]["n"] <= live.config.max_n
        else:
            assert row["kind"] == "ping" and row["payload"] == {}
    after = status(live.client)
    assert after["updates_accepted_total"] == before["updates_accepted_total"] + 2
    assert after["updates_in_iteration"] == before["updates_in_iteration"] + 1  # the update


def test_max_staleness_accepts_one_version_back_and_no_further(live: Live) -> None:
    def update(message_id: str, version: int) -> dict[str, object]:
        return {"message_id": message_id, "model_version": version,
                "payload": {"gradient": [0.5] * 22, "n": 2}}  # fmt: skip

    first = live.version()
    assert live.client.post("/v1/updates", json=update("st-0", first)).status_code == 202
    assert admin(live.client, "close").status_code == 200
    assert live.client.post("/v1/updates", json=update("st-1", first)).status_code == 202
    assert admin(live.client, "close").status_code == 200
    too_old = live.client.post("/v1/updates", json=update("st-2", first))
    assert_error(too_old, 409, "stale", f"accepts versions >= {first + 1}")
    assert live.client.post("/v1/updates", json=update("st-3", first + 1)).status_code == 202


@pytest.mark.parametrize(
    ("section", "payloads", "wrong"),
    [
        (
            '[server]\nworkload = "frecency"\n[frecency]\nmodel = "modern"\n',
            [{"gradient": [0.2, -0.1, 0.3, 0.1, -0.2], "n": 3}] * 3,
            {"gradient": [0.1] * 22, "n": 1},
        ),
        (
            '[server]\nworkload = "foltr-es"\n[foltr_es]\nranker = "two-layer"\n',
            [{"seed": s, "metric": 0.1 * s, "antithetic_metric": 0.05} for s in range(1, 5)],
            {"seed": 1, "metric": 1.5, "antithetic_metric": 0.0},
        ),
    ],
    ids=["modern-frecency", "two-layer-foltr-es"],
)
def test_other_models_learn_through_the_server(
    tmp_path: Path, section: str, payloads: list[dict[str, object]], wrong: dict[str, object]
) -> None:
    """Modern frecency (5 parameters) and the two-layer FOLtR-ES ranker run through the
    service like the defaults: their updates are folded and a close moves the model;
    a message for another model is refused."""
    text = f"{section}[iteration]\nseconds = 0\nmin_updates = 1000000\n"
    text = text.replace("[server]\n", f'[server]\nadmin_token = "{ADMIN_TOKEN}"\n', 1)
    with live_server(tmp_path, text) as live:
        model = live.client.get("/v1/model").json()
        before = model["params"]
        for i, payload in enumerate(payloads):
            msg = {"message_id": f"om-{i}", "model_version": 0, "payload": payload}
            assert live.client.post("/v1/updates", json=msg).status_code == 202
        bad = live.client.post(
            "/v1/updates", json={"message_id": "om-bad", "model_version": 0, "payload": wrong}
        )
        assert bad.status_code == 422
        assert admin(live.client, "close").status_code == 200
        after = live.client.get("/v1/model").json()
        assert after["model_version"] == 1 and len(after["params"]) == len(before)
        assert after["params"] != before
