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

#: How a search's wanted page is chosen (see :func:`sample_intents`).
INTENT_MODELS: tuple[str, ...] = ("first-letter", "topic", "proportional")


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


def sample_intents(
    population: Population,
    users: np.ndarray,
    true_scores: np.ndarray,
    rng: np.random.Generator,
    noise_var: float = 30.0,
    model: str = "first-letter",
) -> tuple[np.ndarray, np.ndarray]:
    """The wanted page of every search and the title word the user types first.

    ``"proportional"``: the page of :func:`sample_targets`; its title is typed from the
    first word (slot 0).

    ``"first-letter"`` (default) and ``"topic"`` apply the paper's mock selection rule
    (Sec. 6.1: of the pages in question, the one "with the highest score" after adding
    ``N(0, sigma^2 = 30)`` noise to the hidden frecency is selected):

    1. a *cue* page is drawn by :func:`sample_targets` (frecent pages come to mind more
       often) and a word of its title uniformly: the *cue word*;
    2. the pages in question are the user's pages with a title word that starts with the
       cue word's first letter (``"first-letter"``: exactly the pages the URL bar matches
       after the first keystroke) or that equals the cue word (``"topic"``); the cue page
       is always one of them;
    3. the wanted page is the one of them with the highest noisy true score,
       ``true_scores[j] + N(0, noise_var)`` (fresh noise);
    4. the user types first the wanted page's first title word that qualified it, then the
       other words in title order (the URL bar's matching does not depend on word order).

    With ``"first-letter"`` every page the URL bar shows while the user types is one the
    user rates below the wanted page (up to the noise), so a model with the hidden weights
    shows it first after one keystroke: what is left of the loss is noise and margin. With
    ``"topic"`` and ``"proportional"`` the URL bar also shows pages that are better by the
    hidden preference but not wanted in this search, a loss no model can remove (see
    ``docs/frecency.md`` for the measured floors).

    Returns:
        ``(targets, first_slot)``: int64 ``(S,)`` global page ids, and int64 ``(S,)``
        indices into ``population.title_words[target]`` of the word typed first.
    """
    if model not in INTENT_MODELS:
        raise ConfigError(
            f"unknown intent model {model!r}; choose one of {', '.join(INTENT_MODELS)}"
        )
    cue = sample_targets(population, users, true_scores, rng, noise_var=noise_var)
    if model == "proportional" or cue.size == 0:
        return cue, np.zeros(cue.size, dtype=np.int64)
    titles = population.title_words
    n_words = (titles[cue] >= 0).sum(axis=1)
    cue_word = titles[cue, (rng.random(cue.size) * n_words).astype(np.int64)]
    vocab = population.vocabulary
    # Key of every word id (last entry: the padding id -1, which never qualifies).
    if model == "topic":
        word_key = np.append(np.arange(vocab.n_words, dtype=np.int32), -1)
    else:
        word_key = np.append(vocab.chars[:, 0].astype(np.int32), -1)
    cue_key = word_key[cue_word]

    flat = population.pages_of_users(users)
    # Pages in question, then the noisy argmax among them (noise drawn only for them).
    page_key = word_key[titles]  # (N, W)
    key_columns = np.ascontiguousarray(page_key.T)  # one gather per title slot
    wanted = cue_key[flat.owner]
    in_question = key_columns[0][flat.page] == wanted
    for column in key_columns[1:]:
        in_question |= column[flat.page] == wanted
    idx = np.flatnonzero(in_question)
    owner = flat.owner[idx]  # ascending; every search has >= 1 page in question (its cue)
    utility = np.asarray(true_scores, dtype=np.float64)[flat.page[idx]]
    if noise_var > 0:
        utility = utility + rng.normal(0.0, np.sqrt(noise_var), size=utility.size)
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    seg_max = np.maximum.reduceat(utility, starts)
    hits = np.flatnonzero(utility == seg_max[owner])
    first = np.ones(hits.size, dtype=bool)  # one hit per search (ties: the lowest page id)
    first[1:] = owner[hits[1:]] != owner[hits[:-1]]
    targets = flat.page[idx[hits[first]]]
    first_slot = np.argmax(page_key[targets] == cue_key[:, None], axis=1).astype(np.int64)
    return targets, first_slot


__all__ = ["INTENT_MODELS", "sample_intents", "sample_targets"]
