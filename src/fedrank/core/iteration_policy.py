"""When to close an iteration (Mozilla paper, Section 6.4, future work), shared by the
simulated policy comparison (:mod:`fedrank.experiments.frecency.policies`) and the server
(:mod:`fedrank.server.scheduler`).

The deployed system closed an iteration every 30 minutes, whatever number of reports had
arrived; the paper proposes closing iterations by report count, or once the update estimate
is stable:

* :class:`FixedTime` -- close every ``minutes`` (the deployed protocol), if anything arrived.
* :class:`MinUpdates` -- close as soon as ``min_reports`` reports have arrived.
* :class:`SignStable` -- close once the sign of the running aggregate has not changed over
  the last ``window`` ticks, after at least ``min_reports`` reports.
* :class:`AllOf` -- close when every one of several policies would (e.g. 30 minutes *and*
  at least 500 reports: never apply an aggregate of fewer than 500 updates).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class OpenIteration:
    """What the server knows about the iteration being collected."""

    minutes: float
    n_reports: int
    stable_ticks: int  # consecutive ticks in which the aggregate's sign did not change


class IterationPolicy(Protocol):
    name: str

    def should_close(self, it: OpenIteration) -> bool: ...


@dataclass(frozen=True)
class FixedTime:
    minutes: float = 30.0

    @property
    def name(self) -> str:
        return f"fixed-time({self.minutes:g} min)"

    def should_close(self, it: OpenIteration) -> bool:
        return it.n_reports > 0 and it.minutes >= self.minutes


@dataclass(frozen=True)
class MinUpdates:
    min_reports: int = 500

    @property
    def name(self) -> str:
        return f"min-updates({self.min_reports})"

    def should_close(self, it: OpenIteration) -> bool:
        return it.n_reports >= self.min_reports


@dataclass(frozen=True)
class SignStable:
    window: int = 3
    min_reports: int = 100

    @property
    def name(self) -> str:
        return f"sign-stable({self.window} ticks, >= {self.min_reports})"

    def should_close(self, it: OpenIteration) -> bool:
        return it.n_reports >= self.min_reports and it.stable_ticks >= self.window


@dataclass(frozen=True)
class AllOf:
    policies: tuple[IterationPolicy, ...]

    @property
    def name(self) -> str:
        return " and ".join(p.name for p in self.policies)

    def should_close(self, it: OpenIteration) -> bool:
        return all(p.should_close(it) for p in self.policies)
