"""``FrecencyWorld.search``: a subset of a batch's searches (the evaluation's oracle pass
over the treatment users) gives the results the whole batch gives them."""

from __future__ import annotations

import numpy as np
import pytest

from fedrank.data.synthetic_history import generate_world
from fedrank.experiments.frecency.presets import hidden_weights
from fedrank.simulation.frecency_world import TREATMENT, FrecencyWorld


@pytest.mark.parametrize("model", ["classic", "modern"])
def test_searching_a_subset_gives_the_whole_batch_results(model: str) -> None:
    world = FrecencyWorld(
        generate_world(90, np.random.default_rng(21)), hidden_weights("shifted", model),
        np.random.default_rng(22), model=model,
    )  # fmt: skip
    rng = np.random.default_rng(23)
    searches = world.draw_searches(np.repeat(np.arange(90), 2), rng)
    whole = world.search(searches, world.hidden, np.random.default_rng(24))
    treated = world.branch[searches.users] == TREATMENT
    assert 0 < treated.sum() < treated.size
    part = world.search(searches, world.hidden, np.random.default_rng(24), only=treated)
    assert part.found.any()
    for name in ("user", "target", "chars_typed", "selected_rank", "shown", "found",
                 "autofilled", "first_chars"):  # fmt: skip
        np.testing.assert_array_equal(getattr(part, name), getattr(whole, name)[treated], name)
