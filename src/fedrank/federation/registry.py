"""The registry of federated ranking systems: :data:`SYSTEMS`, name -> :class:`~fedrank.
systems.system.System`.

Every place that needs to know which system it serves asks here -- the server's
configuration (its sections, default branches, metrics and weights), the service's
workload, its privacy ledger, the client SDK and the command line -- so a new system is one
folder under ``systems/`` and one line below (docs/architecture.md, "Adding a system").
"""

from __future__ import annotations

from fedrank.errors import ConfigError
from fedrank.systems import fedavg, foltr_es, fpdgd, frecency
from fedrank.systems.system import System

#: Every system, by name, in the order the command line lists them.
SYSTEMS: dict[str, System] = {
    s.name: s for s in (frecency.SYSTEM, foltr_es.SYSTEM, fedavg.SYSTEM, fpdgd.SYSTEM)
}


def system(name: str) -> System:
    """The system called ``name``; a :class:`~fedrank.errors.ConfigError` naming the
    systems there are otherwise."""
    try:
        return SYSTEMS[name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown system {name!r}; choose one of {', '.join(SYSTEMS)}") from None
