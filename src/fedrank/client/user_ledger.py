"""The user's own privacy ledger: the rounds of central DP this device took part in, and its
epsilon over exactly those rounds (docs/privacy.md, "The user's ledger").

The server's ledger (:mod:`fedrank.server.privacy`) counts every closed iteration against
every user, because it cannot tell users apart: a bound for a user who reports in every
iteration. A user who takes part in fewer rounds has spent less, and only the device knows
which rounds it took part in. :class:`UserLedger` records them (server, round, the noise
multiplier the server announced in ``/v1/status``) and composes the Gaussian mechanisms of
those rounds with the PLD accountant (:func:`fedrank.privacy.accounting.gaussian_epsilon`,
``dp_accounting``). :meth:`UserLedger.admit` records a round only if the user's epsilon with
it stays within the user's own budget; else it raises :class:`PrivacyBudgetError` and the
SDK sends nothing.

Rules: one update per user and round (the sensitivity the server's noise covers); a round is
recorded when the update is handed to the SDK, before delivery, so an update that is later
refused (stale) still counts (the ledger errs on the safe side). The ledger lives in the
client's ``state_dir`` (``privacy.sqlite3``; one transaction per admission, so several
``Client`` objects or processes may share it), or in memory without one.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections import Counter
from pathlib import Path

from fedrank.errors import FedrankError

SCHEMA = """
CREATE TABLE IF NOT EXISTS rounds (
    server TEXT NOT NULL,
    round INTEGER NOT NULL,
    noise_multiplier REAL NOT NULL,
    PRIMARY KEY (server, round)
);
"""


class PrivacyBudgetError(FedrankError):
    """The update would take the user over its own budget, or into a round it already
    took part in; nothing was sent."""


def composed_epsilon(multipliers: list[float], delta: float) -> float:
    """The epsilon at ``delta`` of one Gaussian mechanism per entry of ``multipliers``
    (sensitivity 1 each), composed by the PLD accountant; 0 for none."""
    if not multipliers:
        return 0.0
    import dp_accounting
    from dp_accounting import pld

    from fedrank.privacy.accounting import PLD_DISCRETIZATION

    events = [
        dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), count)
        for z, count in sorted(Counter(multipliers).items())
    ]
    accountant = pld.PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)
    return float(accountant.compose(dp_accounting.ComposedDpEvent(events)).get_epsilon(delta))


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

    def close(self) -> None:
        self._db.close()

    def multipliers(self) -> list[float]:
        """The noise multiplier of every recorded round."""
        with self._lock:
            rows = self._db.execute("SELECT noise_multiplier FROM rounds").fetchall()
        return [float(r[0]) for r in rows]

    def epsilon(self) -> float:
        """The user's epsilon at :attr:`delta` over the recorded rounds."""
        return composed_epsilon(self.multipliers(), self.delta)

    def admit(self, server: str, round_: int, noise_multiplier: float) -> float:
        """Record that the user takes part in ``round_`` of ``server`` under Gaussian noise
        of ``noise_multiplier``, and return its epsilon with that round.

        Raises:
            PrivacyBudgetError: the round is already recorded (one update per round), or
                the epsilon with it would exceed the budget; nothing is recorded.
        """
        if not (math.isfinite(noise_multiplier) and noise_multiplier > 0):
            raise FedrankError(
                f"the noise multiplier must be a finite number > 0, got {noise_multiplier}"
            )
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")  # one admission at a time, across processes
            try:
                taken = self._db.execute(
                    "SELECT 1 FROM rounds WHERE server = ? AND round = ?", (server, round_)
                ).fetchone()
                if taken is not None:
                    raise PrivacyBudgetError(
                        f"this user already sent an update in round {round_} of {server}: "
                        "central DP covers one update per user and round"
                    )
                rows = self._db.execute("SELECT noise_multiplier FROM rounds").fetchall()
                eps = composed_epsilon([float(r[0]) for r in rows] + [noise_multiplier], self.delta)
                if eps > self.budget:
                    raise PrivacyBudgetError(
                        f"taking part in round {round_} would bring this user's epsilon to "
                        f"{eps:.4g} (delta {self.delta:g}), over its budget {self.budget:g}; "
                        "nothing was sent"
                    )
                self._db.execute(
                    "INSERT INTO rounds VALUES (?, ?, ?)", (server, round_, noise_multiplier)
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return eps
