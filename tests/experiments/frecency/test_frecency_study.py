"""End-to-end tests of the simulated federated frecency study (small, fast configurations;
larger runs are checked in test_frecency_study_acceptance.py)."""

import json
from collections.abc import Callable

import numpy as np
import pytest

from fedrank.core.provenance import code_version
from fedrank.errors import ConfigError
from fedrank.experiments.frecency.plots import plot_study
from fedrank.experiments.frecency.presets import hidden_weights
from fedrank.experiments.frecency.report import write_report
from fedrank.experiments.frecency.study import FrecencyStudyConfig, compare_messages, run_study
from fedrank.models.frecency.history import PageHistories
from fedrank.models.frecency.modern import (
    MODERN_DEFAULTS,
    MODERN_WEIGHT_NAMES,
    ModernFrecency,
    modern_samples_from_histories,
)
from fedrank.models.frecency.safeguards import (
    deployed_frecency_safeguards,
    frecency_safeguards,
    modern_frecency_safeguards,
)
from fedrank.models.frecency.scorer import MIN_HALF_LIFE_DAYS, NOW_DAY
from fedrank.models.frecency.weights import CLASSIC_WEIGHT_NAMES, classic_defaults
from fedrank.simulation.frecency.branches import CONTROL, TREATMENT
from fedrank.simulation.frecency.pipeline import Pipeline
from fedrank.simulation.frecency.urlbar import UrlbarState
from fedrank.simulation.frecency.world import FrecencyWorld

SMALL = dict(n_users=240, iterations=6, eval_searches_per_user=3, history_days=14.0)


@pytest.fixture(scope="module")
def small_result():
    return run_study(FrecencyStudyConfig(seed=7, **SMALL))


def test_result_json_has_the_documented_fields(small_result) -> None:
    data = json.loads(json.dumps(small_result.to_json()))
    assert len(data["loss_per_iteration"]) == 6
    assert len(data["weights_per_iteration"]) == 6
    assert set(data["weights_per_iteration"][0]) == set(CLASSIC_WEIGHT_NAMES)
    assert data["constraints_held"] is True
    assert set(data["eval"]) == {"treatment", "control", "control-no-decay"}
    shares = {"treatment": 0.6, "control": 0.2, "control-no-decay": 0.2}
    for name, ev in data["eval"].items():
        assert {"chars_typed_mean", "selected_rank_mean", "n", "n_users", "paper_loss_mean"} <= set(
            ev
        )
        assert ev["n"] > 0 and 0 < ev["n_users"] <= shares[name] * 240 + 1
        assert ev["chars_typed_mean"] >= 1 and ev["selected_rank_mean"] >= 0
    keys = {"treatment_vs_control", "treatment_vs_control_no_decay"}
    assert set(data["tests"]) == keys | {k + "_rank" for k in keys}
    for test in data["tests"].values():
        assert test["unit"] == "user" and 0 <= test["pvalue"] <= 1
        assert {"statistic", "diff", "diff_ci95", "pooled_pvalue", "n_users_a"} <= set(test)
        assert test["diff_ci95"][0] <= test["diff"] <= test["diff_ci95"][1]
    assert data["bonferroni_alpha"] == pytest.approx(0.05 / 6)
    assert len(data["all_tests"]) == 6
    assert set(data["paper_loss_per_iteration"]) == set(shares)
    assert set(data["paper_eval"]) == set(shares)
    assert data["world_stats"]["clicks_per_user"] > 0
    assert set(data["intra_user_correlation"]) == {"chars_typed", "selected_rank"}
    assert data["code"] == code_version()  # the source that ran it


def test_starts_from_defaults_and_every_iterate_is_safe(small_result) -> None:
    traj = small_result.weight_trajectory()
    assert traj.shape == (len(small_result.loss_per_iteration) + 1, len(CLASSIC_WEIGHT_NAMES))
    np.testing.assert_array_equal(traj[0], classic_defaults())
    np.testing.assert_array_equal(
        traj[-1], [small_result.final_weights[n] for n in CLASSIC_WEIGHT_NAMES]
    )
    chain = frecency_safeguards(max_change=3.0)
    for prev, cur in zip(traj, traj[1:], strict=False):
        assert chain.holds(cur, prev)
        assert np.abs(cur - prev).max() <= 3.0 + 1e-9
    assert any(np.abs(t - traj[0]).max() > 0 for t in traj[1:]), "the model never moved"


def test_same_seed_same_result_and_other_seed_differs(small_result) -> None:
    again = run_study(FrecencyStudyConfig(seed=7, **SMALL))
    assert again.to_json() == small_result.to_json()
    other = run_study(FrecencyStudyConfig(seed=8, **SMALL))
    assert other.loss_per_iteration != small_result.loss_per_iteration


def test_the_server_half_on_its_own_thread_changes_nothing(
    small_result, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clients' messages and the server's step overlap the next iteration's draws: in
    line, or with no helper thread at all, they give the same study; either way the model
    is fetched once per iteration and once for the evaluation (the service demo's clients
    fetch it over HTTP); a failure of the server half stops the study."""
    from fedrank.experiments.frecency import study

    model = study.InProcessServer.model
    fetched: list[int] = []

    def counted_model(self: study.InProcessServer) -> np.ndarray:
        fetched.append(1)
        return model(self)

    monkeypatch.setattr(study.InProcessServer, "model", counted_model)
    for pipeline in (Pipeline(overlap_server_half=False), Pipeline(threads=False), Pipeline()):
        fetched.clear()
        again = run_study(FrecencyStudyConfig(seed=7, **SMALL), pipeline=pipeline)
        assert again.to_json() == small_result.to_json()
        assert len(fetched) == SMALL["iterations"] + 1
    close = study.InProcessServer.close
    calls: list[int] = []

    def failing_close(self: study.InProcessServer) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the second step failed")
        close(self)

    monkeypatch.setattr(study.InProcessServer, "close", failing_close)
    with pytest.raises(RuntimeError, match="the second step failed"):
        run_study(FrecencyStudyConfig(seed=7, **SMALL))


def test_a_study_runs_numpys_products_on_one_blas_thread_with_the_same_results(
    small_result, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The iterations and the evaluation's searches run with one BLAS thread (the study's
    own threads fill the cores), the tests after them with the caller's setting, which
    comes back; the same study leaving the caller's two BLAS threads
    (``Pipeline(blas_threads=None)``) gives the same JSON."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from fedrank.experiments.frecency import study

    def blas_threads() -> set[int]:
        return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

    seen: list[set[int]] = []
    draw, compare = FrecencyWorld.draw_searches, study.compare_branches_by_user

    def watched_draw(self: FrecencyWorld, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(blas_threads())  # every iteration's searches, the evaluation's too
        return draw(self, *args, **kwargs)

    def watched_compare(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(blas_threads())
        return compare(*args, **kwargs)

    monkeypatch.setattr(FrecencyWorld, "draw_searches", watched_draw)
    monkeypatch.setattr(study, "compare_branches_by_user", watched_compare)
    with threadpool_limits(limits=2, user_api="blas"):
        again = run_study(FrecencyStudyConfig(seed=7, **SMALL))
        assert blas_threads() == {2}
        n_eval = len(seen) - SMALL["iterations"] - 1
        assert seen == [{1}] * (SMALL["iterations"] + n_eval) + [{2}] and n_eval > 0
        assert again.to_json() == small_result.to_json()
        seen.clear()
        two = run_study(FrecencyStudyConfig(seed=7, **SMALL), pipeline=Pipeline(blas_threads=None))
        assert seen and all(threads == {2} for threads in seen)
    assert two.to_json() == small_result.to_json()


def test_clients_report_on_their_searches_as_they_were_when_they_searched() -> None:
    """What the clients compute their messages from (handed to them on the server half's
    thread) is the shown pages' histories when the search was made, before the search
    itself enters them."""
    from dataclasses import fields

    from fedrank.experiments.frecency.clients import LocalFrecencyClients
    from fedrank.experiments.frecency.study import (
        FrecencyClient,
        FrecencyStrategy,
        InProcessServer,
        Round,
        StudyResult,
        build_world,
        optimization_phase,
    )

    config = FrecencyStudyConfig(seed=7, **{**SMALL, "iterations": 3}).resolved()
    world = build_world(config, np.random.default_rng(1))
    strategy = FrecencyStrategy(config)
    expected, held = [], []
    search = world.search

    def search_then_take(*args, **kwargs):  # type: ignore[no-untyped-def]
        batch = search(*args, **kwargs)
        expected.append(world.client_searches(batch, TREATMENT))
        return batch

    class Spy(LocalFrecencyClients):
        def messages(self, searches, theta, random):  # type: ignore[no-untyped-def]
            held.append(searches)
            return super().messages(searches, theta, random)

    world.search = search_then_take  # type: ignore[method-assign]
    client = FrecencyClient(config)
    optimization_phase(
        world, config, client, InProcessServer(Round(strategy)), np.random.default_rng(2),
        StudyResult(config=config), clients=Spy(client),
    )  # fmt: skip
    assert len(held) == len(expected) == 3
    for got, want in zip(held, expected, strict=True):
        assert got.now == want.now
        for name in ("users", "client", "selected", "valid"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), name)
        for f in fields(want.pages):
            np.testing.assert_array_equal(
                getattr(got.pages, f.name), getattr(want.pages, f.name), f.name
            )


def test_sign_messages_and_other_optimizers_run() -> None:
    for kwargs in (
        {"message": "sign"},
        {"optimizer": "adam", "learning_rate": 1.0},
        {"optimizer": "sgd", "learning_rate": 0.01},
    ):
        res = run_study(FrecencyStudyConfig(seed=1, **{**SMALL, "iterations": 3}, **kwargs))
        assert res.constraints_held
        assert len(res.loss_per_iteration) == 3


def test_stability_tracking_gives_one_entry_per_iteration() -> None:
    res = run_study(
        FrecencyStudyConfig(
            seed=2,
            track_stability=True,
            stability_sample=50,
            stability_draws=5,
            **{**SMALL, "iterations": 3},
        )
    )
    assert len(res.stability) == 3
    for s in res.stability:  # half the reports when fewer than twice the sample
        assert s["sample"] == min(50, max(1, s["n_reports"] // 2)) and s["mean"] >= 0


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ConfigError, match="preset"):
        FrecencyStudyConfig(preset="nope")
    with pytest.raises(ConfigError):
        FrecencyStudyConfig(n_users=2)
    with pytest.raises(ConfigError):
        FrecencyStudyConfig(message="bits")
    with pytest.raises(ConfigError, match="world"):
        FrecencyStudyConfig(world="mars")
    with pytest.raises(ConfigError, match="setting"):
        FrecencyStudyConfig(setting="mine")
    with pytest.raises(ConfigError, match="classic"):
        FrecencyStudyConfig(setting="mozilla-deployed", model="modern")


def test_deployed_setting_publishes_integers_under_the_deployed_safeguards() -> None:
    res = run_study(FrecencyStudyConfig(seed=3, setting="mozilla-deployed", **SMALL))
    config = res.to_json()["config"]
    assert (config["eta_plus"], config["eta_minus"], config["step_init"]) == (2.0, 0.6, 2.0)
    assert (config["step_min"], config["step_max"], config["significance_z"]) == (1.0, 3.0, 0.0)
    traj = res.weight_trajectory()
    chain = deployed_frecency_safeguards()
    for prev, cur in zip(traj, traj[1:], strict=False):
        assert chain.holds(cur, prev)
    published = np.array([res.published_weights[n] for n in CLASSIC_WEIGHT_NAMES])
    np.testing.assert_array_equal(published, np.floor(traj[-1] + 0.5))
    assert not np.array_equal(traj[-1], classic_defaults())


def test_rprop_settings_override_the_setting() -> None:
    c = FrecencyStudyConfig(setting="mozilla-deployed", eta_plus=1.5).resolved()
    assert (c.eta_plus, c.eta_minus) == (1.5, 0.6)
    p = FrecencyStudyConfig().resolved()
    assert (p.eta_plus, p.eta_minus, p.step_init, p.significance_z) == (1.2, 0.5, 1.0, 1.0)


def test_shifted_preset_differs_from_defaults_and_is_feasible() -> None:
    hidden = hidden_weights("shifted")
    assert not np.array_equal(hidden, classic_defaults())
    assert frecency_safeguards(max_change=1e9).holds(hidden, classic_defaults())


# ----------------------------------------------------------------------------------------
# Modern frecency (5 parameters)
# ----------------------------------------------------------------------------------------

MODERN_SMALL = dict(model="modern", **SMALL)


@pytest.fixture(scope="module")
def modern_result():
    return run_study(FrecencyStudyConfig(seed=7, **MODERN_SMALL))


def _trajectory(result, names) -> list[np.ndarray]:
    traj = [np.array([w[n] for n in names]) for w in result.weights_per_iteration]
    traj.append(np.array([result.final_weights[n] for n in names]))
    return traj


def test_classic_defaults_are_resolved_into_the_json(small_result) -> None:
    config = FrecencyStudyConfig()
    assert (config.model, config.score_scale, config.delta) == ("classic", None, None)
    resolved = config.resolved()
    assert (resolved.score_scale, resolved.delta) == ("log", 0.1)
    data = small_result.to_json()["config"]
    assert (data["model"], data["score_scale"], data["delta"]) == ("classic", "log", 0.1)
    # An explicit scale gets the model's margin for that scale; an explicit margin stays.
    assert FrecencyStudyConfig(score_scale="raw").resolved().delta == 0.1
    modern_log = FrecencyStudyConfig(model="modern", score_scale="log").resolved()
    assert modern_log.delta == pytest.approx(np.log1p(NOW_DAY + 6.0) - np.log1p(NOW_DAY))
    assert FrecencyStudyConfig(model="modern", delta=2.0).resolved().score_scale == "raw"


def test_modern_json_uses_the_five_modern_names(modern_result) -> None:
    data = json.loads(json.dumps(modern_result.to_json()))
    config = data["config"]
    assert (config["model"], config["score_scale"], config["delta"]) == ("modern", "raw", 6.0)
    assert len(data["loss_per_iteration"]) == 6
    assert all(np.isfinite(x) and x >= 0 for x in data["loss_per_iteration"])
    assert len(data["weights_per_iteration"]) == 6
    for weights in data["weights_per_iteration"]:
        assert list(weights) == list(MODERN_WEIGHT_NAMES)
    assert list(data["final_weights"]) == list(MODERN_WEIGHT_NAMES)
    assert data["weights_per_iteration"][0] == dict(MODERN_DEFAULTS)
    assert data["constraints_held"] is True
    assert set(data["eval"]) == {"treatment", "control", "control-no-decay"}
    assert all(ev["n"] > 0 and ev["chars_typed_mean"] >= 1.0 for ev in data["eval"].values())
    assert data["oracle"]["n"] == data["eval"]["treatment"]["n"]
    assert set(data["tests"]) == {
        "treatment_vs_control", "treatment_vs_control_no_decay",
        "treatment_vs_control_rank", "treatment_vs_control_no_decay_rank",
    }  # fmt: skip


def test_modern_iterates_satisfy_the_modern_safeguards(modern_result) -> None:
    traj = _trajectory(modern_result, MODERN_WEIGHT_NAMES)
    np.testing.assert_array_equal(traj[0], ModernFrecency.defaults())
    chain = modern_frecency_safeguards(max_change=3.0)
    for prev, cur in zip(traj, traj[1:], strict=False):
        assert chain.holds(cur, prev)
        assert np.abs(cur - prev).max() <= 3.0 + 1e-9
    assert any(np.abs(t - traj[0]).max() > 0 for t in traj[1:]), "the model never moved"


def test_modern_run_is_reproducible_with_a_seed(modern_result) -> None:
    again = run_study(FrecencyStudyConfig(seed=7, **MODERN_SMALL))
    assert again.to_json() == modern_result.to_json()
    other = run_study(FrecencyStudyConfig(seed=8, **MODERN_SMALL))
    assert other.loss_per_iteration != modern_result.loss_per_iteration


def test_branch_states_follow_the_study_add_on() -> None:
    """Treatment ranks with the model's fresh frecency, control-no-decay with the defaults'
    fresh frecency, control with the stored (visit-time, daily-decayed) one; modern
    frecency has no decay job, so both controls rank with the defaults' fresh scores."""
    from fedrank.data.synthetic_history import generate_world

    for model in ("classic", "modern"):
        browsing = generate_world(40, np.random.default_rng(0))
        world = FrecencyWorld(
            browsing, hidden_weights("shifted", model), np.random.default_rng(1), model=model
        )
        world.advance(3.5)
        theta = hidden_weights("shifted", model)
        users = np.arange(world.n_users)
        state = world.state(theta, users)
        index = world.listing.of(users)
        branch = world.page_branch[index]
        h = world.histories(index)
        fresh_theta = world.scorer.fresh(theta, h, world.now)
        fresh_default = world.scorer.fresh(world.scorer.defaults(), h, world.now)
        stored, undecayed = world.scorer.stored(h, world.now, world.decay_rate)
        t, c, n = branch == TREATMENT, branch == CONTROL, branch == 2
        np.testing.assert_array_equal(state.stored[index][t], fresh_theta[t])
        np.testing.assert_array_equal(state.stored[index][n], fresh_default[n])
        np.testing.assert_array_equal(state.stored[index][c], stored[c])
        np.testing.assert_array_equal(state.origin[index][c], undecayed[c])
        if model == "modern":
            np.testing.assert_array_equal(stored, fresh_default)
        else:  # decay only lowers positive scores, and does for pages visited days ago
            assert (stored <= undecayed).all() and (stored < undecayed).any()
        assert (world.delta, world.score_scale) == (
            (6.0, "raw") if model == "modern" else (0.1, "log")
        )
    # a half-life pushed to <= 0 by a finite-difference step is scored in the vanishing
    # half-life limit instead of failing
    rows = np.tile(ModernFrecency.defaults(), (3, 1))
    rows[:, 4] = [0.0, -1.0, MIN_HALF_LIFE_DAYS]
    scores = world.scorer.fresh(rows, h, world.now)
    assert np.isfinite(scores).all()
    np.testing.assert_array_equal(scores[0], scores[2])
    np.testing.assert_array_equal(scores[1], scores[2])
    samples = modern_samples_from_histories(h, now_day=NOW_DAY + 3)
    np.testing.assert_array_equal(
        fresh_default, ModernFrecency().score(ModernFrecency.defaults(), samples)
    )


def test_url_bar_state_equals_scoring_the_histories_directly() -> None:
    """What the URL bar reads (treatment: fresh frecency under the model; control: the
    stored, decayed one; control-no-decay: fresh under the defaults) equals scoring the
    pages' current histories directly, before and after searches change the history and
    time passes: a reused history build is never stale or partial."""
    from fedrank.data.synthetic_history import generate_world

    world = FrecencyWorld(
        generate_world(60, np.random.default_rng(5)), hidden_weights("shifted"),
        np.random.default_rng(6),
    )  # fmt: skip
    theta = classic_defaults() * np.linspace(0.8, 1.2, classic_defaults().size)
    rng = np.random.default_rng(7)
    users = np.arange(60)

    def check(state: UrlbarState) -> None:
        index = np.flatnonzero(world.listing.listable())
        histories = world.histories(index)
        branch = world.branch[world.pages.owner[index]]
        expected = np.where(
            branch == TREATMENT,
            world.scorer.fresh(theta, histories, world.now),
            world.scorer.fresh(world.scorer.defaults(), histories, world.now),
        )
        stored, undecayed = world.scorer.stored(histories, world.now, world.decay_rate)
        np.testing.assert_array_equal(
            state.stored[index], np.where(branch == CONTROL, stored, expected)
        )
        # origin frecency: the control branch's without the daily decay
        np.testing.assert_array_equal(
            state.origin[index], np.where(branch == CONTROL, undecayed, expected)
        )
        unlisted = np.flatnonzero(~world.listing.listable())
        assert (state.stored[unlisted] == 0).all() and (state.origin[unlisted] == 0).all()
        assert (branch == CONTROL).any() and (branch == TREATMENT).any()
        assert (stored[branch == CONTROL] != undecayed[branch == CONTROL]).any()

    for _ in range(3):
        searches = world.draw_searches(users, rng)  # builds the histories a search reuses
        check(world.state(theta, searches.users))
        world.record(world.search(searches, theta, rng))
        check(world.state(theta, users))  # same time, same pages, new visits
        world.advance(1.5)


@pytest.mark.parametrize("model", ["classic", "modern"])
def test_kept_scores_equal_scoring_the_histories_again(model: str) -> None:
    """The scores a world keeps between searches (``PageScoreCache``: the hidden
    preference, the defaults, the stored frecency, models used twice) equal scoring the
    current histories again, over 60 days in which ages pass every bucket cutoff, days turn,
    pages are visited and bookmarked; and most are kept (the cache works)."""
    from fedrank.data.synthetic_history import generate_world

    world = FrecencyWorld(
        generate_world(40, np.random.default_rng(8)), hidden_weights("shifted", model),
        np.random.default_rng(9), model=model,
    )  # fmt: skip
    theta = world.scorer.defaults() * np.linspace(0.8, 1.2, world.scorer.defaults().size)
    other = theta[::-1].copy() if model == "classic" else theta * 1.1
    rng = np.random.default_rng(10)

    def again(score: Callable[[PageHistories], np.ndarray], index: np.ndarray) -> np.ndarray:
        out = np.zeros((2, index.size))
        for pos, pages in world.scores.histories_by_width(index, world.now):
            out[:, pos] = score(pages)
        return out

    kept = []
    for step in range(45):
        index = np.flatnonzero(world.listing.listable())
        # each model twice in a row, so the model slot is kept, then handed to the next
        for params in (world.hidden, world.scorer.defaults(), theta, theta, other, other):
            expected = again(lambda h, p=params: world.scorer.fresh(p, h, world.now), index)
            np.testing.assert_array_equal(world.scores.fresh(params, index, world.now), expected[0])
        expected = again(lambda h: np.stack(world.scorer.stored(h, world.now, 0.975)), index)
        np.testing.assert_array_equal(world.scores.stored(index, world.now), expected)
        kept.append(1.0 - world.scores.kept(world.hidden).stale(index, world.now).mean())
        if step % 3 == 0:
            searches = world.draw_searches(np.flatnonzero(rng.random(40) < 0.5), rng)
            world.record(world.search(searches, theta, rng))
        if step % 7 == 0:
            world.store.add_bookmarks(rng.choice(world.pages.n_pages, 20), np.full(20, world.now))
        world.advance(0.37 if step % 2 else 2.3)  # within a day, and past day ends
    assert min(kept) > 0.99  # just read (some end early: rounding at day ends)
    index = np.flatnonzero(world.listing.listable())
    world.scores.fresh(world.hidden, index, world.now)
    world.advance(0.25)  # within the day: classic ages rarely pass a cutoff
    stale = world.scores.kept(world.hidden).stale(index, world.now).mean()
    assert stale < (0.05 if model == "classic" else 0.8)


def test_record_and_advance_change_the_history() -> None:
    """A search leaves a TYPED visit on the wanted page and, when picked while typing the
    first word (not through autofill), an adaptive-history input; time decays the inputs."""
    from fedrank.data.synthetic_history import generate_world

    world = FrecencyWorld(
        generate_world(60, np.random.default_rng(2)), hidden_weights("shifted"),
        np.random.default_rng(3),
    )  # fmt: skip
    rng = np.random.default_rng(4)
    searches = world.draw_searches(np.arange(60), rng)
    batch = world.search(searches, classic_defaults(), rng)
    assert batch.found.any()
    before = world.store.visit_count.copy()
    world.record(batch)
    added = np.bincount(batch.target, minlength=world.pages.n_pages)
    np.testing.assert_array_equal(world.store.visit_count, before + added)
    assert world.store.typed[batch.target].all()
    assert (world.store.time[batch.target, 0] == world.now).all()
    assert (
        len(world.inputs)
        == np.unique(
            np.stack([batch.target, batch.first_word, batch.first_chars])[:, batch.adaptive_input],
            axis=1,
        ).shape[1]
    )
    use = world.inputs.use_count.copy()
    world.advance(2.5)  # crosses two day boundaries
    np.testing.assert_allclose(world.inputs.use_count, use * 0.975**2)
    with pytest.raises(ConfigError):
        world.advance(-1.0)


def test_modern_sign_messages_and_explicit_loss_settings_run() -> None:
    res = run_study(
        FrecencyStudyConfig(seed=1, message="sign", delta=2.0, **{**MODERN_SMALL, "iterations": 3})
    )
    assert res.constraints_held
    assert res.to_json()["config"]["delta"] == 2.0
    assert list(res.final_weights) == list(MODERN_WEIGHT_NAMES)


def test_modern_compare_messages_report_and_plots(modern_result, tmp_path) -> None:
    res = compare_messages(FrecencyStudyConfig(**{**MODERN_SMALL, "iterations": 2}), seeds=[0])
    assert res["config"]["model"] == "modern" and res["config"]["delta"] == 6.0
    assert np.isfinite(res["ratio"])
    plots = plot_study(modern_result, tmp_path)
    assert [p.name for p in plots] == ["loss.png", "weights.png", "chars_typed.png"]
    report = write_report(modern_result, tmp_path / "report.md", "test", plots).read_text()
    assert "Model `modern` frecency" in report
    start = modern_result.weights_per_iteration[0]
    moved = [n for n in MODERN_WEIGHT_NAMES if modern_result.final_weights[n] != start[n]]
    assert moved
    for name in moved:
        assert f"| {name} | {start[name]:g} |" in report


def test_bad_model_is_refused() -> None:
    with pytest.raises(ConfigError, match="model must be one of classic, modern"):
        FrecencyStudyConfig(model="newest")
    with pytest.raises(ConfigError, match="unknown frecency model"):
        hidden_weights("paper", "newest")


def test_modern_shifted_preset_is_feasible_and_reachable() -> None:
    hidden = hidden_weights("shifted", "modern")
    defaults = ModernFrecency.defaults()
    np.testing.assert_array_equal(hidden_weights("paper", "modern"), defaults)
    assert not np.array_equal(hidden, defaults)
    assert modern_frecency_safeguards(max_change=120.0).holds(hidden, defaults)


def test_aol_world_study_replays_the_logs_revisits(tmp_path) -> None:
    from tests.aolkit import write_browsing_log

    log = write_browsing_log(tmp_path / "log.tsv", n_users=40)
    config = FrecencyStudyConfig(world="aol", aol_log=str(log), n_users=None, iterations=4)
    res = run_study(config)
    data = res.to_json()
    assert data["config"]["world"] == "aol"
    assert res.oracle == {}  # real searches: no hidden weights
    assert sum(ev["n_users"] for ev in data["eval"].values()) > 10
    assert all(ev["n"] > 0 for ev in data["eval"].values())
    assert data["world_stats"]["users"] == 40
    assert len(data["loss_per_iteration"]) == 4 and sum(data["reports_per_iteration"]) > 0
    again = run_study(config)
    assert again.to_json() == data
    with pytest.raises(ConfigError, match="AOL log"):
        run_study(FrecencyStudyConfig(world="aol", aol_log=str(tmp_path / "none.tsv")))
