"""Central DP as a strategy wrapper (fedrank.strategies.dp): clipping, the unweighted mean,
noise at the stated scale, reproducibility, and what it refuses to wrap."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.core.message import MessageBatch
from fedrank.errors import ConfigError
from fedrank.federation.privacy import PrivacyConfig, private, run_record
from fedrank.privacy.accounting import gaussian_epsilon
from fedrank.privacy.adaptive_clip import AdaptiveClip
from fedrank.privacy.discrete_gaussian import KeyStream, LatticeGaussian, noise_key
from fedrank.strategies.dp import DPStrategy
from fedrank.systems.fedavg.config import FedAvgConfig
from fedrank.systems.fedavg.strategy import FedAvgStrategy
from fedrank.systems.foltr_es.config import FoltrEsConfig
from fedrank.systems.foltr_es.strategy import FoltrEsStrategy
from fedrank.systems.frecency.config import FrecencyConfig
from fedrank.systems.frecency.strategy import FrecencyStrategy

DIM = 8


def _fedavg(**settings: object) -> FedAvgStrategy:
    return FedAvgStrategy(FedAvgConfig(dim=DIM, **settings))  # type: ignore[arg-type]


def _round(strategy: DPStrategy, updates: np.ndarray, n: np.ndarray | None = None) -> np.ndarray:
    """The aggregate of one round of ``updates``."""
    weights = np.ones(len(updates)) if n is None else n
    state = strategy.accumulate(strategy.zero(), MessageBatch.of_vectors(updates, weights))
    params = strategy.initial_params()
    return strategy.server_step(state, params, strategy.init(params)).aggregate


def test_noise_on_the_aggregate_has_std_z_clip_over_m() -> None:
    """300 rounds of 20 zero updates: the aggregate's sample std is z C / m within 5%."""
    dp = DPStrategy(_fedavg(), noise_multiplier=3.0, clip=0.4, rng=11)
    zeros = np.zeros((20, DIM))
    draws = np.stack([_round(dp, zeros) for _ in range(300)])
    assert dp.noise_std(20) == pytest.approx(3.0 * 0.4 / 20)
    assert draws.std() == pytest.approx(0.06, rel=0.05)
    assert abs(draws.mean()) < 4 * 0.06 / np.sqrt(draws.size)


def test_one_client_moves_the_mean_by_at_most_clip_over_m() -> None:
    dp = DPStrategy(_fedavg(), noise_multiplier=1e-12, clip=1.0, rng=0)
    updates = np.zeros((10, DIM))
    updates[0, 0] = 1e6  # one poisoned update
    aggregate = _round(dp, updates)
    np.testing.assert_allclose(aggregate, np.eye(DIM)[0] * 0.1, atol=1e-9)
    assert np.linalg.norm(aggregate) <= 1.0 / 10 + 1e-9
    # the plain FedAvg mean would have moved by 1e5
    plain = _fedavg()
    state = plain.accumulate(plain.zero(), MessageBatch.of_vectors(updates, np.ones(10)))
    assert plain.aggregator.finalize(state)[0] == pytest.approx(1e5)


def test_the_mean_is_unweighted() -> None:
    """A client claiming n = 1000 weighs as much as one with n = 1."""
    dp = DPStrategy(_fedavg(), noise_multiplier=1e-12, clip=10.0, rng=0)
    updates = np.array([np.full(DIM, 1.0), np.full(DIM, 3.0)])
    np.testing.assert_allclose(_round(dp, updates, np.array([1.0, 1000.0])), 2.0, atol=1e-9)


def test_a_fixed_denominator_hides_who_took_part() -> None:
    """With ``denominator = W`` the aggregate is (clipped sum + noise) / W: with the same
    noise draw, a user's absence changes it by that user's clipped update over W and
    nothing else, and an empty round steps on its noise alone. Divided by the count, the
    same absence rescales every other user's contribution too."""
    rng = np.random.default_rng(3)
    updates = rng.normal(size=(10, DIM)) * 0.1
    updates[0] = np.full(DIM, 5.0)  # clipped to norm 1

    def aggregate(rows: np.ndarray, denominator: float | None) -> np.ndarray:
        dp = DPStrategy(_fedavg(), 2.0, 1.0, rng=7, denominator=denominator)
        return _round(dp, rows)

    noise = np.random.default_rng(7).normal(0.0, 2.0 * 1.0, size=DIM)
    clipped0 = updates[0] / np.linalg.norm(updates[0])
    with_all, without = aggregate(updates, 8.0), aggregate(updates[1:], 8.0)
    np.testing.assert_allclose(with_all, (clipped0 + updates[1:].sum(axis=0) + noise) / 8.0)
    np.testing.assert_allclose(with_all - without, clipped0 / 8.0, atol=1e-12)
    np.testing.assert_allclose(aggregate(np.zeros((0, DIM)), 8.0), noise / 8.0)
    by_count = aggregate(updates, None) - aggregate(updates[1:], None)
    assert not np.allclose(by_count, clipped0 / 10.0, atol=1e-3)  # the others rescale too
    dp = DPStrategy(_fedavg(), 2.0, 1.0, rng=7, denominator=8.0)
    assert dp.noise_std(3) == dp.noise_std(30) == pytest.approx(2.0 / 8.0)
    privacy = run_record(dp, PrivacyConfig(epsilon=1.0, delta=1e-6, clip=1.0), 4, [10] * 4)
    assert privacy["denominator"] == 8.0 and "participation is protected" in privacy["adjacency"]
    for bad in (0.0, -1.0, float("inf"), 1e-300):
        with pytest.raises(ConfigError, match="denominator"):
            DPStrategy(_fedavg(), 2.0, 1.0, rng=7, denominator=bad)
        with pytest.raises(ConfigError, match="denominator"):
            PrivacyConfig(epsilon=1.0, delta=1e-6, clip=1.0, denominator=bad)
    config = PrivacyConfig(epsilon=1.0, delta=1e-6, clip=1.0, denominator=5.0)
    assert private(_fedavg(), config, rounds=4, rng=0).denominator == 5.0


def test_same_seed_same_result_other_seed_other_noise() -> None:
    updates = np.random.default_rng(5).normal(size=(30, DIM))

    def run(seed: int) -> np.ndarray:
        dp = DPStrategy(_fedavg(), noise_multiplier=1.0, clip=1.0, rng=seed)
        return np.stack([_round(dp, updates) for _ in range(3)])

    np.testing.assert_array_equal(run(4), run(4))
    assert not np.array_equal(run(4), run(5))
    dp = DPStrategy(_fedavg(), 1.0, 1.0, rng=np.random.default_rng(np.random.SeedSequence(4)))
    np.testing.assert_array_equal(np.stack([_round(dp, updates) for _ in range(3)]), run(4))


def test_wraps_frecency_keeping_its_model_optimizer_and_safeguards() -> None:
    inner = FrecencyStrategy(FrecencyConfig())
    dp = DPStrategy(inner, noise_multiplier=2.0, clip=0.05, rng=1)
    assert (dp.dim, dp.optimizer, dp.constraints) == (inner.dim, inner.optimizer, inner.constraints)
    np.testing.assert_array_equal(dp.initial_params(), inner.initial_params())
    assert dp.parameter_names() == inner.parameter_names()
    params = dp.initial_params()
    updates = np.random.default_rng(2).normal(scale=0.02, size=(50, inner.dim))
    state = dp.accumulate(dp.zero(), MessageBatch.of_vectors(updates, np.full(50, 3.0)))
    step = dp.server_step(state, params, dp.init(params))
    assert inner.constraints is not None and inner.constraints.holds(step.params, params)
    assert not np.array_equal(step.params, params)
    fresh = dp.next_zero(state)
    assert (fresh.count, fresh.bound, fresh.inner.weighted_sum.any()) == (0, 0.05, False)
    assert not dp.carries_over


def test_state_round_trips_through_json_as_a_server_stores_it() -> None:
    dp = DPStrategy(_fedavg(), noise_multiplier=1.0, clip=1.0, rng=0)
    updates = np.random.default_rng(1).normal(size=(5, DIM))
    state = dp.accumulate(dp.zero(), MessageBatch.of_vectors(updates, np.ones(5)))
    back = dp.aggregator.state_from_json(dp.aggregator.state_to_json(state))
    np.testing.assert_array_equal(back.inner.weighted_sum, state.inner.weighted_sum)
    assert (back.count, back.bound) == (5, 1.0)


def test_for_budget_keeps_the_budget() -> None:
    budget = PrivacyConfig(epsilon=3.0, delta=1e-6, clip=0.2)
    dp = private(_fedavg(), budget, rounds=10, rng=0)
    assert gaussian_epsilon(dp.noise_multiplier, 1e-6, 10) <= 3.0
    record = run_record(dp, budget, 10, [100, 50])
    assert record["epsilon"] <= 3.0 and record["rounds"] == 10 and record["clip"] == 0.2
    assert record["noise_std_per_iteration"] == [dp.noise_std(100), dp.noise_std(50)]
    assert record["epsilon_replace_one"] > record["epsilon"]


@pytest.mark.parametrize(
    ("inner", "message"),
    [
        (lambda: FoltrEsStrategy(FoltrEsConfig()), "randomized"),
        (lambda: _fedavg(norm_bound=1.0, norm_quantile=0.5), "norm_quantile"),
        (lambda: _fedavg(norm_bound=2.0), "norm_bound"),
        (lambda: _fedavg(aggregator="median"), "robust statistic"),
    ],
)
def test_refuses_what_it_cannot_account(inner: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DPStrategy(inner(), noise_multiplier=1.0, clip=1.0, rng=0)  # type: ignore[operator]


def test_accepts_an_inner_bound_equal_to_the_clip_and_refuses_unseeded_noise() -> None:
    DPStrategy(_fedavg(norm_bound=1.0), noise_multiplier=1.0, clip=1.0, rng=0)
    with pytest.raises(ConfigError, match="seed"):
        DPStrategy(_fedavg(), 1.0, 1.0, rng=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="delta"):
        PrivacyConfig(epsilon=1.0, delta=0.0, clip=1.0)


# ---------------------------------------------------------------- the adaptive clip


def _adaptive_rounds(seed: int, rounds: int = 60) -> tuple[DPStrategy, list[float]]:
    """Rounds of 400 updates whose norms are uniform in [0, 2] (median 1), from clip 0.1:
    the clip of every round."""
    data = np.random.default_rng(99)
    dp = DPStrategy(
        _fedavg(), 1.0, clip=0.1, rng=seed, adaptive=AdaptiveClip(quantile=0.5, count_noise=20.0)
    )
    params = dp.initial_params()
    opt_state = dp.init(params)
    state, clips = dp.zero(), []
    for _ in range(rounds):
        directions = data.normal(size=(400, DIM))
        directions /= np.linalg.norm(directions, axis=1, keepdims=True)
        updates = directions * data.uniform(0.0, 2.0, size=(400, 1))
        state = dp.accumulate(state, MessageBatch.of_vectors(updates, np.ones(400)))
        clips.append(state.bound)
        dp.server_step(state, params, opt_state)
        state = dp.next_zero(state)
    return dp, clips


def test_the_adaptive_clip_follows_the_median_norm_and_is_reproducible() -> None:
    dp, clips = _adaptive_rounds(seed=5)
    assert clips[0] == 0.1 and dp.clips == clips
    assert np.mean(clips[-10:]) == pytest.approx(1.0, rel=0.1)
    assert _adaptive_rounds(seed=5)[1] == clips
    assert _adaptive_rounds(seed=6)[1] != clips


def test_the_adaptive_noise_is_z_u_times_the_rounds_clip() -> None:
    """The noise on a round of clip C_t is N(0, (z_u C_t)^2) / m, z_u from Theorem 1, and the
    accounted multiplier stays the budget's z."""
    adaptive = AdaptiveClip(quantile=0.5, count_noise=3.0)
    dp = DPStrategy(_fedavg(), noise_multiplier=2.0, clip=0.5, rng=8, adaptive=adaptive)
    z_u = adaptive.update_noise_multiplier(2.0)
    assert dp.noise_multiplier == 2.0 and dp.update_noise_multiplier == z_u
    state = dp.zero()._replace(bound=0.8)  # a later round's clip
    zeros = np.zeros((4, DIM))
    state = dp.accumulate(state, MessageBatch.of_vectors(zeros, np.ones(4)))
    expected = np.random.default_rng(8).normal(0.0, z_u * 0.8, size=DIM) / 4
    np.testing.assert_array_equal(dp.noisy_aggregate(state), expected)
    assert dp.noise_std(4, 0.8) == pytest.approx(z_u * 0.8 / 4)
    assert dp.guarantee(1e-6, 10).epsilon == pytest.approx(gaussian_epsilon(2.0, 1e-6, 10))


def test_an_adaptive_budget_records_its_clips_and_stays_within_epsilon() -> None:
    budget = PrivacyConfig(epsilon=3.0, delta=1e-6, clip=0.2, clip_quantile=0.5)
    dp = private(_fedavg(), budget, rounds=10, rng=0, expected_updates=1000)
    assert dp.adaptive is not None and dp.adaptive.count_noise == 50.0  # 1000 / 20
    state, params = dp.zero(), dp.initial_params()
    for m in (100, 50):
        state = dp.accumulate(state, MessageBatch.of_vectors(np.full((m, DIM), 0.01), np.ones(m)))
        dp.server_step(state, params, dp.init(params))
        state = dp.next_zero(state)
    record = run_record(dp, budget, 10, [100, 50])
    assert record["epsilon"] <= 3.0 and record["clip_quantile"] == 0.5
    assert record["clip_per_iteration"][0] == 0.2 and record["clip_per_iteration"][1] < 0.2
    assert record["noise_std_per_iteration"] == [
        dp.noise_std(100, 0.2),
        dp.noise_std(50, record["clip_per_iteration"][1]),
    ]
    assert record["update_noise_multiplier"] > record["noise_multiplier"]


def test_adaptive_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="give clip_quantile"):
        PrivacyConfig(epsilon=1.0, delta=1e-6, clip=1.0, count_noise=5.0)
    config = PrivacyConfig(epsilon=1.0, delta=1e-6, clip=1.0, clip_quantile=0.5)
    with pytest.raises(ConfigError, match="give count_noise"):
        config.adaptive(0)
    with pytest.raises(ConfigError, match="quantile"):
        PrivacyConfig(epsilon=1.0, delta=1e-6, clip=1.0, clip_quantile=1.5)
    with pytest.raises(ConfigError, match="2 sigma_b > z"):  # z of 1 round at epsilon 1 > 1
        private(
            _fedavg(),
            PrivacyConfig(1.0, 1e-6, 1.0, clip_quantile=0.5, count_noise=0.5),
            rounds=1,
            rng=0,
        )


def test_a_keystream_gives_the_secure_lattice_noise() -> None:
    """``use_rng(KeyStream)``: the round's sum is rounded to the lattice and noised with the
    discrete Gaussian (:mod:`fedrank.privacy.discrete_gaussian`), reproducibly by key; the
    adaptive clip's count noise cannot come from it."""
    dp = DPStrategy(_fedavg(), noise_multiplier=2.0, clip=0.5, rng=0)
    updates = np.full((4, DIM), 0.05)
    key = noise_key(99, "iteration 0")
    dp.use_rng(KeyStream(key))
    first = _round(dp, updates)
    dp.use_rng(KeyStream(key))
    assert np.array_equal(first, _round(dp, updates))
    lattice = LatticeGaussian(0.5, 2.0, DIM)
    units = first * 4 / lattice.step
    assert np.allclose(units, np.rint(units), atol=1e-6)
    adaptive = DPStrategy(_fedavg(), 2.0, 0.5, 0, AdaptiveClip(0.5, 5.0))
    with pytest.raises(ConfigError, match="fixed clip"):
        adaptive.use_rng(KeyStream(key))
    with pytest.raises(ConfigError, match="Generator or a KeyStream"):
        dp.use_rng("not a generator")  # type: ignore[arg-type]
