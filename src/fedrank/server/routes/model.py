"""``GET /v1/model``: the model a client is served (its study branch from its
``enrollment_id``: the trained model, or the defaults), with ``ETag`` / ``If-None-Match`` for
cheap polling; ``GET /v1/model/{version}``: a published version, from the store
(docs/service.md)."""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING

import numpy as np
from starlette.requests import Request
from starlette.responses import Response

from fedrank.server.envelope import BadRequest, identifier, json_response
from fedrank.server.store import ModelVersion, Store

if TYPE_CHECKING:
    from fedrank.server.service import Service


class ModelRoutes:
    """The model endpoints (module docstring)."""

    def __init__(self, service: Service) -> None:
        self.service = service

    @functools.cached_property
    def defaults(self) -> np.ndarray:
        """What the control branches are served: the workload's model of version 0."""
        return self.service.engine.workload.initial_params()

    async def model(self, request: Request) -> Response:
        service = self.service
        engine, counts = service.engine, service.counts
        enrollment = request.query_params.get("enrollment_id")
        try:
            identifier(enrollment, "enrollment_id", required=False)
        except BadRequest as err:
            return counts.reject("model", err)
        branch = service.branches.of(enrollment)
        snap = engine.snapshot()
        etag = f'"{snap.version}-{branch}"'
        if request.headers.get("if-none-match") == etag:
            counts.answered("model", 304)
            return Response(status_code=304, headers={"ETag": etag})
        served = service.branches[branch]
        params = snap.params if served.served == "trained" else self.defaults
        body = {
            "model_version": snap.version,
            "iteration": snap.iteration,
            "workload": engine.workload.name,
            "branch": branch,
            "served": served.served,
            "params": params.tolist(),
            "parameter_names": engine.workload.parameter_names(),
            "config": {**service.config.client_view(), "decay": served.decay},
        }
        if snap.norm_bound is not None:  # it changes only with the version (the ETag)
            body["norm_bound"] = snap.norm_bound
        counts.answered("model", 200)
        return json_response(body, headers={"ETag": etag, "Cache-Control": "no-cache"})

    async def model_version(self, request: Request) -> Response:
        counts = self.service.counts
        raw = request.path_params["version"]
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 12:
            return counts.reject("model", BadRequest(422, "invalid", "version must be an integer"))
        version = int(raw)
        loop = asyncio.get_running_loop()
        model = await loop.run_in_executor(None, self._read_model, version)
        if model is None:
            missing = BadRequest(404, "not_found", f"no model version {version}")
            return counts.reject("model", missing)
        body = {
            "model_version": model.version,
            "iteration": model.iteration,
            "params": model.params.tolist(),
            "created_at": model.created_at,
        }
        return json_response(
            body, headers={"ETag": f'"{version}"', "Cache-Control": "max-age=86400"}
        )

    def _read_model(self, version: int) -> ModelVersion | None:
        reader = Store(self.service.engine.store.directory, read_only=True)
        try:
            return reader.model(version)
        finally:
            reader.close()
