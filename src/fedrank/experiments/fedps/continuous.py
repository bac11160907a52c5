"""Continuous model updating: FedPS Sec. 5.4 and Figure 4.

"We use the data of AOL from 3rd Apr to 31st May ... cut all log into 8 stages with one
week as a stage. First, the personalized search model is initialized with the first week
data. Then, after each week, we apply the currently available logs to retrain the model from
scratch, and evaluate the trained model on the data of the next stage. We consider 10% of
the clients offline ... The improvement on MAP of PEPS and our two models over the original
ranking are displayed in Figure 4." (Sec. 5.4)

Weeks (:func:`stage_bounds`): week ``w`` (1-based) is ``[start + 7(w-1) days, start + 7w
days)``; the last week (``w = n_stages``) runs to the end of the log. With the defaults
(``start`` = 2006-04-03, 8 stages) on the shared AOL sample (events from 2006-03-01 00:01:44
to 2006-05-31 23:59:39) the weeks are Apr 3-9, 10-16, 17-23, Apr 24-30, May 1-7, 8-14, 15-21
and May 22-31 (ten days: the paper's "to 31st May" leaves three days after eight full
weeks).

Stage ``k`` (1 .. ``n_stages - 1``; :func:`stage_split`): weeks ``1..k`` are the available
logs (per user, the last ``valid_fraction`` of them in time order validate the model
selection, the rest train), week ``k + 1`` is the test set, events before ``start`` stay
background (history for the click features and the user profile), and later events are
dropped. :func:`stage_data` builds the :class:`~fedrank.experiments.fedps.data.FedPSData` of a
stage and :func:`run_continuous` trains every mode from scratch on every stage and reports
the MAP improvement over the original ranking (Figure 4's y-axis); :class:`ContinuousResult`
holds the numbers, its JSON and the Figure-4-style plot.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from fedrank.data.aol import (
    BACKGROUND,
    TEST,
    TRAIN,
    VALID,
    QueryLog,
    TimeSplit,
    assign_sessions,
    csr_offsets,
)
from fedrank.errors import ConfigError, DataFormatError
from fedrank.experiments.fedps.data import FedPSData, prepare_split
from fedrank.experiments.fedps.run import FedPSResult, run_fedps
from fedrank.experiments.fedps.settings import FedPSSettings
from fedrank.experiments.fedps.training import Progress, report_progress

__all__ = [
    "BASELINE_MODE",
    "DEFAULT_MODES",
    "DEFAULT_START",
    "DEFAULT_VALID_FRACTION",
    "MODE_LABELS",
    "N_STAGES",
    "WEEK",
    "ContinuousResult",
    "StageBounds",
    "StageResult",
    "run_continuous",
    "stage_bounds",
    "stage_data",
    "stage_split",
]

#: First day of the simulated period (FedPS Sec. 5.4: "from 3rd Apr to 31st May").
#: :func:`fedrank.data.aol.split_by_time`'s background instead ends on 2006-04-05
#: (:data:`~fedrank.data.aol.DEFAULT_BACKGROUND_END`, five weeks after the log's start).
DEFAULT_START = np.datetime64("2006-04-03T00:00:00", "s")
#: Stages (weeks) of the simulation (Sec. 5.4: "8 stages with one week as a stage").
N_STAGES = 8
#: Length of a stage.
WEEK = np.timedelta64(7, "D")
#: Share of every user's available events (latest first) used for validation: one day in
#: seven, the ratio of :func:`~fedrank.data.aol.split_by_time`'s 6:1 train/valid parts.
DEFAULT_VALID_FRACTION = 1 / 7
#: The modes of Figure 4: the baseline and PEPS (central), FedPSFlat, FedPSProxy.
DEFAULT_MODES: tuple[str, ...] = ("original", "central", "flat", "proxy")
#: The mode every improvement is measured against (Figure 4: "over the original ranking").
BASELINE_MODE = "original"
#: Legend labels of the modes (paper names).
MODE_LABELS: Mapping[str, str] = {
    "original": "Original Rank",
    "pclick": "P-Click",
    "knrm": "K-NRM",
    "central": "PEPS",
    "flat": "FedPSFlat",
    "proxy": "FedPSProxy",
    "coverquery": "CoverQuery",
    "groupuser": "GroupUser",
}


# ----------------------------------------------------------------------------------------
# Stages
# ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StageBounds:
    """The time windows of stage ``stage`` (FedPS Sec. 5.4).

    Attributes:
        stage: ``k`` in ``1 .. n_stages - 1``.
        start: start of week 1; earlier events are background.
        test_start: start of week ``k + 1``; events in ``[start, test_start)`` are the
            available (train / valid) logs.
        test_end: end of week ``k + 1`` (exclusive); ``None`` when it is the last week,
            which runs to the end of the log. Events at or after it are not used.
    """

    stage: int
    start: np.datetime64
    test_start: np.datetime64
    test_end: np.datetime64 | None

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "train_start": str(self.start),
            "test_start": str(self.test_start),
            "test_end": None if self.test_end is None else str(self.test_end),
        }


def _check_n_stages(n_stages: int) -> int:
    try:
        n = operator.index(n_stages)
    except TypeError:
        raise ConfigError(f"n_stages must be an integer, got {n_stages!r}") from None
    if n < 2:
        raise ConfigError(
            f"n_stages must be >= 2 (one week to train on and one to test on), got {n}"
        )
    return n


def _check_stage(stage: int, n_stages: int) -> int:
    n = _check_n_stages(n_stages)
    try:
        k = operator.index(stage)
    except TypeError:
        raise ConfigError(f"stage must be an integer in 1..{n - 1}, got {stage!r}") from None
    if isinstance(stage, bool) or not 1 <= k <= n - 1:
        raise ConfigError(
            f"stage must be in 1..{n - 1} (stage k trains on weeks 1..k and tests on week "
            f"k + 1 of {n}), got {stage!r}"
        )
    return k


def _as_time(start: np.datetime64) -> np.datetime64:
    try:
        t = np.datetime64(start, "s")
    except (TypeError, ValueError):
        raise ConfigError(
            f"start must be a time such as np.datetime64('2006-04-03'), got {start!r}"
        ) from None
    if np.isnat(t):
        raise ConfigError("start must be a time, got NaT")
    return t


def stage_bounds(
    stage: int, *, start: np.datetime64 = DEFAULT_START, n_stages: int = N_STAGES
) -> StageBounds:
    """The windows of stage ``stage``: train from ``start``, test on week ``stage + 1``
    (the last week open-ended), see :class:`StageBounds`.

    Raises:
        ConfigError: ``stage`` not in ``1..n_stages - 1``, ``n_stages < 2`` or a ``start``
            that is not a time.
    """
    k = _check_stage(stage, n_stages)
    t0 = _as_time(start)
    test_end = None if k + 1 == n_stages else t0 + (k + 1) * WEEK
    return StageBounds(k, t0, t0 + k * WEEK, test_end)


def _drop_events(log: QueryLog, keep: np.ndarray) -> QueryLog:
    """``log`` with only the events where ``keep`` is True. Users, the ``queries`` and
    ``urls`` tables (so query and document ids) and ``user_rows`` (rows of the file) stay;
    sessions are renumbered, which leaves the session partition of a per-user time-prefix
    unchanged."""
    if keep.all():
        return log
    user = log.event_user[keep]
    time_ = log.time[keep]
    clicks = log.clicks_per_event
    return QueryLog(
        source=log.source,
        user_ids=log.user_ids,
        user_rows=log.user_rows,
        user_ptr=csr_offsets(np.bincount(user, minlength=log.n_users)),
        event_user=user,
        time=time_,
        query=log.query[keep],
        queries=log.queries,
        click_ptr=csr_offsets(clicks[keep]),
        click_docs=log.click_docs[np.repeat(keep, clicks)],
        urls=log.urls,
        session=assign_sessions(user, time_),
    )


def _train_valid(
    event_user: np.ndarray, t: np.ndarray, n_users: int, valid_fraction: float
) -> np.ndarray:
    """TRAIN / VALID codes of events sorted by user, then time: a user with ``n`` events
    gets the first ``floor(n (1 - valid_fraction) + 1/2)`` as TRAIN and the rest as VALID,
    except that an event with the same time as the one before it takes that event's code
    (the rule of :func:`~fedrank.data.aol.split_by_time`), so every VALID event of a user is
    strictly later than every TRAIN event."""
    user = event_user.astype(np.int64)
    n = np.bincount(user, minlength=n_users)
    first = csr_offsets(n)[:-1]
    rank = np.arange(user.size) - first[user]
    n_train = np.floor(n * (1.0 - valid_fraction) + 0.5).astype(np.int64)
    code = np.where(rank < n_train[user], TRAIN, VALID).astype(np.int8)
    ts = t.astype(np.int64)
    run_start = np.ones(user.size, dtype=bool)
    run_start[1:] = (np.diff(ts) != 0) | (np.diff(user) != 0)
    run_first = np.flatnonzero(run_start)[np.cumsum(run_start) - 1]
    return code[run_first]


def stage_split(
    split: TimeSplit,
    stage: int,
    *,
    start: np.datetime64 = DEFAULT_START,
    n_stages: int = N_STAGES,
    valid_fraction: float = DEFAULT_VALID_FRACTION,
) -> TimeSplit:
    """The events of ``split.log`` labelled for stage ``stage`` of the simulation (FedPS
    Sec. 5.4; windows from :func:`stage_bounds`).

    * events before ``start`` are :data:`~fedrank.data.aol.BACKGROUND` (with the defaults,
      2006-03-01 to 2006-04-02; ``split_by_time``'s background ends two days later, on
      2006-04-05, so the events of 3-4 April are background there and week-1 data here);
    * events of weeks ``1..stage`` (``[start, test_start)``) are the available logs: per
      user, in time order, the first ``floor(n (1 - valid_fraction) + 1/2)`` of the user's
      ``n`` such events are :data:`~fedrank.data.aol.TRAIN` and the rest
      :data:`~fedrank.data.aol.VALID`; an event tied in time with the one before it takes
      its code, so ties stay together and a user with three or fewer events (defaults) has
      no validation event;
    * events of week ``stage + 1`` are :data:`~fedrank.data.aol.TEST`;
    * later events are **dropped** from the log.

    Dropping (rather than giving later events a code no sample builder selects) keeps the
    :class:`~fedrank.data.aol.TimeSplit` contract of codes 0..3, which other code relies on
    (``TimeSplit.counts`` would count a negative code as the previous user's test events,
    the past is ``split <= TRAIN``). Nothing else changes: the users (none
    is dropped, even without any event in a stage window), their order, the query and URL
    tables (so document ids and a :class:`~fedrank.data.aol.DocumentPool` built for
    ``split.log`` stay valid) and each user's event order; every user keeps a time-prefix of
    their events, so event ``i`` of a user is the same event as in ``split.log``. The
    result's ``background_end`` is ``start`` and its ``report`` is ``split.report`` (the
    users were chosen by the original split).

    Raises:
        ConfigError: a bad ``stage`` / ``n_stages`` / ``start`` (see :func:`stage_bounds`)
            or ``valid_fraction`` not in ``[0, 1)``.
    """
    bounds = stage_bounds(stage, start=start, n_stages=n_stages)
    vf = float(valid_fraction)
    if not 0.0 <= vf < 1.0:
        raise ConfigError(
            f"valid_fraction must be in [0, 1) (the share of each user's available events "
            f"used for validation), got {valid_fraction!r}"
        )
    log = split.log
    t = log.time
    available = (t >= bounds.start) & (t < bounds.test_start)
    later = np.zeros(t.size, dtype=bool) if bounds.test_end is None else t >= bounds.test_end
    code = np.full(t.size, BACKGROUND, dtype=np.int8)
    code[available] = _train_valid(log.event_user[available], t[available], log.n_users, vf)
    code[(t >= bounds.test_start) & ~later] = TEST
    keep = ~later
    return TimeSplit(_drop_events(log, keep), code[keep], bounds.start, split.report)


def stage_data(
    data: FedPSData,
    stage: int,
    *,
    seed: int = 0,
    start: np.datetime64 = DEFAULT_START,
    n_stages: int = N_STAGES,
    valid_fraction: float = DEFAULT_VALID_FRACTION,
    word2vec_epochs: int = 5,
) -> FedPSData:
    """The :class:`~fedrank.experiments.fedps.data.FedPSData` of stage ``stage`` (FedPS
    Sec. 5.4), built from scratch on :func:`stage_split` of ``data.corpus.split`` by
    :func:`~fedrank.experiments.fedps.data.prepare_split` with the data seed ``seed``: the
    segmenter, document texts, vocabulary, BM25 statistics and word vectors are fitted on
    the stage's past only (events before ``start`` and the stage's training events), and
    the search engine indexes the documents clicked up to the end of the test week. Nothing
    after the stage's test week is used anywhere.

    The users are exactly ``data.users``'s (``data.select(n)`` is respected), in the same
    order, each with the samples of the stage: a user without a test query in week
    ``stage + 1`` still trains, and one without any event in weeks ``1..stage`` keeps 0
    training queries (FedAvg weight 0).

    Raises:
        ConfigError: bad stage arguments (see :func:`stage_split`).
        DataFormatError: a user of ``data.users`` missing from ``data.corpus.split``.
    """
    start_time = time.perf_counter()
    corpus = data.corpus
    split = stage_split(
        corpus.split, stage, start=start, n_stages=n_stages, valid_fraction=valid_fraction
    )
    built = prepare_split(
        split, seed=seed, dim=int(data.word_vectors.shape[1]), word2vec_epochs=word2vec_epochs
    )
    index = {ul.user_id: i for i, ul in enumerate(built.corpus.users)}
    missing = [u.user_id for u in corpus.users if u.user_id not in index]
    if missing:
        raise DataFormatError(
            f"users {missing[:5]} of the FedPSData are not in its corpus.split log; build the "
            "data with prepare_aol (or keep corpus.users a subset of corpus.split.log)"
        )
    chosen = [index[u.user_id] for u in corpus.users]
    return replace(
        built,
        corpus=replace(built.corpus, users=tuple(built.corpus.users[i] for i in chosen)),
        users=[built.users[i] for i in chosen],
        timings={**built.timings, "stage": time.perf_counter() - start_time},
    )


# ----------------------------------------------------------------------------------------
# The simulation
# ----------------------------------------------------------------------------------------


def _improvement(value: float, baseline: float) -> float:
    """Relative improvement in percent (NaN when the baseline is 0 or NaN)."""
    if not np.isfinite(baseline) or baseline == 0.0:
        return float("nan")
    return float((value - baseline) / baseline * 100.0)


@dataclass
class StageResult:
    """Every mode's outcome on one stage.

    Attributes:
        bounds: the stage's windows.
        data: :meth:`FedPSData.summary` of the stage data (train / valid / test queries).
        results: mode -> :class:`~fedrank.experiments.fedps.run.FedPSResult`.
    """

    bounds: StageBounds
    data: dict[str, float | int]
    results: dict[str, FedPSResult]

    @property
    def stage(self) -> int:
        return self.bounds.stage

    def improvement(self, mode: str, metric: str = "MAP") -> float:
        """``(metric(mode) - metric(original)) / metric(original)`` in percent."""
        base = self.results[BASELINE_MODE].metrics[metric]
        return _improvement(self.results[mode].metrics[metric], base)

    def to_json(self) -> dict[str, Any]:
        modes = {}
        for mode, r in self.results.items():
            modes[mode] = {
                **r.metrics,
                "MAP_improvement_pct": self.improvement(mode),
                "best_round": r.best_round,
                "steps": r.steps,
                "kl_divergence": r.kl_divergence,
                "wall_seconds": r.wall_seconds,
            }
        return {**self.bounds.to_json(), "data": dict(self.data), "modes": modes}


@dataclass
class ContinuousResult:
    """The outcome of :func:`run_continuous` (FedPS Sec. 5.4, Figure 4).

    Attributes:
        stages: one :class:`StageResult` per simulated stage, in stage order.
        settings: mode -> the settings it ran with (every stage alike).
        start, n_stages, valid_fraction, seed: the stage arguments (see :func:`stage_data`).
    """

    stages: list[StageResult]
    settings: dict[str, FedPSSettings]
    start: np.datetime64
    n_stages: int
    valid_fraction: float
    seed: int

    @property
    def modes(self) -> tuple[str, ...]:
        return tuple(self.settings)

    @property
    def stage_numbers(self) -> np.ndarray:
        return np.array([s.stage for s in self.stages], dtype=np.int64)

    def metric(self, mode: str, name: str = "MAP") -> np.ndarray:
        """``(n_stages_run,)`` float64 ``name`` (MAP, MRR or P@1) of ``mode`` per stage."""
        self._check_mode(mode)
        return np.array([s.results[mode].metrics[name] for s in self.stages], dtype=np.float64)

    def improvement(self, mode: str, metric: str = "MAP") -> np.ndarray:
        """``(n_stages_run,)`` float64 improvement of ``mode`` over the original ranking in
        percent, per stage (Figure 4's y-axis for ``metric="MAP"``)."""
        self._check_mode(mode)
        return np.array([s.improvement(mode, metric) for s in self.stages], dtype=np.float64)

    def _check_mode(self, mode: str) -> None:
        if mode not in self.settings:
            raise ConfigError(f"mode {mode!r} was not run; this result has {self.modes}")

    def to_json(self) -> dict[str, Any]:
        """``{"start", "n_stages", "valid_fraction", "seed", "modes", "settings",
        "stages"}``: ``stages`` holds one row per stage with its windows, data counts and,
        per mode, MAP / MRR / P@1, ``MAP_improvement_pct``, best round, steps, KL divergence
        and wall time."""
        return {
            "start": str(self.start),
            "n_stages": self.n_stages,
            "valid_fraction": self.valid_fraction,
            "seed": self.seed,
            "modes": list(self.modes),
            "settings": {m: asdict(s) for m, s in self.settings.items()},
            "stages": [s.to_json() for s in self.stages],
        }

    def plot(self, path: str | Path) -> Path:
        """A Figure-4-style PNG at ``path``: x = stage, y = MAP improvement over the original
        ranking in percent, one line per mode other than the baseline. Renders with the Agg
        canvas (no display, no global backend change). Returns the path."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        path = Path(path)
        fig = Figure(figsize=(6, 4))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        x = self.stage_numbers
        markers = "osd^vx*+"
        for i, mode in enumerate(m for m in self.modes if m != BASELINE_MODE):
            ax.plot(
                x,
                self.improvement(mode),
                marker=markers[i % len(markers)],
                label=MODE_LABELS.get(mode, mode),
            )
        ax.axhline(0.0, color="grey", lw=0.5)
        ax.set_xticks(x)
        ax.set_xlabel("stage k (trained on weeks 1..k, tested on week k+1)")
        ax.set_ylabel("MAP improvement over original (%)")
        ax.set_title("Continuous model updating (FedPS Fig. 4)")
        if len(self.modes) > 1:
            ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        return path


def _prefixed(progress: Progress | None, prefix: str) -> Progress | None:
    """``progress`` with ``prefix`` in front of every stage text."""
    if progress is None:
        return None

    def report(what: str, done: int, total: int) -> None:
        progress(prefix + what, done, total)

    return report


def _mode_settings(
    modes: Sequence[str],
    base: FedPSSettings | None,
    settings: Mapping[str, FedPSSettings] | None,
) -> dict[str, FedPSSettings]:
    """mode -> settings, the baseline first."""
    modes = tuple(modes)
    if len(set(modes)) != len(modes):
        raise ConfigError(f"modes must be distinct, got {modes}")
    if BASELINE_MODE not in modes:
        modes = (BASELINE_MODE, *modes)
    given = dict(settings or {})
    extra = sorted(set(given) - set(modes))
    if extra:
        raise ConfigError(f"settings given for modes {extra} that are not in modes {modes}")
    wrong = sorted(m for m, s in given.items() if s.mode != m)
    if wrong:
        raise ConfigError(
            f"settings[{wrong[0]!r}] has mode {given[wrong[0]].mode!r}; each entry's mode must "
            "equal its key"
        )
    template = base if base is not None else FedPSSettings(mode=BASELINE_MODE)
    # replace() re-runs FedPSSettings' checks, so an unknown mode is a ConfigError here.
    out = {m: given.get(m) or replace(template, mode=m) for m in modes}
    return {BASELINE_MODE: out.pop(BASELINE_MODE), **out}


def run_continuous(
    data: FedPSData,
    modes: Sequence[str] = DEFAULT_MODES,
    *,
    base: FedPSSettings | None = None,
    settings: Mapping[str, FedPSSettings] | None = None,
    stages: Sequence[int] | None = None,
    start: np.datetime64 = DEFAULT_START,
    n_stages: int = N_STAGES,
    valid_fraction: float = DEFAULT_VALID_FRACTION,
    seed: int = 0,
    progress: Progress | None = None,
) -> ContinuousResult:
    """Simulate continuous model updating (FedPS Sec. 5.4, Figure 4).

    For every stage ``k`` of ``stages`` (default ``1 .. n_stages - 1``) the stage data is
    built once (:func:`stage_data` with ``seed``, ``start``, ``n_stages``,
    ``valid_fraction``) and every mode is run on it from scratch
    (:func:`~fedrank.experiments.fedps.run.run_fedps`): trained on weeks ``1..k``, the round
    with the best validation MAP reported on week ``k + 1``.

    Args:
        data: the prepared data (:func:`~fedrank.experiments.fedps.data.prepare_aol`).
        modes: modes of :data:`~fedrank.experiments.fedps.settings.MODES`; ``"original"``, the
            baseline of every improvement, is always run and put first.
        base: settings template of every mode (its ``mode`` is replaced); default the
            paper's (:class:`~fedrank.experiments.fedps.settings.FedPSSettings`: 10% stragglers).
        settings: full settings for some modes (key = mode), overriding ``base``.
        stages: the stages to run; default all.
        start, n_stages, valid_fraction: the stage windows (:func:`stage_split`).
        seed: the data seed of every stage (training lists' negatives, word2vec; training
            is seeded by each mode's ``settings.seed``).
        progress: ``progress(stage, done, total)`` as in ``run_fedps``; the stage text is
            prefixed with ``"stage k mode: "``.

    Raises:
        ConfigError: duplicate or unknown modes or stages, settings whose mode differs from
            their key, or bad stage arguments.
    """
    per_mode = _mode_settings(modes, base, settings)
    if stages is None:
        stages = range(1, _check_n_stages(n_stages))
    numbers = [_check_stage(k, n_stages) for k in stages]
    if not numbers:
        raise ConfigError("stages is empty; give at least one stage in 1..n_stages - 1")
    if len(set(numbers)) != len(numbers):
        raise ConfigError(f"stages must be distinct, got {list(stages)}")
    numbers.sort()
    bounds = [stage_bounds(k, start=start, n_stages=n_stages) for k in numbers]
    out = []
    for b in bounds:
        report_progress(progress, f"stage {b.stage}: samples", 0, 1)
        sd = stage_data(
            data,
            b.stage,
            seed=seed,
            start=start,
            n_stages=n_stages,
            valid_fraction=valid_fraction,
        )
        report_progress(progress, f"stage {b.stage}: samples", 1, 1)
        results = {
            mode: run_fedps(sd, s, progress=_prefixed(progress, f"stage {b.stage} {mode}: "))
            for mode, s in per_mode.items()
        }
        out.append(StageResult(b, sd.summary(), results))
    return ContinuousResult(
        out, per_mode, bounds[0].start, int(n_stages), float(valid_fraction), seed
    )
