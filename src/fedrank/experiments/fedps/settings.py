"""The settings of one FedPS experiment (:class:`FedPSSettings`) and the names they are
checked against, in a module that imports neither torch nor LightGBM: a command line is
checked, and a Dask cluster started, before the heavy imports of the run
(:mod:`fedrank.experiments.fedps.run` has the modes' descriptions)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from numbers import Integral, Real
from typing import Any

from fedrank.baselines.list_rankers import RULES as RANKING_RULES
from fedrank.core.validation import Accepts, Delegated, Interval, Options, Rule, Validated
from fedrank.federation.privacy import PrivacyConfig
from fedrank.privacy.accounting import check_budget
from fedrank.privacy.report import fedps_dp_block, fedps_steps
from fedrank.retrieval.candidates import FEATURE_EDGES

RULE_MODES: tuple[str, ...] = RANKING_RULES
TRAINED_MODES: tuple[str, ...] = ("knrm", "central", "flat", "proxy", "coverquery", "groupuser")
#: Modes trained by clients on their devices (the others train on the server).
FEDERATED_MODES: tuple[str, ...] = ("flat", "proxy")
#: Rounds of the click-feature warm-up by default: the feature tower alone peaked after 5.5
#: to 6.25 epochs in central runs on the 1,000-user sample (docs/fedps.md, "Model").
DEFAULT_WARMUP_ROUNDS = 8
#: The most warm-up rounds a run accepts.
MAX_WARMUP_ROUNDS = 100
MODES: tuple[str, ...] = (*RULE_MODES, "gbdt", *TRAINED_MODES)
#: Modes whose outcome depends on a training seed.
SEEDED_MODES: tuple[str, ...] = ("gbdt", *TRAINED_MODES)

#: The personalized model's variants (:class:`fedrank.models.peps.ranker.PEPSConfig` fields).
#: ``compact``: the first model, a tanh MLP of 16 units on the raw click features and a
#: final tanh MLP over the six scores. ``encoded``: the click features in fixed bins
#: (:data:`~fedrank.retrieval.candidates.FEATURE_EDGES`) through two ReLU layers of 64, and
#: a final ReLU MLP that also sees that tower's hidden layer. On the AOL lists the compact
#: tower ranked by the click history worse than a GBDT on the same features
#: (docs/fedps.md, "Model").
MODEL_VARIANTS: dict[str, dict[str, Any]] = {
    "compact": {},
    "encoded": {
        "feature_hidden": 64,
        "feature_layers": 2,
        "feature_edges": FEATURE_EDGES,
        "combine_hidden": 32,
        "combine_sees_features": True,
    },
}


def _per_proxy(settings: FedPSSettings) -> int:
    """Clients a FedPSProxy step samples under each proxy (at most ``K``)."""
    return min(settings.clients_per_proxy_step, settings.clients_per_step)


#: An integer >= 1 (counts of rounds, clients, epochs...).
_AT_LEAST_ONE = Interval(Integral, 1, None)
#: A finite number > 0.
_POSITIVE = Interval(Real, 0, None, closed="neither")


@dataclass(frozen=True)
class FedPSSettings(Validated):
    """One experiment's settings (defaults: FedPS Sec. 4.3 and Algorithm 1).

    Attributes:
        mode: one of :data:`MODES`.
        rounds: ``R``, the most rounds of federated training (epochs of central training).
        evals_per_round: validation evaluations per round or epoch (4: every quarter).
        patience: stop after this many evaluations without a better validation MAP.
        clients_per_step: ``K`` (paper: 10).
        clients_per_proxy_step: clients sampled under one proxy in a FedPSProxy step
            (paper: 10; a step samples ``K / clients_per_proxy_step`` proxies).
        local_epochs: ``E`` (paper: 1).
        batch_size: ``B``, queries per minibatch.
        learning_rate: ``eta``, Adam's step size (clients' and central).
        server_learning_rate: ``eta_s`` of the FedAvg step; Algorithm 1 is 1 (default).
        straggler_ratio: the share of responses later than ``T_max`` (paper: 10%), which
            sets ``T_max`` unless ``t_max`` is given.
        t_max: ``T_max`` in seconds of the response-time model (``None``: calibrated).
        clients_per_proxy, proxies_per_group: the FedPSProxy topology (paper: 100 clients
            per proxy and 1,000 proxies per group server for 118,067 users, i.e. two group
            servers; 5 proxies per group server gives the AOL sample's 986 users two as
            well).
        upload: upload case of Sec. 3.3.2: ``"all"``, ``"frequent"`` or ``"frozen"``.
            Models trained on the server (central, K-NRM, CoverQuery, GroupUser) upload
            nothing, but ``"frozen"`` keeps their global word embeddings fixed as well
            (case 3's model); ``"frequent"`` is for federated modes only.
        frequent_words: words whose rows are uploaded under ``"frequent"``.
        client_metrics: clients also send their training loss (off: the update and its
            count only).
        cover_queries: ``m``, cover queries per real query (paper: 1).
        n_topics: LDA topics of the cover-query generator.
        group_size: users per GroupUser identity (paper: 100).
        seed: the training seed: model initialization, sampling, response times, covers,
            groups (the data have their own seed, :func:`prepare_aol`).
        model: the personalized model's variant (:data:`MODEL_VARIANTS`): ``"encoded"``
            (default) or ``"compact"`` (the first model: a tanh MLP on the raw features).
        text_dropout: the personalized model's text dropout in training
            (:class:`fedrank.models.peps.ranker.PEPSConfig`).
        warmup_rounds: rounds (epochs, in central training) of the click-feature warm-up
            before the full model
            (:meth:`fedrank.models.peps.ranker.PEPSRanker.set_features_only`; trained the
            same way as the full model, FedAvg in federated modes; validated every ``1 /
            evals_per_round`` round, stopped after ``patience`` evaluations without gain,
            and the best warm-up model is where the full training starts).
            ``None``: :data:`DEFAULT_WARMUP_ROUNDS`, or 0 with DP (its rounds are not in
            the accounting). Models without a feature tower (K-NRM) skip it.
        dp_epsilon: each user's DP budget over the training (flat and proxy only; 0:
            off): DP-FedAvg with the noise that keeps ``rounds`` participations within
            ``(dp_epsilon, dp_delta)`` (every client takes part in exactly one step per
            round), updates clipped to ``dp_clip``; the server's Gaussian noise or the
            clients' Skellam shares (``dp_mode``).
        dp_delta, dp_clip: the budget's delta and the clip ``C``.
        dp_denominator: divide each step's noised sum by this fixed number instead of the
            step's count of updates (``None``: the count), so that the model hides who took
            part (McMahan et al. 2018; e.g. ``clients_per_step``).
        sampling: FedPSFlat's clients per step: ``shuffle`` (the paper: each round visits
            every client once) or ``poisson`` (each step takes every client with
            probability ``K / N``; with DP it needs ``dp_denominator`` and gives
            amplification by subsampling; :mod:`~fedrank.experiments.fedps.client_sampling`).
        dp_mode: ``central`` (the server adds Gaussian noise to the clipped updates it
            sees) or ``distributed`` (each client encodes its clipped update on secure
            aggregation's integer grid and adds a share of Skellam noise; the server sees
            only each step's noisy sum: :mod:`fedrank.privacy.skellam`, the service's
            ``[privacy] mode = "distributed"``). Its plan depends on the model's dimension,
            so it is calibrated when the run starts.
        dp_threshold: distributed DP: secure aggregation's threshold ``t`` as a share of
            ``K`` (``t = max(2, ceil(dp_threshold K))``): a step with fewer contributors
            (late clients are dropped) is aborted and leaves the model as it is.
    """

    mode: str
    rounds: int = 4
    evals_per_round: int = 4
    patience: int = 4
    clients_per_step: int = 10
    clients_per_proxy_step: int = 10
    local_epochs: int = 1
    batch_size: int = 32
    learning_rate: float = 1e-3
    server_learning_rate: float = 1.0
    straggler_ratio: float = 0.1
    t_max: float | None = None
    clients_per_proxy: int = 100
    proxies_per_group: int = 5
    upload: str = "all"
    frequent_words: int = 5000
    client_metrics: bool = False
    cover_queries: int = 1
    n_topics: int = 50
    group_size: int = 100
    seed: int = 0
    model: str = "encoded"
    text_dropout: float = 0.3
    warmup_rounds: int | None = None
    dp_epsilon: float = 0.0
    dp_delta: float = 1e-6
    dp_clip: float = 0.0
    dp_denominator: float | None = None
    sampling: str = "shuffle"
    dp_mode: str = "central"
    dp_threshold: float = 0.5

    ACCEPTS = {
        "mode": Options(*MODES),
        "rounds": _AT_LEAST_ONE,
        "evals_per_round": _AT_LEAST_ONE,
        "patience": _AT_LEAST_ONE,
        "clients_per_step": _AT_LEAST_ONE,
        "clients_per_proxy_step": _AT_LEAST_ONE,
        "local_epochs": _AT_LEAST_ONE,
        "batch_size": _AT_LEAST_ONE,
        "learning_rate": _POSITIVE,
        "server_learning_rate": _POSITIVE,
        "straggler_ratio": Interval(Real, 0, 1, closed="left"),
        "t_max": Accepts(_POSITIVE, None, note="seconds"),
        "clients_per_proxy": _AT_LEAST_ONE,
        "proxies_per_group": _AT_LEAST_ONE,
        # the cases are UploadPolicy's (fedrank.estimators.local_sgd, which needs torch)
        "upload": str,
        "frequent_words": _AT_LEAST_ONE,
        "client_metrics": bool,
        "cover_queries": Interval(Integral, 0, None),
        "n_topics": _AT_LEAST_ONE,
        "group_size": _AT_LEAST_ONE,
        "seed": Interval(Integral, 0, None),
        "model": Options(*MODEL_VARIANTS),
        "text_dropout": Interval(Real, 0, 1, closed="left"),
        "warmup_rounds": Accepts(Interval(Integral, 0, MAX_WARMUP_ROUNDS), None),
        "dp_epsilon": Accepts(Interval(Real, 0, None), note="each user's budget; 0: off"),
        "dp_delta": Interval(Real, 0, 1, closed="neither"),
        "dp_clip": Accepts(Interval(Real, 0, None), note="the L2 bound of every update"),
        "dp_denominator": Accepts(
            Interval(Real, 1, None),
            None,
            note="the fixed denominator of central DP's step, about the updates per step",
        ),
        "sampling": Options("shuffle", "poisson"),
        "dp_mode": Options("central", "distributed"),
        "dp_threshold": Accepts(
            Interval(Real, 0, 1, closed="right"),
            note="secure aggregation's threshold as a share of K",
        ),
    }
    RULES = (
        Rule(
            lambda s: not (s.warmup_rounds and s.dp_epsilon),
            "the click-feature warm-up's rounds are not in the DP accounting: with "
            "--dp-epsilon pass --warmup-rounds 0 (or leave it out: DP runs skip it)",
        ),
        Rule(
            lambda s: s.upload != "frequent" or s.mode in FEDERATED_MODES,
            "upload frequent restricts what clients send (flat, proxy); mode {mode} trains on "
            "the server and uploads nothing: use all or frozen",
        ),
        Rule(
            lambda s: not s.dp_epsilon or s.mode in FEDERATED_MODES,
            "DP (dp_epsilon) noises the FedAvg step of flat and proxy runs; mode {mode} has none",
        ),
        Rule(
            lambda s: not s.dp_epsilon or s.dp_clip > 0,
            "DP needs dp_clip > 0 (the L2 bound of every update), got {dp_clip}",
        ),
        # central DP's budget is calibrated now: one it cannot meet fails before any work
        # (Poisson sampling's calibration needs the users, distributed DP's the model)
        Delegated(
            lambda s: (
                not (s.dp_epsilon and s.dp_mode == "central" and s.sampling == "shuffle")
                or dp_block(s)
            )
        ),
        Rule(
            lambda s: s.dp_mode != "distributed" or s.dp_epsilon,
            "dp_mode distributed needs dp_epsilon (the budget)",
        ),
        Delegated(
            lambda s: s.dp_mode != "distributed" or check_budget(s.dp_epsilon, s.dp_delta, s.rounds)
        ),
        Rule(
            lambda s: (
                s.dp_mode != "distributed" or (s.sampling == "shuffle" and s.dp_denominator is None)
            ),
            "distributed DP divides each step's decoded sum by its contributors, whom secure "
            "aggregation reveals, and its accounting claims no amplification: it takes "
            "neither Poisson sampling nor dp_denominator",
        ),
        Rule(
            lambda s: s.dp_mode != "distributed" or s.clients_per_step >= 2,
            "distributed DP needs K >= 2 clients per step, got {clients_per_step}",
        ),
        Rule(
            lambda s: s.sampling != "poisson" or s.mode == "flat",
            "Poisson sampling draws FedPSFlat's clients; mode {mode} samples its own",
        ),
        Rule(
            lambda s: not (s.sampling == "poisson" and s.dp_epsilon and s.dp_denominator is None),
            "central DP with Poisson sampling needs a fixed denominator (dp_denominator, e.g. "
            "clients_per_step): dividing by the sampled count would reveal who was sampled, "
            "and the amplification would not hold",
        ),
        Rule(
            lambda s: s.dp_denominator is None or s.dp_epsilon,
            "dp_denominator (the fixed denominator of central DP's step) needs dp_epsilon",
        ),
        Rule(
            lambda s: s.mode != "proxy" or s.clients_per_step % _per_proxy(s) == 0,
            lambda s: (
                f"FedPSProxy samples K / {_per_proxy(s)} proxies x {_per_proxy(s)} "
                "clients: K must be a multiple of clients_per_proxy_step, got "
                f"K = {s.clients_per_step}"
            ),
        ),
    )

    def privacy(self) -> PrivacyConfig | None:
        """The run's budget for the privacy factory (:mod:`fedrank.federation.privacy`);
        ``None`` without DP."""
        if not self.dp_epsilon:
            return None
        return PrivacyConfig(
            epsilon=self.dp_epsilon,
            delta=self.dp_delta,
            clip=self.dp_clip,
            denominator=self.dp_denominator,
            mode=self.dp_mode,
            threshold=self.dp_threshold,
        )

    @property
    def warmup(self) -> int:
        """Rounds (epochs) of the click-feature warm-up: ``warmup_rounds``, or by default
        :data:`DEFAULT_WARMUP_ROUNDS` without DP and 0 with it."""
        if self.warmup_rounds is not None:
            return self.warmup_rounds
        return 0 if self.dp_epsilon else DEFAULT_WARMUP_ROUNDS


def dp_block(settings: FedPSSettings, n_users: int | None = None) -> dict[str, Any] | None:
    """The central-DP block of a run of ``n_users`` clients
    (:func:`fedrank.privacy.report.fedps_dp_block`)."""
    return fedps_dp_block(asdict(settings), n_users)


def dp_steps(settings: FedPSSettings, n_users: int) -> dict[str, Any]:
    """The steps a user of a run of ``n_users`` clients can take part in and its
    probability in each (:func:`fedrank.privacy.report.fedps_steps`), as the privacy
    factory's ``rounds`` and ``sampling_rate``."""
    steps, rate = fedps_steps(asdict(settings), n_users)
    return {"rounds": steps, "sampling_rate": rate}
