"""What each system guarantees, per message, per round and per user over a training run
(docs/privacy.md): the rows of ``fedrank privacy report`` and the ``privacy`` object of every
run's JSON (:func:`run_privacy`).

The accounting (:mod:`fedrank.privacy.accounting`) imports ``dp_accounting``, which takes
about a second to load, so it is imported only by the functions that use it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fedrank.errors import ConfigError

if TYPE_CHECKING:
    from fedrank.privacy.skellam import SkellamPlan


@dataclass
class SystemPrivacy:
    """One system's guarantees. Each of ``per_message``, ``per_round``, ``per_user`` is a
    ``{"epsilon", "delta", "rounds"}`` dict, or a string saying why it is not available."""

    system: str
    mechanism: str
    parameters: dict[str, Any]
    per_message: dict[str, Any] | str
    per_round: dict[str, Any] | str
    per_user: dict[str, Any] | str
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "mechanism": self.mechanism,
            "parameters": self.parameters,
            "per_message": self.per_message,
            "per_round": self.per_round,
            "per_user": self.per_user,
            "notes": self.notes,
        }


def _figure(epsilon: float, delta: float, rounds: int) -> dict[str, Any]:
    return {
        "epsilon": epsilon if math.isfinite(epsilon) else None,
        "delta": delta,
        "rounds": rounds,
    }


_CENTRAL_MESSAGE = (
    "none: central DP protects the aggregate, not the message; the server sees every "
    "clipped update (secure aggregation with distributed noise, [privacy] mode = "
    "'distributed', would hide it: FedAvg rounds in the service only)"
)
_NO_MECHANISM = "none: no privacy mechanism"


def local_privacy(
    system: str,
    mechanism: str,
    parameters: dict[str, Any],
    per_message: float,
    rounds: int | None,
    notes: list[str],
) -> SystemPrivacy:
    """A pure local mechanism (delta 0) whose every message is ``per_message``-LDP, one
    message per round: per round the same, per user ``rounds`` times it by basic composition
    (``rounds`` ``None``: said as ``k x`` for a user in ``k`` rounds)."""
    per_user: dict[str, Any] | str = (
        f"k x {per_message:.4g} for a user who takes part in k rounds"
        if rounds is None
        else _figure(rounds * per_message, 0.0, rounds)
    )
    one = _figure(per_message, 0.0, 1)
    return SystemPrivacy(system, mechanism, parameters, one, one, per_user, notes)


def no_privacy(system: str, parameters: dict[str, Any], why: str) -> SystemPrivacy:
    """A system that sends its updates as computed: ``why`` says what a message reveals."""
    return SystemPrivacy(system, "none", parameters, why, _NO_MECHANISM, _NO_MECHANISM)


def frecency_privacy(
    config: dict[str, Any],
    privacy: dict[str, Any] | None,
    dim: int = 22,
    rounds: int | None = None,
) -> SystemPrivacy:
    """Federated frecency: the central Gaussian mechanism of a run's ``privacy`` block; else
    randomized signs (``sign_epsilon``: ``dim`` weights per message, a user in each of
    ``rounds`` iterations); else no guarantee (full gradients; plain sign messages are a
    deterministic compression)."""
    message = config.get("message", "full")
    if privacy and privacy.get("mode") == "distributed":
        return recorded_skellam_privacy("frecency", privacy)
    if privacy and privacy.get("noise_multiplier") is not None:
        return gaussian_privacy("frecency", privacy, {"message": message})
    eps = config.get("sign_epsilon")
    if message == "sign" and eps is not None:
        return local_privacy(
            "frecency",
            "randomized response on signs (local)",
            {"sign_epsilon": float(eps), "weights": dim},
            dim * float(eps),
            rounds,
            [
                f"each weight's sign: epsilon {float(eps):g} (3-ary randomized response), "
                f"local DP: holds against the server; a message of {dim} signs: {dim} x "
                "epsilon by basic composition (an upper bound)",
                "per user: a user who reports in every iteration (one message each)",
            ],
        )
    why = (
        "none: sign messages are a deterministic compression (2 bits per weight), "
        "not differential privacy"
        if message == "sign"
        else "none: the full gradient is sent as computed"
    )
    return no_privacy("frecency", {"message": message}, why)


def gaussian_privacy(
    system: str, privacy: dict[str, Any], parameters: dict[str, Any] | None = None
) -> SystemPrivacy:
    """The central Gaussian mechanism (:class:`~fedrank.strategies.dp.DPStrategy`) of a
    ``privacy`` block (``noise_multiplier``, ``clip``, ``delta``, ``rounds``, ``epsilon``;
    optionally ``accountant``, ``adjacency``, ``epsilon_replace_one``, ``epsilon_rdp`` /
    ``epsilon_pld``, ``denominator``): no per-message guarantee, one round's and the
    training's."""
    from fedrank.privacy.accounting import gaussian_epsilon

    z, delta, rounds = privacy["noise_multiplier"], privacy["delta"], privacy["rounds"]
    accountant = privacy.get("accountant", "pld")
    one = gaussian_epsilon(z, delta, 1, privacy.get("sampling_rate", 1.0), accountant)
    fixed = privacy.get("denominator")
    counted = (
        f"a fixed denominator ({fixed:g}) keeps the number of updates per iteration out of "
        "the model"
        if fixed
        else "the number of updates per iteration is not protected"
    )
    notes = [
        f"adjacency: {privacy.get('adjacency', 'add-or-remove one user')}; {counted}",
        "sampling_rate 1.0: every user is counted in every iteration (users report when "
        "they search or check in, not by a random sample of the population), so no "
        "amplification by subsampling is claimed",
    ]
    if "epsilon_replace_one" in privacy:
        notes.append(
            f"replace-one adjacency (same participants): epsilon "
            f"{privacy['epsilon_replace_one']:.3f} over {rounds} iterations"
        )
    for other in ("rdp", "pld"):
        if f"epsilon_{other}" in privacy:
            notes.append(f"{other} accountant: epsilon {privacy[f'epsilon_{other}']:.3f}")
    return SystemPrivacy(
        system,
        "gaussian (central)",
        {
            "noise_multiplier": z,
            "clip": privacy["clip"],
            "delta": delta,
            "accountant": accountant,
            **({"denominator": fixed} if fixed else {}),
            **(parameters or {}),
        },
        _CENTRAL_MESSAGE,
        _figure(one, delta, 1),
        _figure(privacy["epsilon"], delta, rounds),
        notes,
    )


def recorded_skellam_privacy(system: str, privacy: dict[str, Any]) -> SystemPrivacy:
    """The guarantee of a run with distributed DP from the ``privacy`` object it recorded
    (:meth:`fedrank.strategies.distributed_dp.DistributedDPStrategy.run_privacy`)."""
    from fedrank.privacy.skellam import SkellamPlan

    out = skellam_privacy(SkellamPlan.from_record(privacy), int(privacy["rounds"]), system)
    out.notes.append(
        f"{privacy.get('aborted_iterations', 0)} iteration(s) had fewer than t reports "
        "and released nothing"
    )
    return out


def skellam_privacy(plan: SkellamPlan, rounds: int, system: str = "fedavg") -> SystemPrivacy:
    """Distributed DP under secure aggregation (:mod:`fedrank.privacy.skellam`): the
    clients' Skellam shares on the sum of each round's encoded updates, after ``rounds``
    rounds (epsilon 0 before the first)."""
    one = plan.epsilon_after(1)
    total = plan.epsilon_after(rounds) if rounds > 0 else 0.0
    replace_one = plan.epsilon_after(rounds, "replace-one") if rounds > 0 else 0.0
    return SystemPrivacy(
        system,
        "skellam (distributed, secure aggregation)",
        {
            "noise_multiplier": plan.noise_multiplier,
            "clip": plan.clip,
            "delta": plan.delta,
            "accountant": "rdp",
            "clients_per_round": plan.clients,
            "threshold": plan.threshold,
            **plan.to_json(),
        },
        "none needed against the server: it sees no single message, only each round's "
        "masked sum (secure aggregation); a message carries only a 1/t share of the noise",
        _figure(one, plan.delta, 1),
        _figure(total, plan.delta, rounds),
        [
            "adjacency: add-or-remove one user (one clipped update per user and round); the "
            f"number of contributors per round is not protected; replace-one: epsilon "
            f"{replace_one:.3f} over {rounds} rounds",
            f"holds against the server if at least t = {plan.threshold} honest clients add "
            f"their share (each adds variance {plan.client_variance:.4g} in units of "
            f"1/{plan.scale:g}); c clients colluding with the server leave (k - c)/t of the "
            "noise on a sum of k contributions",
            "sampling_rate 1.0: every user may be in every round (the service's cohort is the "
            "first clients to check in, the simulation's the users who searched: not a "
            "random sample), so no amplification is claimed",
        ],
    )


def foltr_es_privacy(p: float | None, batch: int, rounds: int | None) -> SystemPrivacy:
    """FOLtR-ES: randomized response over MaxRR's ``n = 11`` values, ``B = batch`` values per
    message, one message per round a client takes part in (``rounds``: the rounds of the
    training, if known)."""
    from fedrank.metrics.maxrr import maxrr_values
    from fedrank.privacy.accounting import (
        randomized_response_epsilon,
        randomized_response_message_epsilon,
    )

    n = len(maxrr_values())  # 0 and 1/1 .. 1/10
    parameters = {"p": p, "n": n, "B": batch}
    if p is None or p >= 1.0:
        return no_privacy(
            "foltr-es", parameters, "none: p = 1, the true metric is sent (epsilon infinite)"
        )
    per_value = randomized_response_epsilon(p, n)
    per_message = randomized_response_message_epsilon(p, n, batch)
    notes = [
        f"each interaction value: epsilon = ln(p (n - 1) / (1 - p)) = {per_value:.4f} "
        "(FOLtR-ES Eq. 10), local DP: holds against the server",
        f"a message of B = {batch} values: B x epsilon by basic composition (an upper bound)",
    ]
    if rounds is None:
        notes.append(
            "per user: give --rounds; the server does not cap k (per-user budget refusal is "
            "not built)"
        )
    else:
        notes.append(
            f"per user: a user in all {rounds} rounds (the simulator draws every client's "
            "queries afresh each iteration, so its client slots are not persistent users; "
            "a real user who takes part in k rounds has k x the per-message epsilon)"
        )
    return local_privacy(
        "foltr-es", "randomized response (local)", parameters, per_message, rounds, notes
    )


def fpdgd_privacy(config: dict[str, Any], rounds: int | None) -> SystemPrivacy:
    """FPDGD's optional Laplace mechanism (:mod:`fedrank.privacy.laplace`), or central DP
    (``dp = "central"``: the Gaussian mechanism calibrated to the budget over the run's
    planned iterations, every client slot in each, after ``rounds`` of them). ``config``
    has the simulator's keys ``dp``, ``dp_epsilon``, ``dp_clip`` (and, for central DP,
    ``interactions``, ``clients``, ``batch``, ``dp_delta``); ``rounds`` ``None``: a user in
    ``k`` rounds."""
    mode, eps = config.get("dp", "none"), float(config.get("dp_epsilon", 0.0))
    parameters = {"dp": mode, "dp_epsilon": eps, "dp_clip": config.get("dp_clip")}
    if mode == "none":
        return no_privacy("fpdgd", parameters, "none: the model delta is sent as computed")
    composition = "per user: basic composition over the rounds, a client in every round"
    if mode == "central":
        planned = int(config["interactions"]) // (int(config["clients"]) * int(config["batch"]))
        delta = float(config.get("dp_delta", 1e-6))
        closed = planned if rounds is None else rounds
        block = central_dp_block(eps, delta, float(config["dp_clip"]), planned, "pld", closed)
        return gaussian_privacy("fpdgd", block, parameters)
    if mode == "local":
        return local_privacy("fpdgd", "laplace (local)", parameters, eps, rounds, [composition])
    per_user: dict[str, Any] | str = (
        f"k x {eps:.4g} for a user who takes part in k rounds"
        if rounds is None
        else _figure(rounds * eps, 0.0, rounds)
    )
    return SystemPrivacy(
        "fpdgd",
        "laplace (distributed, FPDGD)",
        parameters,
        "none: one message carries only a 1/K share of the noise",
        _figure(eps, 0.0, 1),
        per_user,
        [
            "holds only if all K clients add their share and nobody sees single messages "
            "(secure aggregation)",
            composition,
        ],
    )


def fedps_steps(settings: dict[str, Any], n_users: int | None = None) -> tuple[int, float]:
    """``(steps, rate)``: the steps of a FedPS run a user can take part in, and the
    probability that it does in each. Shuffled rounds (the default): one step per round,
    ``rounds`` in all, rate 1. Poisson sampling (``sampling = "poisson"``, which needs the
    run's ``n_users``): every step of every round, ``ceil(N / K)`` steps a round, each user
    in each with probability ``K / N`` (amplification by subsampling)."""
    rounds = int(settings["rounds"])
    if settings.get("sampling") != "poisson":
        return rounds, 1.0
    if n_users is None or n_users < 1:
        raise ConfigError(
            "a Poisson-sampled FedPS run's guarantee depends on its number of users: "
            "give n_users (the run JSON's data.users)"
        )
    k = min(int(settings["clients_per_step"]), n_users)
    return rounds * math.ceil(n_users / k), k / n_users


def fedps_dp_block(settings: dict[str, Any], n_users: int | None = None) -> dict[str, Any] | None:
    """The central-DP block of a FedPS run from its settings (``dp_epsilon``, ``dp_delta``,
    ``dp_clip``, ``rounds``, optionally ``dp_denominator`` and ``sampling``; ``None``
    without DP): the Gaussian mechanism calibrated to the steps a user can take part in,
    composed over all of them (:func:`fedps_steps`)."""
    if not settings.get("dp_epsilon") or settings.get("dp_mode") == "distributed":
        return None  # distributed DP: the plan of the run's privacy config (skellam_plan)
    steps, rate = fedps_steps(settings, n_users)
    block = central_dp_block(
        float(settings["dp_epsilon"]),
        float(settings["dp_delta"]),
        float(settings["dp_clip"]),
        steps,
        "pld",
        steps,
        rate,
    )
    if settings.get("dp_denominator"):
        block["denominator"] = float(settings["dp_denominator"])
    return block


def fedps_privacy(mode: str, dp: dict[str, Any] | None = None) -> SystemPrivacy:
    """A FedPS run: central DP-FedAvg (``dp``, :func:`fedps_dp_block`), or no mechanism;
    its KL measure is a disclosure figure."""
    if dp is not None:
        out = gaussian_privacy("fedps", dp, {"mode": mode})
        rate = float(dp.get("sampling_rate", 1.0))
        out.notes[1] = (
            "each user takes part in exactly one step per round (a shuffled schedule, not "
            "random sampling): its epsilon composes one Gaussian mechanism per round, no "
            "amplification by subsampling is claimed"
            if rate == 1.0
            else f"each step samples every user independently with probability {rate:.4g} "
            f"(Poisson; the sample is the server's secret and the model depends on the "
            f"noised sums only, by the fixed denominator): its epsilon composes "
            f"{dp['rounds']} subsampled Gaussian mechanisms (amplification by subsampling)"
        )
        return out
    return no_privacy(
        "fedps",
        {"mode": mode},
        "none: updates (or, centrally, the logs) are sent as computed; the KL measure is an "
        "empirical disclosure figure, not a guarantee",
    )


def report_run(data: dict[str, Any]) -> list[SystemPrivacy]:
    """The guarantees of a run's JSON: ``fedrank frecency simulate --json``, ``fedrank
    foltr train --json`` or ``fedrank fedps run --json``."""
    if "MAP_per_seed" in data and isinstance(data.get("mode"), str):
        runs = data.get("runs") or [{}]
        if (runs[0].get("settings") or {}).get("dp_mode") == "distributed":
            return [recorded_skellam_privacy("fedps", runs[0].get("privacy") or {})]
        users = (runs[0].get("data") or {}).get("users")
        block = fedps_dp_block(runs[0].get("settings", {}), users)
        return [fedps_privacy(data["mode"], block)]
    config = data.get("config")
    if not isinstance(config, dict):
        raise ConfigError(
            "the run JSON has no config object: give the JSON of `fedrank frecency simulate "
            "--json` or `fedrank foltr train --json`"
        )
    if "loss_per_iteration" in data and "preset" in config:
        dim, rounds = len(data["final_weights"]), len(data["loss_per_iteration"])
        return [frecency_privacy(config, data.get("privacy"), dim, rounds)]
    if "algorithm" in config and "batch_maxrr" in data:
        rounds = int(data.get("iterations", len(data["batch_maxrr"])))
        if config["algorithm"] == "es":
            return [foltr_es_privacy(config.get("p"), int(config.get("batch", 4)), rounds)]
        return [fpdgd_privacy(config, rounds)]
    raise ConfigError(
        "not a run JSON this report knows: give the JSON of `fedrank frecency simulate "
        "--json`, `fedrank foltr train --json` or `fedrank fedps run --json`"
    )


@functools.cache
def budget_noise_multiplier(
    epsilon: float, delta: float, rounds: int, accountant: str, sampling_rate: float = 1.0
) -> float:
    """The noise multiplier that keeps ``rounds`` rounds, each user in each with
    probability ``sampling_rate`` (Poisson), within ``(epsilon, delta)``
    (:func:`~fedrank.privacy.accounting.gaussian_noise_multiplier`; cached: the calibration
    takes about a second)."""
    from fedrank.privacy.accounting import gaussian_noise_multiplier

    return gaussian_noise_multiplier(epsilon, delta, rounds, sampling_rate, accountant)


def central_dp_block(
    epsilon: float,
    delta: float,
    clip: float,
    rounds: int,
    accountant: str,
    closed: int,
    sampling_rate: float = 1.0,
) -> dict[str, Any]:
    """The privacy block of central DP calibrated to a budget of ``(epsilon, delta)`` over
    ``rounds`` rounds (each user sampled into each with probability ``sampling_rate``),
    after ``closed`` of them: the :class:`~fedrank.privacy.accounting.PrivacyGuarantee`
    keys (epsilon 0 before the first round), the budget asked for and the accountant."""
    from fedrank.privacy.accounting import gaussian_guarantee

    z = budget_noise_multiplier(epsilon, delta, rounds, accountant, sampling_rate)
    if closed > 0:
        block = gaussian_guarantee(z, clip, delta, closed, sampling_rate, accountant).to_json()
    else:
        block = {
            "mechanism": "gaussian",
            "epsilon": 0.0,
            "delta": delta,
            "rounds": 0,
            "sampling_rate": sampling_rate,
            "noise_multiplier": z,
            "clip": clip,
        }
    block.update(
        target_epsilon=epsilon,
        accountant=accountant,
        adjacency="add-or-remove one user (one clipped update per user and round)",
    )
    return block


def run_privacy(row: SystemPrivacy, sampling_rate: float | None = 1.0) -> dict[str, Any]:
    """The ``privacy`` object of a run's JSON: ``{mechanism, epsilon, delta, rounds,
    sampling_rate, noise_multiplier, clip}`` of one user over the whole training (the
    report's per-user row). Without a mechanism, ``epsilon`` is ``None`` (unbounded) and
    so are the mechanism's parameters."""
    per_user = row.per_user
    if isinstance(per_user, str):
        return {
            "mechanism": row.mechanism,
            "epsilon": None,
            "delta": None,
            "rounds": None,
            "sampling_rate": sampling_rate,
            "noise_multiplier": None,
            "clip": None,
        }
    return {
        "mechanism": row.mechanism,
        "epsilon": per_user["epsilon"],
        "delta": per_user["delta"],
        "rounds": per_user["rounds"],
        "sampling_rate": sampling_rate,
        "noise_multiplier": row.parameters.get("noise_multiplier"),
        "clip": row.parameters.get("clip", row.parameters.get("dp_clip")),
    }
