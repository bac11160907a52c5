"""Loading the AOL click log into query events with their clicks (CSR) and sessions
(FedPS Sec. 4.1): :func:`load_aol`, :class:`QueryLog`, :func:`assign_sessions`."""

from __future__ import annotations

import gzip
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedrank.errors import ConfigError, DataFormatError

_logger = logging.getLogger(__name__)


#: Columns of the click log, in order (the file's first line).
HEADER: tuple[str, ...] = ("AnonID", "Query", "QueryTime", "ClickURL")


#: First day of the AOL log (2006-03-01 00:00:00); the background period starts here.
LOG_START = np.datetime64("2006-03-01T00:00:00", "s")


#: A gap of more than this many seconds between two events of a user starts a new session.
SESSION_GAP_SECONDS = 30 * 60


_TIME_LENGTH = len("2006-03-01 07:33:28")


class ClickRows:
    """Per-event clicks held as CSR offsets ``click_ptr`` (``n_events + 1``) into a click
    array: shared by :class:`QueryLog` and :class:`~fedrank.data.aol.corpus.UserLog`."""

    click_ptr: np.ndarray

    @property
    def n_events(self) -> int:
        return int(self.click_ptr.shape[0]) - 1

    @property
    def clicks_per_event(self) -> np.ndarray:
        """``(n_events,)`` int64 number of clicked URLs of every event."""
        return np.diff(self.click_ptr)

    @property
    def click_event(self) -> np.ndarray:
        """``(n_clicks,)`` int64 event index of every click."""
        return np.repeat(np.arange(self.n_events, dtype=np.int64), self.clicks_per_event)


@dataclass(frozen=True, eq=False)
class QueryLog(ClickRows):
    """Query events of an AOL-style click log, grouped per user (FedPS Sec. 3.1, 4.1).

    An event is one ``(user, query, time)``; events are sorted by user index, then time,
    then the file position of their first row. Users are sorted by AnonID.

    Attributes:
        source: the file the log was read from.
        user_ids: ``(n_users,)`` int64 AnonIDs, ascending.
        user_rows: ``(n_users,)`` int64 rows of the file of every user.
        user_ptr: ``(n_users + 1,)`` int64; user ``u`` owns events
            ``[user_ptr[u], user_ptr[u + 1])``.
        event_user: ``(n_events,)`` int32 user index of every event.
        time: ``(n_events,)`` ``datetime64[s]`` query times.
        query: ``(n_events,)`` int32 index into ``queries``.
        queries: ``(n_queries,)`` str array of distinct raw query strings, sorted.
        click_ptr: ``(n_events + 1,)`` int64; event ``e`` clicked
            ``click_docs[click_ptr[e]:click_ptr[e + 1]]`` (empty for an event without click).
        click_docs: ``(n_clicks,)`` int32 index into ``urls``, ascending within an event.
        urls: ``(n_urls,)`` str array of distinct clicked URLs, sorted; the document ids of
            :class:`~fedrank.data.aol.corpus.DocumentPool` built from this log are indices into it.
        session: ``(n_events,)`` int64 session id (0, 1, ... in event order), see
            :func:`assign_sessions`.
    """

    source: str
    user_ids: np.ndarray
    user_rows: np.ndarray
    user_ptr: np.ndarray
    event_user: np.ndarray
    time: np.ndarray
    query: np.ndarray
    queries: np.ndarray
    click_ptr: np.ndarray
    click_docs: np.ndarray
    urls: np.ndarray
    session: np.ndarray

    def __post_init__(self) -> None:
        n_users, n_events = self.user_ids.size, self.time.size
        expect = {
            "user_rows": (n_users,),
            "user_ptr": (n_users + 1,),
            "event_user": (n_events,),
            "query": (n_events,),
            "click_ptr": (n_events + 1,),
            "session": (n_events,),
        }
        for name, shape in expect.items():
            if getattr(self, name).shape != shape:
                raise DataFormatError(
                    f"QueryLog {self.source!r}: {name} must have shape {shape} "
                    f"(n_users={n_users}, n_events={n_events}), got {getattr(self, name).shape}"
                )
        if self.time.dtype != np.dtype("datetime64[s]"):
            raise DataFormatError(
                f"QueryLog {self.source!r}: time must be datetime64[s], got {self.time.dtype}"
            )
        if int(self.click_ptr[-1]) != self.click_docs.size or int(self.user_ptr[-1]) != n_events:
            raise DataFormatError(
                f"QueryLog {self.source!r}: click_ptr must end at n_clicks={self.click_docs.size} "
                f"and user_ptr at n_events={n_events}"
            )

    @property
    def n_users(self) -> int:
        return int(self.user_ids.size)

    @property
    def n_clicks(self) -> int:
        return int(self.click_docs.size)

    @property
    def n_rows(self) -> int:
        """Rows of the file these users had (one per click, plus rows without a click)."""
        return int(self.user_rows.sum())

    @property
    def n_sessions(self) -> int:
        return int(self.session[-1]) + 1 if self.session.size else 0

    def select_users(self, users: np.ndarray | Sequence[int]) -> QueryLog:
        """The log of the users with the given indices (not AnonIDs), in ascending order.

        ``queries`` and ``urls`` are reduced to the ones these users have, so document ids
        change; sessions are renumbered.
        """
        idx = np.unique(np.asarray(users, dtype=np.int64))
        if idx.size and (idx[0] < 0 or idx[-1] >= self.n_users):
            raise ConfigError(
                f"user indices must be in 0..{self.n_users - 1}, got {idx[0]}..{idx[-1]}"
            )
        keep = np.zeros(self.n_users, dtype=bool)
        keep[idx] = True
        events = keep[self.event_user]
        sizes = np.diff(self.user_ptr)[idx]
        counts = self.clicks_per_event[events]
        docs = self.click_docs[np.repeat(events, self.clicks_per_event)]
        urls_used, docs = np.unique(docs, return_inverse=True)
        queries_used, query = np.unique(self.query[events], return_inverse=True)
        remap = np.full(self.n_users, -1, dtype=np.int32)
        remap[idx] = np.arange(idx.size, dtype=np.int32)
        user = remap[self.event_user[events]]
        time = self.time[events]
        return QueryLog(
            source=self.source,
            user_ids=self.user_ids[idx],
            user_rows=self.user_rows[idx],
            user_ptr=csr_offsets(sizes),
            event_user=user,
            time=time,
            query=query.astype(np.int32),
            queries=self.queries[queries_used],
            click_ptr=csr_offsets(counts),
            click_docs=docs.astype(np.int32),
            urls=self.urls[urls_used],
            session=assign_sessions(user, time),
        )


def csr_offsets(sizes: np.ndarray) -> np.ndarray:
    """``(n + 1,)`` int64 CSR offsets of rows with ``sizes`` items: ``[0, cumsum(sizes)]``."""
    ptr = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=ptr[1:])
    return ptr


def assign_sessions(
    event_user: np.ndarray, time: np.ndarray, gap_seconds: int = SESSION_GAP_SECONDS
) -> np.ndarray:
    """Session id of every event: a new session starts at a user's first event and after
    more than ``gap_seconds`` (30 minutes) without an event (FedPS Sec. 4.1).

    Events must be sorted by user, then time (as in :class:`QueryLog`). A gap of exactly
    ``gap_seconds`` stays in the session. Returns ``(n_events,)`` int64 ids 0, 1, ...
    """
    if gap_seconds <= 0:
        raise ConfigError(f"gap_seconds must be positive, got {gap_seconds}")
    user = np.asarray(event_user)
    t = np.asarray(time).astype("datetime64[s]").astype(np.int64)
    if user.shape != t.shape or user.ndim != 1:
        raise DataFormatError(
            f"event_user and time must be 1-D of equal length, got {user.shape} and {t.shape}"
        )
    if t.size == 0:
        return np.zeros(0, dtype=np.int64)
    new_user = np.diff(user) != 0
    if np.any(np.diff(user) < 0) or np.any((np.diff(t) < 0) & ~new_user):
        raise DataFormatError("events must be sorted by user, then time, to be split into sessions")
    start = np.empty(t.size, dtype=bool)
    start[0] = True
    start[1:] = new_user | (np.diff(t) > gap_seconds)
    return np.cumsum(start, dtype=np.int64) - 1


def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise DataFormatError(
                f"{path}: corrupt gzip stream ({exc}); re-download the file"
            ) from exc
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DataFormatError(
            f"{path}:{line}: not valid UTF-8 (byte {raw[exc.start]:#04x}); the log must be "
            "UTF-8 text"
        ) from exc


def _first_bad_time(values: Sequence[str]) -> int:
    """Index of the first value numpy cannot parse as a time (-1 if none)."""
    for i, v in enumerate(values):
        try:
            np.datetime64(v, "s")
        except ValueError:
            return i
    return -1


def load_aol(
    path: str | os.PathLike[str],
    users: int | None = None,
    rng: np.random.Generator | None = None,
) -> QueryLog:
    """Read an AOL click log (TSV, optionally gzipped) into a :class:`QueryLog`.

    The file starts with the header ``AnonID\\tQuery\\tQueryTime\\tClickURL`` and has one
    row per click; rows with the same AnonID, Query and QueryTime are one query event.
    ``QueryTime`` is ``YYYY-MM-DD HH:MM:SS``. An empty ``ClickURL`` gives an event without
    click (kept); blank lines are skipped; CRLF line endings are accepted.

    Args:
        path: the ``.tsv`` or ``.tsv.gz`` file.
        users: keep only this many users; ``None`` keeps all. Without ``rng`` these are the
            ``users`` smallest AnonIDs (deterministic, and a prefix of the full ordering);
            with ``rng`` they are drawn uniformly without replacement.
        rng: random generator for drawing the users (only used with ``users``).

    Raises:
        DataFormatError: ``"{file}:{line}: ..."`` for a wrong header, a line without exactly
            four tab-separated fields, an AnonID that is not a non-negative integer (ASCII
            digits), an empty Query, or a QueryTime not of the form above; or a file that is
            not gzip/UTF-8 text or has no rows.
        ConfigError: ``users`` is not positive, or more than the log has.
    """
    path = Path(path)
    if users is not None and users <= 0:
        raise ConfigError(f"users must be a positive number of users or None (all), got {users}")
    text = _read_text(path)
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines or lines[0].split("\t") != list(HEADER):
        got = lines[0][:80] if lines else "an empty file"
        raise DataFormatError(
            f"{path}:1: expected the header {chr(9).join(HEADER)!r} (tab-separated), got {got!r}"
        )
    line_no = np.arange(2, len(lines) + 1, dtype=np.int64)
    body = lines[1:]
    if "" in body:
        keep = np.fromiter((bool(x) for x in body), dtype=bool, count=len(body))
        line_no = line_no[keep]
        body = [x for x in body if x]
    if not body:
        raise DataFormatError(f"{path}: no rows after the header; the log is empty")
    tabs = np.fromiter((x.count("\t") for x in body), dtype=np.int64, count=len(body))
    bad = np.flatnonzero(tabs != 3)
    if bad.size:
        i = int(bad[0])
        raise DataFormatError(
            f"{path}:{line_no[i]}: expected 4 tab-separated fields (AnonID, Query, QueryTime, "
            f"ClickURL), found {tabs[i] + 1}: {body[i][:80]!r}"
        )
    flat = "\t".join(body).split("\t")
    anon_s, query_s, time_s, url_s = flat[0::4], flat[1::4], flat[2::4], flat[3::4]
    del flat
    i = next((i for i, a in enumerate(anon_s) if not (a.isascii() and a.isdigit())), -1)
    if i < 0:
        i = next((i for i, a in enumerate(anon_s) if len(a) > 18), -1)
    if i >= 0:
        raise DataFormatError(
            f"{path}:{line_no[i]}: AnonID {anon_s[i]!r} is not a non-negative integer of at "
            "most 18 digits"
        )
    anon = np.array(anon_s, dtype=np.int64)

    all_ids, all_rows = np.unique(anon, return_counts=True)
    if users is not None and users > all_ids.size:
        raise ConfigError(
            f"{path} has {all_ids.size} users, fewer than the {users} asked for: ask for at "
            f"most {all_ids.size}, or for all of them"
        )
    chosen = all_ids
    if users is not None and users < all_ids.size:
        if rng is None:
            chosen = all_ids[:users]
        else:
            chosen = np.sort(rng.choice(all_ids, size=users, replace=False))
        rows = np.flatnonzero(np.isin(anon, chosen))
        anon = anon[rows]
        line_no = line_no[rows]
        query_s = [query_s[i] for i in rows]
        time_s = [time_s[i] for i in rows]
        url_s = [url_s[i] for i in rows]

    empty_query = [i for i, q in enumerate(query_s) if not q]
    if empty_query:
        i = empty_query[0]
        raise DataFormatError(f"{path}:{line_no[i]}: Query is empty; every row needs query text")
    lengths = np.fromiter(map(len, time_s), dtype=np.int64, count=len(time_s))
    bad = np.flatnonzero(lengths != _TIME_LENGTH)
    i = -1
    if bad.size:
        i = int(bad[0])
    else:
        try:
            time = np.array(time_s, dtype="datetime64[s]")
        except ValueError:
            i = _first_bad_time(time_s)
    if i >= 0:
        raise DataFormatError(
            f"{path}:{line_no[i]}: QueryTime {time_s[i]!r} is not a time of the form "
            "'YYYY-MM-DD HH:MM:SS'"
        )

    user_ids, user = np.unique(anon, return_inverse=True)
    qid, queries = _intern(query_s)
    uid, urls = _intern(url_s)
    has_click = np.array([bool(u) for u in url_s], dtype=bool)
    if not has_click.all():
        # The empty string sorts first among the interned URLs: drop it from the table.
        uid = uid - 1
        urls = urls[1:]
    t = time.astype(np.int64)

    # Group rows into events, then order events by (user, time, first row in the file).
    order = np.lexsort((np.arange(anon.size), qid, t, user))
    su, st, sq = user[order], t[order], qid[order]
    first = np.ones(order.size, dtype=bool)
    first[1:] = (np.diff(su) != 0) | (np.diff(st) != 0) | (np.diff(sq) != 0)
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    ev_order = np.lexsort((order[starts], st[starts], su[starts]))
    rank = np.empty(ev_order.size, dtype=np.int64)
    rank[ev_order] = np.arange(ev_order.size)
    row_event = np.empty(order.size, dtype=np.int64)
    row_event[order] = rank[group]
    ev_rows = starts[ev_order]
    event_user = su[ev_rows].astype(np.int32)
    event_time = st[ev_rows].astype("datetime64[s]")
    event_query = sq[ev_rows].astype(np.int32)

    ce, cd = row_event[has_click], uid[has_click]
    corder = np.lexsort((cd, ce))
    ce, cd = ce[corder], cd[corder]
    distinct = np.ones(ce.size, dtype=bool)
    distinct[1:] = (np.diff(ce) != 0) | (np.diff(cd) != 0)
    ce, cd = ce[distinct], cd[distinct]
    n_events = ev_rows.size
    user_rows = all_rows[np.searchsorted(all_ids, user_ids)]
    result = QueryLog(
        source=str(path),
        user_ids=user_ids.astype(np.int64),
        user_rows=user_rows.astype(np.int64),
        user_ptr=csr_offsets(np.bincount(event_user, minlength=user_ids.size)),
        event_user=event_user,
        time=event_time,
        query=event_query,
        queries=queries,
        click_ptr=csr_offsets(np.bincount(ce, minlength=n_events)),
        click_docs=cd.astype(np.int32),
        urls=urls,
        session=assign_sessions(event_user, event_time),
    )
    n_no_click = int(np.count_nonzero(result.clicks_per_event == 0))
    if n_no_click:
        _logger.info("%s: %d query events have no click (empty ClickURL); kept", path, n_no_click)
    return result


def _intern(values: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Ids of ``values`` in the sorted table of their distinct values, and that table."""
    ids: dict[str, int] = {}
    first = np.fromiter(
        (ids.setdefault(v, len(ids)) for v in values), dtype=np.int64, count=len(values)
    )
    table = np.array(list(ids), dtype=str)
    order = np.argsort(table, kind="stable")
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    return rank[first], table[order]
