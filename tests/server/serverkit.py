"""Helpers shared by the server tests: start real servers on loopback, read their SQLite
store read-only, build update messages, parse Prometheus text, wait for conditions.

Every server here is a real ``fedrank serve`` child process
(:class:`fedrank.server.process.ServerProcess`); the tests talk to it over HTTP with
``httpx`` only, and read the store the way an auditor would (``sqlite3`` in read-only mode).
Where a server requires enrolled devices (``[rounds]``, ``[secagg]``, ``[privacy]``;
docs/devices.md), :func:`enroll_devices` enrolls keys the way a device does, with tokens
the operator's ``fedrank devices enroll`` would print; each :class:`Device`'s ``auth``
signs a request (``client.post(..., auth=device.auth)``). :func:`live_server`'s client then
signs every request with :class:`NamedDevices`: each client a test names is a device.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import struct
import time
import urllib.parse
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from fedrank.identity.device import DeviceAuth, enroll
from fedrank.identity.protocol import DeviceKey
from fedrank.identity.registry import DeviceRegistry
from fedrank.server.config import ServerConfig, load_config
from fedrank.server.envelope import ID
from fedrank.server.process import ServerProcess

BINARY = "application/vnd.fedrank.update"
ADMIN_TOKEN = "s3cret-token-for-tests"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
#: The proxy a test server accepts merged aggregates from (``PROXIES_TOML``), and its header.
PROXY_TOKEN = "proxy-token-for-tests"
PROXIES_TOML = f"""
[[proxies]]
name = "test-proxy"
token = "{PROXY_TOKEN}"
max_clients = 1000
"""
PROXY = {"Authorization": f"Bearer {PROXY_TOKEN}"}
#: Fields of ``GET /v1/status`` that a refused request must leave as they were.
STATE_FIELDS = (
    "model_version",
    "iteration",
    "updates_accepted_total",
    "updates_counted_total",
    "updates_in_iteration",
    "updates_duplicate_total",
)


def write_config(directory: Path, text: str, name: str = "server.toml") -> Path:
    """Write a ``server.toml`` into ``directory`` and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    return path


@contextlib.contextmanager
def running_server(
    directory: Path, config_text: str | None = None, **flags: object
) -> Iterator[ServerProcess]:
    """A started server with its store in ``directory / "store"``; stopped (SIGTERM, then
    SIGKILL) on exit, whatever happened."""
    config = write_config(directory, config_text) if config_text is not None else None
    server = ServerProcess(directory / "store", config=config, **flags)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        server.kill()


@dataclass
class Live:
    """A running server with an HTTP client, its store directory, its configuration
    (loaded here the way the server loads it) and, where the server requires enrolled
    devices, the :class:`NamedDevices` its client signs with."""

    process: ServerProcess
    client: httpx.Client
    config: ServerConfig
    devices: NamedDevices | None

    @property
    def store(self) -> Path:
        return self.process.store

    def device_id(self, name: str) -> str:
        """The id of the device that stands for the client a test names ``name`` (what the
        server calls that client in its answers and keys its state on)."""
        assert self.devices is not None, "this server does not require enrolled devices"
        return self.devices.id(name)

    def version(self) -> int:
        return int(status(self.client)["model_version"])


@contextlib.contextmanager
def live_server(directory: Path, config_text: str | None = None, **flags: object) -> Iterator[Live]:
    """:func:`running_server` with a client and the offline configuration."""
    overrides = {k: v for k, v in flags.items() if k == "workload"}
    renamed = {"iteration_seconds": "seconds", "iteration_min_updates": "min_updates"}
    overrides.update({renamed[k]: v for k, v in flags.items() if k in renamed})
    config = offline_config(config_text, directory, **overrides)
    with running_server(directory, config_text, **flags) as process:
        auth = NamedDevices(process.store, process.url) if config.identity_required else None
        # A kept-alive connection idle for longer than the server's keep-alive timeout may be
        # closed by the server just as the client reuses it ("server disconnected"): the
        # client lets idle connections go well before the server does.
        limits = httpx.Limits(keepalive_expiry=config.server.keep_alive_timeout / 5)
        with httpx.Client(base_url=process.url, timeout=30.0, auth=auth, limits=limits) as client:
            yield Live(process, client, config, auth)


def offline_config(config_text: str | None, tmp: Path, **overrides: Any) -> ServerConfig:
    """The same configuration the server loads, for recomputing its results offline."""
    path = write_config(tmp, config_text, "offline.toml") if config_text is not None else None
    return load_config(path, **overrides)


def wait_until(
    predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.02, what: str = ""
) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned); fail after
    ``timeout`` seconds. Used instead of fixed sleeps."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(interval)


def status(client: httpx.Client) -> dict[str, Any]:
    """``GET /v1/status`` as the operator sees it (with the admin token, which a server
    under ``[privacy]`` needs to show the counts; must answer 200)."""
    response = client.get("/v1/status", headers=ADMIN)
    assert response.status_code == 200, response.text
    return response.json()


def state_of(client: httpx.Client) -> dict[str, Any]:
    """The fields of the status that only accepted messages or closes may change."""
    snapshot = status(client)
    return {k: snapshot[k] for k in STATE_FIELDS}


def admin(client: httpx.Client, action: str, token: str | None = ADMIN_TOKEN) -> httpx.Response:
    """``POST /v1/admin/{action}`` with the bearer token (``None``: without any)."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    return client.post(f"/v1/admin/{action}", headers=headers)


def assert_error(response: httpx.Response, status_code: int, code: str, detail: str = "") -> None:
    """A refusal: the status, ``{"error": code, "detail": ...}`` with a non-empty reason that
    contains ``detail``."""
    assert response.status_code == status_code, (response.status_code, response.text)
    body = response.json()
    assert body["error"] == code, body
    assert isinstance(body["detail"], str) and body["detail"], body
    assert detail in body["detail"], body


# -- enrolled devices -------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    """An enrolled device: its id (the client id of its requests) and the ``httpx.Auth``
    that signs them."""

    id: str
    auth: DeviceAuth


class NamedDevices(httpx.Auth):
    """Signs each request as the enrolled device of the client it names: a test's client
    names (``"c1"``, ``"mallory"``) each stand for a device of their own, enrolled on first
    use; the name is replaced by that device's id where the request carries it (a JSON
    body's ``client_id``, its ``messages``' ones, ``X-Client-Id``, the ``client_id`` query
    parameter). A request that names no client, or only ids the server refuses as ids
    (``"bad id"``, sent as they are), is signed as the device ``""``. The device routes
    themselves go unsigned."""

    requires_response_body = True

    def __init__(self, store: Path, url: str) -> None:
        self.store, self.url = store, url
        self.devices: dict[str, DeviceAuth] = {}

    def device(self, name: str) -> DeviceAuth:
        """The device of the client ``name`` (enrolled now if it is new)."""
        if name not in self.devices:
            key = DeviceKey.generate()
            with httpx.Client(timeout=30.0) as http:
                enroll(http, self.url, key, issue_tokens(self.store)[0])
            self.devices[name] = DeviceAuth(key, self.url)
        return self.devices[name]

    def id(self, name: str) -> str:
        """The device id of the client ``name``."""
        return self.device(name).device_id

    def _named(self, request: httpx.Request) -> tuple[str, httpx.Request]:
        """The client the request names, and the request with its device id instead."""
        url, headers, body = request.url, dict(request.headers), request.read()
        names: list[str] = []
        data: Any = None
        if request.headers.get("content-type", "").startswith("application/json") and body:
            with contextlib.suppress(ValueError):
                data = json.loads(body)
        messages = data.get("messages") if isinstance(data, dict) else None
        holders = [data] + (messages if isinstance(messages, list) else [])
        for held in holders:
            if isinstance(held, dict) and _valid_id(held.get("client_id")):
                names.append(held["client_id"])
                held["client_id"] = self.id(held["client_id"])
        if _valid_id(headers.get("x-client-id")):
            names.append(headers["x-client-id"])
            headers["x-client-id"] = self.id(headers["x-client-id"])
        query = dict(urllib.parse.parse_qsl(url.query.decode()))
        if _valid_id(query.get("client_id")):
            names.append(query["client_id"])
            query["client_id"] = self.id(query["client_id"])
            url = url.copy_with(query=urllib.parse.urlencode(query).encode())
        if data is not None and names:
            body = json.dumps(data).encode()
        headers.pop("content-length", None)
        rebuilt = httpx.Request(request.method, url, headers=headers, content=body)
        return (names[0] if names else ""), rebuilt

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if request.url.path.startswith("/v1/devices/"):
            yield request
            return
        name, rebuilt = self._named(request)
        yield from self.device(name).auth_flow(rebuilt)


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) and ID.fullmatch(value) is not None


def issue_tokens(store: Path, count: int = 1, label: str = "tests") -> list[str]:
    """Enrollment tokens of a server's store, as ``fedrank devices enroll`` issues them."""
    registry = DeviceRegistry(store)
    try:
        return registry.issue(count, label, 1.0)
    finally:
        registry.close()


def enroll_devices(live: Live, count: int) -> list[Device]:
    """``count`` new devices enrolled on ``live``'s server (each its own key and token)."""
    out = []
    for token in issue_tokens(live.store, count):
        key = DeviceKey.generate()
        enroll(live.client, live.process.url, key, token)
        out.append(Device(key.id, DeviceAuth(key, live.process.url)))
    return out


# -- the store, read like an auditor ----------------------------------------------------


def connect_ro(store: Path) -> sqlite3.Connection:
    """A read-only connection to a server's SQLite database."""
    return sqlite3.connect(f"file:{store / 'fedrank.sqlite3'}?mode=ro", uri=True)


def store_query(store: Path, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one query on a read-only connection and close it."""
    db = connect_ro(store)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def stored_ids(store: Path) -> list[str]:
    """Every stored ``message_id`` (with repeats, if there were any)."""
    return [r[0] for r in store_query(store, "SELECT message_id FROM updates")]


def row_count(store: Path) -> int:
    return int(store_query(store, "SELECT COUNT(*) FROM updates")[0][0])


def stored_rows(store: Path, iteration: int | None = None) -> list[dict[str, Any]]:
    """Stored messages as dicts (``payload`` and ``metrics`` decoded), in commit order."""
    sql = (
        "SELECT message_id, iteration, model_version, branch, kind, payload, metrics, count "
        "FROM updates"
    )
    args: tuple[Any, ...] = ()
    if iteration is not None:
        sql += " WHERE iteration = ?"
        args = (iteration,)
    keys = ("message_id", "iteration", "model_version", "branch", "kind", "payload", "metrics")
    out = []
    for r in store_query(store, sql + " ORDER BY seq", args):
        row = dict(zip(keys, r[:7], strict=True))
        row["payload"] = json.loads(row["payload"])
        row["metrics"] = json.loads(row["metrics"])
        row["count"] = r[7]
        out.append(row)
    return out


def closed_iteration(store: Path, iteration: int) -> dict[str, Any]:
    """The stored record of a closed iteration (aggregate and summary decoded)."""
    rows = store_query(
        store,
        "SELECT model_version, n_updates, aggregate, summary, reason, closed_at FROM iterations "
        "WHERE iteration = ?",
        (iteration,),
    )
    assert rows, f"iteration {iteration} is not stored"
    version, n, aggregate, summary, reason, closed_at = rows[0]
    assert closed_at is not None, f"iteration {iteration} is not closed"
    return {
        "model_version": version,
        "n_updates": n,
        "aggregate": json.loads(aggregate),
        "summary": json.loads(summary),
        "reason": reason,
    }


# -- messages ---------------------------------------------------------------------------


def es_message(
    message_id: str,
    version: int,
    seed: int,
    metric: float,
    antithetic: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A JSON FOLtR-ES message."""
    payload: dict[str, Any] = {"seed": seed, "metric": metric}
    if antithetic is not None:
        payload["antithetic_metric"] = antithetic
    return {"message_id": message_id, "model_version": version, "payload": payload, **extra}


def es_bytes(seed: int, metric: float, antithetic: float | None = None) -> bytes:
    """The 8 (or 12) bytes of an ES message, written here by hand from the documented
    layout (``seed u32 | metric f32 [| antithetic f32]``, little-endian) rather than with the
    codec under test."""
    if antithetic is None:
        return struct.pack("<If", seed, metric)
    return struct.pack("<Iff", seed, metric, antithetic)


def binary_headers(message_id: str, version: int, **more: str) -> dict[str, str]:
    headers = {"Content-Type": BINARY, "X-Message-Id": message_id, "X-Model-Version": str(version)}
    headers.update({f"X-{k.replace('_', '-').title()}": v for k, v in more.items()})
    return headers


def f32(x: float) -> float:
    """``x`` rounded to float32, as the binary form carries it."""
    return float(np.float32(x))


def prometheus(text: str) -> dict[str, float]:
    """``{"name{labels}": value}`` of every sample in a Prometheus text exposition."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, value = line.rsplit(" ", 1)
        samples[name] = float(value)
    return samples


# -- the server's arithmetic, redone offline from the stored rows -----------------------


def recompute_state(config: ServerConfig, rows: list[dict[str, Any]]) -> Any:
    """The aggregator state the stored ``rows`` stand for, computed here from the
    workload's own pieces (updates one by one, proxy aggregates merged, pings skipped)."""
    from fedrank.server.workloads import make_workload

    workload = make_workload(config)
    aggregator = workload.strategy.aggregator
    state = aggregator.zero()
    for row in rows:
        if row["kind"] == "update":
            cols = workload.wire.columns([workload.wire.parse(row["payload"])])
            state = workload.strategy.accumulate(state, cols)
        elif row["kind"] == "aggregate":
            state = aggregator.merge(state, aggregator.state_from_json(row["payload"]))
    return state


def stored_model(store: Path, version: int) -> tuple[np.ndarray, dict[str, Any]]:
    """``(params, optimizer state JSON)`` of a stored model version."""
    from fedrank.core.state_json import array_from_json

    rows = store_query(
        store, "SELECT params, optimizer_state FROM models WHERE version = ?", (version,)
    )
    assert rows, f"model version {version} is not stored"
    return array_from_json(json.loads(rows[0][0])), json.loads(rows[0][1])


def recompute_step(config: ServerConfig, store: Path, version: int, state: Any) -> np.ndarray:
    """The parameters of version ``version + 1``: the strategy's server step from the
    stored version ``version`` and its optimizer state on ``state``."""
    from fedrank.federation.round import Round, RoundState
    from fedrank.server.workloads import make_workload

    strategy = make_workload(config).strategy
    params, opt_json = stored_model(store, version)
    opt_state = strategy.optimizer.state_from_json(opt_json)
    return Round(strategy, RoundState(params, opt_state, state, version)).close().step.params
