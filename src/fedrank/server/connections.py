"""Connection limits of the service: no client can hold a connection open for free.

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive``, but a connection
that never completes its request headers is never timed out, so slow or silent clients
could hold every file descriptor, and new clients would get empty replies.
:class:`GuardedProtocol` adds a *header* deadline: from the moment a connection opens, or a
new request on it begins, its headers must be complete within ``header_timeout`` seconds,
or the connection is closed. The *body* deadline is
enforced where the body is read (:func:`fedrank.server.envelope.read_body`: 408), the
keep-alive timeout is uvicorn's, and ``max_connections`` is uvicorn's
``limit_concurrency`` (503 beyond it). All four are ``[server]`` keys.
"""

from __future__ import annotations

import asyncio
from asyncio import TimerHandle
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def guarded_protocol(header_timeout: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with a header deadline of ``header_timeout`` s."""

    class GuardedProtocol(HttpToolsProtocol):
        _header_timer: TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout, self._headers_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_late(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._header_timer is None:  # a new request on a kept-alive connection
                self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()  # between requests, uvicorn's keep-alive timeout applies
            super().on_headers_complete()

    return GuardedProtocol


def uvicorn_limits(server: Any) -> dict[str, Any]:
    """The keyword arguments of ``uvicorn.run`` for ``[server]`` (a ServerSection)."""
    return {
        "http": guarded_protocol(server.header_timeout),
        "timeout_keep_alive": server.keep_alive_timeout,
        "limit_concurrency": server.max_connections,
    }
