"""Connection limits of the service: no client can hold a connection, or the server's
memory, for free (docs/service.md, "No connection is free").

uvicorn closes an idle keep-alive connection after ``timeout_keep_alive`` and answers 503
beyond ``limit_concurrency``, but a connection that trickles bytes is never timed out (every
byte cancels the keep-alive timer), a request whose body nobody reads keeps its connection
after the answer, and a client that never reads its answers makes the server buffer them.
:class:`GuardedProtocol` (built by :func:`guarded_protocol`) adds, per connection:

* a *header* deadline: from the moment a connection opens, a new request on it begins, or
  bytes arrive on an idle kept-alive connection, its headers must be complete within
  ``header_timeout`` seconds;
* a *request* deadline: from the first byte of a request to the last byte of its body,
  ``request_timeout`` seconds in all, armed once per request and never extended by data;
* no keep-alive after an answer that went out before its request's body came in (an
  endpoint that takes no body, a refusal): the connection is closed, so the rest of the
  body cannot hold it;
* a *write* deadline: when the transport's write buffer stays above its high-water mark
  (asyncio flow control: ``pause_writing`` without ``resume_writing``) for
  ``write_timeout`` seconds, the client is not reading and the connection is reset;
* at most :data:`UNSENT_BYTES` unsent bytes in the kernel per connection
  (``TCP_NOTSENT_LOWAT``): without it, the kernel took up to 4 MB of a large answer into
  the buffer of each client that never reads, copying it at the cost of the event loop;
* at most ``max_connections_per_address`` open connections per client address; further
  connections from it are closed at once.

The *body* deadline of a body the app reads is :func:`fedrank.server.envelope.read_body`'s
(408), and large answers are written piece by piece after the previous piece drained
(:class:`fedrank.server.routes.model.SharedBody`), so a client that never reads holds one
piece in the process. All are ``[server]`` keys; :func:`raise_fd_limit` gives the process
the file descriptors ``max_connections`` needs.
"""

from __future__ import annotations

import asyncio
import resource
import socket
import struct
from asyncio import TimerHandle
from collections import Counter
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from fedrank.errors import ConfigError
from fedrank.server.sections import ServerSection

#: Most bytes the kernel holds unsent per connection (``TCP_NOTSENT_LOWAT``): what a client
#: that never reads costs the kernel beyond its receive window, while the bytes in flight to
#: a client that reads still grow with the path (the kernel's send-buffer autotuning).
UNSENT_BYTES = 131_072
#: File descriptors the server needs besides its connections: the listening socket, the
#: store's SQLite and Parquet files, the executor's threads, logs.
FD_RESERVE = 256


def guarded_protocol(server: ServerSection) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with the deadlines and the per-address cap of
    ``server`` (module docstring); one class per server, sharing its per-address counts."""
    header_timeout, request_timeout = server.header_timeout, server.request_timeout
    write_timeout, per_address = server.write_timeout, server.max_connections_per_address
    open_by_address: Counter[str] = Counter()

    class GuardedProtocol(HttpToolsProtocol):
        _header_timer: TimerHandle | None = None
        _request_timer: TimerHandle | None = None
        _write_timer: TimerHandle | None = None
        _address: str | None = None  # set while counted in open_by_address
        _running: RequestResponseCycle | None = None  # the request being answered

        def _close(self) -> None:
            if not self.transport.is_closing():
                self.transport.close()

        def _arm_headers(self) -> None:
            _cancel(self._header_timer)
            self._header_timer = self.loop.call_later(header_timeout, self._headers_late)

        def _headers_late(self) -> None:
            self._header_timer = None
            self._close()

        def _request_late(self) -> None:
            self._request_timer = None
            self._close()

        def _write_stalled(self) -> None:
            self._write_timer = None
            # a reset, not a close: close() would wait for the buffers the client never
            # reads, the process's and the kernel's
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.transport.abort()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            address = self.client[0] if self.client else None
            if address is not None and open_by_address[address] >= per_address:
                transport.close()
                return
            if address is not None:
                open_by_address[address] += 1
                self._address = address
            sock = transport.get_extra_info("socket")
            if sock is not None and hasattr(socket, "TCP_NOTSENT_LOWAT"):  # Linux, macOS
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NOTSENT_LOWAT, UNSENT_BYTES)
            self._arm_headers()

        def connection_lost(self, exc: Exception | None) -> None:
            for timer in (self._header_timer, self._request_timer, self._write_timer):
                _cancel(timer)
            self._header_timer = self._request_timer = self._write_timer = None
            running = self._running
            if running is not None and not running.response_complete:
                # uvicorn marks only the last parsed request disconnected; with pipelined
                # requests the one still writing would write to the closed transport
                running.disconnected = True
            if self._address is not None:
                open_by_address[self._address] -= 1
                if not open_by_address[self._address]:
                    del open_by_address[self._address]
                self._address = None
            super().connection_lost(exc)

        def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
            self._running = cycle
            super()._start_asgi_task(cycle, app)

        def data_received(self, data: bytes) -> None:
            idle = self.timeout_keep_alive_task is not None  # uvicorn cancels it on any data
            super().data_received(data)
            if idle and self._header_timer is None and self._request_timer is None:
                self._arm_headers()  # bytes that began no request still have a deadline

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._header_timer is None:  # a new request on a kept-alive connection
                self._arm_headers()
            _cancel(self._request_timer)
            self._request_timer = self.loop.call_later(request_timeout, self._request_late)

        def on_headers_complete(self) -> None:
            _cancel(self._header_timer)
            self._header_timer = None
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            _cancel(self._request_timer)
            self._request_timer = None
            super().on_message_complete()

        def on_response_complete(self) -> None:
            cycle = self.cycle
            if cycle.response_complete and cycle.more_body:
                self._close()  # answered before its body came in: nothing reads the rest
            super().on_response_complete()

        def pause_writing(self) -> None:
            super().pause_writing()
            if self._write_timer is None:
                self._write_timer = self.loop.call_later(write_timeout, self._write_stalled)

        def resume_writing(self) -> None:
            _cancel(self._write_timer)
            self._write_timer = None
            super().resume_writing()

    return GuardedProtocol


def _cancel(timer: TimerHandle | None) -> None:
    if timer is not None:
        timer.cancel()


def uvicorn_limits(server: ServerSection) -> dict[str, Any]:
    """The keyword arguments of ``uvicorn.run`` for ``[server]``."""
    return {
        "http": guarded_protocol(server),
        "timeout_keep_alive": server.keep_alive_timeout,
        "limit_concurrency": server.max_connections,
    }


def raise_fd_limit(max_connections: int) -> None:
    """Raise the process's soft limit of open files (``RLIMIT_NOFILE``) to its hard limit
    when ``max_connections`` (one descriptor each) and :data:`FD_RESERVE` need more than the
    soft limit; :class:`ConfigError` when even the hard limit is too low."""
    need = max_connections + FD_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        raise ConfigError(
            f"[server] max_connections = {max_connections} needs about {need} open files, "
            f"but this process may open at most {hard} (RLIMIT_NOFILE's hard limit): raise "
            "it (ulimit -Hn as root, LimitNOFILE= in a systemd unit, nofile in "
            "/etc/security/limits.conf) or lower max_connections"
        )
    target = need if hard == resource.RLIM_INFINITY else hard  # Linux caps "unlimited"
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
