"""Server-side logs of the two privacy baselines of FedPS (paper Sec. 4.2, with Sec. 3.2).

Both baselines keep the users' search logs on the server and train the personalized model
centrally on what the server holds; FedPS keeps every log on its client instead. This module
builds the server's logs as :class:`~fedrank.data.aol.UserLog` objects, so they go through
the same sample builder (:func:`fedrank.retrieval.candidates.build_users`) as the real
per-user logs:

* **GroupUser** [52]: "A group of users share a single identity and their search logs are
  recorded together to build user profile at the group level" (Sec. 4.2); "We define 100
  users as a group" (Sec. 4.3). :func:`fedrank.privacy.profile_kl.assign_groups` draws
  the groups, :func:`group_members` lists them and :func:`group_user_logs` merges each
  group's logs into one log, in time order, whose click history (and hence every
  click-history feature) is the group's.
* **CoverQuery** [1, 4]: the client sends each real query with ``m`` cover queries generated
  by an LDA topic model "on different topics with similar entropy" (Sec. 3.2); the server
  cannot tell them apart and records all of them ("recording cover queries into the search
  log on the server, which will distort the user interest profile", Sec. 3.2). "One query is
  randomly generated as the cover query" (Sec. 4.3): ``m = 1``. :func:`cover_queries_for`
  generates the covers with a fitted
  :class:`~fedrank.privacy.cover_queries.CoverQueryGenerator` and :func:`cover_query_logs`
  inserts them into the logs as click-less events.

Usage::

    groups = profile_kl.assign_groups(len(corpus.users), 100, rng)
    grouped = group_user_logs(corpus.users, groups)           # one UserLog per group
    covers = cover_queries_for(corpus.users, generator, 1, rng)
    covered = cover_query_logs(corpus.users, covers)          # one UserLog per user
    users = build_users(grouped, corpus.pool, corpus.vocab, candidates)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from fedrank.data.aol import PAD_ID, UserLog
from fedrank.errors import ConfigError, DataFormatError

__all__ = [
    "CoverGenerator",
    "cover_queries_for",
    "cover_query_logs",
    "group_members",
    "group_user_logs",
]

_INT32_MAX = int(np.iinfo(np.int32).max)


@runtime_checkable
class CoverGenerator(Protocol):
    """What :func:`cover_queries_for` needs: ``generate(query_ids, m, rng)`` returning
    ``(Q, m, Lq)`` cover token ids for ``(Q, Lq)`` real queries, as
    :meth:`fedrank.privacy.cover_queries.CoverQueryGenerator.generate` does."""

    def generate(self, query_ids: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        """``(Q, m, Lq)`` cover token ids (0 = padding) for every row of ``query_ids``."""
        ...


# ----------------------------------------------------------------------------------------
# Validation helpers
# ----------------------------------------------------------------------------------------


def _check_logs(logs: Sequence[UserLog]) -> None:
    for i, log in enumerate(logs):
        if not isinstance(log, UserLog):
            raise DataFormatError(
                f"logs[{i}] is a {type(log).__name__}, expected fedrank.data.aol.UserLog "
                f"(build them with fedrank.data.aol.build_corpus(...).users or user_logs)"
            )


def _check_rng(rng: object) -> None:
    if not isinstance(rng, np.random.Generator):
        raise ConfigError(
            f"rng must be a numpy.random.Generator (np.random.default_rng(seed)), got "
            f"{type(rng).__name__}"
        )


def _pad_width(queries: np.ndarray, width: int) -> np.ndarray:
    """``queries`` (``(..., Lq)``) padded with :data:`PAD_ID` to ``width`` columns."""
    extra = width - queries.shape[-1]
    if extra == 0:
        return queries
    pad = [(0, 0)] * (queries.ndim - 1) + [(0, extra)]
    return np.pad(queries, pad, constant_values=PAD_ID)


# ----------------------------------------------------------------------------------------
# GroupUser
# ----------------------------------------------------------------------------------------


def _check_groups(groups: object, n_logs: int | None) -> np.ndarray:
    """``groups`` as given, after checking it is an integer array of shape ``(n_logs,)``
    (any 1-D length when ``n_logs`` is None)."""
    if not isinstance(groups, np.ndarray) or groups.dtype.kind not in "iu":
        kind = getattr(groups, "dtype", type(groups).__name__)
        raise DataFormatError(
            f"groups must be a numpy integer array with one group id per user log, got {kind}; "
            f"use np.asarray(groups, dtype=np.int64) or fedrank.privacy.profile_kl.assign_groups"
        )
    if n_logs is None and groups.ndim != 1:
        raise DataFormatError(
            f"groups must be 1-D (one group id per user log), got shape {groups.shape}"
        )
    if n_logs is not None and groups.shape != (n_logs,):
        raise DataFormatError(
            f"groups must have shape ({n_logs},) (one group id per user log), got {groups.shape}"
        )
    return groups


def group_members(groups: np.ndarray) -> list[np.ndarray]:
    """The members of every group, in ascending group id order: ``out[k]`` holds the int64
    indices ``i`` (ascending) with ``groups[i]`` equal to the ``k``-th smallest group id,
    the same order as :func:`group_user_logs`' output."""
    groups = _check_groups(groups, None)
    if groups.size == 0:
        return []
    _, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
    order = np.argsort(inverse.reshape(-1), kind="stable").astype(np.int64)
    return np.split(order, np.cumsum(counts)[:-1])


def _merge(logs: Sequence[UserLog], user_id: int) -> UserLog:
    """One log with the events of ``logs`` in time order (ties: member order, then event
    order); each (member, session) pair gets its own session id."""
    width = max(log.queries.shape[1] for log in logs)
    time = np.concatenate([log.time for log in logs])
    order = np.argsort(time, kind="stable")

    # Dense session ids per member, shifted so that members never share one ...
    session = np.empty(time.shape[0], dtype=np.int64)
    start = offset = 0
    for log in logs:
        uniq, inverse = np.unique(log.session, return_inverse=True)
        session[start : start + log.n_events] = inverse.reshape(-1) + offset
        start += log.n_events
        offset += uniq.size
    # ... then renumbered 0, 1, ... by first event in the merged order.
    _, first, inverse = np.unique(session[order], return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)

    counts = np.concatenate([log.clicks_per_event for log in logs])[order]
    starts = np.concatenate(
        [log.click_ptr[:-1] + shift for log, shift in zip(logs, _click_offsets(logs), strict=True)]
    )[order]
    click_ptr = np.zeros(order.size + 1, dtype=np.int64)
    np.cumsum(counts, out=click_ptr[1:])
    within = np.arange(int(click_ptr[-1]), dtype=np.int64) - np.repeat(click_ptr[:-1], counts)
    docs = np.concatenate([log.click_docs for log in logs])
    return UserLog(
        user_id=user_id,
        event_id=np.concatenate([log.event_id for log in logs])[order],
        time=time[order],
        session=rank[inverse.reshape(-1)],
        split=np.concatenate([log.split for log in logs])[order],
        query_key=np.concatenate([log.query_key for log in logs])[order],
        queries=np.concatenate([_pad_width(log.queries, width) for log in logs])[order],
        click_ptr=click_ptr,
        click_docs=docs[np.repeat(starts, counts) + within],
    )


def _click_offsets(logs: Sequence[UserLog]) -> np.ndarray:
    """Start of each log's clicks in the concatenation of their ``click_docs``."""
    sizes = np.array([log.click_docs.size for log in logs], dtype=np.int64)
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)


def group_user_logs(logs: Sequence[UserLog], groups: np.ndarray) -> list[UserLog]:
    """The server's logs under GroupUser (Sec. 4.2): one :class:`UserLog` per group.

    Args:
        logs: the users' logs (e.g. ``corpus.users``).
        groups: ``(len(logs),)`` integer group id of every log (e.g.
            :func:`fedrank.privacy.profile_kl.assign_groups`).

    Returns:
        One log per distinct group id, in ascending id order (members:
        :func:`group_members`), with ``user_id`` = the group id. It holds every event of
        every member exactly once, in time order; events at the same time keep member order
        (ascending index in ``logs``), then each member's own order. Each member's own
        session becomes one session of the group (ids ``0, 1, ...`` by first event; no
        session spans two members). ``split`` and ``query_key`` (global across users) are
        kept, queries are padded to the widest member's width, clicks follow their events.

    Raises:
        DataFormatError: ``groups`` is not an integer array of shape ``(len(logs),)``, or an
            element of ``logs`` is not a :class:`UserLog`.
    """
    _check_logs(logs)
    groups = _check_groups(groups, len(logs))
    ids = np.unique(groups)
    return [
        _merge([logs[i] for i in members], int(gid))
        for gid, members in zip(ids, group_members(groups), strict=True)
    ]


# ----------------------------------------------------------------------------------------
# CoverQuery
# ----------------------------------------------------------------------------------------


def cover_queries_for(
    logs: Sequence[UserLog],
    generator: CoverGenerator,
    m: int,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """The ``m`` cover queries of every event of every user (Sec. 3.2), for
    :func:`cover_query_logs`.

    One ``generator.generate`` call on all users' queries (padded to the widest), split
    back per user and cut to each user's query width (covers only use the real query's
    non-padding positions, see :mod:`fedrank.privacy.cover_queries`).

    Args:
        logs: the users' logs.
        generator: a fitted cover generator, e.g.
            :class:`~fedrank.privacy.cover_queries.CoverQueryGenerator`.
        m: covers per query (the paper uses 1, Sec. 4.3).
        rng: all randomness of the covers.

    Returns:
        ``out[u]``: ``(E_u, m, Lq_u)`` int32 cover token ids of ``logs[u]``'s events.

    Raises:
        ConfigError: ``rng`` is not a Generator, ``generator`` has no ``generate``, or the
            generator rejects ``m``.
        DataFormatError: the generator returns a wrong shape.
    """
    _check_logs(logs)
    _check_rng(rng)
    if not isinstance(generator, CoverGenerator):
        raise ConfigError(
            f"generator must have generate(query_ids, m, rng) (e.g. a fitted "
            f"fedrank.privacy.cover_queries.CoverQueryGenerator), got {type(generator).__name__}"
        )
    if not logs:
        return []
    width = max(log.queries.shape[1] for log in logs)
    queries = np.concatenate([_pad_width(log.queries, width) for log in logs])
    covers = np.asarray(generator.generate(queries, m, rng))
    if covers.ndim != 3 or covers.shape[0] != queries.shape[0] or covers.shape[2] < width:
        raise DataFormatError(
            f"{type(generator).__name__}.generate returned shape {covers.shape} for "
            f"{queries.shape} queries; expected ({queries.shape[0]}, m, >= {width})"
        )
    bounds = np.cumsum([log.n_events for log in logs])[:-1]
    return [
        np.ascontiguousarray(part[:, :, : log.queries.shape[1]], dtype=np.int32)
        for log, part in zip(logs, np.split(covers, bounds), strict=True)
    ]


def _check_covers(logs: Sequence[UserLog], covers: Sequence[np.ndarray]) -> int:
    """Validate ``covers`` against ``logs``; return ``m``."""
    if len(covers) != len(logs):
        raise DataFormatError(
            f"covers has {len(covers)} entries for {len(logs)} user logs; pass one "
            f"(E_u, m, Lq) array per user (cover_queries_for builds them)"
        )
    m = None
    for u, (log, c) in enumerate(zip(logs, covers, strict=True)):
        if not isinstance(c, np.ndarray) or c.dtype.kind not in "iu":
            kind = getattr(c, "dtype", type(c).__name__)
            raise DataFormatError(f"covers[{u}] must be a numpy integer array, got {kind}")
        if c.ndim != 3 or c.shape[0] != log.n_events:
            raise DataFormatError(
                f"covers[{u}] must have shape ({log.n_events}, m, Lq) (the covers of each of "
                f"user {log.user_id}'s {log.n_events} events), got {c.shape}"
            )
        if m is None:
            m = c.shape[1]
        elif c.shape[1] != m:
            raise DataFormatError(
                f"covers[{u}] has {c.shape[1]} covers per query, covers[0] has {m}; every "
                f"user sends the same number m"
            )
        if c.size and (int(c.min()) < 0 or int(c.max()) > _INT32_MAX):
            raise DataFormatError(
                f"covers[{u}] token ids must lie in [0, 2**31) (0 = padding), got "
                f"{int(c.min())}..{int(c.max())}"
            )
    return 0 if m is None else int(m)


def cover_query_logs(logs: Sequence[UserLog], covers: Sequence[np.ndarray]) -> list[UserLog]:
    """The server's logs under CoverQuery (Sec. 3.2, 4.2): every real query event followed
    by its ``m`` cover queries, which the server records as queries of the same user.

    Each cover becomes an event right after its real event, with the same time, session and
    split, no click and ``event_id`` -1 (it is not an event of the log, so it has no list).
    Its ``query_key`` is new and unique per cover event: all cover keys
    lie above the largest ``query_key`` of any log, numbered in user, event, cover order.
    Covers are random words, so treating each as a distinct query is what the server would
    see in almost every case; as a consequence the samples that
    :func:`~fedrank.retrieval.candidates.build_users` builds for the real (clicked) events
    are unchanged, and covers only enter the users' word profiles (``vocab_ids`` and
    ``query_term_counts``).

    Args:
        logs: the users' logs.
        covers: ``covers[u]`` is ``(E_u, m, Lq')`` integer cover token ids of ``logs[u]``'s
            events (:func:`cover_queries_for`); queries and covers are padded to the wider
            of ``Lq`` and ``Lq'``.

    Returns:
        One log per user (same ``user_id``) with ``E_u * (1 + m)`` events: event ``i`` of
        ``logs[u]`` is at ``i * (1 + m)``, its covers at ``i * (1 + m) + 1 ... + m``.

    Raises:
        DataFormatError: ``covers`` does not match ``logs`` (count, shape, dtype, a
            different ``m`` per user, negative ids), or an element of ``logs`` is not a
            :class:`UserLog`.
    """
    _check_logs(logs)
    m = _check_covers(logs, covers)
    real_max = max((int(log.query_key.max()) for log in logs if log.n_events), default=-1)
    next_key = real_max + 1
    out = []
    for log, c in zip(logs, covers, strict=True):
        e = log.n_events
        width = max(log.queries.shape[1], c.shape[2])
        queries = np.concatenate(
            [_pad_width(log.queries, width)[:, None, :], _pad_width(c.astype(np.int32), width)],
            axis=1,
        )
        keys = np.empty((e, 1 + m), dtype=np.int64)
        keys[:, 0] = log.query_key
        keys[:, 1:] = next_key + np.arange(e * m, dtype=np.int64).reshape(e, m)
        next_key += e * m
        counts = np.zeros((e, 1 + m), dtype=np.int64)
        counts[:, 0] = log.clicks_per_event
        click_ptr = np.zeros(e * (1 + m) + 1, dtype=np.int64)
        np.cumsum(counts.reshape(-1), out=click_ptr[1:])
        out.append(
            UserLog(
                user_id=log.user_id,
                event_id=np.where(
                    np.arange(e * (1 + m)) % (1 + m) == 0, np.repeat(log.event_id, 1 + m), -1
                ),
                time=np.repeat(log.time, 1 + m),
                session=np.repeat(log.session, 1 + m),
                split=np.repeat(log.split, 1 + m),
                query_key=keys.reshape(-1),
                queries=queries.reshape(e * (1 + m), width),
                click_ptr=click_ptr,
                click_docs=log.click_docs.copy(),
            )
        )
    return out
