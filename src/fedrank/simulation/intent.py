"""What each simulated user is searching for (paper Sec. 6.1).

The paper models a user's choice with the existing frecency algorithm plus noise: "Random
noise, sampled from a normal distribution with mu = 0, sigma^2 = 30, is then added to the
score." Here that noisy score is the user's *true preference* over their own history, and
it decides which page a search is for:

* for every search and every page ``j`` of the searching user, the utility is
  ``u_j = true_scores[j] + N(0, noise_var)`` (fresh noise per search);
* the wanted page is drawn with probability proportional to ``max(u_j, 0)``: pages with a
  higher true frecency are wanted more often, since frecency is meant to predict revisits
  (a page twice as frecent is revisited about twice as often);
* if every utility of the user is ``<= 0`` the page is drawn uniformly.

The draw is exact and vectorized over all searches at once with an exponential race: with
i.i.d. ``E_j ~ Exp(1)``, ``argmin_j E_j / w_j`` is ``j`` with probability
``w_j / sum(w)``. Users with different page counts are handled on the flattened
(search, page) pairs with a segmented minimum.
"""

from __future__ import annotations

import numpy as np

from fedrank.data.synthetic_history import Population
from fedrank.errors import ConfigError, DataFormatError


def sample_targets(
    population: Population,
    users: np.ndarray,
    true_scores: np.ndarray,
    rng: np.random.Generator,
    noise_var: float = 30.0,
) -> np.ndarray:
    """The page each search is for: one draw per entry of ``users`` (paper Sec. 6.1).

    Args:
        population: the users' histories.
        users: int ``(S,)``: the user of every search (repeats allowed).
        true_scores: float64 ``(N,)``: the hidden "true" frecency of every page.
        rng: randomness (noise and draws).
        noise_var: variance ``sigma^2`` of the Gaussian noise on the scores (paper: 30).

    Returns:
        int64 ``(S,)``: global page id of each search's target, always a page of its user.
    """
    users = population.check_users(users)
    scores = np.asarray(true_scores, dtype=np.float64)
    if scores.shape != (population.n_pages,):
        raise DataFormatError(
            f"true_scores has shape {scores.shape}, expected ({population.n_pages},): one "
            "score per page of the population"
        )
    if np.isnan(scores).any():
        raise DataFormatError("true_scores contains NaN")
    if not np.isfinite(noise_var) or noise_var < 0:
        raise ConfigError(f"noise_var must be a finite variance >= 0, got {noise_var}")
    if not isinstance(rng, np.random.Generator):
        raise ConfigError("rng must be a numpy.random.Generator (np.random.default_rng(seed))")
    if users.size == 0:
        return np.zeros(0, dtype=np.int64)
    flat = population.pages_of_users(users)
    if (flat.count == 0).any():
        raise DataFormatError("a searching user has no pages; every user needs a history")

    utility = scores[flat.page]
    if noise_var > 0:
        utility = utility + rng.normal(0.0, np.sqrt(noise_var), size=utility.size)
    weight = np.maximum(utility, 0.0)
    with np.errstate(divide="ignore"):
        key = rng.standard_exponential(weight.size) / weight  # +inf where weight == 0
    # Users whose every utility is <= 0 choose uniformly: any i.i.d. continuous keys do.
    has_positive = np.logical_or.reduceat(weight > 0, flat.start)
    uniform = ~has_positive[flat.owner]
    key[uniform] = rng.random(int(uniform.sum()))

    seg_min = np.minimum.reduceat(key, flat.start)
    hits = np.flatnonzero(key == seg_min[flat.owner])
    first = np.ones(hits.size, dtype=bool)  # keep one hit per search (ties have prob. 0)
    first[1:] = flat.owner[hits[1:]] != flat.owner[hits[:-1]]
    return flat.page[hits[first]]


__all__ = ["sample_targets"]
