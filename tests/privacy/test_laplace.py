"""Laplace mechanisms for model updates: L1 clipping, noise scale, and the distributed
shares that add up to one Laplace draw."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedrank.errors import ConfigError, DataFormatError
from fedrank.privacy.laplace import DistributedLaplace, LocalLaplace, clip_l1


def test_clip_l1_scales_only_long_rows() -> None:
    x = np.array([[3.0, -4.0], [0.1, 0.2], [0.0, 0.0]])
    out = clip_l1(x, 1.0)
    np.testing.assert_allclose(out[0], [3 / 7, -4 / 7])
    np.testing.assert_array_equal(out[1:], x[1:])
    with pytest.raises(DataFormatError, match="finite"):
        clip_l1(np.array([[np.nan]]), 1.0)


def test_local_laplace_has_scale_two_clip_over_epsilon() -> None:
    mech = LocalLaplace(clip=0.5, epsilon=2.0)
    assert mech.scale == 0.5 and mech.epsilon() == 2.0
    noise = mech.privatize_batch(np.zeros((200_000, 1)), np.random.default_rng(0)).ravel()
    assert stats.kstest(noise, "laplace", args=(0.0, 0.5)).pvalue > 1e-3


def test_distributed_shares_add_up_to_one_laplace_draw() -> None:
    k = 10
    mech = DistributedLaplace(clip=1.0, epsilon=4.0, n_clients=k)
    rng = np.random.default_rng(1)
    shares = mech.privatize_batch(np.zeros((k * 20_000, 1)), rng).reshape(20_000, k)
    total = shares.sum(axis=1)
    assert stats.kstest(total, "laplace", args=(0.0, mech.scale)).pvalue > 1e-3
    # one share alone is far less noisy than the aggregate's noise
    assert shares[:, 0].std() < total.std() / 2


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ConfigError, match="epsilon"):
        LocalLaplace(1.0, 0.0)
    with pytest.raises(ConfigError, match="clip"):
        LocalLaplace(-1.0, 1.0)
    with pytest.raises(ConfigError, match="n_clients"):
        DistributedLaplace(1.0, 1.0, 0)


@pytest.mark.parametrize(
    "mech", [LocalLaplace(1.0, 2.0), DistributedLaplace(1.0, 2.0, n_clients=50)]
)
def test_noise_is_a_function_of_the_uniforms_finite_at_the_ends(
    mech: LocalLaplace | DistributedLaplace,
) -> None:
    """Noise by inverse CDFs: the same uniforms give the same noise (what lets a client's
    own random numbers privatize it anywhere), and the generator's extreme outputs stay
    finite; a wrong number of uniforms is refused."""
    updates = np.zeros((3, 4))
    shape = mech.uniform_shape(updates.shape)
    u = np.random.default_rng(2).random(shape)
    np.testing.assert_array_equal(
        mech.privatize_uniforms(updates, u), mech.privatize_uniforms(updates, u.copy())
    )
    ends = np.full(shape, 1.0 - 2.0**-53)
    ends[0] = 0.0
    assert np.all(np.isfinite(mech.privatize_uniforms(updates, ends)))
    with pytest.raises(ConfigError, match="uniforms of shape"):
        mech.privatize_uniforms(updates, u[:, :, :2])
