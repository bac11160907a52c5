"""The user's own privacy ledger: the rounds this device took part in, under the mechanism
each server announced, and its epsilon over exactly those rounds (docs/privacy.md, "The
user's ledger").

The server's ledger (:mod:`fedrank.server.privacy`) counts every closed iteration against
every user, because it cannot tell users apart: a bound for a user who reports in every
iteration. A user who takes part in fewer rounds has spent less, and only the device knows
which rounds it took part in. :class:`UserLedger` records them (server, round, and the
mechanism from ``/v1/status``) and composes their privacy loss distributions
(``dp_accounting``'s PLD, as its accountant does):

* ``gaussian``: central DP, one Gaussian mechanism of the announced noise multiplier
  (sensitivity 1) per round;
* ``pure``: a local mechanism that makes each message ``epsilon``-DP (delta 0): FOLtR-ES's
  randomized response, frecency's randomized signs. It is composed as binary randomized
  response with the same epsilon (keep the true bit with probability ``e^eps / (1 +
  e^eps)``), whose privacy loss dominates that of every ``epsilon``-DP mechanism (Kairouz,
  Oh & Viswanath, ICML 2015), so the bound holds whatever the mechanism and is tight for
  the worst one. Over many rounds of a small epsilon it is well below the basic
  composition's sum (100 rounds of 0.1: about half at delta 1e-6); a few rounds of a large
  epsilon cost about their sum.
* ``skellam``: a secure-aggregation round with distributed DP: the clients' Skellam shares
  give the round's sum noise of the announced variance (at the threshold), over encoded
  updates of sensitivities ``(l1, l2)``; composed by Renyi DP (Agarwal, Kairouz & Liu 2021,
  :func:`fedrank.privacy.skellam.rdp`). With both kinds in one ledger, each part gets half
  of ``delta`` and their epsilons add (basic composition).

:meth:`UserLedger.admit`, :meth:`UserLedger.admit_local` and
:meth:`UserLedger.admit_skellam` record a round only if the
user's epsilon with it stays within the user's own budget; else they raise
:class:`PrivacyBudgetError` and the SDK sends nothing.

Rules: one update per user and round (the sensitivity the mechanisms cover); a round is
recorded when the update is handed to the SDK, before delivery, so an update that is later
refused (stale) still counts (the ledger errs on the safe side). The ledger lives in the
client's ``state_dir`` (``privacy.sqlite3``; one transaction per admission, so several
``Client`` objects or processes may share it), or in memory without one. A ledger written
by a version that knew only the Gaussian mechanism (table ``rounds``) is carried over once,
in one transaction.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from fedrank.errors import FedrankError

if TYPE_CHECKING:
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    server TEXT NOT NULL,
    round INTEGER NOT NULL,
    mechanism TEXT NOT NULL CHECK (mechanism IN ('gaussian', 'pure', 'skellam')),
    value REAL NOT NULL,
    l1 REAL NOT NULL DEFAULT 0,
    l2 REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (server, round)
);
"""

#: The mechanisms a ledger composes, and what ``value`` is for each.
MECHANISMS = {
    "gaussian": "noise multiplier",
    "pure": "epsilon per message",
    "skellam": "Skellam noise variance on the round's sum",
}


class Event(NamedTuple):
    """A recorded round: its mechanism and parameter (:data:`MECHANISMS`); a Skellam round
    also has the sensitivities ``(l1, l2)`` of one encoded update."""

    mechanism: str
    value: float
    l1: float = 0.0
    l2: float = 0.0


class PrivacyBudgetError(FedrankError):
    """The update would take the user over its own budget, or into a round it already
    took part in; nothing was sent."""


def _loss_distribution(mechanism: str, value: float, count: int) -> PrivacyLossDistribution:
    """The privacy loss distribution of ``count`` rounds of one mechanism (PLD accountant's
    discretization, pessimistic)."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    from fedrank.privacy.accounting import PLD_DISCRETIZATION

    if mechanism == "gaussian":
        one = pld.from_gaussian_mechanism(
            value, sensitivity=1.0, value_discretization_interval=PLD_DISCRETIZATION
        )
    else:  # binary randomized response with epsilon = value (module docstring)
        one = pld.from_randomized_response(
            2.0 / (math.exp(value) + 1.0), 2, value_discretization_interval=PLD_DISCRETIZATION
        )
    return one.self_compose(count) if count > 1 else one


#: The noise multipliers a ledger accounts: a server may announce any number, so below
#: :data:`MIN_NOISE_MULTIPLIER` (over epsilon 90 in one round at delta 1e-6) a round is
#: refused, and above :data:`MAX_NOISE_MULTIPLIER` it is accounted at that bound (less noise
#: than announced: an upper bound), which keeps the loss distributions small and finite.
MIN_NOISE_MULTIPLIER = 0.1
MAX_NOISE_MULTIPLIER = 1e5
#: A local round below this epsilon is accounted at it (an upper bound; randomized response
#: cannot be built for an epsilon that rounds its flip probability to 1).
MIN_LOCAL_EPSILON = 1e-6

#: A local round at least this epsilon is added to the total as it is (basic composition):
#: its randomized response keeps the true bit with probability 1 - 1e-22, so composing its
#: loss distribution would give the same, and ``dp_accounting`` overflows near 700.
LARGE_EPSILON = 50.0


def _pld_epsilon(events: list[Event], delta: float) -> float:
    large = sum(e.value for e in events if e.mechanism == "pure" and e.value >= LARGE_EPSILON)
    rest = [
        (e.mechanism, e.value) for e in events if e.value < LARGE_EPSILON or e.mechanism != "pure"
    ]
    if not rest:
        return float(large)
    parts = [_loss_distribution(m, v, k) for (m, v), k in sorted(Counter(rest).items())]
    total = parts[0]
    for part in parts[1:]:
        total = total.compose(part)
    return float(total.get_epsilon_for_delta(delta)) + large


def _rdp_epsilon(events: list[Event], delta: float) -> float:
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    from fedrank.privacy.skellam import ORDERS, rdp

    curve = sum(rdp(e.value, e.l1, e.l2) for e in events)
    eps, _ = compute_epsilon(ORDERS, list(curve), delta)
    return float(eps)


def composed_epsilon(events: list[Event], delta: float) -> float:
    """The epsilon at ``delta`` of the recorded ``events`` (module docstring): Gaussian and
    local rounds by their privacy loss distributions composed (local rounds of at least
    :data:`LARGE_EPSILON` added as they are), Skellam rounds by their Renyi DP summed; with
    both kinds, each at half of ``delta`` and the two epsilons added (basic composition);
    0 for none."""
    skellam = [Event(*e) for e in events if e[0] == "skellam"]
    others = [Event(*e) for e in events if e[0] != "skellam"]
    if not skellam:
        return _pld_epsilon(others, delta) if others else 0.0
    if not others:
        return _rdp_epsilon(skellam, delta)
    return _pld_epsilon(others, delta / 2) + _rdp_epsilon(skellam, delta / 2)


class UserLedger:
    """A user's rounds and budget (module docstring).

    Args:
        state_dir: where ``privacy.sqlite3`` lives; ``None``: in memory.
        budget: the user's epsilon over everything it takes part in (> 0).
        delta: the delta at which ``budget`` is counted (in (0, 1)).
    """

    def __init__(self, state_dir: Path | None, budget: float, delta: float = 1e-6) -> None:
        if not budget > 0:
            raise FedrankError(f"the privacy budget must be > 0, got {budget}")
        if not 0 < delta < 1:
            raise FedrankError(f"the privacy budget's delta must be in (0, 1), got {delta}")
        self.budget = float(budget)
        self.delta = float(delta)
        path = ":memory:" if state_dir is None else str(Path(state_dir) / "privacy.sqlite3")
        if state_dir is not None:
            Path(state_dir).mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA busy_timeout = 30000")
        self._db.executescript(SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        """Carry a Gaussian-only ledger's ``rounds`` over to ``events`` (module docstring)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                old = self._db.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'rounds'"
                ).fetchone()
                if old is not None:
                    self._db.execute(
                        "INSERT INTO events (server, round, mechanism, value) "
                        "SELECT server, round, 'gaussian', noise_multiplier FROM rounds"
                    )
                    self._db.execute("DROP TABLE rounds")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def close(self) -> None:
        self._db.close()

    def events(self) -> list[Event]:
        """Every recorded round."""
        with self._lock:
            return self._events()

    def _events(self) -> list[Event]:
        rows = self._db.execute("SELECT mechanism, value, l1, l2 FROM events").fetchall()
        return [Event(str(m), float(v), float(a), float(b)) for m, v, a, b in rows]

    def epsilon(self) -> float:
        """The user's epsilon at :attr:`delta` over the recorded rounds."""
        return composed_epsilon(self.events(), self.delta)

    def admit(self, server: str, round_: int, noise_multiplier: float) -> float:
        """Record that the user takes part in ``round_`` of ``server`` under central
        Gaussian noise of ``noise_multiplier``, and return its epsilon with that round.

        Raises:
            PrivacyBudgetError: the round is already recorded (one update per round), or
                the epsilon with it would exceed the budget; nothing is recorded.
        """
        return self._admit(server, round_, Event("gaussian", noise_multiplier))

    def admit_local(self, server: str, round_: int, epsilon: float) -> float:
        """Record that the user sends ``round_``'s message to ``server`` through a local
        mechanism that makes it ``epsilon``-DP (delta 0), and return its epsilon with that
        round. Raises as :meth:`admit`."""
        return self._admit(server, round_, Event("pure", epsilon))

    def admit_skellam(
        self, server: str, round_: int, variance: float, l1: float, l2: float
    ) -> float:
        """Record that the user takes part in a secure-aggregation round of ``server`` whose
        sum carries Skellam noise of ``variance`` (the clients' shares together, at the
        threshold) over updates of sensitivities ``(l1, l2)`` (in the encoded units;
        :func:`fedrank.privacy.skellam.sensitivities`), and return its epsilon with that
        round. Raises as :meth:`admit`."""
        for name, v in (("l1", l1), ("l2", l2)):
            if not (math.isfinite(v) and v > 0):
                raise FedrankError(f"the Skellam round's {name} must be a finite number > 0")
        return self._admit(server, round_, Event("skellam", variance, l1, l2))

    def _admit(self, server: str, round_: int, event: Event) -> float:
        mechanism, value = event.mechanism, event.value
        if not (math.isfinite(value) and value > 0):
            raise FedrankError(
                f"the {MECHANISMS[mechanism]} must be a finite number > 0, got {value}"
            )
        if mechanism == "gaussian" and value < MIN_NOISE_MULTIPLIER:
            raise PrivacyBudgetError(
                f"round {round_} announces noise multiplier {value:.3g}, below "
                f"{MIN_NOISE_MULTIPLIER}: more than epsilon 90 in one round; nothing was sent"
            )
        if mechanism == "gaussian":
            event = event._replace(value=min(value, MAX_NOISE_MULTIPLIER))
        if mechanism == "pure":
            event = event._replace(value=max(value, MIN_LOCAL_EPSILON))
        if mechanism == "pure" and value > self.budget:  # alone it is over: no accounting
            raise PrivacyBudgetError(
                f"one message of round {round_} is {value:.4g}-DP, over this user's whole "
                f"budget {self.budget:g}; nothing was sent"
            )
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")  # one admission at a time, across processes
            try:
                taken = self._db.execute(
                    "SELECT 1 FROM events WHERE server = ? AND round = ?", (server, round_)
                ).fetchone()
                if taken is not None:
                    raise PrivacyBudgetError(
                        f"this user already sent an update in round {round_} of {server}: "
                        "the privacy mechanisms cover one update per user and round"
                    )
                eps = composed_epsilon([*self._events(), event], self.delta)
                if eps > self.budget:
                    raise PrivacyBudgetError(
                        f"taking part in round {round_} would bring this user's epsilon to "
                        f"{eps:.4g} (delta {self.delta:g}), over its budget {self.budget:g}; "
                        "nothing was sent"
                    )
                self._db.execute(
                    "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)", (server, round_, *event)
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return eps
