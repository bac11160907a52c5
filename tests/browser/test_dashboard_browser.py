"""The operator dashboard in a real browser (docs/dashboard.md): Playwright drives the
system's Chromium (``/usr/bin/chromium``, or ``FEDRANK_CHROMIUM``; ``scripts/setup-system``
installs it) against a real ``fedrank serve`` running a frecency study whose users, each a
real Firefox profile, send their updates over HTTP. The page must show the numbers of
``/v1/status``, follow the iterations as they close, and load nothing from elsewhere.
Screenshots go to ``results/dashboard/``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.server.frecency_users import PRIVATE, Users
from tests.server.serverkit import ADMIN_TOKEN, Live, admin, live_server, status, wait_until

CHROMIUM = Path(os.environ.get("FEDRANK_CHROMIUM", "/usr/bin/chromium"))
RESULTS = Path(__file__).resolve().parents[2] / "results" / "dashboard"
#: How long the page may take to show a change (it polls every 2 s).
SHOWN_MS = 15_000

FRECENCY = f"""
[server]
workload = "frecency"
admin_token = "{ADMIN_TOKEN}"
[iteration]
seconds = 0
min_updates = 3
tick_seconds = 0.1
"""

pytestmark = pytest.mark.skipif(
    not CHROMIUM.is_file(),
    reason=f"Chromium is absent at {CHROMIUM}: run scripts/setup-system (or set FEDRANK_CHROMIUM)",
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


def shows(page: Page, element: str, value: object) -> None:
    """Wait until the element ``#element`` reads ``value`` (fails after :data:`SHOWN_MS`)."""
    page.wait_for_function(
        "([id, want]) => document.getElementById(id).textContent.trim() === want",
        arg=[element, str(value)],
        timeout=SHOWN_MS,
    )


def shows_status(page: Page, live: Live) -> dict[str, object]:
    """Wait until the page shows ``/v1/status``'s version, iteration and counts."""
    now = status(live.client)
    shows(page, "model-version", now["model_version"])
    shows(page, "iteration", now["iteration"])
    shows(page, "updates-accepted", now["updates_accepted_total"])
    shows(page, "updates-in-iteration", now["updates_in_iteration"])
    shows(page, "rejected-total", now["updates_rejected_total"])
    return now


def test_the_page_follows_a_live_frecency_study(
    browser: Browser, tmp_path: Path, data_dir: Path
) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    with live_server(tmp_path, FRECENCY) as live:
        url = live.process.url
        users = Users(url, live.config, data_dir, treatment=3, control=2, seed=5)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        requests: list[str] = []
        errors: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        try:
            page.goto(f"{url}/dashboard")
            first = shows_status(page, live)
            assert first["model_version"] == 0
            page.screenshot(path=RESULTS / "start.png", full_page=True)
            for k in range(1, 4):
                assert users.step() == ["accepted"] * 5
                wait_until(lambda k=k: live.version() == k, what=f"version {k}")
                now = shows_status(page, live)
                assert now["model_version"] == k and now["iteration"] == k
                page.screenshot(path=RESULTS / f"iteration-{k}.png", full_page=True)
            # a stale update: the refusal shows by its reason
            stale = {"message_id": "browser-stale", "model_version": 0, "payload": {}}
            assert live.client.post("/v1/updates", json=stale).status_code == 409
            shows_status(page, live)
            page.wait_for_function(
                "() => [...document.querySelectorAll('#refusals td')]"
                ".some((td) => td.textContent === 'stale')",
                timeout=SHOWN_MS,
            )
            # the weights chart has a point per version and the metric chart a line per branch
            legend = page.locator("#chart-metrics .u-legend .u-series").all_text_contents()
            assert any("treatment" in t for t in legend) and any("control" in t for t in legend)
            assert page.locator("#movers tbody tr").count() == 5
            page.screenshot(path=RESULTS / "dashboard.png", full_page=True)
        finally:
            page.close()
            users.close()
    assert not errors, errors
    assert requests and all(r.startswith(url) for r in requests), requests


def test_under_privacy_the_page_shows_counts_only_with_the_admin_token(
    browser: Browser, tmp_path: Path
) -> None:
    """Without the token the page shows what ``/v1/status`` shows publicly; typed into the
    page, the token brings the counts and the per-device spends."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    with live_server(tmp_path, PRIVATE) as live:
        client = live.client
        for i in range(3):
            body = {
                "message_id": f"b{i}",
                "model_version": 0,
                "client_id": f"user-{i}",
                "payload": {"delta": [0.3, -0.2, 0.1, 0.0, 0.05, -0.1], "n": 1},
            }
            assert client.post("/v1/updates", json=body).status_code == 202
        assert admin(client, "close").status_code == 200
        public = client.get("/v1/status").json()
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(f"{live.process.url}/dashboard")
            shows(page, "model-version", public["model_version"])
            shows(page, "updates-accepted", "withheld (admin token)")
            shows(page, "spends", "withheld (admin token)")
            shows(page, "privacy-epsilon", f"{public['privacy']['epsilon']:.4g}")
            page.fill("#token", ADMIN_TOKEN)
            page.click("#token-form button")
            operator = status(client)
            shows(page, "updates-accepted", operator["updates_accepted_total"])
            page.wait_for_function(
                "() => document.getElementById('spends').textContent.includes('3 devices')",
                timeout=SHOWN_MS,
            )
            page.screenshot(path=RESULTS / "privacy.png", full_page=True)
        finally:
            page.close()
