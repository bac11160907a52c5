"""The HTTP API of the federation server (Starlette on uvicorn): the app, its routes and its
lifespan (docs/service.md).

Endpoints (all JSON unless noted; the OpenAPI document is at ``/openapi.json``), each in its
module under :mod:`fedrank.server.routes`:

* ``GET /v1/model``, ``GET /v1/model/{version}`` -- :mod:`~fedrank.server.routes.model`.
* ``POST /v1/updates``, ``POST /v1/updates:batch`` -- :mod:`~fedrank.server.routes.ingest`.
* ``POST /v1/checkin`` -- :mod:`~fedrank.server.routes.checkin`.
* ``POST /v1/secagg``, ``GET /v1/secagg`` -- :mod:`~fedrank.server.routes.secagg`.
* ``GET /v1/status``, ``GET /v1/summary``, ``GET /metrics`` --
  :mod:`~fedrank.server.routes.observability`.
* ``POST /v1/admin/{close,pause,resume}`` -- :mod:`~fedrank.server.routes.admin`.
* ``GET /dashboard``, ``GET /v1/dashboard`` -- :mod:`~fedrank.server.routes.dashboard`.
* ``POST /v1/devices/enroll``, ``POST /v1/devices/session``, ``POST /v1/admin/devices`` --
  :mod:`~fedrank.server.routes.devices`.

The lifespan starts the engine (:mod:`fedrank.server.engine`), the enrolled devices
(:mod:`fedrank.identity`), the checks of server-issued
seeds, the first round and the scheduler (:mod:`fedrank.server.scheduler`), and stops them
at shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.routing import Route

from fedrank.identity.limits import RETRY_AFTER_SECONDS
from fedrank.server.config import ServerConfig
from fedrank.server.engine import Engine
from fedrank.server.envelope import JSON
from fedrank.server.identity import Identity
from fedrank.server.log_limit import RateLimit
from fedrank.server.openapi import openapi
from fedrank.server.rounds import Rounds
from fedrank.server.routes.admin import Admin
from fedrank.server.routes.checkin import Checkin
from fedrank.server.routes.dashboard import DashboardRoutes
from fedrank.server.routes.devices import DeviceRoutes
from fedrank.server.routes.ingest import Ingest
from fedrank.server.routes.model import ModelRoutes
from fedrank.server.routes.observability import Observability
from fedrank.server.routes.secagg import SecAggRoutes
from fedrank.server.scheduler import Scheduler
from fedrank.server.seeds import SeedChecks, open_seeds
from fedrank.server.service import Service

log = logging.getLogger("fedrank.server")
# uvicorn logs a traceback per failed request and a warning per malformed or refused
# connection: a flood of them is one record per kind per 10 s (the app's own logger,
# "fedrank.server", is limited where the engine defines it)
logging.getLogger("uvicorn.error").addFilter(RateLimit())

#: The header of a rate-limited answer (429).
RETRY_AFTER = (b"retry-after", str(RETRY_AFTER_SECONDS).encode())

ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]


@contextlib.asynccontextmanager
async def lifespan(service: Service, app: Starlette) -> AsyncIterator[None]:
    """Start the engine (resuming from the store, off the event loop), the seed checks of
    ``[foltr_es] server_seeds`` (claims of the versions still accepted), the first round of
    ``[rounds]`` and the scheduler; stop the scheduler and then the engine at shutdown."""
    config = service.config
    loop = asyncio.get_running_loop()
    engine = service.engine = await loop.run_in_executor(None, Engine, config, loop)
    service.identity = Identity(config, engine.store.directory, service.attestation)
    if config.server_seeds:
        oldest = engine.snapshot().version - config.server.max_staleness
        issuer, claims = await loop.run_in_executor(
            None, open_seeds, engine.store.directory, oldest
        )
        service.seeds = SeedChecks(issuer, claims)
    if config.rounds.enabled:
        issue = None if service.seeds.issuer is None else service.seeds.issuer.issue
        service.rounds = Rounds(
            config, engine.workload.dim, engine.privacy.plan, issue, service.identity.public_key
        )
    scheduler = service.scheduler = Scheduler(
        config, engine, service.rounds, service.branches.first
    )
    scheduler.start()
    try:
        yield
    finally:
        await scheduler.stop()
        await loop.run_in_executor(None, engine.stop)
        service.identity.close()


def create_app(config: ServerConfig) -> ASGIApp:
    """The ASGI application: ``POST /v1/updates`` is answered by a lean ASGI handler (it is
    the endpoint every client calls, and Starlette's request and middleware machinery is a
    large part of its cost); every other route goes through Starlette. The app's
    ``service`` attribute is the :class:`~fedrank.server.service.Service` it runs."""
    service = Service(config)
    model, ingest, checkin = ModelRoutes(service), Ingest(service), Checkin(service)
    secagg, admin, observe = SecAggRoutes(service), Admin(service), Observability(service)
    devices, dashboard = DeviceRoutes(service), DashboardRoutes(service, observe)
    routes = [
        Route("/v1/model", model.model, methods=["GET"]),
        Route("/v1/model/{version}", model.model_version, methods=["GET"]),
        Route("/v1/updates", ingest.updates, methods=["POST"]),
        Route("/v1/updates:batch", ingest.batch, methods=["POST"]),
        Route("/v1/checkin", checkin.checkin, methods=["POST"]),
        Route("/v1/secagg", secagg.post, methods=["POST"]),
        Route("/v1/secagg", secagg.get, methods=["GET"]),
        Route("/v1/status", observe.status, methods=["GET"]),
        Route("/v1/summary", observe.summary, methods=["GET"]),
        Route("/v1/devices/enroll", devices.enroll, methods=["POST"]),
        Route("/v1/devices/session", devices.session, methods=["POST"]),
        Route("/v1/admin/devices", devices.issue, methods=["POST"]),
        Route("/v1/admin/{action}", admin.admin, methods=["POST"]),
        Route("/metrics", observe.metrics, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/v1/dashboard", dashboard.data, methods=["GET"]),
        Route("/dashboard", dashboard.page, methods=["GET"]),
        Route("/dashboard/{name}", dashboard.asset, methods=["GET"]),
    ]
    framework = Starlette(routes=routes, lifespan=functools.partial(lifespan, service))
    response_headers = [(b"content-type", JSON.encode())]

    async def app(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if not (
            scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/v1/updates"
        ):
            await framework(scope, receive, send)
            return
        # ASGI servers send header names lowercased
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            status, body = await ingest.update(headers, receive, scope)
        except ClientDisconnect:  # nobody to answer
            return
        except Exception:  # a bug, not bad input: answer 500 and keep serving
            log.exception("POST /v1/updates failed")
            status, body = 500, orjson.dumps({"error": "internal", "detail": "server error"})
        answer = response_headers if status != 429 else [*response_headers, RETRY_AFTER]
        await send({"type": "http.response.start", "status": status, "headers": answer})
        await send({"type": "http.response.body", "body": body})

    app.service = service  # type: ignore[attr-defined]
    return app
