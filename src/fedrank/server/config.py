"""The server's configuration: a TOML file, overridden by command-line flags, validated in
full at start (an unknown key, a wrong type or an out-of-range value is an error that names
the section and the key).

A complete example (every key optional; these are the defaults)::

    [server]
    workload = "frecency"        # frecency | foltr-es | fedavg | fpdgd (the registry's systems)
    store = "fedrank-data/store" # directory: SQLite database, Parquet audit log
    host = "127.0.0.1"
    port = 8000
    admin_token = ""             # bearer token of the admin endpoints; empty: admin disabled
    max_body_bytes = 16777216    # larger requests get 413 (a 10,000-message batch: 1-4 MB)
    max_staleness = 0            # accept updates computed on up to this many versions back
    max_n = 0                    # largest weight n of a message; 0: the workload's default
                                 # (frecency 100 searches, fedavg 100000 training queries)
    header_timeout = 10.0        # a request's headers must arrive within this (s), or closed
    body_timeout = 60.0          # its body within this (s), or 408
    keep_alive_timeout = 5.0     # an idle connection between requests is closed after this
    max_connections = 1000       # concurrent connections; beyond, new requests get 503
    request_timeout = 70.0       # a whole request, first byte to last body byte (s), or closed
    write_timeout = 30.0         # a client that reads none of its answer for this long: closed
    max_connections_per_address = 64  # open connections from one client address; beyond,
                                 # closed at once (behind a reverse proxy: max_connections)

    [iteration]
    seconds = 1800.0             # fixed-time policy (the paper's 30 minutes); 0: off
    min_updates = 1              # never apply an aggregate of fewer updates
    stable_ticks = 0             # adaptive policy: aggregate sign unchanged for this many ticks
    tick_seconds = 0.5           # how often the scheduler looks

    [frecency]                   # Mozilla paper, Sections 5-6 (fedrank.systems.frecency)
    model = "classic"            # classic (22 weights) | modern (Firefox 128+)
    setting = "paper"            # paper | mozilla-deployed (the study's Scala server)
    message = "full"             # full (float gradients) | sign (2 bits per weight)
    optimizer = "rprop"          # rprop | sgd | adam
    significance_z = 1.0         # per-weight significance gate (default: 1 paper, 0 deployed)
    aggregator = "gated-mean"    # gated-mean (sign vote for sign messages) | median |
                                 # trimmed-mean (coordinate-wise, unweighted; full only)
    trim = 0.1                   # trimmed-mean: fraction dropped from each end, [0, 0.5)
    norm_bound = 0.0             # full gradients scaled down to this L2 norm; 0: as sent
    # norm_quantile = 0.5        # adapt norm_bound towards this quantile of the gradient
                                 # norms every iteration (Andrew et al. 2021); unset: fixed
    max_rows = 100000            # most gradients a median / trimmed mean holds per iteration
    eps = 1.0                    # finite-difference epsilon the clients use
    max_change = 3.0             # safeguard: change per iteration (paper setting)
    eta_plus = 1.2               # Rprop (Eq. 2); defaults: the setting's
    eta_minus = 0.5
    step_init = 1.0
    step_min = 0.001
    step_max = 3.0
    learning_rate = 1.0          # sgd | adam
    decay_rate = 0.975           # classic frecency's daily decay, served to control

    [foltr_es]                   # FOLtR-ES, Section 3
    ranker = "linear"            # linear | two-layer
    n_features = 46
    sigma = 0.01
    batch = 4                    # B
    antithetic = true
    p = 0.9                      # randomized response; 1.0: no privatization
    learning_rate = 0.001        # Adam
    difference_bound = 0.0       # clip each report's f+ - f- to [-b, b]; 0: as reported
    server_seeds = false         # the server issues each selected client's seed at check-in
                                 # and updates carry its seed_token (needs [rounds]; no
                                 # [[proxies]]); false: clients draw their own (the paper)

    [fedavg]                     # FedAvg of parameter deltas (FedPS, Algorithm 1)
    dim = 100                    # number of shared parameters
    server_learning_rate = 1.0
    aggregator = "mean"          # mean (n-weighted) | median | trimmed-mean (unweighted)
    trim = 0.1
    norm_bound = 0.0             # deltas scaled down to this L2 norm; 0: the default bound
                                 # (1.0 adapting to the 0.9-quantile of the norms; none under
                                 # [privacy] or [secagg], which bound deltas themselves)
    # norm_quantile = 0.5        # adaptive bound (see [frecency])
    max_rows = 100000
    unbounded = false            # true: no default bound, deltas averaged as sent (a warning)

    [fpdgd]                      # FPDGD (Wang et al. 2021): FedAvg of PDGD deltas
    ranker = "linear"            # linear | two-layer
    n_features = 46
    batch = 4                    # B: a client's interactions (PDGD steps) per round
    learning_rate = 0.1          # the clients' local step
    server_learning_rate = 1.0
    laplace = "none"             # none | local | distributed: the clients' Laplace noise
    laplace_epsilon = 4.5
    laplace_clip = 1.0           # L1 radius of every delta before the noise
    laplace_shares = 1           # distributed: K, the clients whose shares add up
    aggregator = "mean"          # as [fedavg]
    seed = 0                     # the first model's seed (a two-layer ranker's weights)

    [rounds]                     # server-selected rounds (every workload but frecency)
    enabled = false
    clients_per_round = 100      # K
    t_max_seconds = 60.0         # reporting deadline after selection
    checkin_seconds = 10.0       # the check-in window, from a round's first check-in; at
                                 # its end K of the clients that checked in are sampled
                                 # uniformly at random (never first-come; docs/service.md)
    min_checkins = 1             # the window stays open until this many clients wait (a
                                 # secure round always waits for K)
    max_waiting = 0              # clients a window keeps, the rest reservoir-sampled (a
                                 # flood cannot crowd out earlier ones); 0: 100 x K
    selection_seed = -1          # -1: selections from a CSPRNG; >= 0: a seeded generator,
                                 # reproducible (simulations and tests only)

    [secagg]                     # secure aggregation of each round (fedavg; docs/secagg.md)
    enabled = false
    threshold = 0                # t: clients needed to finish a round; 0: K // 2 + 1
    l2_bound = 0.0               # clients clip their delta to this L2 norm (required)
    stage_seconds = 30.0         # each protocol stage closes after this (or when all sent)
    allow_low_threshold = false  # true: accept threshold < K // 2 + 1 (logged as a warning)

    [privacy]                    # DP of the model (frecency, fedavg; docs/privacy.md)
    mode = "central"             # central: the server clips and adds Gaussian noise;
                                 # distributed: clients add Skellam noise under [secagg]
                                 # (needs clip = [secagg] l2_bound, accountant = "rdp")
    epsilon = 0.0                # each user's budget over the server's whole training; 0: off
                                 # (calibrated for 0.05..50)
    delta = 1e-6                 # its delta, well below 1 / users (1e-12..0.1)
    clip = 0.0                   # L2 bound C of every update (required with epsilon)
    rounds = 0                   # iterations the budget covers (required with epsilon); the
                                 # noise is calibrated to them and no iteration closes after
    accountant = "pld"           # pld (tight) | rdp
    noise_seed = -1              # -1: noise from the store's secret seed (OS entropy, drawn
                                 # once); >= 0: reproducible noise (tests and experiments only)
    clip_quantile = 0.0          # central only: the clip follows this quantile of the update
                                 # norms, estimated privately (Andrew et al. 2021); 0: fixed
    count_noise = 0.0            # sigma_b of that estimate (required with clip_quantile;
                                 # Andrew et al.: the expected updates per iteration / 20)
    clip_eta = 0.2               # the adaptive clip's learning rate
    denominator = 0.0            # central only: divide each noised sum by this fixed number
                                 # (about the expected updates per iteration), so that the
                                 # model hides who took part too; 0: by the iteration's count
    public_counts = false        # true: /v1/status's counts, /v1/summary and /metrics answer
                                 # anyone, as without [privacy] (their exact counts reveal who
                                 # took part); false: only to the admin token
    noise = "numpy"              # central only: numpy (PCG64 floats, for experiments) | secure
                                 # (discrete Gaussian on a lattice from ChaCha20, keyed by the
                                 # store's secret; needs accountant = "rdp", a fixed clip)

    [identity]                   # enrolled devices (docs/devices.md)
    required = "auto"            # "auto": true when [rounds], [secagg] or [privacy] is on;
                                 # true: every check-in, update and secagg message comes from
                                 # an enrolled device; false: anyone (a warning with those on)
    session_seconds = 3600.0     # a device's session key lasts this long (10..86400)
    max_clock_skew_seconds = 60.0  # a signed request's timestamp within this of the server's
                                 # clock (1..3600); older ones (replays) are refused
    device_rate = 10.0           # requests/s per device (token bucket; >= 1, or 0: off)
    device_burst = 100           # its bucket size
    address_rate = 100.0         # requests/s per client address where identity is checked
    address_burst = 1000         # (>= 1, or 0: off); beyond either limit: 429, Retry-After
    attestation = ""             # "module:function": called with (public_key, evidence) at
                                 # enrollment; true admits a device without a token

    [metrics]                    # the metrics clients may report: name = [low, high]
    loss = [0.0, 1e9]            # (given, the table replaces the workload's defaults,
    chars_typed = [0.0, 2048.0]  #  system's metrics; these are frecency's)
    evaluation = [0.0, 1.0]
    searches = [0.0, 1e6]
    selected_rank = [0.0, 1000.0]

    [[proxies]]                  # proxies that may send merged aggregates (none by default)
    name = "proxy-eu"
    token = "a secret of 16 or more characters"   # sent as Authorization: Bearer <token>
    max_clients = 100000         # most client messages one aggregate may stand for

    [[branches]]                 # study branches (Mozilla Section 6.2)
    name = "treatment"
    share = 0.6
    served = "trained"           # trained | defaults
    [[branches]]
    name = "control"
    share = 0.2
    served = "defaults"
    decay = true                 # classic frecency's daily decay in this branch
    [[branches]]
    name = "control-no-decay"
    share = 0.2
    served = "defaults"
    decay = false

Without ``[[branches]]`` a workload runs its system's default branches
(:attr:`fedrank.systems.system.System.branches`): frecency the three branches above, the
other workloads a single ``treatment`` branch with share 1. Without ``[metrics]`` its
clients may report its system's metrics (:attr:`~fedrank.systems.system.System.metrics`).
"""

from __future__ import annotations

import math
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


def _resolved(section: Any) -> Any:
    """A system's section with its defaults filled in, where it has some to fill
    (frecency's model-dependent margin and Rprop factors: ``resolved()``)."""
    resolve = getattr(section, "resolved", None)
    return section if resolve is None else resolve()
