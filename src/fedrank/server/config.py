"""The server's configuration: a TOML file, overridden by command-line flags, validated in
full at start (an unknown key, a wrong type or an out-of-range value is an error that names
the section and the key).

Every key is optional. Each section's class says what its keys mean, next to the fields
(``Attributes`` of :class:`~fedrank.server.sections.ServerSection` and its siblings, and of
each system's config); ``python -m fedrank.server.config_reference`` writes them, with
every key's type, default and accepted values, to docs/reference/config.md. The files in
``examples/`` are configurations that start a server.

Without ``[[branches]]`` a workload runs its system's default branches
(:attr:`fedrank.systems.system.System.branches`): frecency three (treatment, control and
control-no-decay), the other workloads a single ``treatment`` branch with share 1. Without
``[metrics]`` its clients may report its system's metrics
(:attr:`~fedrank.systems.system.System.metrics`).
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

from fedrank.core.validation import Rule, Validated
from fedrank.errors import ConfigError
from fedrank.federation.registry import SYSTEMS, system
from fedrank.server.sections import (
    MAX_METRIC_NAMES,
    METRIC_LIMIT,
    METRIC_NAME,
    Branch,
    IdentitySection,
    IterationSection,
    PrivacySection,
    Proxy,
    RoundsSection,
    SecAggSection,
    ServerSection,
)
from fedrank.systems.system import System


def _names(systems: dict[str, System], has: str, joiner: str = ", ") -> str:
    """The registry's systems whose record says ``has`` (``rounds``, ``central_dp``...)."""
    return joiner.join(name for name, sys in systems.items() if getattr(sys, has))


def _distinct(names: list[str]) -> bool:
    return len(set(names)) == len(names) and all(names)


def _one_sum(shares: list[float]) -> bool:
    return all(x >= 0 for x in shares) and math.isclose(sum(shares), 1.0, abs_tol=1e-9)


def _served(config: ServerConfig) -> str | None:
    """The first branch served something unknown, or ``None``."""
    return next((b.name for b in config.branches if b.served not in SERVED), None)


#: What a branch may be served: the trained model or the defaults.
SERVED: tuple[str, ...] = ("trained", "defaults")


def _default_system() -> System:
    """The system of the default workload."""
    return system(ServerSection().workload)


def _system_sections() -> dict[str, Any]:
    """Every system's section with its defaults, by TOML table name."""
    return {s.section: s.config() for s in SYSTEMS.values()}


@dataclass(frozen=True)
class ServerConfig(Validated):
    """The whole configuration; build it with :func:`load_config`. Each section checks its
    own keys; the rules here are those between sections, and between the entries of
    ``[[proxies]]`` and of ``[[branches]]`` (docs/privacy.md, "In the server";
    docs/secagg.md, "In the service")."""

    server: ServerSection = field(default_factory=ServerSection)
    iteration: IterationSection = field(default_factory=IterationSection)
    rounds: RoundsSection = field(default_factory=RoundsSection)
    privacy: PrivacySection = field(default_factory=PrivacySection)
    secagg: SecAggSection = field(default_factory=SecAggSection)
    identity: IdentitySection = field(default_factory=IdentitySection)
    #: Every system's section (``[frecency]``, ``[foltr_es]``, ...), by table name; the
    #: workload's is :attr:`system_config`.
    sections: dict[str, Any] = field(default_factory=_system_sections)
    #: The study's branches (``[[branches]]``, or the workload's system's).
    branches: tuple[Branch, ...] = field(default_factory=lambda: _default_system().branches)
    #: ``(name, low, high)`` per metric clients may report, sorted by name (``[metrics]``,
    #: or the system's :attr:`~fedrank.systems.system.System.metrics`).
    metrics: tuple[tuple[str, float, float], ...] = field(
        default_factory=lambda: _default_system().metrics
    )
    #: The proxies that may send merged aggregates (``[[proxies]]``; none: refused).
    proxies: tuple[Proxy, ...] = ()

    ACCEPTS = {
        "server": ServerSection,
        "iteration": IterationSection,
        "rounds": RoundsSection,
        "privacy": PrivacySection,
        "secagg": SecAggSection,
        "identity": IdentitySection,
        "sections": dict,
        "branches": tuple,
        "metrics": tuple,
        "proxies": tuple,
    }

    RULES = (
        Rule(
            lambda c: not c.rounds.enabled or c.system.rounds,
            f"[rounds] apply to {_names(SYSTEMS, 'rounds')}; {{workload}} clients report "
            "whenever they search",
        ),
        Rule(
            lambda c: not c.server_seeds or c.rounds.enabled,
            "[{system.section}] server_seeds = true needs [rounds] enabled = true: seeds are "
            "issued at check-in, and only the round's capacity (clients_per_round) bounds how "
            "many seeds one client can collect under many ids; enable [rounds] or set "
            "server_seeds = false",
        ),
        Rule(
            lambda c: not (c.server_seeds and c.proxies),
            "[{system.section}] server_seeds = true cannot take [[proxies]]: a merged aggregate "
            "hides its messages' seed tokens, so the server could not verify them; remove "
            "[[proxies]] (proxies may forward JSON batches naming each client and its token) "
            "or set server_seeds = false",
        ),
        Rule(
            lambda c: _distinct([p.name for p in c.proxies]),
            lambda c: (
                f"proxy names must be distinct and non-empty, got {[p.name for p in c.proxies]}"
            ),
        ),
        Rule(
            lambda c: len({p.token for p in c.proxies}) == len(c.proxies),
            "every proxy needs its own token",
        ),
        # [privacy] with epsilon > 0
        Rule(
            lambda c: not c.privacy.enabled or c.system.central_dp,
            f"[privacy] central DP averages vector updates ({_names(SYSTEMS, 'central_dp')}); "
            "{workload} clients privatize on the device with randomized response ([foltr_es] p)",
        ),
        Rule(
            lambda c: not c.privacy.enabled or not c.proxies or c.privacy.distributed,
            "[privacy] mode = 'central' cannot take [[proxies]]: a merged aggregate hides its "
            "clients' updates, so the server could not clip them one by one; remove [[proxies]] "
            "(under mode = 'distributed' proxies sum masked inputs only)",
        ),
        Rule(
            lambda c: not c.privacy.enabled or c.iteration.stable_ticks == 0,
            "[privacy] needs [iteration] stable_ticks = 0: the adaptive policy closes when the "
            "exact aggregate's sign settles, a decision the noise does not cover",
        ),
        # [privacy] mode = "distributed"
        Rule(
            lambda c: not c.privacy.distributed or c.secagg.enabled,
            "[privacy] mode = 'distributed' needs [secagg] enabled = true: the clients add the "
            "noise to updates the server only ever sees summed",
        ),
        Rule(
            lambda c: not c.privacy.distributed or c.privacy.clip == c.secagg.l2_bound,
            "[privacy] clip ({privacy.clip:g}) must equal [secagg] l2_bound "
            "({secagg.l2_bound:g}): the clients clip to l2_bound, and the noise is calibrated "
            "to clip",
        ),
        Rule(
            lambda c: not c.privacy.distributed or c.privacy.accountant == "rdp",
            "[privacy] mode = 'distributed' is accounted in Renyi DP (the Skellam bound): set "
            "accountant = 'rdp'",
        ),
        Rule(
            lambda c: not c.privacy.distributed or c.privacy.noise_seed == -1,
            "[privacy] noise_seed is the server's noise; with mode = 'distributed' the clients "
            "draw the noise: remove noise_seed",
        ),
        # [secagg] enabled = true
        Rule(
            lambda c: not c.secagg.enabled or c.system.secure_aggregation,
            "[secagg] sums model deltas: it needs [server] workload = "
            f"{_names(SYSTEMS, 'secure_aggregation', ' or ')}",
        ),
        Rule(
            lambda c: not c.secagg.enabled or c.rounds.enabled,
            "[secagg] needs [rounds] enabled = true: a round's cohort",
        ),
        Rule(
            lambda c: not c.secagg.enabled or 2 <= c.rounds.clients_per_round <= 1000,
            "[secagg] needs [rounds] clients_per_round in 2..1000, got {rounds.clients_per_round}",
        ),
        Rule(
            lambda c: not c.secagg.enabled or c.secagg.threshold <= c.rounds.clients_per_round,
            "[secagg] threshold must be 0 (a majority) or in 2..{rounds.clients_per_round} "
            "(clients_per_round), got {secagg.threshold}",
        ),
        Rule(
            lambda c: (
                not c.secagg.enabled
                or c.secagg.allow_low_threshold
                or c.secagg.threshold_for(c.rounds.clients_per_round)
                > c.rounds.clients_per_round // 2
            ),
            lambda c: (
                f"[secagg] threshold ({c.secagg.threshold}) must be at least a majority of "
                f"clients_per_round ({c.rounds.clients_per_round // 2 + 1} of "
                f"{c.rounds.clients_per_round}; 0 picks it): with fewer, the sum of fewer than "
                "half the cohort is published and fewer colluding members can unmask one. Set "
                "allow_low_threshold = true to accept it (a warning is logged at start)"
            ),
        ),
        Rule(
            lambda c: (
                not c.secagg.enabled
                or (
                    c.system_config.aggregator == "mean"
                    and not c.system_config.norm_bound
                    and c.system_config.norm_quantile is None
                )
            ),
            "[secagg] the server sees only the sum: [{system.section}] aggregator must be 'mean' "
            "with no norm_bound or norm_quantile (clients clip to [secagg] l2_bound)",
        ),
        Rule(
            lambda c: not c.secagg.enabled or not c.privacy.enabled or c.privacy.distributed,
            "[secagg] with central [privacy]: the server clips each update and adds the noise, but "
            "it sees only the sum here; set [privacy] mode = 'distributed' (the clients add the "
            "noise, docs/privacy.md)",
        ),
        # [[branches]]
        Rule(
            lambda c: _distinct([b.name for b in c.branches]),
            lambda c: (
                f"branch names must be distinct and non-empty, got {[b.name for b in c.branches]}"
            ),
        ),
        Rule(
            lambda c: _one_sum([b.share for b in c.branches]),
            lambda c: (
                f"branch shares must be >= 0 and sum to 1, got {[b.share for b in c.branches]}"
            ),
        ),
        Rule(
            lambda c: _served(c) is None,
            lambda c: f"branch {_served(c)!r}: served must be trained or defaults",
        ),
        Rule(
            lambda c: any(b.served == "trained" for b in c.branches),
            "one branch must be served the trained model (served = 'trained')",
        ),
    )

    @property
    def workload(self) -> str:
        return self.server.workload

    @property
    def system(self) -> System:
        """The registry's record of the workload."""
        return system(self.workload)

    @property
    def system_config(self) -> Any:
        """The workload's section (its system's config)."""
        return self.sections[self.system.section]

    @property
    def server_seeds(self) -> bool:
        """Whether the server issues the clients' seeds at check-in (a section's
        ``server_seeds``, :mod:`fedrank.server.seeds`)."""
        return bool(getattr(self.system_config, "server_seeds", False))

    @property
    def counts_clients(self) -> bool:
        """Whether [rounds], [secagg] or [privacy] is on: cohorts, secure sums or budgets
        that count clients, which hold only if clients are enrolled devices."""
        return self.rounds.enabled or self.secagg.enabled or self.privacy.enabled

    @property
    def identity_required(self) -> bool:
        """Whether requests must come from enrolled devices (``[identity] required``;
        ``"auto"``: when :attr:`counts_clients`)."""
        return self.identity.required_with(self.counts_clients)

    @property
    def max_n(self) -> int:
        """``[server] max_n``, or the system's default when it is 0."""
        return self.server.max_n or self.system.max_n

    def client_view(self) -> dict[str, Any]:
        """What clients need to know (served with the model): the workload's section and
        the rounds, never the admin token or paths."""
        section = self.system_config
        view = {k: getattr(section, k) for k in (f.name for f in fields(section))}
        view["rounds"] = {f.name: getattr(self.rounds, f.name) for f in fields(self.rounds)}
        view["max_staleness"] = self.server.max_staleness
        view["max_n"] = self.max_n  # a client caps its weight n here
        view["metrics"] = {name: [low, high] for name, low, high in self.metrics}
        return view


#: The service's own sections.
_SERVICE_SECTIONS: dict[str, type] = {
    "server": ServerSection,
    "iteration": IterationSection,
    "rounds": RoundsSection,
    "privacy": PrivacySection,
    "secagg": SecAggSection,
    "identity": IdentitySection,
}
#: Every section of the file: the service's and every system's.
_SECTIONS: dict[str, type] = {
    **_SERVICE_SECTIONS,
    **{s.section: s.config for s in SYSTEMS.values()},
}


def _typed(section: str, key: str, value: Any, kind: type) -> Any:
    where = f"[{section}] {key}"
    if kind is object:
        return value
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, got {value!r}")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ConfigError(f"{where} must be finite, got {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise ConfigError(f"{where} must be a string, got {value!r}")
    return value


def _section(name: str, cls: type, data: Any) -> Any:
    """``[name]`` as ``cls``."""
    if not isinstance(data, dict):
        raise ConfigError(f"[{name}] must be a table, got {data!r}")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(
            f"unknown key(s) {', '.join(unknown)} in [{name}]; known keys: {', '.join(known)}"
        )
    data = {k: v for k, v in data.items() if k in known}
    kinds = {k: _kind(hint) for k, hint in get_type_hints(cls).items() if k in known}
    values = {k: _typed(name, k, v, kinds[k]) for k, v in data.items()}
    try:
        return cls(**values)
    except ConfigError as exc:  # the section's own table and rules (core.validation)
        raise ConfigError(
            f"[{name}] {exc}", field=exc.field, requirement=exc.requirement, value=exc.value
        ) from exc


def _kind(hint: Any) -> type:
    """The TOML value type of a field: ``float | None`` is a float, a ``Literal`` of
    strings a string."""
    args = [a for a in get_args(hint) if a is not type(None)]
    if get_origin(hint) is Literal:
        return str
    if len(args) > 1:  # e.g. [identity] required = "auto" | true | false: the section checks
        return object
    if args and get_origin(hint) is not Literal and len(args) == 1:
        return _kind(args[0])
    return hint if isinstance(hint, type) else str


def _tables(data: Any, section: str, what: str, allowed: set[str], required: tuple[str, ...]
            ) -> list[dict[str, Any]]:  # fmt: skip
    """``[[section]]``: a non-empty array of tables with only ``allowed`` keys and every
    ``required`` one (``what`` names one table in the messages)."""
    if not isinstance(data, list) or not data:
        raise ConfigError(f"[[{section}]] must be a non-empty array of tables")
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise ConfigError(f"{what} {i} must be a table, got {item!r}")
        unknown = sorted(set(item) - allowed)
        if unknown:
            raise ConfigError(f"unknown key(s) {', '.join(unknown)} in {what} {i}")
        for key in required:
            if key not in item:
                raise ConfigError(f"{what} {i} needs a {key!r}")
    return data


def _branches(data: Any) -> tuple[Branch, ...]:
    out = []
    for item in _tables(data, "branches", "branch", {"name", "share", "served", "decay"},
                        ("name", "share")):  # fmt: skip
        out.append(
            Branch(
                name=_typed("branches", "name", item["name"], str),
                share=_typed("branches", "share", item["share"], float),
                served=_typed("branches", "served", item.get("served", "trained"), str),
                decay=_typed("branches", "decay", item.get("decay", False), bool),
            )
        )
    return tuple(out)


def _proxies(data: Any) -> tuple[Proxy, ...]:
    out = []
    for item in _tables(data, "proxies", "proxy", {"name", "token", "max_clients"},
                        ("name", "token")):  # fmt: skip
        name = _typed("proxies", "name", item["name"], str)
        token = _typed("proxies", "token", item["token"], str)
        limit = _typed("proxies", "max_clients", item.get("max_clients", 100_000), int)
        try:
            out.append(Proxy(name, token, limit))
        except ConfigError as exc:
            raise ConfigError(f"proxy {name!r}: {exc}") from exc
    return tuple(out)


def _metrics(data: Any) -> tuple[tuple[str, float, float], ...]:
    """``[metrics]``: ``name = [low, high]`` per metric, names of 1-64 characters of
    ``A-Z a-z 0-9 . _ : -``, finite bounds within +-:data:`METRIC_LIMIT`, ``low <= high``."""
    if not isinstance(data, dict) or not data:
        raise ConfigError("[metrics] must be a table of name = [low, high], e.g. loss = [0, 1e9]")
    if len(data) > MAX_METRIC_NAMES:
        raise ConfigError(f"[metrics] may name at most {MAX_METRIC_NAMES} metrics, got {len(data)}")
    out = []
    for name, bounds in sorted(data.items()):
        if not METRIC_NAME.fullmatch(name):
            raise ConfigError(
                f"[metrics] {name!r}: names have 1-64 characters of A-Z a-z 0-9 . _ : -"
            )
        if not isinstance(bounds, list) or len(bounds) != 2:
            raise ConfigError(f"[metrics] {name} must be [low, high], got {bounds!r}")
        low, high = (_typed("metrics", name, b, float) for b in bounds)
        if not -METRIC_LIMIT <= low <= high <= METRIC_LIMIT:
            raise ConfigError(
                f"[metrics] {name} = [{low:g}, {high:g}]: need low <= high, both within "
                f"+-{METRIC_LIMIT:g}"
            )
        out.append((name, low, high))
    return tuple(out)


def load_config(path: Path | None = None, **overrides: Any) -> ServerConfig:
    """Read ``path`` (TOML; ``None``: all defaults), apply ``overrides`` (keys of
    ``[server]`` and ``[iteration]``, e.g. ``workload``, ``port``, ``seconds``; ``None``
    values are ignored) and validate everything."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except OSError as exc:
            raise ConfigError(f"cannot read the configuration {path}: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    unknown = sorted(set(data) - set(_SECTIONS) - {"branches", "metrics", "proxies"})
    if unknown:
        raise ConfigError(
            f"unknown section(s) {', '.join(unknown)}; known: {', '.join(_SECTIONS)}, "
            "metrics, branches, proxies"
        )
    if isinstance(data.get("server"), dict) and "max_update_norm" in data["server"]:
        raise ConfigError(
            "[server] max_update_norm is now norm_bound in the workload's section ([frecency] "
            "or [fedavg] norm_bound = ...): one norm bound, applied by the aggregator, "
            "optionally adaptive (norm_quantile); see docs/service.md, Robust aggregation"
        )
    for key, value in overrides.items():
        if value is None:
            continue
        target = "server" if key in {f.name for f in fields(ServerSection)} else "iteration"
        if key not in {f.name for f in fields(_SECTIONS[target])}:
            raise ConfigError(f"unknown setting {key!r}")
        table = data.get(target, {})
        if isinstance(table, dict):  # else _section names the section that is no table
            data = {**data, target: {**table, key: value}}
    data = _admin_token_from_env(data)
    sections = {name: _section(name, cls, data.get(name, {})) for name, cls in _SECTIONS.items()}
    service = {name: sections.pop(name) for name in _SERVICE_SECTIONS}
    chosen = SYSTEMS[service["server"].workload]
    branches = _branches(data["branches"]) if "branches" in data else chosen.branches
    metrics = _metrics(data["metrics"]) if "metrics" in data else chosen.metrics
    proxies = _proxies(data["proxies"]) if "proxies" in data else ()
    resolved = {name: _resolved(section) for name, section in sections.items()}
    # The workload's default norm bound, where its section has one (FedAvg's), unless
    # [privacy] or [secagg] bound the updates themselves.
    default_bound = getattr(resolved[chosen.section], "with_default_bound", None)
    if default_bound is not None and not (service["privacy"].enabled or service["secagg"].enabled):
        resolved[chosen.section] = default_bound()
    return ServerConfig(
        sections=resolved,
        branches=branches,
        metrics=metrics,
        proxies=proxies,
        **service,
    )


def _admin_token_from_env(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with ``[server] admin_token`` read from the environment variable that
    ``[server] admin_token_env`` names, where it names one."""
    table = data.get("server")
    if not isinstance(table, dict) or not table.get("admin_token_env"):
        return data
    name = table["admin_token_env"]
    if not isinstance(name, str):
        return data  # _section names the wrong type
    if table.get("admin_token"):
        raise ConfigError(
            "[server] has both admin_token and admin_token_env: keep one (admin_token_env "
            "keeps the secret out of the file)"
        )
    token = os.environ.get(name, "")
    if not token:
        raise ConfigError(
            f"[server] admin_token_env = {name!r}, but the environment variable {name} is not "
            f"set; set it, e.g. export {name}=$(python -c 'import secrets; "
            "print(secrets.token_hex())')"
        )
    return {**data, "server": {**table, "admin_token": token}}


def _resolved(section: Any) -> Any:
    """A system's section with its defaults filled in, where it has some to fill
    (frecency's model-dependent margin and Rprop factors: ``resolved()``)."""
    resolve = getattr(section, "resolved", None)
    return section if resolve is None else resolve()
