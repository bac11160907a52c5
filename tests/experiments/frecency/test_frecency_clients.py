"""The frecency clients' messages are their own: any block of clients reports what it reports
among all (what lets ``fedrank frecency simulate --dask-workers N`` give the same study; the
real 2-worker cluster run is in ``tests/cli/test_cli_frecency.py``)."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.core.client_random import ClientRandom
from fedrank.experiments.executors import blocks
from fedrank.experiments.frecency.clients import LocalFrecencyClients
from fedrank.experiments.frecency.study import (
    FrecencyStudyConfig,
    build_world,
    iteration_searches,
)
from fedrank.models.frecency.scorer import page_scorer
from fedrank.simulation.frecency.branches import TREATMENT
from fedrank.simulation.frecency.messages import ClientReports, ClientSearches
from fedrank.systems.frecency.client import FrecencyClient


@pytest.fixture(scope="module", params=("classic", "modern"))
def searches(request: pytest.FixtureRequest) -> tuple[FrecencyClient, ClientSearches]:
    config = FrecencyStudyConfig(
        n_users=300, iterations=1, seed=3, history_days=14, model=request.param
    ).resolved()
    rng = np.random.default_rng(7)
    world = build_world(config, rng)
    client = FrecencyClient(config)
    batch = world.search(iteration_searches(world, config, 2.0, 1.0, rng), _theta(client), rng)
    return client, world.client_searches(batch, TREATMENT)


def _theta(client: FrecencyClient) -> np.ndarray:
    """Firefox's default weights of the client's model."""
    return page_scorer(client.config.model).defaults()


@pytest.mark.parametrize("n_blocks", [2, 3, 7])
def test_blocks_of_clients_report_what_all_clients_report(
    searches: tuple[FrecencyClient, ClientSearches], n_blocks: int
) -> None:
    client, all_searches = searches
    assert all_searches.n_clients > 20
    theta = _theta(client)
    whole = all_searches.reports(theta, client.estimator)
    assert np.all(whole.n > 0) and np.any(whole.updates != 0)
    parts = blocks(all_searches.work(), n_blocks)
    assert len(parts) == n_blocks
    joined = ClientReports.concat(
        [all_searches.block(p.start, p.stop).reports(theta, client.estimator) for p in parts]
    )
    for name in ("users", "updates", "n", "loss"):
        np.testing.assert_array_equal(getattr(joined, name), getattr(whole, name))


def test_a_block_holds_exactly_its_clients_searches(
    searches: tuple[FrecencyClient, ClientSearches],
) -> None:
    _, all_searches = searches
    lo, hi = 5, 12
    part = all_searches.block(lo, hi)
    rows = np.flatnonzero((all_searches.client >= lo) & (all_searches.client < hi))
    np.testing.assert_array_equal(part.users, all_searches.users[lo:hi])
    np.testing.assert_array_equal(part.client, all_searches.client[rows] - lo)
    np.testing.assert_array_equal(part.selected, all_searches.selected[rows])
    k = all_searches.valid.shape[1]
    ages = all_searches.pages.visit_age_days.reshape(-1, k, all_searches.pages.visit_type.shape[1])
    np.testing.assert_array_equal(part.pages.visit_age_days.reshape(rows.size, k, -1), ages[rows])


def test_sign_messages_are_the_signs_of_the_gradients(
    searches: tuple[FrecencyClient, ClientSearches],
) -> None:
    client, all_searches = searches
    sign = FrecencyClient(FrecencyStudyConfig(model=client.config.model, message="sign"))
    theta = _theta(client)
    coins = ClientRandom(3, 0, all_searches.users)
    plain = LocalFrecencyClients(client).messages(all_searches, theta, coins)
    signs = LocalFrecencyClients(sign).messages(all_searches, theta, coins)
    np.testing.assert_array_equal(signs.updates, np.sign(plain.updates))
    np.testing.assert_array_equal(signs.n, plain.n)


def test_randomized_signs_are_each_client_s_own(
    searches: tuple[FrecencyClient, ClientSearches],
) -> None:
    """With ``sign_epsilon`` every client randomizes its signs from its own numbers: a block
    of clients sends what it sends among all (a Dask worker's block too), a new iteration
    draws new coins, and the randomization flips about the share of signs it should."""
    client, all_searches = searches
    model = client.config.model
    noisy = FrecencyClient(FrecencyStudyConfig(model=model, message="sign", sign_epsilon=0.5))
    theta = _theta(client)
    local = LocalFrecencyClients(noisy)
    coins = ClientRandom(3, 0, all_searches.users)
    whole = local.messages(all_searches, theta, coins)
    for part in blocks(all_searches.work(), 3):
        block = local.messages(
            all_searches.block(part.start, part.stop), theta, coins.block(part.start, part.stop)
        )
        np.testing.assert_array_equal(block.updates, whole.updates[part.start : part.stop])
    later = local.messages(all_searches, theta, ClientRandom(3, 1, all_searches.users))
    assert not np.array_equal(later.updates, whole.updates)
    exact = LocalFrecencyClients(FrecencyClient(FrecencyStudyConfig(model=model, message="sign")))
    signs = exact.messages(all_searches, theta, coins).updates
    flipped = float(np.mean(whole.updates != signs))
    expected = 2 / (np.exp(0.5) + 2)  # each of the other two values with q = 1 / (e^eps + 2)
    assert abs(flipped - expected) < 0.05
