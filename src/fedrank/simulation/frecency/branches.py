"""The study's branches (Mozilla paper, Sec. 6.2, and the study add-on): who is in which
(:func:`assign_branches`, 60/20/20 in the paper), and what the searching users' URL bars
read, branch by branch (:class:`BranchStates`): the stored and origin frecency of their
listable pages -- ``treatment``
fresh under the published model, ``control`` Firefox's stored frecency (computed with the
default weights at the newest visit or bookmark, decayed daily; its origin frecency
without the decay), ``control-no-decay`` fresh under the defaults -- with the listable
pages, the hosts and the adaptive history (:class:`~fedrank.simulation.frecency.urlbar.
UrlbarState`). A state may be computed ahead, on a helper thread while the searches'
targets are drawn, and is then handed to the one call it is for
(:meth:`~fedrank.simulation.frecency.world.FrecencyWorld.draw_searches`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fedrank.errors import ConfigError
from fedrank.simulation.frecency.input_history import InputHistory
from fedrank.simulation.frecency.listing import ListedPages
from fedrank.simulation.frecency.scoring import PageScores
from fedrank.simulation.frecency.urlbar import UrlbarState

__all__ = [
    "BRANCHES",
    "CONTROL",
    "CONTROL_NO_DECAY",
    "TREATMENT",
    "BranchStates",
    "assign_branches",
]

BRANCHES: tuple[str, ...] = ("treatment", "control", "control-no-decay")
TREATMENT, CONTROL, CONTROL_NO_DECAY = range(3)
#: What a URL-bar state depends on: the vector, the users and their branches, the history
#: (its version) and the time.
_StateKey = tuple[bytes, bytes, bytes, int, float]


def assign_branches(
    n_users: int, shares: tuple[float, float, float], rng: np.random.Generator
) -> np.ndarray:
    """Branch index of every user: an exact split by ``shares`` (paper: 60/20/20), in random
    order."""
    if len(shares) != 3 or min(shares) < 0 or not np.isclose(sum(shares), 1.0):
        raise ConfigError(
            f"branch shares must be three non-negative numbers summing to 1, got {shares}"
        )
    counts = np.floor(np.asarray(shares) * n_users).astype(np.int64)
    counts[0] += n_users - counts.sum()
    return rng.permutation(np.repeat(np.arange(3), counts))


class BranchStates:
    """The URL-bar states of the branches (module docstring), from the pages' ``scores``,
    the ``listing`` of the history and the adaptive history ``inputs``."""

    def __init__(self, scores: PageScores, listing: ListedPages, inputs: InputHistory) -> None:
        self.scores = scores
        self.listing = listing
        self.inputs = inputs
        self._ahead: tuple[_StateKey, UrlbarState] | None = None

    def state(
        self, theta: np.ndarray, users: np.ndarray, branch: np.ndarray, now: float
    ) -> UrlbarState:
        """The state of the distinct ascending ``users`` (``branch``: every user's branch)
        at ``now``, treatment ranking with ``theta``; the state held ahead when it is this
        one (:meth:`hold`), else computed now. Pages of other users stay 0."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == self._key(theta, users, branch, now):
            return ahead[1]
        return self._treatment(theta, users, branch, now, self._control(users, branch, now))

    def ahead(
        self,
        vector: Callable[[], np.ndarray | None],
        users: np.ndarray,
        branch: np.ndarray,
        now: float,
    ) -> tuple[_StateKey, UrlbarState] | None:
        """A state computed ahead, with its key, for :meth:`hold`: the control branches'
        part, which does not read the vector, first; then the treatment's under
        ``vector()`` (``None``: no state ahead)."""
        base = self._control(users, branch, now)
        theta = vector()
        if theta is None:
            return None
        return self._key(theta, users, branch, now), self._treatment(
            theta, users, branch, now, base
        )

    @property
    def holding(self) -> bool:
        """A state computed :meth:`ahead` waits for its :meth:`state` call."""
        return self._ahead is not None

    def hold(self, ahead: tuple[_StateKey, UrlbarState] | None) -> None:
        """Keep a state computed :meth:`ahead` for the :meth:`state` call it is for (the
        next call takes it or lets it go; ``None``: let any held state go)."""
        self._ahead = ahead

    def _key(
        self, theta: np.ndarray, users: np.ndarray, branch: np.ndarray, now: float
    ) -> _StateKey:
        return (
            theta.tobytes(),
            users.tobytes(),
            branch[users].tobytes(),
            self.scores.store.version,
            now,
        )

    def _control(self, users: np.ndarray, branch: np.ndarray, now: float) -> np.ndarray:
        """``(2, N)``: the stored and origin frecency of :meth:`state` with the control
        branches' pages filled in (the stored frecency for control, the defaults' for
        control-no-decay), the treatment's still 0."""
        state = np.zeros((2, self.listing.pages.n_pages))
        mine = branch[users]
        of = self.listing.of
        self.scores.fresh(
            self.scores.scorer.defaults(), of(users[mine == CONTROL_NO_DECAY]), now, state
        )
        self.scores.stored(of(users[mine == CONTROL]), now, state)
        return state

    def _treatment(
        self,
        theta: np.ndarray,
        users: np.ndarray,
        branch: np.ndarray,
        now: float,
        state: np.ndarray,
    ) -> UrlbarState:
        """:meth:`state` from :meth:`_control`'s arrays: the treatment's pages scored under
        ``theta``."""
        self.scores.fresh(theta, self.listing.of(users[branch[users] == TREATMENT]), now, state)
        return UrlbarState(
            stored=state[0],
            origin=state[1],
            listable=self.listing.listable(),
            host_bookmarked=self.listing.host_bookmarked(),
            inputs=self.inputs,
            host_known=self.listing.host_known(),
        )
