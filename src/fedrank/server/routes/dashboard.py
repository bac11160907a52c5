"""The operator's dashboard (docs/dashboard.md): ``GET /dashboard`` (one page, its script and
styles and the vendored uPlot chart library, all shipped in the package under
``fedrank/server/dashboard/``: no CDN, it works offline) and ``GET /v1/dashboard``, the one
JSON document the page polls.

Nothing here computes a second copy of a figure: the document carries ``/v1/status``'s body
as it is (:meth:`~fedrank.server.routes.observability.Observability.status_body`), the
model versions and closed iterations the store keeps (as ``/v1/model/{version}`` and
``/v1/summary`` read them), the refusals by reason ``/metrics`` counts, the open round's
cohort (:class:`~fedrank.server.cohort.Cohort`), the privacy ledger's per-device spends
(:meth:`~fedrank.server.privacy.PrivacyLedger.spend_distribution`) and the clip counts the
norm-bounded aggregate holds (:class:`~fedrank.aggregators.norm_bounded.NormBoundedState`).

Counts follow ``/v1/status``'s rule: under ``[privacy]`` (without ``public_counts``) a
request without the admin token gets the status with its counts ``null`` and none of the
count-bearing parts (updates per iteration, branch metrics, refusals, clip rates, the
per-device spends, who dropped out of a round).
"""

from __future__ import annotations

import asyncio
import time
from importlib import resources
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
from starlette.requests import Request
from starlette.responses import Response

from fedrank.server.envelope import json_response
from fedrank.server.store import Store

if TYPE_CHECKING:
    from fedrank.server.routes.observability import Observability
    from fedrank.server.service import Service

#: The page's files and their content types (nothing else under the folder is served).
ASSETS = {
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
    "uPlot.iife.min.js": "text/javascript; charset=utf-8",
    "uPlot.min.css": "text/css; charset=utf-8",
    "LICENSE.uPlot": "text/plain; charset=utf-8",
}
#: Model versions the document carries (the latest ones).
MAX_VERSIONS = 200
#: Models of at most this many parameters are sent whole (a line per weight); larger ones
#: as their L2 norm per version.
MAX_PARAMS = 64
#: Alert thresholds: the share of the budget spent, the open iteration's age against its
#: expected length, the clip rate's rise over the mean of the closed iterations before.
BUDGET_ALERT = 0.8
STALL_FACTOR = 2.0
CLIP_JUMP = 0.25
#: Fewest updates an iteration needs before its clip rate is compared.
CLIP_MIN_UPDATES = 10


def asset_bytes(name: str) -> bytes:
    """A file of the dashboard as shipped in the package."""
    return (resources.files("fedrank.server") / "dashboard" / name).read_bytes()


def clip_counts(state: Any) -> tuple[int, int] | None:
    """``(within, count)`` of a norm-bounded aggregate state, or ``None`` for an
    aggregate that does not clip."""
    within, count = getattr(state, "within", None), getattr(state, "count", None)
    if isinstance(within, int | np.integer) and isinstance(count, int | np.integer):
        return int(within), int(count)
    return None


class DashboardRoutes:
    """``GET /dashboard``, its assets and ``GET /v1/dashboard`` (module docstring)."""

    def __init__(self, service: Service, observe: Observability) -> None:
        self.service = service
        self.observe = observe
        #: The history read from the store, kept until the open iteration changes.
        self._history: tuple[int, dict[str, Any]] | None = None

    async def page(self, request: Request) -> Response:
        return Response(asset_bytes("index.html"), media_type="text/html; charset=utf-8")

    async def asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        media = ASSETS.get(name)
        if media is None:
            return json_response(
                {"error": "not_found", "detail": f"no dashboard file {name!r}"}, 404
            )
        return Response(
            asset_bytes(name), media_type=media, headers={"cache-control": "max-age=3600"}
        )

    async def data(self, request: Request) -> Response:
        """The document: the live parts read here, on the event loop that updates them
        (the request counts, the open round); the store's history and the accountant's
        next cost in a worker thread."""
        status = self.observe.status_body(request)
        visible = self.observe.counts_visible(request)
        now = time.time()
        live = {
            "round": self._round(now, visible),
            "refusals": self._refusals() if visible else None,
        }
        loop = asyncio.get_running_loop()
        body = await loop.run_in_executor(None, self._document, status, visible, now, live)
        return Response(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY),
                        media_type="application/json")  # fmt: skip

    def _document(
        self, status: dict[str, Any], visible: bool, now: float, live: dict[str, Any]
    ) -> dict[str, Any]:
        service = self.service
        engine, config = service.engine, service.config
        snap = engine.snapshot()
        history = self._read_history(snap.iteration)
        iterations = history["iterations"] if visible else [
            {k: it[k] for k in ("iteration", "model_version", "opened_at", "closed_at", "reason")}
            for it in history["iterations"]
        ]  # fmt: skip
        seconds = config.iteration.seconds if service.rounds is None else None
        clip_open = clip_counts(engine.round.aggregate)
        body: dict[str, Any] = {
            "now": now,
            "status": status,
            "counts_withheld": not visible,
            "workload": engine.workload.name,
            "iteration": {
                "number": snap.iteration,
                "opened_at": snap.opened_at,
                "seconds_open": now - snap.opened_at,
                "seconds_left": None if not seconds else snap.opened_at + seconds - now,
                "policy_seconds": seconds or None,
                "min_updates": config.iteration.min_updates,
            },
            "model": history["model"],
            "iterations": iterations,
            **live,
            "privacy": self._privacy(snap.iteration, visible),
            "clipping": {
                "norm_bound": snap.norm_bound,
                "clip_current": engine.privacy.current_clip,
                "open": None
                if clip_open is None or not visible
                else {"within": clip_open[0], "count": clip_open[1]},
            },  # fmt: skip
        }
        body["alerts"] = self._alerts(body, visible)
        return body

    def _read_history(self, open_iteration: int) -> dict[str, Any]:
        """The model versions (parameters or norms) and the closed iterations (with their
        clip counts), from the store; read again only when an iteration has closed."""
        cached = self._history
        if cached is not None and cached[0] == open_iteration:
            return cached[1]
        engine = self.service.engine
        reader = Store(engine.store.directory, read_only=True)
        try:
            closed = reader.closed_iterations()
            rows = reader.db.execute(
                "SELECT version, iteration, created_at FROM models ORDER BY version DESC LIMIT ?",
                (MAX_VERSIONS,),
            ).fetchall()
            models = [reader.model(int(r[0])) for r in reversed(rows)]
            aggregates = dict(
                reader.db.execute(
                    "SELECT iteration, aggregate FROM iterations WHERE closed_at IS NOT NULL"
                ).fetchall()
            )
        finally:
            reader.close()
        for it in closed:
            counts = self._stored_clip_counts(aggregates.get(it["iteration"]))
            it["clip"] = None if counts is None else {"within": counts[0], "count": counts[1]}
        names = engine.workload.parameter_names()
        dim = engine.workload.dim
        versions = []
        for m in models:
            if m is None:
                continue
            params = engine.strategy.publish(m.params)
            entry: dict[str, Any] = {
                "version": m.version,
                "iteration": m.iteration,
                "created_at": m.created_at,
                "norm": float(np.linalg.norm(params)),
            }
            if dim <= MAX_PARAMS:
                entry["params"] = [float(x) for x in params]
            versions.append(entry)
        model = {"dim": dim, "names": names, "versions": versions}
        value = {"model": model, "iterations": closed}
        self._history = (open_iteration, value)
        return value

    def _stored_clip_counts(self, text: str | None) -> tuple[int, int] | None:
        if text is None:
            return None
        try:
            state = self.service.engine.aggregator.state_from_json(orjson.loads(text))
        except Exception:  # another configuration's aggregate: no clip counts to show
            return None
        return clip_counts(state)

    def _refusals(self) -> dict[str, Any]:
        """Refused updates by reason and refused other requests by endpoint and reason:
        the counts ``/metrics`` exposes."""
        refused = self.service.counts.refused
        return {
            "updates": dict(sorted(self.observe.rejected().items())),
            "requests": {f"{e}:{code}": n for (e, code), n in sorted(refused.items())},
        }

    def _round(self, now: float, visible: bool) -> dict[str, Any] | None:
        """The open round under ``[rounds]``: its window, seats, reports and the seated
        clients whose deadline passed without a report (who, with the counts visible)."""
        rounds = self.service.rounds
        if rounds is None:
            return None
        cohort = rounds.cohort
        dropped = sorted(
            c for c, d in cohort.deadlines.items() if now > d and c not in cohort.reported
        )
        deadline = max(cohort.deadlines.values(), default=None)
        return {
            "number": cohort.number,
            "window_end": cohort.window_end,
            "selected_at": cohort.selected_at,
            "clients_per_round": self.service.config.rounds.clients_per_round,
            "waiting": cohort.waiting if visible else None,
            "seated": len(cohort.deadlines) if visible else None,
            "reported": len(cohort.reported) if visible else None,
            "dropped": dropped if visible else None,
            "seconds_left": None if deadline is None else max(0.0, deadline - now),
        }

    def _privacy(self, closed: int, visible: bool) -> dict[str, Any] | None:
        ledger = self.service.engine.privacy
        if not ledger.enabled:
            return None
        return {
            "budget_epsilon": ledger.section.epsilon,
            "budget_rounds": ledger.section.rounds,
            "next_cost": ledger.next_cost(closed),
            "spends": ledger.spend_distribution() if visible else None,
        }

    def _alerts(self, body: dict[str, Any], visible: bool) -> list[dict[str, str]]:
        """A budget nearly spent, a stalled iteration or round, failing closes, a pause,
        and (with the counts visible) the clip rate jumping: docs/dashboard.md, Alerts."""
        alerts: list[dict[str, str]] = []
        status, it = body["status"], body["iteration"]
        privacy = status.get("privacy") or {}
        budget = privacy.get("budget") or {}
        spent = (privacy.get("devices") or {}).get("max_epsilon") or privacy.get("epsilon")
        if budget.get("epsilon") and spent is not None:
            share = spent / budget["epsilon"]
            if privacy.get("budget_spent") or share >= 1.0:
                alerts.append(_alert("error", "budget_spent", "the privacy budget is spent"))
            elif share >= BUDGET_ALERT:
                text = f"{share:.0%} of the privacy budget (epsilon {budget['epsilon']:g}) spent"
                alerts.append(_alert("warning", "budget_nearly_spent", text))
        if status.get("paused"):
            alerts.append(_alert("warning", "paused", "the server is paused by its operator"))
        if status.get("close_failures_total"):
            error = (status.get("last_close_error") or {}).get("error", "failed")
            n = status["close_failures_total"]
            alerts.append(_alert("error", "close_failed", f"{n} failed closes (last: {error})"))
        expected = it["policy_seconds"]
        r = self.service.config.rounds
        if body["round"] is not None:
            expected = r.checkin_seconds + r.t_max_seconds
        if expected and it["seconds_open"] > STALL_FACTOR * expected and not status.get("paused"):
            text = (
                f"iteration {it['number']} open for {it['seconds_open']:.0f} s, "
                f"{STALL_FACTOR:g} x its expected {expected:g} s"
            )
            alerts.append(_alert("warning", "stalled", text))
        if visible:
            jump = _clip_jump(body["iterations"], body["clipping"]["open"])
            if jump is not None:
                alerts.append(_alert("warning", "clip_rate_jump", jump))
        return alerts


def _alert(level: str, code: str, text: str) -> dict[str, str]:
    return {"level": level, "code": code, "text": text}


def _clip_jump(closed: list[dict[str, Any]], open_counts: dict[str, int] | None) -> str | None:
    """The latest iteration's clip rate (the open one once it has enough updates, else the
    last closed) if it rose by more than :data:`CLIP_JUMP` over the mean of the closed
    iterations before it (an attack signal: many updates far larger than usual)."""
    rates = [
        (it["iteration"], 1.0 - it["clip"]["within"] / it["clip"]["count"])
        for it in closed
        if it.get("clip") and it["clip"]["count"] >= CLIP_MIN_UPDATES
    ]
    if open_counts is not None and open_counts["count"] >= CLIP_MIN_UPDATES:
        rates.append((-1, 1.0 - open_counts["within"] / open_counts["count"]))
    if len(rates) < 2:
        return None
    (last_it, last), before = rates[-1], [r for _, r in rates[:-1]]
    mean = sum(before) / len(before)
    if last - mean <= CLIP_JUMP:
        return None
    where = "the open iteration" if last_it < 0 else f"iteration {last_it}"
    return f"clip rate {last:.0%} in {where}, up from a mean of {mean:.0%}"
