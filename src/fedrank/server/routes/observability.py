"""What an operator watches: ``GET /v1/status`` (counts, the open iteration, the last failed
close, each user's privacy guarantee so far), ``GET /v1/summary`` (per-branch, per-iteration
metric summaries) and ``GET /metrics`` (Prometheus text, :mod:`fedrank.server.prometheus`),
and the front door's counts behind them (:class:`RequestCounts`).

Under ``[privacy]`` the exact counts of an iteration's updates, polled, tell who took part
(a fixed denominator hides that in the model): ``/v1/status`` then shows them as ``null``,
and ``/v1/summary`` and ``/metrics`` answer 403 ``counts_withheld``, unless the request
carries the admin token or ``[privacy] public_counts`` is set (docs/service.md).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from fedrank.identity.limits import RETRY_AFTER_SECONDS
from fedrank.server.auth import is_admin
from fedrank.server.envelope import BadRequest, json_response
from fedrank.server.prometheus import prometheus_text
from fedrank.server.store import Store

if TYPE_CHECKING:
    from fedrank.server.service import Service

#: The endpoints whose refusals count as refused updates (``updates_rejected_total``).
UPDATE_ENDPOINTS = frozenset({"updates", "batch"})


class RequestCounts:
    """The front door's counts, kept on the event loop: requests by endpoint and status,
    the updates it refused by reason (``updates_rejected_total`` adds the writer's), and
    the refused requests that are not updates (model, check-in, admin) by endpoint and
    reason."""

    def __init__(self) -> None:
        self.requests: Counter[tuple[str, int]] = Counter()
        self.updates_refused: Counter[str] = Counter()
        self.refused: Counter[tuple[str, str]] = Counter()

    def answered(self, endpoint: str, status: int) -> None:
        self.requests[(endpoint, status)] += 1

    def refuse(self, endpoint: str, err: BadRequest) -> None:
        """Count a refusal: as a refused *update* only on the endpoints that carry updates;
        a refused model fetch, check-in or admin call is a refused request, not an update."""
        if endpoint in UPDATE_ENDPOINTS:
            self.refuse_message(err)
        else:
            self.refused[(endpoint, err.code)] += 1
        self.requests[(endpoint, err.status)] += 1

    def refuse_message(self, err: BadRequest) -> None:
        """Count a refused update message by its reason (alone, or one of a batch)."""
        self.updates_refused[err.code] += 1

    def reject(self, endpoint: str, err: BadRequest) -> Response:
        """Count the refusal and answer it."""
        self.refuse(endpoint, err)
        headers = {"retry-after": str(RETRY_AFTER_SECONDS)} if err.status == 429 else None
        return json_response({"error": err.code, "detail": err.detail}, err.status, headers)


class Observability:
    """``/v1/status``, ``/v1/summary`` and ``/metrics`` (module docstring)."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def rejected(self) -> Counter[str]:
        """Refused updates by reason: the front door's and the writer's."""
        front = self.service.counts.updates_refused
        return Counter(dict(front)) + self.service.engine.rejected()

    def counts_visible(self, request: Request) -> bool:
        """Whether ``request`` may see the exact counts: always without ``[privacy]`` (or
        with ``public_counts``), else only with the admin token."""
        config = self.service.config
        privacy = config.privacy
        return not privacy.enabled or privacy.public_counts or is_admin(config, request.headers)

    def _counts_withheld(self, endpoint: str) -> Response:
        return self.service.counts.reject(
            endpoint,
            BadRequest(
                403,
                "counts_withheld",
                "[privacy] is on: the exact counts and summaries tell who took part; send "
                "the admin token (Authorization: Bearer ...) or set [privacy] public_counts "
                "= true",
            ),
        )

    async def status(self, request: Request) -> Response:
        return json_response(self.status_body(request))

    def status_body(self, request: Request) -> dict[str, Any]:
        """The body of ``GET /v1/status`` for ``request`` (the counts ``null`` when
        ``[privacy]`` withholds them from it); the dashboard shows the same dict."""
        service = self.service
        e, snap, scheduler = service.engine, service.engine.snapshot(), service.scheduler
        counts: dict[str, Any] = {
            "updates_accepted_total": e.accepted_total,
            "updates_counted_total": e.counted_total,
            "updates_in_iteration": snap.updates_in_iteration,
            "updates_rejected_total": sum(self.rejected().values()),
            "updates_duplicate_total": e.duplicates_total,
            "requests_refused_total": sum(service.counts.refused.values()),
        }
        withheld = not self.counts_visible(request)
        if withheld:
            counts = dict.fromkeys(counts)
        secagg = service.secagg
        previous = None if service.rounds is None else service.rounds.secagg_previous
        return {
            "model_version": snap.version,
            "iteration": snap.iteration,
            "workload": e.workload.name,
            **counts,
            "counts_withheld": withheld,
            "close_failures_total": scheduler.close_failures_total,
            "last_close_error": scheduler.last_close_error,
            "paused": snap.paused,
            "policy": scheduler.policy.name if service.rounds is None else "rounds",
            "privacy": e.privacy.status(snap.iteration),
            "secagg": None if secagg is None else secagg.summary(previous),
        }

    async def summary(self, request: Request) -> Response:
        if not self.counts_visible(request):
            return self._counts_withheld("summary")
        loop = asyncio.get_running_loop()
        iterations = await loop.run_in_executor(None, self._summaries)
        return json_response({"iterations": iterations})

    def _summaries(self) -> list[dict[str, Any]]:
        """Per-branch, per-iteration metric summaries: the closed iterations (stored) and
        the open one (live)."""
        engine = self.service.engine
        reader = Store(engine.store.directory, read_only=True)
        try:
            closed = reader.closed_iterations()
        finally:
            reader.close()
        return [*closed, engine.current.summary(engine.round.version)]

    async def metrics(self, request: Request) -> Response:
        if not self.counts_visible(request):
            return self._counts_withheld("metrics")
        counts = self.service.counts
        text = prometheus_text(
            self.service.engine, self.rejected(), counts.requests, counts.refused
        )
        return Response(text, media_type="text/plain; version=0.0.4")
