"""The time split of the AOL log (FedPS Sec. 4.1): the background period and the per-user
6:1:1 train / valid / test parts, the filter report, and what counts as the *past*."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedrank.data.aol.log import LOG_START, QueryLog
from fedrank.errors import ConfigError, DataFormatError

_logger = logging.getLogger(__name__)

#: End of the background period: the log's first five weeks (paper Sec. 4.1).
DEFAULT_BACKGROUND_END = LOG_START + np.timedelta64(35, "D")


#: Split codes stored in :attr:`TimeSplit.split` and :attr:`~fedrank.data.aol.corpus.UserLog.split`.
BACKGROUND, TRAIN, VALID, TEST = 0, 1, 2, 3


SPLIT_NAMES: tuple[str, ...] = ("background", "train", "valid", "test")


@dataclass(frozen=True, eq=False)
class FilterReport:
    """Which users :func:`split_by_time` kept and which it dropped, and why.

    Attributes:
        minimums: the required number of events per part, e.g. ``{"background": 1, ...}``.
        kept: ``(n_kept,)`` AnonIDs of the kept users.
        dropped: ``(n_dropped,)`` AnonIDs of the dropped users.
        dropped_counts: ``(n_dropped, 4)`` int64 events of every dropped user per part
            (columns as :data:`SPLIT_NAMES`).
    """

    minimums: Mapping[str, int]
    kept: np.ndarray
    dropped: np.ndarray
    dropped_counts: np.ndarray

    @property
    def n_kept(self) -> int:
        return int(self.kept.size)

    @property
    def n_dropped(self) -> int:
        return int(self.dropped.size)

    @property
    def _short(self) -> np.ndarray:
        need = np.array([self.minimums[p] for p in SPLIT_NAMES], dtype=np.int64)
        return self.dropped_counts < need

    @property
    def reasons(self) -> tuple[str, ...]:
        """One text per dropped user, e.g. ``"0 background events (< 1)"``."""
        short = self._short
        return tuple(
            ", ".join(
                f"{self.dropped_counts[u, p]} {SPLIT_NAMES[p]} events "
                f"(< {self.minimums[SPLIT_NAMES[p]]})"
                for p in np.flatnonzero(short[u])
            )
            for u in range(self.n_dropped)
        )

    def reason_counts(self) -> dict[str, int]:
        """Number of dropped users lacking each part (a user can lack several)."""
        per_part = self._short.sum(axis=0)
        return {p: int(n) for p, n in zip(SPLIT_NAMES, per_part, strict=True) if n}

    def __str__(self) -> str:
        total = self.n_kept + self.n_dropped
        text = f"kept {self.n_kept} of {total} users"
        if self.n_dropped:
            why = ", ".join(
                f"{n} with too few {part} events" for part, n in self.reason_counts().items()
            )
            text += f"; dropped {self.n_dropped} ({why}; minimums {dict(self.minimums)})"
        return text


@dataclass(frozen=True, eq=False)
class TimeSplit:
    """A :class:`QueryLog` cut into background / train / valid / test (FedPS Sec. 4.1).

    Attributes:
        log: the log of the kept users.
        split: ``(log.n_events,)`` int8 part of every event (:data:`BACKGROUND`,
            :data:`TRAIN`, :data:`VALID`, :data:`TEST`).
        background_end: events before this time are background.
        report: the users kept and dropped.
    """

    log: QueryLog
    split: np.ndarray
    background_end: np.datetime64
    report: FilterReport

    def __post_init__(self) -> None:
        if self.split.shape != (self.log.n_events,) or self.split.dtype != np.int8:
            raise DataFormatError(
                f"TimeSplit.split must be int8 of shape ({self.log.n_events},), got "
                f"{self.split.dtype} {self.split.shape}"
            )

    def mask(self, part: str) -> np.ndarray:
        """Boolean mask of the events of ``part`` (one of :data:`SPLIT_NAMES`)."""
        return self.split == _split_code(part)

    def counts(self) -> np.ndarray:
        """``(n_users, 4)`` int64 events per user and part (columns as :data:`SPLIT_NAMES`)."""
        return _part_counts(self.log.event_user, self.split, self.log.n_users)


def _split_code(part: str) -> int:
    try:
        return SPLIT_NAMES.index(part)
    except ValueError:
        raise ConfigError(f"unknown split {part!r}; use one of {SPLIT_NAMES}") from None


def _part_counts(event_user: np.ndarray, split: np.ndarray, n_users: int) -> np.ndarray:
    flat = event_user.astype(np.int64) * 4 + split
    return np.bincount(flat, minlength=n_users * 4).reshape(n_users, 4)


def split_by_time(
    log: QueryLog,
    *,
    background_end: np.datetime64 = DEFAULT_BACKGROUND_END,
    ratios: tuple[int, int, int] = (6, 1, 1),
    min_background: int = 1,
    min_train: int = 1,
    min_valid: int = 1,
    min_test: int = 1,
) -> TimeSplit:
    """Background = events before ``background_end``; each user's later events are split in
    time order by ``ratios`` into train / valid / test (FedPS Sec. 4.1: five weeks of
    background, then 6:1:1).

    With ``n`` later events a user gets the first ``floor(n * 6/8 + 1/2)`` as train, up to
    ``floor(n * 7/8 + 1/2)`` as valid and the rest as test, except that an event with the
    same time as the event before it takes that event's part, so every train event is
    strictly earlier than every valid event, and valid than test. Users with fewer than
    ``min_*`` events in some part are dropped; the :class:`FilterReport` lists them (and the
    count is logged).

    Raises:
        ConfigError: non-positive ratios or negative minimums.
    """
    if len(ratios) != 3 or min(ratios) <= 0:
        raise ConfigError(
            f"ratios must be three positive numbers (train, valid, test), got {ratios}"
        )
    minimums = {
        "background": min_background,
        "train": min_train,
        "valid": min_valid,
        "test": min_test,
    }
    if min(minimums.values()) < 0:
        raise ConfigError(f"minimum event counts must be >= 0, got {minimums}")
    end = np.datetime64(background_end, "s")
    split = np.zeros(log.n_events, dtype=np.int8)
    later = log.time >= end
    user = log.event_user.astype(np.int64)
    n_later = np.bincount(user[later], minlength=log.n_users)
    # Rank of every later event among its user's later events (events are time-sorted).
    later_idx = np.flatnonzero(later)
    first_later = np.searchsorted(later_idx, log.user_ptr[:-1])
    rank = np.arange(later_idx.size) - first_later[user[later_idx]]
    total = float(sum(ratios))
    b1 = np.floor(n_later * (ratios[0] / total) + 0.5).astype(np.int64)
    b2 = np.floor(n_later * ((ratios[0] + ratios[1]) / total) + 0.5).astype(np.int64)
    u_later = user[later_idx]
    part = np.where(rank < b1[u_later], TRAIN, np.where(rank < b2[u_later], VALID, TEST))
    # Events tied in time with their predecessor take its part.
    t = log.time[later_idx].astype(np.int64)
    run_start = np.ones(later_idx.size, dtype=bool)
    run_start[1:] = (np.diff(t) != 0) | (np.diff(u_later) != 0)
    run_first = np.flatnonzero(run_start)[np.cumsum(run_start) - 1]
    split[later_idx] = part[run_first]

    counts = _part_counts(log.event_user, split, log.n_users)
    need = np.array(list(minimums.values()), dtype=np.int64)
    short = counts < need
    keep = ~short.any(axis=1)
    report = FilterReport(
        minimums=minimums,
        kept=log.user_ids[keep],
        dropped=log.user_ids[~keep],
        dropped_counts=counts[~keep],
    )
    if report.n_dropped:
        _logger.info("%s: %s", log.source, report)
    if keep.all():
        return TimeSplit(log, split, end, report)
    kept = np.flatnonzero(keep)
    events = keep[log.event_user]
    return TimeSplit(log.select_users(kept), split[events], end, report)


def past_events(split: TimeSplit) -> np.ndarray:
    """``(n_events,)`` bool: the background and training events, the only part of the log
    that anything learned from it (segmenter, vocabulary, word vectors, topic model, BM25
    statistics) may be fitted on."""
    return split.split <= TRAIN


def past_documents(split: TimeSplit) -> np.ndarray:
    """``(n_urls,)`` bool: the documents clicked in a background or training event."""
    lg = split.log
    past = np.zeros(lg.urls.size, dtype=bool)
    past[lg.click_docs[past_events(split)[lg.click_event]]] = True
    return past


def indexed_documents(split: TimeSplit) -> np.ndarray:
    """``(n_urls,)`` bool: the documents clicked in any event of ``split.log`` -- the search
    engine's index (FedPS Sec. 4.1 ranks "all documents" of the log). A URL of the table
    whose clicks were all removed (a later stage of the continuous simulation) is not in it."""
    lg = split.log
    indexed = np.zeros(lg.urls.size, dtype=bool)
    indexed[lg.click_docs] = True
    return indexed
