"""What each simulated user is searching for and what they type (Mozilla paper, Sec. 6.1).

The paper models a user's choice with the frecency algorithm plus noise: "Random noise,
sampled from a normal distribution with mu = 0, sigma^2 = 30, is then added to the score."
In the synthetic world that noisy score is the user's *true preference* over their own
history and decides which page a search is for:

* for every search and every page ``j`` of the searching user, the utility is
  ``u_j = true_scores[j] + N(0, noise_var)`` (fresh noise per search);
* the wanted page is drawn with probability proportional to ``max(u_j, 0)``: pages with a
  higher true frecency are wanted more often, since frecency is meant to predict revisits;
* if every utility of the user is ``<= 0`` the page is drawn uniformly.

The draw is exact and vectorized over all searches with an exponential race: with i.i.d.
``E_j ~ Exp(1)``, ``argmin_j E_j / w_j`` is ``j`` with probability ``w_j / sum(w)``.

What the user types (:func:`typed_words`): the site's name -- the host's name label, what
people type to reach a site -- with probability ``host_share``, otherwise one of the page's
other words; then the page's remaining words in order, if more are needed.
"""

from __future__ import annotations

import numpy as np

from fedrank.data.browsing import Pages
from fedrank.errors import ConfigError, DataFormatError

__all__ = ["race_draws", "sample_targets", "typed_words"]


def race_draws(
    rng: np.random.Generator, n: int, noise_var: float = 30.0
) -> tuple[np.ndarray, np.ndarray]:
    """The draws :func:`sample_targets` makes for ``n`` (search, eligible page) entries, in
    its order: the Gaussian noise (none when ``noise_var`` is 0), then the exponential
    race keys. (numpy fills the arrays without holding the interpreter lock, so a caller
    may draw them on another thread while it prepares the scores.)"""
    if not np.isfinite(noise_var) or noise_var < 0:
        raise ConfigError(f"noise_var must be a finite variance >= 0, got {noise_var}")
    noise = rng.normal(0.0, np.sqrt(noise_var), size=n) if noise_var > 0 else np.zeros(0)
    return noise, rng.standard_exponential(n)


def sample_targets(
    pages: Pages,
    users: np.ndarray,
    true_scores: np.ndarray,
    rng: np.random.Generator,
    noise_var: float = 30.0,
    eligible: np.ndarray | None = None,
    *,
    candidates: tuple[np.ndarray, np.ndarray] | None = None,
    draws: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """The page each search is for: one draw per entry of ``users`` (see module docstring).

    Args:
        pages: the users' pages.
        users: int ``(S,)``: the user of every search (repeats allowed).
        true_scores: float64 ``(N,)``: the hidden "true" frecency of every page (only the
            eligible pages of the searching users are read).
        rng: randomness (noise and draws).
        noise_var: variance ``sigma^2`` of the Gaussian noise on the scores (paper: 30).
        eligible: bool ``(N,)``: pages that can be wanted (default: all); a user needs one.
        candidates: the eligible pages as a caller keeps them, instead of ``eligible``:
            ``(pages ascending, where user u's start among them (U + 1 offsets))``.
        draws: what :func:`race_draws` drew from ``rng`` for these searches (one entry
            per search and eligible page) when the caller drew them ahead; ``rng`` is then
            used only where the draw goes on (users whose every utility is <= 0). The
            keys are overwritten (the race divides them in place).

    Returns:
        int64 ``(S,)``: global page id of each search's target, always a page of its user.
    """
    users = np.asarray(users)
    if users.ndim != 1 or not (users.size == 0 or np.issubdtype(users.dtype, np.integer)):
        raise DataFormatError(f"users must be a 1-D integer array, got {users.dtype} {users.shape}")
    users = users.astype(np.int64)
    if users.size and (users.min() < 0 or users.max() >= pages.n_users):
        raise DataFormatError(f"user ids must be in 0..{pages.n_users - 1}")
    scores = np.asarray(true_scores, dtype=np.float64)
    if scores.shape != (pages.n_pages,):
        raise DataFormatError(
            f"true_scores has shape {scores.shape}, expected ({pages.n_pages},): one score per page"
        )
    if candidates is None and np.isnan(scores).any():
        raise DataFormatError("true_scores contains NaN")
    if not np.isfinite(noise_var) or noise_var < 0:
        raise ConfigError(f"noise_var must be a finite variance >= 0, got {noise_var}")
    if not isinstance(rng, np.random.Generator):
        raise ConfigError("rng must be a numpy.random.Generator (np.random.default_rng(seed))")
    if users.size == 0:
        return np.zeros(0, dtype=np.int64)
    # every search's eligible pages, in page order, search after search: entry k of search
    # s (ptr[s] <= k < ptr[s + 1]) is page source[first[s] + k - ptr[s]]
    if candidates is None:
        ok = np.ones(pages.n_pages, dtype=bool) if eligible is None else np.asarray(eligible, bool)
        lo = pages.user_offsets[users]
        count = pages.user_offsets[users + 1] - lo
        owner = np.repeat(np.arange(users.size, dtype=np.int64), count)
        source = np.arange(int(count.sum()), dtype=np.int64) + np.repeat(
            lo - (np.cumsum(count) - count), count
        )
        keep = ok[source]
        source = source[keep]
        count = np.bincount(owner[keep], minlength=users.size)
        first = np.cumsum(count) - count
    else:
        source, user_start = _checked_candidates(candidates, pages)
        first = user_start[users]
        count = user_start[users + 1] - first
    if count.min() == 0:
        raise DataFormatError("a searching user has no page that can be wanted")
    from fedrank.simulation.frecency.kernels.intent import race_keys, race_winners

    ptr = np.zeros(users.size + 1, dtype=np.int64)
    np.cumsum(count, out=ptr[1:])
    n = int(ptr[-1])  # one utility per (search, eligible page)
    if draws is None:
        noise, key = race_draws(rng, n, noise_var)
    else:
        noise, key = draws
        if noise.shape != ((n,) if noise_var > 0 else (0,)) or key.shape != (n,):
            raise DataFormatError(
                f"draws must be race_draws(rng, {n}, {noise_var}) for these searches (one "
                f"entry per search and eligible page), got shapes {noise.shape} and "
                f"{key.shape}"
            )
    problem, has_positive = race_keys(
        scores, source, first, ptr, noise, key, users, pages.user_offsets, candidates is not None
    )
    if problem == 2:
        raise DataFormatError(
            "candidates list a page that is not the searching user's: user u's kept "
            "pages must lie in pages.user_offsets[u]:pages.user_offsets[u + 1]"
        )
    if problem == 1:
        raise DataFormatError("true_scores contains NaN")
    # Users whose every utility is <= 0 choose uniformly: any i.i.d. continuous keys do.
    if not has_positive.all():
        flat = np.flatnonzero(~has_positive)
        n_flat = count[flat]
        uniform = np.arange(int(n_flat.sum()), dtype=np.int64) + np.repeat(
            ptr[flat] - (np.cumsum(n_flat) - n_flat), n_flat
        )
        key[uniform] = rng.random(uniform.size)
    winner = race_winners(key, ptr)
    return source[first + winner - ptr[:-1]]


def _checked_candidates(
    candidates: tuple[np.ndarray, np.ndarray], pages: Pages
) -> tuple[np.ndarray, np.ndarray]:
    """``candidates`` as int64 arrays, with offsets that stay inside the pages (what the
    compiled race reads, which checks no bounds)."""
    source, user_start = (np.asarray(a) for a in candidates)
    if (
        source.ndim != 1
        or source.dtype.kind not in "iu"
        or user_start.shape != (pages.n_users + 1,)
        or user_start.dtype.kind not in "iu"
    ):
        raise DataFormatError(
            f"candidates must be (1-D integer pages, {pages.n_users + 1} integer offsets: "
            f"where each user's start among them), got shapes {source.shape} and "
            f"{user_start.shape}, dtypes {source.dtype} and {user_start.dtype}"
        )
    if user_start[0] < 0 or user_start[-1] > source.size or (np.diff(user_start) < 0).any():
        raise DataFormatError(
            f"candidates' offsets must be non-decreasing within 0..{source.size} (the number "
            "of kept pages)"
        )
    return source.astype(np.int64, copy=False), user_start.astype(np.int64, copy=False)


def typed_words(
    pages: Pages,
    targets: np.ndarray,
    rng: np.random.Generator,
    host_share: float = 0.7,
    max_words: int = 3,
) -> np.ndarray:
    """int64 ``(S, max_words)``: the words typed for each target, ``-1`` padded: the host's
    name with probability ``host_share`` (else a uniformly drawn other word of the page)
    first, then the page's other words in order."""
    if not 0.0 <= host_share <= 1.0:
        raise ConfigError(f"host_share must be in [0, 1], got {host_share}")
    if max_words < 1:
        raise ConfigError(f"max_words must be >= 1, got {max_words}")
    targets = np.asarray(targets, dtype=np.int64)
    words = pages.words[targets]
    n_words = (words >= 0).sum(axis=1)
    other = 1 + (rng.random(targets.size) * np.maximum(n_words - 1, 1)).astype(np.int64)
    first = np.where((rng.random(targets.size) < host_share) | (n_words == 1), 0, other)
    cols = np.arange(words.shape[1])[None, :]
    # the chosen word, then the others in page order
    order = np.argsort(np.where(cols == first[:, None], -1, cols), axis=1, kind="stable")
    out = np.take_along_axis(words, order, axis=1)[:, :max_words].astype(np.int64)
    if out.shape[1] < max_words:
        out = np.pad(out, ((0, 0), (0, max_words - out.shape[1])), constant_values=-1)
    return out
