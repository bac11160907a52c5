"""fedrank.experiments.fedps.continuous: stages, stage data and the Figure 4 simulation
(FedPS Sec. 5.4), on a 20-user slice of the real AOL sample."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fedrank.data.aol import BACKGROUND, TEST, TRAIN, VALID, TimeSplit, past_events, tokenize
from fedrank.errors import ConfigError
from fedrank.experiments.fedps.continuous import (
    DEFAULT_START,
    N_STAGES,
    WEEK,
    ContinuousResult,
    run_continuous,
    stage_bounds,
    stage_data,
    stage_split,
)
from fedrank.experiments.fedps.data import FedPSData, prepare_aol
from fedrank.experiments.fedps.run import run_fedps
from fedrank.experiments.fedps.settings import FedPSSettings
from fedrank.retrieval.candidates import RankingSamples, build_users

SPLITS = ("train", "valid", "test")
TINY = FedPSSettings(
    mode="original", rounds=1, clients_per_step=5, cover_queries=0, warmup_rounds=1
)
MODES = ("original", "central", "flat")


@pytest.fixture(scope="module")
def data(data_dir: Path) -> FedPSData:
    return prepare_aol(
        data_dir / "AOL" / "aol_top1000_users_clicks.tsv.gz",
        users=20,
        seed=0,
        dim=16,
        word2vec_epochs=1,
    )


@pytest.fixture(scope="module")
def progress_calls() -> list[tuple[str, int, int]]:
    return []


@pytest.fixture(scope="module")
def continuous(data: FedPSData, progress_calls: list[tuple[str, int, int]]) -> ContinuousResult:
    return run_continuous(
        data,
        MODES,
        base=TINY,
        stages=(2, 1),
        seed=3,
        progress=lambda *a: progress_calls.append(a),
    )


def _user_slices(split: TimeSplit) -> Iterator[slice]:
    """Every user's event range in ``split.log``."""
    lg = split.log
    for u in range(lg.n_users):
        yield slice(int(lg.user_ptr[u]), int(lg.user_ptr[u + 1]))


# ---------------------------------------------------------------------------- stage windows


def test_stage_bounds_are_weeks_from_3_april_and_the_last_week_is_open() -> None:
    b = stage_bounds(1)
    assert b.start == np.datetime64("2006-04-03T00:00:00")
    assert b.test_start == np.datetime64("2006-04-10T00:00:00")
    assert b.test_end == np.datetime64("2006-04-17T00:00:00")
    last = stage_bounds(N_STAGES - 1)
    assert last.test_start == np.datetime64("2006-05-22T00:00:00")
    assert last.test_end is None
    assert last.to_json()["test_end"] is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"stage": 0},
        {"stage": N_STAGES},
        {"stage": -1},
        {"stage": 1.5},
        {"stage": True},
        {"stage": "1"},
        {"stage": 1, "n_stages": 1},
        {"stage": 1, "n_stages": 2.0},
        {"stage": 3, "n_stages": 3},
        {"stage": 1, "start": "not a time"},
    ],
)
def test_bad_stage_arguments_are_config_errors(data: FedPSData, kwargs: dict) -> None:
    stage = kwargs.pop("stage")
    with pytest.raises(ConfigError):
        stage_bounds(stage, **kwargs)
    with pytest.raises(ConfigError):
        stage_split(data.corpus.split, stage, **kwargs)
    with pytest.raises(ConfigError):
        stage_data(data, stage, **kwargs)


@pytest.mark.parametrize("fraction", [-0.1, 1.0, float("nan")])
def test_bad_valid_fraction_is_a_config_error(data: FedPSData, fraction: float) -> None:
    with pytest.raises(ConfigError, match="valid_fraction"):
        stage_split(data.corpus.split, 1, valid_fraction=fraction)


def test_the_sample_covers_the_simulated_period(data: FedPSData) -> None:
    t = data.corpus.split.log.time
    assert t.min() < DEFAULT_START
    assert t.max() >= DEFAULT_START + (N_STAGES - 1) * WEEK  # events in the last week


# ---------------------------------------------------------------------------- stage_split


@pytest.mark.parametrize("stage", range(1, N_STAGES))
def test_stage_split_partitions_events_by_week(data: FedPSData, stage: int) -> None:
    orig = data.corpus.split
    st = stage_split(orig, stage)
    b = stage_bounds(stage)
    lg, ol = st.log, orig.log
    # Same users, query and URL tables: document and query ids stay valid.
    np.testing.assert_array_equal(lg.user_ids, ol.user_ids)
    assert lg.urls is ol.urls and lg.queries is ol.queries
    assert st.report is orig.report and st.background_end == b.start
    end = np.datetime64("2262-01-01") if b.test_end is None else b.test_end
    for s, o in zip(_user_slices(st), _user_slices(orig), strict=True):
        t, code = lg.time[s], st.split[s]
        ot = ol.time[o]
        # Each user keeps exactly the time-prefix before the end of the test week.
        n = int(np.count_nonzero(ot < end))
        assert t.size == n
        np.testing.assert_array_equal(t, ot[:n])
        np.testing.assert_array_equal(lg.query[s], ol.query[o][:n])
        oc = ol.click_ptr[o.start : o.start + n + 1]
        sc = lg.click_ptr[s.start : s.stop + 1]
        np.testing.assert_array_equal(sc - sc[0], oc - oc[0])
        np.testing.assert_array_equal(
            lg.click_docs[lg.click_ptr[s.start] : lg.click_ptr[s.stop]],
            ol.click_docs[oc[0] : oc[-1]],
        )
        # Background unchanged, available weeks train/valid, next week test.
        before = t < b.start
        avail = (t >= b.start) & (t < b.test_start)
        assert np.all(code[before] == BACKGROUND)
        assert np.all(orig.split[o][:n][before] == BACKGROUND)
        assert np.all(np.isin(code[avail], (TRAIN, VALID)))
        assert np.all(code[~before & ~avail] == TEST)
        assert np.all(t[code == TEST] >= b.test_start)
        # Validation = the latest available events, ties kept together.
        tr, va = t[code == TRAIN], t[code == VALID]
        if tr.size and va.size:
            assert tr.max() < va.min()
        m = int(avail.sum())
        n_train = int(np.floor(m * 6 / 7 + 0.5))
        ta = t[avail]
        tie = 0 < n_train < m and ta[n_train - 1] == ta[n_train]
        assert va.size == m - n_train if not tie else va.size < m - n_train
    counts = np.bincount(st.split, minlength=4)
    assert counts[VALID] > 0 and counts[TEST] > 0
    if stage == N_STAGES - 1:
        assert lg.n_events == ol.n_events  # the last week runs to the end of the log


def test_stage_split_sessions_match_the_original_partition(data: FedPSData) -> None:
    orig = data.corpus.split
    st = stage_split(orig, 3)
    for s, o in zip(_user_slices(st), _user_slices(orig), strict=True):
        n = s.stop - s.start
        a, b = st.log.session[s], orig.log.session[o][:n]
        np.testing.assert_array_equal(a - a[:1], b - b[:1])


def test_valid_fraction_zero_gives_no_validation_events(data: FedPSData) -> None:
    st = stage_split(data.corpus.split, 2, valid_fraction=0.0)
    assert not np.any(st.split == VALID)
    assert np.any(st.split == TRAIN)


def test_stage_split_accepts_another_start(data: FedPSData) -> None:
    start = np.datetime64("2006-04-24")
    full = data.corpus.split.log
    st = stage_split(data.corpus.split, 1, start=start, n_stages=3)
    t = st.log.time
    assert np.all(st.split[t < start] == BACKGROUND)
    assert np.all(t[st.split == TEST] >= start + WEEK)
    assert st.log.n_events == np.count_nonzero(full.time < start + 2 * WEEK)
    # Week 3 is the last: it runs to the end of the log (2006-05-31), nothing is dropped.
    last = stage_split(data.corpus.split, 2, start=start, n_stages=3)
    assert last.log.n_events == full.n_events
    assert last.log.time[last.split == TEST].max() == full.time.max()


# ---------------------------------------------------------------------------- stage_data


def _assert_samples_equal(a: RankingSamples, b: RankingSamples) -> None:
    for name in ("events", "query", "candidates", "mask", "labels", "features", "bm25", "ranks"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.n_without_click == b.n_without_click and a.n_unlisted == b.n_unlisted


@pytest.fixture(scope="module")
def stage2(data: FedPSData) -> FedPSData:
    return stage_data(data, 2, seed=5)


def test_stage_data_invariants(data: FedPSData, stage2: FedPSData) -> None:
    sd, b = stage2, stage_bounds(2)
    assert len(sd.users) == len(sd.corpus.users) == len(data.users)
    assert [u.user_id for u in sd.users] == [u.user_id for u in data.users]
    assert [u.user_id for u in sd.corpus.users] == [u.user_id for u in data.corpus.users]
    assert sd.word_vectors.shape == (len(sd.corpus.vocab), data.word_vectors.shape[1])
    # Fitted on the stage's past only: every vocabulary word comes from a document clicked
    # or a query issued before the stage's validation and test events.
    lg = sd.corpus.split.log
    past = past_events(sd.corpus.split)
    past_docs = np.zeros(lg.urls.size, dtype=bool)
    past_docs[lg.click_docs[past[lg.click_event]]] = True
    assert np.array_equal(sd.corpus.past_docs, past_docs)
    test_clicked = lg.click_docs[sd.corpus.split.split[lg.click_event] == TEST]
    assert np.any(~past_docs[test_clicked])  # new documents in the test week: not past
    words = {w for d in np.flatnonzero(past_docs) for w in sd.corpus.texts[d]}
    words |= {w for q in lg.query[past] for w in tokenize(str(lg.queries[q]))}
    assert set(sd.corpus.vocab.words[2:]) <= words
    for ul, ud, full in zip(sd.corpus.users, sd.users, data.corpus.users, strict=True):
        assert ul.queries.shape[1] == full.queries.shape[1]
        n = ul.n_events
        np.testing.assert_array_equal(ul.time, full.time[:n])
        np.testing.assert_array_equal(ul.query_key, full.query_key[:n])
        for code, part in zip((TRAIN, VALID, TEST), SPLITS, strict=True):
            s = ud.samples(part)
            in_part = ul.split == code
            assert s.n_queries + s.n_without_click + s.n_unlisted == int(in_part.sum())
            assert np.all(ul.split[s.events] == code)
        assert np.all(ul.time[ud.test.events] >= b.test_start)
        assert np.all(ul.time[ud.test.events] < b.test_end)
        assert np.all(ul.time[ud.train.events] >= b.start)
        assert np.all(ul.time[ud.valid.events] < b.test_start)
    summary = sd.summary()
    assert summary["users"] == len(data.users) and summary["test_queries"] > 0


def test_stage_data_is_deterministic_for_a_seed(data: FedPSData, stage2: FedPSData) -> None:
    again = stage_data(data, 2, seed=5)
    for a, b in zip(stage2.users, again.users, strict=True):
        for part in SPLITS:
            _assert_samples_equal(a.samples(part), b.samples(part))


def test_stage_data_respects_select(data: FedPSData) -> None:
    small = data.select(5)
    sd = stage_data(small, 1)
    assert [u.user_id for u in sd.users] == [u.user_id for u in small.users]
    assert len(sd.corpus.users) == 5


def test_later_events_do_not_leak_into_the_samples(data: FedPSData, stage2: FedPSData) -> None:
    """The stage samples equal those built from the *untruncated* logs, later events
    present but in no split: features use only strictly earlier events."""
    full_logs = []
    for ul, full in zip(stage2.corpus.users, data.corpus.users, strict=True):
        later = full.n_events - ul.n_events
        code = np.full(full.n_events, -1, dtype=np.int8)
        code[: ul.n_events] = ul.split
        queries = np.zeros_like(full.queries)  # later queries: no words, never sampled
        queries[: ul.n_events] = ul.queries
        event_id = np.concatenate([ul.event_id, np.full(later, -1, dtype=np.int64)])
        full_logs.append(replace(full, split=code, queries=queries, event_id=event_id))
    assert sum(f.n_events for f in full_logs) > sum(u.n_events for u in stage2.corpus.users)
    corpus = stage2.corpus
    rebuilt = build_users(full_logs, corpus.pool, corpus.vocab, stage2.lists)
    for a, b in zip(stage2.users, rebuilt, strict=True):
        for part in SPLITS:
            _assert_samples_equal(a.samples(part), b.samples(part))
        np.testing.assert_array_equal(a.vocab_ids, b.vocab_ids)


def test_test_click_features_count_only_earlier_clicks(data: FedPSData, stage2: FedPSData) -> None:
    """``log_doc_clicks`` / ``log_pclick`` of the stage-2 test samples, recomputed by brute
    force from the full three-month logs with a strict time filter."""
    checked = 0
    for ud, full in zip(stage2.users, data.corpus.users, strict=True):
        s = ud.test
        click_time = full.time[full.click_event]
        click_key = full.query_key[full.click_event]
        for i, e in enumerate(s.events[:5]):
            earlier = click_time < full.time[e]
            for j in np.flatnonzero(s.mask[i]):
                d = s.candidates[i, j]
                doc = earlier & (full.click_docs == d)
                same_query = doc & (click_key == full.query_key[e])
                assert s.features[i, j, 1] == pytest.approx(np.log1p(doc.sum()))
                assert s.features[i, j, 0] == pytest.approx(np.log1p(same_query.sum()))
                checked += 1
    assert checked > 100


def test_users_without_any_event_in_the_stage_are_kept(data: FedPSData) -> None:
    # From 4 April one of these users has no event until after week 2.
    sd = stage_data(data, 1, start=np.datetime64("2006-04-04"), n_stages=3)
    n_train = np.array([u.train.n_queries for u in sd.users])
    assert len(sd.users) == len(data.users)
    assert np.any(n_train == 0)
    empty = sd.users[int(np.flatnonzero(n_train == 0)[0])]
    for part in SPLITS:
        s = empty.samples(part)
        assert s.features.shape[0] == s.candidates.shape[0] == s.n_queries


@pytest.mark.parametrize("mode", ["central", "flat"])
def test_training_with_a_user_without_training_queries(data: FedPSData, mode: str) -> None:
    sd = stage_data(data, 1, start=np.datetime64("2006-04-04"), n_stages=3)
    assert any(u.train.n_queries == 0 for u in sd.users)
    result = run_fedps(sd, replace(TINY, mode=mode))
    assert np.isfinite(result.metrics["MAP"])


# ---------------------------------------------------------------------------- run_continuous


def test_run_continuous_reports_every_stage_and_mode(
    continuous: ContinuousResult, progress_calls: list[tuple[str, int, int]]
) -> None:
    r = continuous
    assert r.modes == MODES
    np.testing.assert_array_equal(r.stage_numbers, [1, 2])
    assert {m: s.mode for m, s in r.settings.items()} == {m: m for m in MODES}
    assert all(s.rounds == 1 and s.clients_per_step == 5 for s in r.settings.values())
    out = r.to_json()
    json.dumps(out)
    assert out["start"] == "2006-04-03T00:00:00" and out["n_stages"] == N_STAGES
    assert [row["stage"] for row in out["stages"]] == [1, 2]
    assert out["stages"][1]["test_start"] == "2006-04-17T00:00:00"
    for row, stage in zip(out["stages"], r.stages, strict=True):
        assert set(row["modes"]) == set(MODES)
        base = row["modes"]["original"]["MAP"]
        assert row["modes"]["original"]["MAP_improvement_pct"] == 0.0
        for m in MODES:
            cell = row["modes"][m]
            assert 0.0 <= cell["MAP"] <= 1.0 and 0.0 <= cell["P@1"] <= 1.0
            assert cell["MAP_improvement_pct"] == pytest.approx((cell["MAP"] / base - 1) * 100)
            assert stage.results[m].metrics["MAP"] == cell["MAP"]
        assert 0 < row["modes"]["flat"]["best_round"] <= 1  # an evaluation of round 1
    np.testing.assert_allclose(
        r.improvement("flat"), (r.metric("flat") / r.metric("original") - 1) * 100
    )
    stages_seen = {what.split(":")[0] for what, _, _ in progress_calls}
    assert {"stage 1", "stage 2", "stage 1 central", "stage 2 flat"} <= stages_seen


def _without_times(out: dict) -> dict:
    for row in out["stages"]:
        for cell in row["modes"].values():
            cell.pop("wall_seconds")
    return out


def test_run_continuous_is_deterministic_for_a_seed(
    data: FedPSData, continuous: ContinuousResult
) -> None:
    again = run_continuous(data, MODES, base=TINY, stages=(1, 2), seed=3)
    assert _without_times(again.to_json()) == _without_times(continuous.to_json())


def test_plot_writes_a_png(continuous: ContinuousResult, tmp_path: Path) -> None:
    path = continuous.plot(tmp_path / "figure4.png")
    assert path == tmp_path / "figure4.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_original_ranking_is_always_run(data: FedPSData) -> None:
    r = run_continuous(data, ("pclick",), stages=(1,))
    assert r.modes == ("original", "pclick")
    assert np.isfinite(r.improvement("pclick")).all()
    with pytest.raises(ConfigError, match="not run"):
        r.improvement("flat")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"stages": (0,)},
        {"stages": (1, N_STAGES)},
        {"stages": (1, 1)},
        {"stages": ()},
        {"n_stages": 1},
        {"modes": ("original", "nope")},
        {"modes": ("flat", "flat")},
        {"settings": {"flat": replace(TINY, mode="central")}},
        {"settings": {"proxy": replace(TINY, mode="proxy")}},
    ],
)
def test_run_continuous_rejects_bad_arguments(data: FedPSData, kwargs: dict) -> None:
    kwargs.setdefault("modes", MODES)
    with pytest.raises(ConfigError):
        run_continuous(data, base=TINY, **kwargs)
