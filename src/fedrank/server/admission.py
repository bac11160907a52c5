"""Which messages of a group the open iteration takes, decided by the writer before the
group is stored: a message id already stored in the remembered window is a duplicate (200,
answered again, counted once), a message computed on a model older than ``max_staleness``
versions is stale (409), a message beyond what the aggregator keeps is refused while the
iteration is full (503), and a proxy's state that cannot join the iteration's aggregate is
invalid (422). Every other message is accepted (202). See docs/service.md."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedrank.errors import FedrankError
from fedrank.federation.round import Round
from fedrank.server.messages import PING, UPDATE, Messages
from fedrank.server.recent_ids import RecentIds


@dataclass(frozen=True)
class Admission:
    """The decision on a group: a status per message, the bodies of the messages not
    accepted (by position), the open iteration they were decided in, and how many were
    duplicates and refused by reason (``stale``, ``iteration_full``, ``invalid_aggregate``)."""

    status: np.ndarray
    bodies: dict[int, dict[str, Any]]
    iteration: int
    duplicates: int
    refused: Counter[str]

    @property
    def accepted(self) -> np.ndarray:
        """Positions of the accepted messages."""
        return np.flatnonzero(self.status == 202)


def admit(
    msgs: Messages,
    known: RecentIds,
    round_: Round,
    max_staleness: int,
    iteration: int,
    workload: str,
) -> Admission:
    """Decide every message of ``msgs`` for the open ``iteration`` of ``round_``
    (module docstring); ``known`` holds the ids already stored, ``workload`` names the
    section whose ``max_rows`` a full iteration's answer points to."""
    m = len(msgs)
    status = np.full(m, 202, dtype=np.int64)
    bodies: dict[int, dict[str, Any]] = {}
    distinct = set(msgs.ids)
    if len(distinct) < m or not known.isdisjoint(distinct):  # some duplicates
        seen: set[str] = set()
        for k, mid in enumerate(msgs.ids):
            if mid in known or mid in seen:
                status[k] = 200
            else:
                seen.add(mid)
    duplicates = int(np.count_nonzero(status == 200))
    oldest = round_.version - max_staleness
    # A ping is stale like an update: its metrics describe an older model, and counted
    # in this iteration's summary they would be credited to the new one.
    stale = (status == 202) & (msgs.versions < oldest)
    for k in np.flatnonzero(stale):
        status[k] = 409
        bodies[int(k)] = _stale(int(msgs.versions[k]), oldest, round_.version)
    full = _beyond_capacity(msgs, status, round_.capacity())
    if full.size:
        status[full] = 503
        body = _full(iteration, workload)
        bodies.update({int(k): body for k in full})
    for k, aggregate in msgs.aggregates.items():
        problem = _merge_problem(round_, aggregate) if status[k] == 202 else None
        if problem is not None:
            status[k] = 422
            bodies[k] = {"error": "invalid_aggregate", "detail": problem}
    invalid = sum(1 for b in bodies.values() if b.get("error") == "invalid_aggregate")
    refused = Counter(
        {"stale": int(stale.sum()), "iteration_full": int(full.size), "invalid_aggregate": invalid}
    )
    return Admission(status, bodies, iteration, duplicates, +refused)


def _stale(version: int, oldest: int, current: int) -> dict[str, Any]:
    detail = (
        f"computed on model version {version}; the server accepts versions >= {oldest} "
        f"(current {current}); fetch the model and compute the report again"
    )
    return {"error": "stale", "detail": detail, "current_version": current}


def _beyond_capacity(msgs: Messages, status: np.ndarray, room: int | None) -> np.ndarray:
    """Positions of the messages still to accept (status 202) that the iteration's
    aggregate has no ``room`` for: a median or trimmed mean keeps every update, up to its
    ``max_rows`` (an update takes one row, a proxy's aggregate its ``count``, a ping
    none). Refused before they are stored, so the aggregate never overflows."""
    if room is None:
        return np.zeros(0, dtype=np.int64)
    candidates = np.flatnonzero(status == 202)
    kinds = msgs.kind_codes[candidates]
    rows = np.where(kinds == PING, 0, np.where(kinds == UPDATE, 1, msgs.counts[candidates]))
    return candidates[(rows > 0) & (np.cumsum(rows) > room)]


def _full(iteration: int, workload: str) -> dict[str, Any]:
    detail = (
        f"iteration {iteration} holds as many updates as its aggregator keeps "
        f"([{workload}] max_rows); retry after the iteration closes"
    )
    return {"error": "iteration_full", "detail": detail, "iteration": iteration}


def _merge_problem(round_: Round, aggregate: Any) -> str | None:
    """Why a proxy's state cannot join the round's aggregate, or ``None``: a state of
    another iteration's norm bound (the merge refuses it), or a merge into an overflow or a
    zero weight (a state valid on its own can still do that)."""
    aggregator = round_.strategy.aggregator
    try:
        with np.errstate(all="ignore"):
            merged = aggregator.merge(round_.aggregate, aggregate)
            finite = bool(np.all(np.isfinite(aggregator.finalize(merged))))
    except FedrankError as exc:
        return f"it does not merge with this iteration's aggregate: {exc}"
    if not finite:
        return "merged with this iteration's aggregate it gives non-finite values"
    return None
