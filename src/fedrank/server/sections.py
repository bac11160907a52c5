"""The service's own sections of the server's configuration: ``[server]``, ``[iteration]``,
``[rounds]``, ``[secagg]``, ``[privacy]`` and ``[[proxies]]`` (:mod:`fedrank.server.config`
loads them with the workload's system section and checks what ties them together). Each
declares what its keys accept (:mod:`fedrank.core.validation`); the meaning of every key and
its default is in its class's ``Attributes``, which ``python -m
fedrank.server.config_reference`` turns into the configuration reference
(docs/reference/config.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from numbers import Integral, Real

from fedrank.core.validation import Accepts, Interval, Options, Rule, Validated
from fedrank.federation.registry import SYSTEMS
from fedrank.privacy.accounting import ACCOUNTANTS
from fedrank.systems.system import StudyBranch

#: Largest metric bound: a summary adds up to ``10**12`` values of at most this size, far
#: from float64's range, so summaries stay finite.
METRIC_LIMIT = 1e12
#: Most metrics a schema (and so a message) may have.
MAX_METRIC_NAMES = 32
METRIC_NAME = re.compile(r"[A-Za-z0-9._:\-]{1,64}")
#: ``[identity] attestation``: an importable ``module:function``.
ATTESTATION = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


#: Shortest accepted secret (admin and proxy tokens).
MIN_TOKEN_LENGTH = 16
#: How to make a token, for the messages that refuse one.
_MAKE_TOKEN = "make one with: python -c 'import secrets; print(secrets.token_hex())'"
#: A finite number > 0.
_POSITIVE = Interval(Real, 0, None, closed="neither")


def _strong_token(token: str) -> bool:
    return len(token) >= MIN_TOKEN_LENGTH and token == token.strip()


@dataclass(frozen=True)
class ServerSection(Validated):
    """``[server]``: the workload, where the store is, and the HTTP server's limits.

    Attributes:
        workload: the system the server trains, one of the registry's
            (:data:`fedrank.federation.registry.SYSTEMS`).
        store: the store's directory: the SQLite database and the Parquet audit log.
        host: the address the HTTP server listens on.
        port: its port (0: any free port).
        admin_token: the bearer token of the admin endpoints; empty: admin disabled.
        admin_token_env: the name of an environment variable that holds the admin token,
            read at start (so that the file holds no secret); empty: none. Give this or
            ``admin_token``, not both.
        max_body_bytes: larger requests get 413 (a 10,000-message batch takes 1-4 MB).
        max_staleness: accept updates computed on up to this many model versions back.
        max_n: the largest weight ``n`` of a message; 0: the workload's default (frecency
            100 searches, fedavg 100,000 training queries).
        header_timeout: a request's headers must arrive within this many seconds, or the
            connection is closed.
        body_timeout: its body within this many seconds, or 408.
        keep_alive_timeout: an idle connection between requests is closed after this many
            seconds.
        max_connections: concurrent connections; beyond, new requests get 503.
        request_timeout: a whole request, first byte to last body byte, within this many
            seconds, or the connection is closed.
        write_timeout: a client that reads none of its answer for this many seconds is
            closed.
        max_connections_per_address: open connections from one client address; beyond,
            closed at once (behind a reverse proxy, rely on ``max_connections``).
    """

    workload: str = "frecency"
    store: str = "fedrank-data/store"
    host: str = "127.0.0.1"
    port: int = 8000
    admin_token: str = ""
    admin_token_env: str = ""
    max_body_bytes: int = 16_777_216
    max_staleness: int = 0
    max_n: int = 0
    header_timeout: float = 10.0
    body_timeout: float = 60.0
    keep_alive_timeout: float = 5.0
    max_connections: int = 1000
    request_timeout: float = 70.0
    write_timeout: float = 30.0
    max_connections_per_address: int = 64

    ACCEPTS = {
        "workload": Options(*SYSTEMS),
        "store": str,
        "host": str,
        "port": Interval(Integral, 0, 65535),
        "admin_token": str,
        "admin_token_env": str,
        "max_body_bytes": Interval(Integral, 1024, None),
        "max_staleness": Interval(Integral, 0, None),
        "max_n": Accepts(Interval(Integral, 0, 10**9), note="0: the workload's default"),
        "header_timeout": _POSITIVE,
        "body_timeout": _POSITIVE,
        "keep_alive_timeout": _POSITIVE,
        "max_connections": Interval(Integral, 1, None),
        "request_timeout": _POSITIVE,
        "write_timeout": _POSITIVE,
        "max_connections_per_address": Interval(Integral, 1, None),
    }
    RULES = (
        Rule(lambda s: bool(s.store), "store must name a directory"),
        Rule(
            lambda s: not s.admin_token or _strong_token(s.admin_token),
            f"admin_token must have at least {MIN_TOKEN_LENGTH} characters and no surrounding "
            f"spaces (or be empty: admin disabled); {_MAKE_TOKEN}",
        ),
        Rule(
            lambda s: s.request_timeout >= max(s.header_timeout, s.body_timeout),
            "request_timeout must be at least header_timeout and body_timeout (it bounds "
            "a whole request: its headers and its body)",
        ),
    )


@dataclass(frozen=True)
class IterationSection(Validated):
    """``[iteration]``: when an iteration closes (:mod:`fedrank.core.iteration_policy`).

    Attributes:
        seconds: the fixed-time policy's length in seconds (the paper's 30 minutes); 0: off.
        min_updates: never apply an aggregate of fewer updates.
        stable_ticks: the adaptive policy: close once the aggregate's sign is unchanged for
            this many ticks; 0: off.
        tick_seconds: how often the scheduler looks, in seconds.
    """

    seconds: float = 1800.0
    min_updates: int = 1
    stable_ticks: int = 0
    tick_seconds: float = 0.5

    ACCEPTS = {
        "seconds": Accepts(Interval(Real, 0, None), note="0: no fixed-time policy"),
        "min_updates": Interval(Integral, 1, None),
        "stable_ticks": Interval(Integral, 0, None),
        "tick_seconds": _POSITIVE,
    }


@dataclass(frozen=True)
class RoundsSection(Validated):
    """``[rounds]``: server-selected rounds of ``clients_per_round`` clients, sampled
    uniformly from those that check in during a window (:mod:`fedrank.server.cohort`).
    They apply to every workload but frecency.

    Attributes:
        enabled: server-selected rounds on.
        clients_per_round: ``K``, the seats of a round.
        t_max_seconds: the reporting deadline after selection, in seconds.
        checkin_seconds: the check-in window, from a round's first check-in; at its end
            ``K`` of the clients that checked in are sampled uniformly at random (never
            first come, first served).
        min_checkins: the window stays open until this many clients wait (a secure round
            always waits for ``K``).
        max_waiting: the clients a window keeps, the rest reservoir-sampled (a flood
            cannot crowd out earlier ones); 0: 100 x ``K``.
        selection_seed: -1: selections from a CSPRNG; >= 0: a seeded generator,
            reproducible (simulations and tests only).
    """

    enabled: bool = False
    clients_per_round: int = 100
    t_max_seconds: float = 60.0
    checkin_seconds: float = 10.0
    min_checkins: int = 1
    max_waiting: int = 0
    selection_seed: int = -1

    ACCEPTS = {
        "enabled": bool,
        "clients_per_round": Interval(Integral, 1, None),
        "t_max_seconds": _POSITIVE,
        "checkin_seconds": Interval(Real, 0, 3600, closed="right"),
        "min_checkins": Interval(Integral, 1, None),
        "max_waiting": Accepts(
            Options(0), Interval(Integral, 1, None), note="0: 100 x clients_per_round"
        ),
        "selection_seed": Accepts(
            Interval(Integral, -1, None), note="-1: a CSPRNG; >= 0: reproducible selections"
        ),
    }
    RULES = (
        Rule(
            lambda r: r.max_waiting == 0 or r.max_waiting >= r.clients_per_round,
            "max_waiting ({max_waiting}) must be 0 (100 x clients_per_round) or at least "
            "clients_per_round ({clients_per_round}): a window keeps the candidates for K seats",
        ),
        Rule(
            lambda r: r.min_checkins <= r.waiting_cap,
            "min_checkins ({min_checkins}) must be at most max_waiting (0: 100 x "
            "clients_per_round), or no window could ever close",
        ),
    )

    @property
    def waiting_cap(self) -> int:
        """The most clients a round's window keeps (a reservoir sample of the rest)."""
        return self.max_waiting or 100 * self.clients_per_round


@dataclass(frozen=True)
class SecAggSection(Validated):
    """``[secagg]``: secure aggregation of every round of FedAvg deltas
    (:mod:`fedrank.server.secagg_round`, docs/secagg.md).

    Attributes:
        enabled: secure aggregation on (needs ``[rounds]``).
        threshold: ``t``, the clients needed to finish a round; 0: a majority,
            ``K // 2 + 1``.
        l2_bound: clients clip their delta to this L2 norm (required when enabled).
        stage_seconds: each protocol stage closes after this many seconds (or when every
            member sent).
        allow_low_threshold: accept a ``threshold`` below a majority of the cohort (logged
            as a warning at start).
    """

    enabled: bool = False
    threshold: int = 0
    l2_bound: float = 0.0
    stage_seconds: float = 30.0
    allow_low_threshold: bool = False

    ACCEPTS = {
        "enabled": bool,
        "threshold": Accepts(
            Options(0), Interval(Integral, 2, None), note="t; 0: a majority of the cohort"
        ),
        "l2_bound": Interval(Real, 0, None),
        "stage_seconds": Interval(Real, 0, 3600, closed="right"),
        "allow_low_threshold": bool,
    }
    RULES = (
        Rule(
            lambda s: not s.enabled or s.l2_bound > 0,
            "l2_bound must be > 0: clients clip their delta to it, which keeps the masked sum "
            "from wrapping",
        ),
    )

    def threshold_for(self, clients_per_round: int) -> int:
        """``t``: the configured one, or a majority of the cohort (``K // 2 + 1``)."""
        return self.threshold or clients_per_round // 2 + 1


@dataclass(frozen=True)
class PrivacySection(Validated):
    """``[privacy]``: differential privacy of the trained model, central
    (:class:`~fedrank.strategies.dp.DPStrategy`) or distributed (the clients' Skellam
    shares under ``[secagg]``), served by :mod:`fedrank.server.privacy`. On when
    ``epsilon > 0``; its rules between keys apply then (docs/privacy.md, "In the server").

    Attributes:
        epsilon: each user's budget over the server's whole training; 0: off (calibrated
            for 0.05 to 50).
        delta: its delta, well below 1 / users (1e-12 to 0.1).
        clip: the L2 bound ``C`` of every update (required with ``epsilon``).
        rounds: the iterations the budget covers (required with ``epsilon``); the noise is
            calibrated to them and no iteration closes after them.
        accountant: ``pld`` (tight) or ``rdp`` (Renyi DP).
        noise_seed: -1: noise from the store's secret seed (OS entropy, drawn once); >= 0:
            reproducible noise (tests and experiments only).
        mode: ``central`` (the server clips and adds Gaussian noise) or ``distributed``
            (clients add Skellam noise under ``[secagg]``, :mod:`fedrank.privacy.skellam`;
            needs ``clip`` equal to ``[secagg] l2_bound`` and ``accountant = "rdp"``).
        clip_quantile: central only: the clip follows this quantile of the update norms,
            estimated privately (Andrew et al. 2021,
            :class:`~fedrank.privacy.adaptive_clip.AdaptiveClip`); 0: a fixed clip.
        count_noise: ``sigma_b``, the noise on that estimate's count (required with
            ``clip_quantile``; Andrew et al.: the expected updates per iteration / 20).
        clip_eta: the adaptive clip's learning rate.
        denominator: central only: divide each noised sum by this fixed number ``W``
            (about the expected updates per iteration, :class:`~fedrank.strategies.dp.DPStrategy`),
            so that the model hides who took part too; 0: by the iteration's count.
        public_counts: true: ``/v1/status``'s counts, ``/v1/summary`` and ``/metrics``
            answer anyone, as without ``[privacy]`` (their exact counts reveal who took
            part); false: only the admin token.
        noise: central only: ``numpy`` (Gaussian floats from PCG64, for experiments) or
            ``secure`` (the discrete Gaussian on a lattice from ChaCha20 keyed by the
            store's secret, :mod:`fedrank.privacy.discrete_gaussian`; needs
            ``accountant = "rdp"`` and a fixed clip).
    """

    epsilon: float = 0.0
    delta: float = 1e-6
    clip: float = 0.0
    rounds: int = 0
    accountant: str = "pld"
    noise_seed: int = -1
    mode: str = "central"
    clip_quantile: float = 0.0
    count_noise: float = 0.0
    clip_eta: float = 0.2
    denominator: float = 0.0
    public_counts: bool = False
    noise: str = "numpy"

    ACCEPTS = {
        "epsilon": Accepts(Interval(Real, 0, None), note="each user's budget; 0: off"),
        "delta": Interval(Real, 0, 1, closed="neither"),
        "clip": Accepts(Interval(Real, 0, None), note="the L2 bound of every update"),
        "rounds": Accepts(Interval(Integral, 0, 100_000), note="the iterations the budget covers"),
        "accountant": Options(*ACCOUNTANTS),
        "noise_seed": Accepts(Interval(Integral, -1, None), note="-1: the store's secret seed"),
        "mode": Options("central", "distributed"),
        "clip_quantile": Accepts(
            Interval(Real, 0, 1, closed="neither"), Options(0), note="0: a fixed clip"
        ),
        "count_noise": Accepts(
            Interval(Real, 0, None), note="sigma_b, the noise on the adaptive clip's count"
        ),
        "clip_eta": Accepts(_POSITIVE, note="the adaptive clip's learning rate"),
        "denominator": Accepts(
            Options(0),
            Interval(Real, 1, 1e9),
            note="W, about the expected updates per iteration; 0: the iteration's count",
        ),
        "public_counts": bool,
        "noise": Options("numpy", "secure"),
    }
    RULES = (
        Rule(
            lambda p: not p.enabled or p.clip > 0,
            "clip (the L2 bound of every update) must be > 0 with epsilon > 0, got {clip}",
        ),
        Rule(
            lambda p: not p.enabled or p.rounds >= 1,
            "rounds (the iterations the budget covers) must be in 1..100000 with epsilon > 0, "
            "got {rounds}",
        ),
        Rule(
            lambda p: not p.enabled or p.adaptive or p.count_noise == 0,
            "count_noise belongs to the adaptive clip: give clip_quantile too",
        ),
        Rule(
            lambda p: not p.enabled or not p.adaptive or p.count_noise > 0,
            "clip_quantile needs count_noise > 0 (sigma_b, the noise on the count of updates "
            "within the clip; Andrew et al. take the expected updates per iteration / 20)",
        ),
        Rule(
            lambda p: not p.enabled or p.denominator == 0 or p.mode == "central",
            "denominator is central DP's: under mode = 'distributed' the decoded sum is "
            "divided by the round's contributors",
        ),
        Rule(
            lambda p: not p.enabled or not (p.adaptive and p.mode == "distributed"),
            "clip_quantile is central DP's: under mode = 'distributed' the clients clip to "
            "the fixed [secagg] l2_bound",
        ),
        Rule(
            lambda p: not p.enabled or p.noise == "numpy" or p.mode == "central",
            "noise = 'secure' is the server's noise (central DP); under mode = 'distributed' "
            "the clients add it",
        ),
        Rule(
            lambda p: not p.enabled or p.noise == "numpy" or p.accountant == "rdp",
            "noise = 'secure' (the discrete Gaussian) is accounted by its Renyi bound: set "
            "accountant = 'rdp', got {accountant!r}",
        ),
        Rule(
            lambda p: not p.enabled or p.noise == "numpy" or not p.adaptive,
            "noise = 'secure' noises the updates' sum; the adaptive clip's count noise is "
            "numpy's: drop clip_quantile (a fixed clip)",
        ),
    )

    @property
    def adaptive(self) -> bool:
        return self.clip_quantile > 0

    @property
    def distributed(self) -> bool:
        return self.enabled and self.mode == "distributed"

    @property
    def enabled(self) -> bool:
        return self.epsilon > 0


@dataclass(frozen=True)
class IdentitySection(Validated):
    """``[identity]``: enrolled devices (:mod:`fedrank.identity`, docs/devices.md).

    Attributes:
        required: ``"auto"``: true when ``[rounds]``, ``[secagg]`` or ``[privacy]`` is on;
            true: every check-in, update and secagg message comes from an enrolled device;
            false: anyone (a warning with those on).
        session_seconds: a device's session key lasts this many seconds (10 to 86,400).
        max_clock_skew_seconds: a signed request's timestamp must be within this many
            seconds of the server's clock (1 to 3,600); older ones (replays) are refused.
        device_rate: requests per second per device (a token bucket); 0: off.
        device_burst: the device's bucket size.
        address_rate: requests per second per client address where identity is checked;
            0: off. Beyond either limit: 429 with Retry-After.
        address_burst: the address's bucket size.
        attestation: ``"module:function"``, called with ``(public_key, evidence)`` at
            enrollment; true admits a device without an enrollment token. Empty: none.
    """

    required: bool | str = "auto"
    session_seconds: float = 3600.0
    max_clock_skew_seconds: float = 60.0
    device_rate: float = 10.0
    device_burst: int = 100
    address_rate: float = 100.0
    address_burst: int = 1000
    attestation: str = ""

    ACCEPTS = {
        "required": Options("auto", True, False),
        "session_seconds": Interval(Real, 10, 86_400),
        "max_clock_skew_seconds": Interval(Real, 1, 3600),
        "device_rate": Accepts(Options(0), Interval(Real, 1, None), note="requests/s; 0: off"),
        "device_burst": Interval(Integral, 1, None),
        "address_rate": Accepts(Options(0), Interval(Real, 1, None), note="requests/s; 0: off"),
        "address_burst": Interval(Integral, 1, None),
        "attestation": str,
    }
    RULES = (
        Rule(
            lambda s: not s.attestation or ATTESTATION.fullmatch(s.attestation) is not None,
            "attestation must be 'module:function' (e.g. 'mycompany.attest:check'), got "
            "{attestation!r}",
        ),
    )

    def required_with(self, protected: bool) -> bool:
        """Whether requests must come from enrolled devices, given whether [rounds],
        [secagg] or [privacy] is on (``protected``)."""
        return protected if self.required == "auto" else bool(self.required)


#: A study branch: its name, share, what it is served and whether its clients decay.
Branch = StudyBranch


@dataclass(frozen=True)
class Proxy(Validated):
    """``[[proxies]]``: a proxy allowed to send merged aggregates (``POST
    /v1/updates:batch`` with ``{"aggregate": ...}``); none by default (refused).

    Attributes:
        name: the proxy's name, distinct among the proxies.
        token: its secret of 16 or more characters, sent as ``Authorization: Bearer
            <token>``; every proxy has its own.
        max_clients: the most client messages one aggregate may stand for.
    """

    name: str
    token: str
    max_clients: int = 100_000

    ACCEPTS = {"name": str, "token": str, "max_clients": Interval(Integral, 1, 10**9)}
    RULES = (
        Rule(
            lambda p: _strong_token(p.token),
            f"the token must have at least {MIN_TOKEN_LENGTH} characters and no surrounding "
            f"spaces ({_MAKE_TOKEN})",
        ),
    )

    def __repr__(self) -> str:  # never print a token
        return f"Proxy(name={self.name!r}, max_clients={self.max_clients})"
