"""The operator dashboard over HTTP (docs/dashboard.md), against real servers on loopback:
``GET /v1/dashboard`` carries ``/v1/status``'s body as it is and figures equal to what
``/v1/model``, ``/v1/summary`` and ``/metrics`` report; under ``[privacy]`` its counts need
the admin token as ``/v1/status``'s do, and the per-device spends match the ledger's
epsilons; the page and its assets are served with their content types and load nothing
from elsewhere."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.server.frecency_users import PRIVATE, Users
from tests.server.serverkit import (
    ADMIN,
    ADMIN_TOKEN,
    Live,
    admin,
    es_message,
    live_server,
    prometheus,
    status,
    wait_until,
)

#: A frecency study whose iterations close as soon as the 2 treatment users have sent.
FRECENCY = f"""
[server]
workload = "frecency"
admin_token = "{ADMIN_TOKEN}"
[iteration]
seconds = 0
min_updates = 2
tick_seconds = 0.1
"""


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Iterator[Live]:
    """A frecency server after two closed iterations of 2 treatment and 1 control users,
    and one refused (stale) update."""
    with live_server(tmp_path_factory.mktemp("dash"), FRECENCY) as live:
        users = Users(live.process.url, live.config, data_dir, treatment=2, control=1, seed=3)
        try:
            for k in range(2):
                assert users.step() == ["accepted"] * 3
                wait_until(lambda k=k: live.version() == k + 1, what=f"version {k + 1}")
        finally:
            users.close()
        stale = {"message_id": "dash-stale", "model_version": 0, "payload": {}}
        assert live.client.post("/v1/updates", json=stale).status_code == 409
        yield live


def test_the_document_carries_the_status_and_the_stored_history(study: Live) -> None:
    client = study.client
    doc = client.get("/v1/dashboard").json()
    assert doc["status"] == status(client)  # the same body, nothing moved meanwhile
    assert doc["status"]["model_version"] == 2 and doc["counts_withheld"] is False
    assert doc["workload"] == "frecency" and doc["alerts"] == []
    model = doc["model"]
    served = client.get("/v1/model").json()
    assert model["names"] == served["parameter_names"] and model["dim"] == len(served["params"])
    assert [v["version"] for v in model["versions"]] == [0, 1, 2]
    for v in model["versions"]:
        params = client.get(f"/v1/model/{v['version']}").json()["params"]
        assert v["params"] == pytest.approx(params, rel=1e-12)
        assert v["norm"] == pytest.approx(float(np.linalg.norm(params)))
    assert model["versions"][2]["params"] != model["versions"][1]["params"]  # the model moved
    summary = client.get("/v1/summary").json()["iterations"]
    closed = doc["iterations"]
    assert [it["iteration"] for it in closed] == [0, 1]
    for mine, theirs in zip(closed, summary[:2], strict=True):
        assert {k: mine[k] for k in theirs} == theirs
        assert theirs["n_updates"] == 2 and set(theirs["branches"]) == {"treatment", "control"}
    assert doc["iteration"]["number"] == 2 and doc["iteration"]["min_updates"] == 2
    assert doc["round"] is None and doc["privacy"] is None


def test_refusals_are_the_counts_of_metrics(study: Live) -> None:
    doc = study.client.get("/v1/dashboard").json()
    metrics = prometheus(study.client.get("/metrics").text)
    refused = doc["refusals"]["updates"]
    assert refused == {"stale": 1}
    for reason, n in refused.items():
        assert metrics[f'fedrank_updates_rejected_total{{reason="{reason}"}}'] == n
    assert doc["status"]["updates_rejected_total"] == sum(refused.values())


def test_the_page_and_its_assets_are_served_and_load_nothing_from_elsewhere(study: Live) -> None:
    client = study.client
    page = client.get("/dashboard")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    found = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    loaded = [url for url in found if url != "data:,"]  # the empty icon: no request at all
    assert loaded and all(not re.match(r"[a-z]+:|//", url) for url in loaded), found
    kinds = {".js": "text/javascript", ".css": "text/css", ".uPlot": "text/plain"}
    for url in loaded:
        response = client.get(f"/{url}")
        assert response.status_code == 200, url
        assert response.headers["content-type"].startswith(kinds[Path(url).suffix]), url
        body = response.text
        if url.endswith("uPlot.iife.min.js"):  # the vendored file names its home once
            head, _, body = body.partition("*/")
            assert head.startswith("/*!")
        if not url.endswith("LICENSE.uPlot"):
            assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", body), url
    missing = client.get("/dashboard/secret.py")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"


def test_under_privacy_the_counts_need_the_admin_token(tmp_path: Path) -> None:
    """Without the token the document shows what ``/v1/status`` shows publicly; with it the
    counts and the per-device spends, whose epsilons are the ledger's; the next close's
    cost is what the next close then adds."""
    with live_server(tmp_path, PRIVATE) as live:
        client = live.client
        epsilons = [0.0]
        costs = []
        for k, users in enumerate((3, 2)):
            for i in range(users):
                body = {
                    "message_id": f"p{k}-{i}",
                    "model_version": k,
                    "client_id": f"user-{i}",
                    "payload": {"delta": [0.3, -0.2, 0.1, 0.0, 0.05, -0.1], "n": 1},
                }
                assert client.post("/v1/updates", json=body).status_code == 202
            costs.append(client.get("/v1/dashboard", headers=ADMIN).json()["privacy"]["next_cost"])
            assert admin(client, "close").status_code == 200
            epsilons.append(status(client)["privacy"]["epsilon"])
        public = client.get("/v1/dashboard").json()
        assert public["status"] == client.get("/v1/status").json()
        assert public["counts_withheld"] is True
        assert public["status"]["updates_accepted_total"] is None
        assert public["refusals"] is None and public["privacy"]["spends"] is None
        assert all("n_updates" not in it and "branches" not in it for it in public["iterations"])
        assert public["clipping"]["open"] is None
        operator = client.get("/v1/dashboard", headers=ADMIN).json()
        assert operator["status"] == status(client) and operator["counts_withheld"] is False
        assert operator["status"]["updates_accepted_total"] == 5
        assert [it["n_updates"] for it in operator["iterations"]] == [3, 2]
        # users 0 and 1 took part in both closes, user 2 in the first only
        spends = operator["privacy"]["spends"]
        assert [(s["iterations"], s["devices"]) for s in spends] == [(1, 1), (2, 2)]
        assert [s["epsilon"] for s in spends] == pytest.approx(epsilons[1:])
        assert costs == pytest.approx([epsilons[1] - epsilons[0], epsilons[2] - epsilons[1]])
        assert operator["privacy"]["budget_epsilon"] == 4.0
        assert "budget_spent" not in [a["code"] for a in operator["alerts"]]
        body = {
            "message_id": "p2-2",
            "model_version": 2,
            "client_id": "user-2",
            "payload": {"delta": [0.1] * 6, "n": 1},
        }
        assert client.post("/v1/updates", json=body).status_code == 202
        assert admin(client, "close").status_code == 200  # the third and last close
        spent = client.get("/v1/dashboard").json()
        assert spent["status"]["privacy"]["budget_spent"] is True
        assert spent["privacy"]["next_cost"] is None
        assert [a["code"] for a in spent["alerts"]] == ["budget_spent"]


CLIPPED = f"""
[server]
workload = "fedavg"
admin_token = "{ADMIN_TOKEN}"
[iteration]
seconds = 0.0
min_updates = 1000000000
[fedavg]
dim = 4
norm_bound = 1.0
"""


def _fedavg_updates(client: object, iteration: int, norm: float, count: int) -> None:
    """``count`` FedAvg deltas of L2 norm ``norm`` for ``iteration``."""
    for i in range(count):
        row = np.array([1.0, -1.0, 1.0, 1.0]) / 2.0 * norm
        body = {
            "message_id": f"clip-{iteration}-{norm}-{i}",
            "model_version": iteration,
            "payload": {"delta": row.tolist(), "n": 1},
        }
        assert client.post("/v1/updates", json=body).status_code == 202  # type: ignore[attr-defined]


def test_clip_counts_and_a_jump_in_the_clip_rate(tmp_path: Path) -> None:
    """The norm-bounded aggregate's counts show per iteration; updates far above the bound
    in the open iteration, after an iteration within it, raise the clip-rate alert."""
    with live_server(tmp_path, CLIPPED) as live:
        client = live.client
        _fedavg_updates(client, 0, 0.5, 10)
        assert admin(client, "close").status_code == 200
        _fedavg_updates(client, 1, 0.5, 8)
        _fedavg_updates(client, 1, 8.0, 2)
        assert admin(client, "close").status_code == 200
        calm = client.get("/v1/dashboard").json()
        assert [it["clip"] for it in calm["iterations"]] == [
            {"within": 10, "count": 10},
            {"within": 8, "count": 10},
        ]
        assert calm["alerts"] == []  # 20 % clipped: not a jump of more than 25 points
        _fedavg_updates(client, 2, 8.0, 12)
        doc = client.get("/v1/dashboard").json()
        assert doc["clipping"]["open"] == {"within": 0, "count": 12}
        assert doc["clipping"]["norm_bound"] == 1.0
        (alert,) = doc["alerts"]
        assert alert["code"] == "clip_rate_jump" and "100%" in alert["text"]
        assert "mean of 10%" in alert["text"]


def test_a_stalled_iteration_raises_an_alert(tmp_path: Path) -> None:
    """An iteration open for more than twice its fixed time (here it cannot close: too
    few updates) is shown as stalled."""
    text = '[server]\nworkload = "frecency"\n[iteration]\nseconds = 0.5\nmin_updates = 99\n'
    with live_server(tmp_path, text) as live:

        def stalled() -> list[dict[str, str]]:
            alerts = live.client.get("/v1/dashboard").json()["alerts"]
            return [a for a in alerts if a["code"] == "stalled"]

        (alert,) = wait_until(stalled, timeout=10.0, interval=0.2, what="the stalled alert")
        assert "iteration 0 open for" in alert["text"]


#: Rounds whose scheduler never ticks: the round stays open past its deadline.
ROUNDS = f"""
[server]
workload = "foltr-es"
admin_token = "{ADMIN_TOKEN}"
[iteration]
tick_seconds = 3600
[rounds]
enabled = true
clients_per_round = 3
t_max_seconds = 1.0
checkin_seconds = 0.1
min_checkins = 2
"""


def test_the_round_shows_its_seats_reports_and_who_dropped(tmp_path: Path) -> None:
    with live_server(tmp_path, ROUNDS, iteration_seconds=0, iteration_min_updates=1) as live:
        client = live.client
        for name in ("drop-a", "drop-b"):
            client.post("/v1/checkin", json={"client_id": name})

        def seated(name: str) -> dict[str, object] | None:
            answer = client.post("/v1/checkin", json={"client_id": name}).json()
            return answer if answer["selected"] else None

        a = wait_until(lambda: seated("drop-a"), interval=0.05, what="drop-a seated")
        assert wait_until(lambda: seated("drop-b"), interval=0.05, what="drop-b seated")
        report = es_message("drop-1", 0, 2, 0.5, 0.5, client_id="drop-b")
        assert client.post("/v1/updates", json=report).status_code == 202
        before = client.get("/v1/dashboard").json()["round"]
        assert before["number"] == 0 and before["seated"] == 2 and before["reported"] == 1
        assert before["dropped"] == [] and before["clients_per_round"] == 3
        wait_until(lambda: time.time() > a["deadline"] + 0.05, what="a's deadline to pass")
        after = client.get("/v1/dashboard").json()["round"]
        assert after["dropped"] == [live.device_id("drop-a")] and after["seconds_left"] == 0.0
