"""What a federated ranking system is to the rest of fedrank: one :class:`System` record per
system, listed in :data:`fedrank.federation.registry.SYSTEMS`.

A system lives in one folder, ``systems/<name>/``:

* ``config.py`` -- its validated settings, one dataclass (the server's TOML table of the same
  name, and what a simulation builds);
* ``strategy.py`` -- the server half: the aggregator, optimizer chain and constraints
  (:class:`~fedrank.strategies.base.Strategy`);
* ``client.py`` -- the client half: the estimator and the privatizer that run on the device
  (:class:`ClientHalf`);
* ``wire.py`` -- its messages on the wire, encoded by clients and parsed by the server
  (:class:`~fedrank.systems.wire.Wire`);
* ``__init__.py`` -- its :class:`System` record.

Everything that needs to know which system it serves (the server's configuration, the
service's workload, its privacy ledger, the client SDK, the command line) asks the record;
nothing compares system names. docs/architecture.md shows how to add one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from fedrank.systems.wire import Wire

if TYPE_CHECKING:
    from fedrank.privacy.report import SystemPrivacy
    from fedrank.strategies.base import Strategy

#: A metric clients may report, and the range its values must lie in.
MetricRange = tuple[str, float, float]


class StudyBranch(NamedTuple):
    """A branch of a study (Mozilla Sec. 6.2): its name, the share of clients in it, which
    model it is served (``trained`` or ``defaults``) and, for classic frecency, whether its
    clients apply the daily decay (``[[branches]]`` of the server's configuration).

    Attributes:
        name: the branch's name, distinct among the branches.
        share: the share of clients assigned to it; the shares sum to 1.
        served: ``trained`` (the model the federation learns) or ``defaults`` (the
            system's default model, a control branch); one branch must be ``trained``.
        decay: classic frecency only: whether the branch's clients apply the daily decay.
    """

    name: str
    share: float
    served: str = "trained"
    decay: bool = False


#: One branch that is served the trained model: every system without a study of its own.
SINGLE_BRANCH = (StudyBranch("treatment", 1.0, "trained"),)


class ClientHalf(Protocol):
    """The device's half of a system (``systems/<name>/client.py``): the estimator that
    turns the served model and the device's own data into an update, and the privatizer
    applied before the update leaves the device. Every client half is built from its
    system's config alone (``config``), holds its ``privatizer`` (``None``: the update leaves
    as computed), and says what one of its messages reveals. Its estimator takes the
    system's own kind of data (a browser's searches, a user's clicks, a local training
    set), so each half names it as the paper does."""

    config: Any
    privatizer: Any

    def message_epsilon(self) -> float | None:
        """The local differential privacy of one message (what a user's own ledger
        records, :mod:`fedrank.client.user_ledger`); ``None``: no local mechanism."""
        ...


@dataclass(frozen=True)
class System:
    """One federated ranking system (module docstring).

    Attributes:
        name: what ``[server] workload`` and ``--workload`` call it.
        section: its TOML table (``[frecency]``, ``[foltr_es]``, ...).
        config: its settings' dataclass; validated when built, every field defaulted.
        strategy: the server half for a config.
        client: the client half for a config.
        wire: its wire formats for a config and the largest weight ``n`` a message may
            claim.
        summary: one line for ``--help``.
        metrics: the metrics its clients report by default, with their ranges.
        max_n: the largest ``n`` (a message's weight: searches, training queries,
            interactions) a server accepts by default.
        branches: the study branches a server runs by default.
        rounds: the server may select its clients in rounds (``[rounds]``); a system whose
            clients report whenever they use the product (frecency) has none.
        central_dp: its updates are vectors, so ``[privacy]`` may wrap its strategy in
            central DP.
        secure_aggregation: its updates may be summed under secure aggregation
            (``[secagg]``).
        device_privacy: what one client's messages reveal without central DP, for the
            run's JSON form of a config and a number of rounds (``None``: a user in ``k``
            rounds).
        attacks: the poisoning attacks its simulator can play (docs/service.md,
            Poisoning).
    """

    name: str
    section: str
    config: type
    strategy: Callable[[Any], Strategy]
    client: Callable[[Any], ClientHalf]
    wire: Callable[[Any, int], Wire]
    summary: str
    metrics: tuple[MetricRange, ...]
    max_n: int
    device_privacy: Callable[[dict[str, Any], int | None], SystemPrivacy]
    branches: tuple[StudyBranch, ...] = SINGLE_BRANCH
    rounds: bool = True
    central_dp: bool = True
    secure_aggregation: bool = False
    attacks: tuple[str, ...] = ("sign-flip", "scale", "random")

    def config_from_view(self, view: dict[str, Any]) -> Any:
        """The config a server serves its clients with the model (``config`` of ``GET
        /v1/model``): its keys of :attr:`config`; the others (rounds, metrics, max_n) are
        the service's."""
        names = {f.name for f in fields(self.config)}
        return self.config(**{k: v for k, v in view.items() if k in names})
