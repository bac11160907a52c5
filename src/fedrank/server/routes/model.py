"""``GET /v1/model``: the model a client is served (its study branch from its
``enrollment_id``: the trained model, or the defaults), with ``ETag`` / ``If-None-Match`` for
cheap polling; ``GET /v1/model/{version}``: a published version, from the store
(docs/service.md).

A model's body is serialized once and shared by every request for it (:class:`Bodies`),
and written piece by piece (:class:`SharedBody`): many clients fetching a large model, or
never reading it, cost the server one copy of it, not one per request
(:mod:`fedrank.server.connections`).
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from collections.abc import Hashable
from typing import TYPE_CHECKING

import numpy as np
import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from fedrank.server.envelope import JSON, BadRequest, identifier
from fedrank.server.store import ModelVersion, Store

if TYPE_CHECKING:
    from fedrank.server.service import Service

#: Bytes of a body written at once; the next piece waits until the client has read enough
#: of the previous ones (uvicorn's ``send`` waits while the transport's buffer is full).
CHUNK = 65_536
#: Serialized bodies kept, and their most bytes in all (the newest is kept whatever its size).
MAX_BODIES = 16
MAX_BODY_BYTES = 256 * 2**20


class Bodies:
    """Serialized response bodies by key, built once and shared: a least-recently-used
    cache bounded by :data:`MAX_BODIES` entries and :data:`MAX_BODY_BYTES` bytes."""

    def __init__(self) -> None:
        self._bodies: OrderedDict[Hashable, bytes] = OrderedDict()
        self._bytes = 0

    def find(self, key: Hashable) -> bytes | None:
        """The body of ``key``, if it is kept."""
        body = self._bodies.get(key)
        if body is not None:
            self._bodies.move_to_end(key)
        return body

    def keep(self, key: Hashable, body: bytes) -> bytes:
        """Keep ``body`` as ``key``'s (the one kept already, if another request built it
        meanwhile), dropping the least recently used beyond the bounds; returns it."""
        kept = self.find(key)
        if kept is not None:
            return kept
        self._bodies[key] = body
        self._bytes += len(body)
        while len(self._bodies) > 1 and (
            len(self._bodies) > MAX_BODIES or self._bytes > MAX_BODY_BYTES
        ):
            _, dropped = self._bodies.popitem(last=False)
            self._bytes -= len(dropped)
        return body


class SharedBody(Response):
    """A JSON response whose body (shared, see :class:`Bodies`) is sent in :data:`CHUNK`-byte
    pieces, each once the client has read the previous ones: a client that does not read
    holds one piece in the process, and slicing copies only that piece."""

    def __init__(self, body: bytes, headers: dict[str, str]) -> None:
        super().__init__(body, media_type=JSON, headers=headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        body, size = self.body, len(self.body)
        for start in range(0, size or 1, CHUNK):
            end = start + CHUNK
            await send(
                {"type": "http.response.body", "body": body[start:end], "more_body": end < size}
            )


class ModelRoutes:
    """The model endpoints (module docstring)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.bodies = Bodies()

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
        key = ("served", snap.version, snap.iteration, branch)
        body = self.bodies.find(key)
        if body is None:
            served = service.branches[branch]
            params = snap.params if served.served == "trained" else self.defaults
            data = {
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
                data["norm_bound"] = snap.norm_bound
            body = self.bodies.keep(key, orjson.dumps(data))
        counts.answered("model", 200)
        return SharedBody(body, headers={"ETag": etag, "Cache-Control": "no-cache"})

    async def model_version(self, request: Request) -> Response:
        counts = self.service.counts
        raw = request.path_params["version"]
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 12:
            return counts.reject("model", BadRequest(422, "invalid", "version must be an integer"))
        version = int(raw)
        key = ("stored", version)
        body = self.bodies.find(key)
        if body is None:
            loop = asyncio.get_running_loop()
            model = await loop.run_in_executor(None, self._read_model, version)
            if model is None:
                missing = BadRequest(404, "not_found", f"no model version {version}")
                return counts.reject("model", missing)
            data = {
                "model_version": model.version,
                "iteration": model.iteration,
                "params": model.params.tolist(),
                "created_at": model.created_at,
            }
            body = self.bodies.keep(key, orjson.dumps(data))
        return SharedBody(body, headers={"ETag": f'"{version}"', "Cache-Control": "max-age=86400"})

    def _read_model(self, version: int) -> ModelVersion | None:
        reader = Store(self.service.engine.store.directory, read_only=True)
        try:
            return reader.model(version)
        finally:
            reader.close()
