"""The iteration scheduler when a close fails (issue 15, F3/F11): the failure is reported in
``/v1/status`` and logged once, and the scheduler backs off exponentially instead of retrying
every tick; a later successful close clears the error. In-process: a failing close cannot be
provoked through the API (bad input is refused before it reaches the aggregate), so the
strategy's step is made to fail the way a refused safeguard fails."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette

from fedrank.server.app import lifespan
from fedrank.server.service import Service
from fedrank.strategies.base import SafeguardError
from tests.server.serverkit import offline_config
from tests.server.test_server_engine import _message

TOML = """
[server]
workload = "foltr-es"
[iteration]
seconds = 0
min_updates = 1
tick_seconds = 0.01
"""


def test_a_failing_close_backs_off_is_reported_and_clears(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = offline_config(TOML, tmp_path, store=str(tmp_path / "store"))
    service = Service(config)

    async def scenario() -> dict[str, Any]:
        async with lifespan(service, Starlette()):
            engine, scheduler = service.engine, service.scheduler
            await scheduler.stop()  # ticks driven by hand
            await engine.writer.submit([_message(engine, "m", 1)])
            real_step = engine.strategy.server_step

            def refuse(*args: Any, **kwargs: Any) -> Any:
                raise SafeguardError("injected: the step breaks a safeguard")

            engine.strategy.server_step = refuse  # type: ignore[method-assign]
            memory: tuple[Any, ...] = (0, None, -1)
            started = time.monotonic()
            for _ in range(50):  # 0.5 s of ticks: without a back-off, 50 failed closes
                memory = await scheduler.tick(*memory)
                await asyncio.sleep(0.01)
            failed = {
                "total": scheduler.close_failures_total,
                "error": scheduler.last_close_error,
                "version": engine.snapshot().version,
                "elapsed": time.monotonic() - started,
            }
            engine.strategy.server_step = real_step  # type: ignore[method-assign]
            scheduler._close_retry_at = 0.0  # the back-off is over
            await scheduler.tick(*memory)
            return {"failed": failed, "version": engine.snapshot().version,
                    "error": scheduler.last_close_error}  # fmt: skip

    with caplog.at_level(logging.ERROR, logger="fedrank.server"):
        r = asyncio.run(scenario())
    # Waits of 0.02, 0.04, 0.08 ... s: k failures take 0.01 * (2**(k+1) - 2) s at least.
    assert 1 <= r["failed"]["total"] <= math.log2(r["failed"]["elapsed"] / 0.01 + 2)
    assert r["failed"]["error"]["error"] == "close_failed"
    assert "safeguard" in r["failed"]["error"]["detail"]
    assert r["failed"]["version"] == 0  # a refused step publishes nothing
    assert r["version"] == 1 and r["error"] is None
    failures = [rec for rec in caplog.records if "closing the iteration failed" in rec.msg]
    assert len(failures) == 1  # the same failure again within 10 s is held back
