"""The paper's simplified frecency (Mozilla paper, Section 4), with 12 tunable weights.

The paper describes frecency "in a mathematical form" that keeps only its essence::

    visit(v)     = recency(v) * type(v)
    recency(v)   = bucket weight of the visit's age (cutoffs 4 / 14 / 31 / 90 days,
                   weights 100 / 70 / 50 / 30 / 10)
    type(v)      = 2    if the URL was typed out (TYPED visit)
                   1.4  else if the URL is bookmarked (bookmarked page, or BOOKMARK visit)
                   1.2  else if the URL was visited by following a link (LINK visit)
                   0    otherwise
    frecency(x)  = |S_x| / |T_x| * sum_{v in T_x} visit(v)

with ``S_x`` all visits of page ``x`` (``visit_count``) and ``T_x`` its up to 10 most recent
(sampled) visits. There is no rounding, no redirect-source rule and no special case for
unvisited pages (``|T_x| = 0`` gives 0). The parameters are the 4 cutoffs and 5 bucket
weights of classic frecency (same names and defaults) followed by ``linkTypeWeight``,
``typedTypeWeight`` and ``bookmarkedTypeWeight``.
"""

from __future__ import annotations

import numpy as np

from fedrank.models.frecency.classic import (
    VisitSlots,
    as_param_rows,
    bucketed_points,
    slot_table,
    type_slots,
)
from fedrank.models.frecency.history import PageHistories, VisitType
from fedrank.models.frecency.weights import CLASSIC_DEFAULTS

#: (name, default) in parameter-vector order.
SIMPLIFIED_DEFAULTS: tuple[tuple[str, float], ...] = (
    *CLASSIC_DEFAULTS[:9],
    ("linkTypeWeight", 1.2),
    ("typedTypeWeight", 2.0),
    ("bookmarkedTypeWeight", 1.4),
)
SIMPLIFIED_WEIGHT_NAMES: tuple[str, ...] = tuple(name for name, _ in SIMPLIFIED_DEFAULTS)
N_SIMPLIFIED_WEIGHTS = len(SIMPLIFIED_WEIGHT_NAMES)

# Slots of the type weights (parameters 9, 10, 11); 3 = no weight (other types, padding).
_LINK, _TYPED, _BOOKMARKED, _NONE = 0, 1, 2, 3
_SLOT_TABLE = slot_table(
    {
        int(VisitType.LINK): _LINK,
        int(VisitType.TYPED): _TYPED,
        int(VisitType.BOOKMARK): _BOOKMARKED,
    },
    other=_NONE,
    padding=_NONE,
)


class SimplifiedFrecency:
    """The paper's Section 4 frecency formula as a vectorized scorer of 12 weights."""

    names: tuple[str, ...] = SIMPLIFIED_WEIGHT_NAMES

    @staticmethod
    def defaults() -> np.ndarray:
        """The paper's weights, in :attr:`names` order."""
        return np.array([value for _, value in SIMPLIFIED_DEFAULTS], dtype=np.float64)

    @staticmethod
    def visit_slots(pages: PageHistories) -> VisitSlots:
        """The visits in type slots: 0 link, 1 typed, 2 bookmarked (bookmarked page or
        BOOKMARK visit, unless typed), 3 no weight (other types and padding)."""
        slot = type_slots(pages.visit_type, _SLOT_TABLE)
        bookmarked = pages.bookmarked[:, None] & pages.visit_mask & (slot != _TYPED)
        np.copyto(slot, _BOOKMARKED, where=bookmarked)
        return VisitSlots(
            age=np.asarray(pages.visit_age_days, dtype=np.float64), slot=slot, n_slots=3
        )

    def score(self, params: np.ndarray, pages: PageHistories) -> np.ndarray:
        """Frecency of every page: ``(n,)`` for a ``(12,)`` vector, ``(P, n)`` for
        ``(P, 12)`` rows."""
        rows, single = as_param_rows(params, N_SIMPLIFIED_WEIGHTS, "simplified frecency")
        total = bucketed_points(rows[:, 0:4], rows[:, 4:9], rows[:, 9:12], self.visit_slots(pages))
        n_sampled = pages.n_sampled
        scale = np.where(n_sampled > 0, pages.visit_count / np.maximum(n_sampled, 1), 0.0)
        out = total * scale[None, :]
        return out[0] if single else out
