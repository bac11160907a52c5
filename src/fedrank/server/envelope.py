"""What the service accepts from a client, checked before anything reaches the writer:
request bodies, identifiers, model versions, metrics and the envelope of an update, each
refused with a :class:`BadRequest` that says what is wrong (status, machine code, human
detail).

Every size an attacker controls is bounded here: bodies of at most ``[server]
max_body_bytes`` that arrive within ``body_timeout`` (:func:`read_body`), ids of 1-128
characters from a fixed alphabet, metrics only from the server's schema
(:class:`MetricSchema`: known names, values in their ranges), at most :data:`MAX_BATCH`
messages per batch.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import Receive

from fedrank.server.sections import ServerSection

JSON = "application/json"
BINARY = "application/vnd.fedrank.update"
BINARY_BATCH = "application/vnd.fedrank.batch"
#: Messages in one batch request.
MAX_BATCH = 10_000
#: Metrics one message may carry.
MAX_METRICS = 32
ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
#: Newline-terminated ids, all valid: the fast path checks a whole batch with one match.
IDS = re.compile(r"(?:[A-Za-z0-9._:\-]{1,128}\n)*")
ENVELOPE = {"message_id", "model_version", "payload", "metrics", "enrollment_id", "client_id"}


class BadRequest(Exception):
    """Answered with ``status`` and ``{"error": code, "detail": detail}``."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """``body`` as a JSON response."""
    return Response(orjson.dumps(body), status_code=status, media_type=JSON, headers=headers)


async def read_body(headers: Mapping[str, str], receive: Receive, server: ServerSection) -> bytes:
    """The body from the ASGI ``receive`` callable, refusing it (413) as soon as it
    exceeds ``server.max_body_bytes`` and (408) when it is not complete within
    ``server.body_timeout`` (a slow body cannot hold the connection). A client that
    disconnects mid-body raises ``ClientDisconnect``: a partial body is never read as a
    whole one."""
    limit, seconds = server.max_body_bytes, server.body_timeout
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, "too_large", f"the body exceeds {limit} bytes")
    parts, size = [], 0
    # the deadline as one timer that cancels this task (asyncio.timeout's mechanism, with
    # less work: this runs for every request)
    task = asyncio.current_task()
    assert task is not None
    expired: list[bool] = []

    def expire() -> None:
        expired.append(True)
        task.cancel()

    handle = asyncio.get_running_loop().call_later(seconds, expire)
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnect()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise BadRequest(413, "too_large", f"the body exceeds {limit} bytes")
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)
    except asyncio.CancelledError:
        if expired and task.uncancel() == 0:  # our deadline, not a shutdown
            raise BadRequest(
                408, "body_timeout", f"the body did not arrive within {seconds:g} s"
            ) from None
        raise
    finally:
        handle.cancel()


def json_body(body: bytes) -> Any:
    """``body`` parsed as JSON; :class:`BadRequest` (400) when it is not JSON, (422) when
    an object holds a key twice (a parser keeps one of them silently, and which one differs
    between parsers: RFC 8259, Section 4, "names within an object SHOULD be unique")."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(400, "bad_json", f"the body is not valid JSON: {exc}") from exc
    # every key is followed by a colon, and outside strings a colon follows only keys: as
    # many colons as kept keys proves there was no duplicate without scanning the tokens
    if body.count(b":") != _key_count(data, body.count(b"{")):
        key = _duplicate_key(body)
        if key is not None:
            raise BadRequest(
                422,
                "duplicate_key",
                f"the key {key!r} appears more than once in one object; send each key once",
            )
    return data


def _key_count(data: Any, objects: int) -> int:
    """The keys of every object in parsed JSON ``data`` that has at most ``objects``
    objects (its count of ``{``), found list by list of values with C-level passes
    (``map``, ``set``, ``chain``) and no deeper once all ``objects`` are found: a batch of
    10,000 messages costs a few passes, and a long vector of numbers none."""
    count = found = 0
    pending: list[list[Any]] = [[data]]
    while pending and found < objects:
        values = pending.pop()
        kinds = set(map(type, values))
        if dict in kinds:
            dicts = values if len(kinds) == 1 else [v for v in values if type(v) is dict]
            count += sum(map(len, dicts))
            found += len(dicts)
            pending.append(list(itertools.chain.from_iterable(map(dict.values, dicts))))
        if list in kinds:
            pending.extend(v for v in values if type(v) is list)
    return count


#: A JSON string or a structural character: outside strings a valid document holds no
#: quote, so scanning from the start never lands inside a string.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]:]')


def _duplicate_key(body: bytes) -> str | None:
    """The first key that appears twice in one object of valid JSON ``body`` (keys compared
    decoded, so ``"a"`` and ``"\\u0061"`` are the same), or ``None``."""
    objects: list[set[str] | None] = []  # one entry per open container (None: an array)
    last = b""
    for match in _TOKEN.finditer(body):
        token = match.group()
        if token == b"{":
            objects.append(set())
        elif token == b"[":
            objects.append(None)
        elif token in (b"}", b"]"):
            objects.pop()
        elif token == b":":
            keys = objects[-1]
            assert keys is not None  # a colon follows a key, inside an object
            key = orjson.loads(last)
            if key in keys:
                return str(key)
            keys.add(key)
        else:
            last = token
    return None


def media_type(headers: Mapping[str, str]) -> str:
    """The request's ``Content-Type`` without its parameters, lowercased."""
    return headers.get("content-type", "").split(";")[0].strip().lower()


def identifier(value: Any, name: str, required: bool = True) -> str | None:
    """``value`` if it is a valid id (1-128 of ``A-Z a-z 0-9 . _ : -``), ``None`` if it is
    absent and optional; :class:`BadRequest` (422) otherwise."""
    if value is None and not required:
        return None
    if not isinstance(value, str) or not ID.fullmatch(value):
        raise BadRequest(422, "invalid", f"{name} must be 1-128 characters of A-Z a-z 0-9 . _ : -")
    return value


def batch_answer(statuses: np.ndarray, errors: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """A batch's answer: counts, one status per message, bodies of the refused ones."""
    return {
        "accepted": int(np.count_nonzero(statuses == 202)),
        "duplicates": int(np.count_nonzero(statuses == 200)),
        "statuses": statuses.tolist(),
        "errors": [{"index": k, "status": int(statuses[k]), **errors[k]} for k in sorted(errors)],
    }


def all_ids(values: list[Any]) -> bool:
    """Whether every value is a valid identifier: strings, one regex over them all (each
    newline-terminated; a value holding a newline itself fails the count)."""
    if not set(map(type, values)) <= {str}:
        return False
    joined = "".join(v + "\n" for v in values)
    return joined.count("\n") == len(values) and IDS.fullmatch(joined) is not None


def known_version(value: Any, current: int) -> int:
    """``value`` if it is a published model version (an integer in ``0..current``);
    :class:`BadRequest` (422) otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRequest(422, "invalid", "model_version must be an integer >= 0")
    if value > current:
        raise BadRequest(
            422, "unknown_version", f"model_version {value} does not exist yet (current {current})"
        )
    return value


class MetricSchema:
    """The metrics this server accepts (``ServerConfig.metrics``: ``(name, low, high)``
    each): a message names only these, each at most once, with a number in its range, so
    no client can grow the summaries (one column per known name) or overflow them."""

    def __init__(self, entries: tuple[tuple[str, float, float], ...]) -> None:
        self.bounds = {name: (low, high) for name, low, high in entries}
        self.known = ", ".join(self.bounds) or "none"

    def check(self, value: Any) -> dict[str, float]:
        """An update's optional ``metrics``; :class:`BadRequest` (422) with the reason."""
        if value is None:
            return {}
        if not isinstance(value, dict) or len(value) > MAX_METRICS:
            raise BadRequest(422, "invalid", f"metrics must be an object of at most {MAX_METRICS}")
        out = {}
        for name, v in value.items():
            if not 1 <= len(name) <= 64:
                raise BadRequest(422, "invalid", "metric names must have 1-64 characters")
            if name not in self.bounds:
                raise BadRequest(
                    422,
                    "unknown_metric",
                    f"metric {name!r} is not one this server accepts ({self.known}; "
                    "[metrics] in its configuration)",
                )
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise BadRequest(422, "invalid", f"metric {name!r} must be a finite number")
            low, high = self.bounds[name]
            if not low <= v <= high:
                raise BadRequest(
                    422,
                    "metric_range",
                    f"metric {name!r} = {v:g} is outside its range [{low:g}, {high:g}]",
                )
            out[name] = float(v)
        return out

    def all_valid(self, given: list[dict[str, Any]]) -> bool:
        """Whether every metrics object in ``given`` passes :meth:`check` (the batch fast
        path: type sets and one numpy comparison; linear in the number of values)."""
        names = [name for mt in given for name in mt]
        if not set(names) <= self.bounds.keys() or any(len(mt) > MAX_METRICS for mt in given):
            return False
        values = [v for mt in given for v in mt.values()]
        if not set(map(type, values)) <= {int, float}:
            return False
        if not values:
            return True
        bounds = np.array([self.bounds[name] for name in names])
        x = np.array(values, dtype=np.float64)
        return bool(np.all((bounds[:, 0] <= x) & (x <= bounds[:, 1])))
