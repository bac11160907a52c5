"""fedrank.experiments.fedps.stragglers: response times against T_max (FedPS Sec. 3.2, 4.3)."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.errors import ConfigError
from fedrank.experiments.fedps.stragglers import ResponseTimes


def late_share(model: ResponseTimes, seed: int, steps: int = 200) -> np.ndarray:
    """Per-client late rate over ``steps`` steps in which every client answers."""
    rng = np.random.default_rng(seed)
    everyone = np.arange(model.n_train.size)
    return np.mean([model.late(everyone, rng) for _ in range(steps)], axis=0)


def test_t_max_is_calibrated_to_the_late_share() -> None:
    n_train = np.random.default_rng(0).integers(10, 400, size=500).astype(float)
    for ratio in (0.1, 0.3):
        model = ResponseTimes.build(n_train, np.random.default_rng(1), ratio=ratio)
        assert np.isfinite(model.t_max)
        assert late_share(model, seed=9).mean() == pytest.approx(ratio, abs=0.02)
    never = ResponseTimes.build(n_train, np.random.default_rng(1), ratio=0.0)
    assert never.t_max == np.inf and late_share(never, 2, steps=5).max() == 0.0
    fixed = ResponseTimes.build(n_train, np.random.default_rng(1), t_max=3.0)
    assert fixed.t_max == 3.0


def test_lateness_grows_with_data_and_persists_per_device() -> None:
    n_train = np.repeat([20.0, 600.0], 1000)
    model = ResponseTimes.build(n_train, np.random.default_rng(3), ratio=0.1)
    rate = late_share(model, seed=4)
    assert rate[1000:].mean() > 3 * rate[:1000].mean()
    big = slice(1000, 2000)
    assert np.corrcoef(model.slowness[big], rate[big])[0, 1] > 0.5


def test_same_seed_same_draws() -> None:
    n_train = np.arange(1.0, 101.0)
    a = ResponseTimes.build(n_train, np.random.default_rng(5))
    b = ResponseTimes.build(n_train, np.random.default_rng(5))
    c = ResponseTimes.build(n_train, np.random.default_rng(6))
    assert np.array_equal(a.slowness, b.slowness) and a.t_max == b.t_max
    clients = np.arange(0, 100, 3)
    assert np.array_equal(
        a.late(clients, np.random.default_rng(7)), b.late(clients, np.random.default_rng(7))
    )
    assert not np.array_equal(a.slowness, c.slowness) and a.t_max != c.t_max
    assert not np.array_equal(
        a.late(np.arange(100), np.random.default_rng(7)),
        a.late(np.arange(100), np.random.default_rng(17)),
    )
    times = a.draw(clients, np.random.default_rng(8))
    assert times.shape == clients.shape and np.all(times > 0)


@pytest.mark.parametrize(
    ("n_train", "kwargs", "match"),
    [
        (np.zeros(0), {}, "non-empty"),
        (np.ones((2, 2)), {}, "1-D"),
        (np.array([1.0, -1.0]), {}, ">= 0"),
        (np.ones(3), {"ratio": 1.0}, "ratio"),
        (np.ones(3), {"ratio": -0.1}, "ratio"),
        (np.ones(3), {"epochs": 0}, "epochs"),
        (np.ones(3), {"epochs": -1}, "epochs"),
        (np.ones(3), {"seconds_per_query": 0.0}, "seconds_per_query"),
        (np.ones(3), {"latency": 0.0}, "latency"),
        (np.ones(3), {"latency": -1.0}, "latency"),
        (np.ones(3), {"step_sigma": -1.0}, "sigma"),
        (np.ones(3), {"device_sigma": -0.5}, "sigma"),
        (np.ones(3), {"t_max": -2.0}, "T_max"),
        (np.ones(3), {"t_max": 0.0}, "T_max"),
    ],
)
def test_bad_arguments(n_train: np.ndarray, kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ResponseTimes.build(n_train, np.random.default_rng(0), **kwargs)


def test_draw_follows_the_formula_without_noise() -> None:
    """With both sigmas 0 every factor is 1: t_j = E * n_j * c + L exactly."""
    n_train = np.array([0.0, 10.0, 140.0, 1000.0])
    model = ResponseTimes.build(
        n_train,
        np.random.default_rng(0),
        t_max=2.0,
        epochs=2,
        seconds_per_query=0.01,
        latency=1.5,
        device_sigma=0.0,
        step_sigma=0.0,
    )
    np.testing.assert_array_equal(model.slowness, np.ones(4))
    clients = np.array([3, 0, 2, 2, 1])
    times = model.draw(clients, np.random.default_rng(1))
    np.testing.assert_allclose(times, [21.5, 1.5, 4.3, 4.3, 1.7])
    np.testing.assert_array_equal(
        model.late(clients, np.random.default_rng(1)), [True, False, True, True, False]
    )
    assert model.draw(np.zeros(0, dtype=np.int64), np.random.default_rng(1)).shape == (0,)


def test_calibrated_deadline_is_the_quantile_of_the_simulated_times() -> None:
    n_train = np.random.default_rng(10).integers(1, 300, size=200).astype(float)
    model = ResponseTimes.build(n_train, np.random.default_rng(11), ratio=0.1)
    # build draws the slowness first, then calibrates with the same generator
    rng = np.random.default_rng(11)
    rng.lognormal(0.0, 1.0, size=n_train.size)
    assert model.t_max == model.calibrate(0.1, rng)
    loose = model.calibrate(0.5, np.random.default_rng(12))
    tight = model.calibrate(0.05, np.random.default_rng(12))
    assert loose < model.t_max < tight


def test_exchange_time_is_log_normal_around_the_latency() -> None:
    """A client with no training data only exchanges the model: t = L * v, ln v ~ N(0, s)."""
    model = ResponseTimes.build(
        np.zeros(1), np.random.default_rng(0), t_max=10.0, latency=1.5, step_sigma=0.5
    )
    times = model.draw(np.zeros(20_000, dtype=np.int64), np.random.default_rng(1))
    assert np.log(times).mean() == pytest.approx(np.log(1.5), abs=0.02)
    assert np.log(times).std() == pytest.approx(0.5, abs=0.02)
