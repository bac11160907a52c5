"""How tight is the epsilon bound? The empirical privacy loss of FOLtR-ES Section 6.1.

"we enumerated all 3^5 = 243 possible placements of relevance labels {0, 1, 2} in a list of
length 5. Then, we considered all possible pairs of these ranked lists (pretending that
they belong to different queries), and selected those that maximize Equation (9)":

    epsilon = max_{q1, q2, f} ln( P(f | q1) / P(f | q2) )

where ``P(f | q)`` is the probability that the *privatized* MaxRR equals ``f`` for the list
``q``: the exact first-click distribution under the click model
(:func:`fedrank.models.click_models.first_click_distribution`) pushed through the
randomized-response transition matrix. For a fixed output ``f`` the ratio is largest for
the list that maximizes ``P(f | q)`` over the one that minimizes it, so the maximum over
pairs is ``max_f [ln max_q P(f|q) - ln min_q P(f|q)]``: linear in the number of lists, no
pair enumeration.

On a list of length ``L`` MaxRR takes ``n = L + 1`` values (first click at one of ``L``
positions, or none), and both the privatizer and the theoretical bound of Eq. (10) use that
``n`` (as the reference implementation does; its pair search compares only the output
"click at the top", where the maximum over all outputs is taken here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from fedrank.errors import ConfigError
from fedrank.models.click_models import ClickModel, first_click_distribution
from fedrank.privacy.randomized_response import RandomizedResponse


def all_label_placements(list_length: int, n_grades: int = 3) -> np.ndarray:
    """``(n_grades ** L, L)``: every list of grades of length ``L``."""
    if not 1 <= list_length <= 12:
        raise ConfigError(
            f"list_length must be in 1..12 ({n_grades}^L lists are enumerated), got {list_length}"
        )
    codes = np.arange(n_grades**list_length)[:, None]
    return (codes // n_grades ** np.arange(list_length)[None, :]) % n_grades


def maxrr_distributions(model: ClickModel, list_length: int) -> np.ndarray:
    """``(n_grades ** L, L + 1)``: the distribution of the MaxRR value index (0 = no click,
    ``v`` = first click at position ``v - 1``) of every label placement."""
    if model.depth < list_length:
        raise ConfigError(
            f"the click model examines {model.depth} positions, fewer than the list length "
            f"{list_length}"
        )
    lists = all_label_placements(list_length, model.n_grades)
    dist = first_click_distribution(model, lists)[:, : list_length + 1]
    dist[:, list_length] = 1.0 - dist[:, :list_length].sum(axis=1)  # no click in the list
    return np.concatenate([dist[:, -1:], dist[:, :-1]], axis=1)


def empirical_epsilon(model: ClickModel, list_length: int, p: float) -> float:
    """Eq. (9) maximized over all pairs of label placements and all outputs."""
    dist = maxrr_distributions(model, list_length)
    privatizer = RandomizedResponse(np.arange(list_length + 1, dtype=np.float64), p)
    out = dist @ privatizer.transition_matrix()
    with np.errstate(divide="ignore"):
        ratio = np.log(out.max(axis=0)) - np.log(out.min(axis=0))
    return float(ratio.max())


def theoretical_epsilon(list_length: int, p: float) -> float:
    """Eq. (10) with ``n = L + 1``."""
    return RandomizedResponse(np.arange(list_length + 1, dtype=np.float64), p).epsilon()


def epsilon_table(
    models: Mapping[str, ClickModel], list_length: int, ps: Sequence[float]
) -> dict[str, list[float]]:
    """``{"theoretical": [...], <model name>: [...], ...}``: one value per ``p``, in order
    (Table 2 of the paper)."""
    table = {"theoretical": [theoretical_epsilon(list_length, p) for p in ps]}
    for name, model in models.items():
        table[name] = [empirical_epsilon(model, list_length, p) for p in ps]
    return table
