"""Simulated poisoning attacks on the three federated systems (beyond the papers).

A share of the clients is malicious: instead of the message its own data gives, a
malicious client sends one built to hurt the model. :class:`Attack` says how many
(``fraction``) and what they send (``kind`` and its parameters); the classes below choose
*which* clients are malicious from a seeded stream and rewrite their messages, with numpy
over all malicious clients at once (no Python loop over clients). Honest clients, the
world and the server are untouched: an attack changes only what the server receives.

Who is malicious:

* **frecency** (:class:`FrecencyAttacker`): a fixed set of ``round(fraction * T)`` of the
  ``T`` treatment users for the whole study (only treatment users send gradients; an
  attacker enrolled in a control branch could only send metrics). In an iteration the
  attackers that searched send poisoned updates, so the share of malicious *messages*
  varies around ``fraction``; the counts are recorded.
* **FOLtR-ES / FPDGD** (:class:`FoltrAttacker`): clients are fresh every iteration, so
  ``round(fraction * N)`` of each iteration's ``N`` clients are chosen, from a stream keyed
  by the run seed and the iteration.
* **FedPS** (:class:`FedPSAttacker`): a fixed set of ``round(fraction * U)`` of the ``U``
  users; a step's attackers are those of its ``K`` sampled clients.

``round`` rounds halves up (``floor(x + 0.5)``). Every random number of an attack comes
from ``numpy`` Generators keyed by ``(run seed, purpose, iteration)`` in a domain of their
own (:func:`attack_rng`), so an attack never shifts an honest client's numbers, and the
same run seed gives the same attack.

Vector updates (frecency gradients, FPDGD and FedAvg deltas; :func:`poison_vectors`):

* ``sign-flip``: send ``-g`` (the honest update reversed).
* ``scale``: send ``factor * g`` (default 100). A frecency attacker also claims the largest
  weight ``n`` the server accepts (``[server] max_n``: 100 searches) -- the weighted mean
  gives it 100 times an honest one-search client's say.
* ``random``: a Gaussian direction scaled to the median norm of the iteration's non-zero
  honest updates (an attacker that knows the honest updates' size, as the full-knowledge
  attacks of Fang et al., USENIX Security 2020, assume): noise that a norm bound cannot
  tell from an honest update. Zero updates are left out of the median because most
  frecency clients send one (their selected page already led by the margin), and noise
  scaled to 0 would send nothing.

On sign messages (``--message sign``) only signs travel, so the attacker's vector is sent
as its signs: ``scale`` then reduces to claiming ``n = max_n``.

FOLtR-ES reports ``(seed, metric, antithetic metric)`` (Kharitonov 2019, Sec. 3.2;
:func:`poison_es`). The server rebuilds the noise ``v_s`` from the seed and adds
``(f+ - f-) v_s``:

* ``sign-flip``: reverse the estimate: swap the two metrics (without antithetic variates,
  report ``max_metric - metric``).
* ``scale``: ``factor * metric`` (and antithetic). Out of MaxRR's range ``[0, 1]``, which
  the service's metric schema enforces: ``fedrank serve`` answers 422 ``metric_range``, and
  the simulation refuses the same messages (:func:`out_of_range`) and counts them. This
  range check is the default defense; it is always on, as in the service.
* ``random``: uniform metrics in ``[0, max_metric)``.
* ``targeted-seed``: the client chooses its seed. Each attacker draws ``candidates`` seeds
  (default 1,000), rebuilds their noise with the server's own function
  (:func:`fedrank.core.seeded_noise.gaussian_noise`, what
  :class:`~fedrank.aggregators.es_gradient.ESGradient` calls) and keeps the one whose
  noise has the largest dot product with a target direction, reporting metric 1 and
  antithetic 0: the largest coefficient a message can carry, on the noise that points
  most along the target. The default target is *minus the current model's direction*
  (``-theta / |theta|``): it undoes what the ranker has learned (for the linear ranker,
  ``-theta`` ranks every list in reverse); while the model is all zeros (FOLtR-ES's
  start) the attackers push along one fixed random direction of their own, which the next
  iteration's target then reverses. With ``n`` attackers the push along the target grows
  like ``n * E[max of m normals]`` (3.24 for ``m = 1000``) against an honest seed's 0.
* With the defense **server-issued seeds** (``server_seeds``) an attacker cannot choose its
  seed: it gets its honest one (in the simulation, the seed the honest client would have
  drawn stands for the one the server issues) and can only choose the metrics: metric 1
  and antithetic 0 when its noise points toward the target (``v . t > 0``), 0 and 1
  otherwise (without antithetic variates: metric 1 or 0). The reversed pair still pushes
  along the target, since ``-v . t > 0``: every message pushes with ``|v . t|``, whose mean
  is ``sqrt(2 / pi) = 0.80``, a quarter of what a chosen seed gives. Server seeds bound the
  *targeting*, not the metric lie.

FedPS (``model-replacement``, :func:`model_replacement`): Bagdasaryan et al., "How To
Backdoor Federated Learning" (AISTATS 2020), Sec. 4: an attacker that wants the global model
to become ``X`` sends ``gamma (X - G_t)`` with ``gamma`` the boost that survives the
averaging (their ``n / eta``: the number of clients per round over the server learning
rate); here the weighted mean's exact boost, the step's total weight over the attackers'
(the attackers know the weights of the step, as Bagdasaryan et al.'s attacker knows ``n``).
The target ``X`` is the untrained model ``M_0`` (the first model the attackers receive):
replacing the global model by it undoes federated training, a stand-in for a backdoored
model that needs no backdoor task (the boost and its effect on the aggregate are the
same). FedPS's clients also take the vector attacks on their deltas.

Defenses live in the aggregators (robust means, norm bounds) and the service (metric range,
weight bound, server seeds); this module only attacks, and reports what it sent and what
was refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from fedrank.core.message import Message, MessageBatch
from fedrank.core.seeded_noise import SEED_BITS, gaussian_noise
from fedrank.errors import ConfigError
from fedrank.systems import fedavg, frecency
from fedrank.systems.system import System

if TYPE_CHECKING:
    from fedrank.simulation.frecency.messages import ClientReports

#: Attacks on vector updates (frecency gradients, FPDGD and FedAvg deltas).
VECTOR_ATTACKS: tuple[str, ...] = ("sign-flip", "scale", "random")
#: Attacks on FOLtR-ES reports.
ES_ATTACKS: tuple[str, ...] = ("sign-flip", "scale", "random", "targeted-seed")
#: Every attack kind (each system's :attr:`~fedrank.systems.system.System.attacks` says
#: which it takes).
ATTACKS: tuple[str, ...] = (*ES_ATTACKS, "model-replacement")
#: ``scale``'s default factor.
DEFAULT_FACTOR = 100.0
#: ``targeted-seed``'s default number of candidate seeds per attacker.
DEFAULT_CANDIDATES = 1000
#: The largest MaxRR (a click on the first result): the top of the ES metric's range.
MAX_METRIC = 1.0

# Purposes of the attack's random streams (the first spawn key after the domain).
_DOMAIN = 0xA77AC  # keeps every attack stream apart from the runs' own SeedSequences
_SELECT, _TRANSFORM, _TARGET = 0, 1, 2
#: Noise entries rebuilt at once while searching seeds (bounds memory: 4 MB of float32).
_NOISE_CHUNK = 1 << 20


@dataclass(frozen=True)
class Attack:
    """A poisoning attack: a ``fraction`` of malicious clients sending ``kind`` messages.

    Attributes:
        fraction: the share of malicious clients, in ``[0, 1)`` (0: no attack).
        kind: one of :data:`ATTACKS` (module docstring).
        factor: ``scale``'s multiplier (default 100).
        candidates: ``targeted-seed``'s seeds tried per attacker, ``m`` (default 1,000).
        server_seeds: the defense of server-issued FOLtR-ES seeds: attackers keep their
            honest seed and choose only the metrics.
    """

    fraction: float = 0.0
    kind: str = "sign-flip"
    factor: float = DEFAULT_FACTOR
    candidates: int = DEFAULT_CANDIDATES
    server_seeds: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.fraction, bool) or not (
            isinstance(self.fraction, int | float) and 0.0 <= self.fraction < 1.0
        ):
            raise ConfigError(
                f"the malicious fraction must be a number in [0, 1), got {self.fraction!r}"
            )
        if self.kind not in ATTACKS:
            raise ConfigError(f"attack must be one of {', '.join(ATTACKS)}, got {self.kind!r}")
        if not (np.isfinite(self.factor) and self.factor > 0):
            raise ConfigError(f"the scale factor must be a finite number > 0, got {self.factor}")
        if isinstance(self.candidates, bool) or not (
            isinstance(self.candidates, int | np.integer) and self.candidates >= 1
        ):
            raise ConfigError(
                f"candidate seeds per attacker must be an integer >= 1, got {self.candidates!r}"
            )

    @property
    def active(self) -> bool:
        """Whether any client is malicious."""
        return self.fraction > 0

    def check_system(self, system: System) -> None:
        """Raise :class:`~fedrank.errors.ConfigError` unless ``system`` can run this attack
        (:attr:`~fedrank.systems.system.System.attacks`) and its defense."""
        allowed = system.attacks
        if self.kind not in allowed:
            raise ConfigError(
                f"the {self.kind} attack does not apply to {system.name}; it takes "
                f"{', '.join(allowed)}"
            )
        if self.server_seeds and "server_seeds" not in {f.name for f in fields(system.config)}:
            raise ConfigError(
                "server-issued seeds are a FOLtR-ES defense (only its messages carry seeds)"
            )

    def to_json(self) -> dict[str, Any]:
        """The attack's settings (the parameters its kind uses)."""
        out: dict[str, Any] = {"fraction": self.fraction, "kind": self.kind}
        if self.kind == "scale":
            out["factor"] = self.factor
        if self.kind == "targeted-seed":
            out["candidates"] = int(self.candidates)
        if self.kind in ES_ATTACKS and self.server_seeds:
            out["server_seeds"] = True
        return out


def attack_rng(seed: int, purpose: int, iteration: int = 0) -> np.random.Generator:
    """The attack's stream for ``purpose`` in ``iteration`` of the run seeded ``seed``: a
    SeedSequence in a domain of its own, apart from every stream a run spawns."""
    return np.random.default_rng(
        np.random.SeedSequence(int(seed), spawn_key=(_DOMAIN, purpose, int(iteration)))
    )


def n_malicious(fraction: float, n: int) -> int:
    """``round(fraction * n)``, halves rounded up: how many of ``n`` clients are malicious."""
    return int(np.floor(fraction * n + 0.5))


def choose_malicious(fraction: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted positions of ``round(fraction * n)`` of ``n`` clients, drawn without
    replacement."""
    return np.sort(rng.choice(n, size=n_malicious(fraction, n), replace=False))


# ---------------------------------------------------------------------- vector updates


def poison_vectors(
    updates: np.ndarray,
    malicious: np.ndarray,
    kind: str,
    *,
    factor: float = DEFAULT_FACTOR,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """The ``(C, d)`` updates with the rows where ``malicious`` (bool ``(C,)``) holds
    replaced by the attack ``kind`` of :data:`VECTOR_ATTACKS` (module docstring); a new
    array, same dtype. ``random`` needs ``rng``."""
    g = np.asarray(updates)
    if g.ndim != 2 or malicious.shape != (g.shape[0],):
        raise ConfigError(
            f"need (C, d) updates and a (C,) mask, got {g.shape} and {malicious.shape}"
        )
    out = g.copy()
    bad = g[malicious]
    if kind == "sign-flip":
        out[malicious] = -bad
    elif kind == "scale":
        out[malicious] = bad * factor
    elif kind == "random":
        if rng is None:
            raise ConfigError("the random attack needs a generator")
        honest = np.linalg.norm(g[~malicious] if (~malicious).any() else bad, axis=1)
        honest = honest[honest > 0]
        size = float(np.median(honest)) if honest.size else 0.0
        direction = rng.standard_normal(bad.shape)
        norms = np.linalg.norm(direction, axis=1, keepdims=True)
        out[malicious] = direction / np.where(norms > 0, norms, 1.0) * size
    else:
        raise ConfigError(f"{kind} is not an attack on vector updates ({VECTOR_ATTACKS})")
    return out


# ---------------------------------------------------------------------- FOLtR-ES reports


def unit_target(theta: np.ndarray, fallback: np.random.Generator) -> np.ndarray:
    """The default ``targeted-seed`` target: ``-theta / |theta|`` (toward undoing the
    model), or a random unit vector drawn from ``fallback`` while ``theta`` is all zeros."""
    t = -np.asarray(theta, dtype=np.float64)
    norm = float(np.linalg.norm(t))
    if norm == 0.0:
        t = fallback.standard_normal(t.shape)
        norm = float(np.linalg.norm(t))
    return t / norm


def best_seeds(
    n_attackers: int,
    target: np.ndarray,
    candidates: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Every attacker's best of ``candidates`` random 32-bit seeds: the one whose noise
    (:func:`~fedrank.core.seeded_noise.gaussian_noise`, as the server rebuilds it) has the
    largest dot product with ``target``. Returns ``(seeds uint32 (A,), projections (A,))``.
    The candidates' noise is rebuilt in chunks of rows (memory bounded), never per
    client."""
    t = np.asarray(target, dtype=np.float64)
    dim = t.size
    pool = rng.integers(0, 2**SEED_BITS, size=(n_attackers, candidates), dtype=np.uint64)
    flat = pool.reshape(-1)
    proj = np.empty(flat.size, dtype=np.float64)
    rows = max(1, _NOISE_CHUNK // dim)
    t32 = t.astype(np.float32)
    for start in range(0, flat.size, rows):
        stop = min(flat.size, start + rows)
        proj[start:stop] = gaussian_noise(flat[start:stop], dim) @ t32
    proj = proj.reshape(n_attackers, candidates)
    pick = np.argmax(proj, axis=1)
    chosen = np.take_along_axis(pool, pick[:, None], axis=1)[:, 0].astype(np.uint32)
    return chosen, np.take_along_axis(proj, pick[:, None], axis=1)[:, 0]


def poison_es(
    seeds: np.ndarray,
    metric: np.ndarray,
    antithetic: np.ndarray | None,
    malicious: np.ndarray,
    kind: str,
    *,
    rng: np.random.Generator,
    factor: float = DEFAULT_FACTOR,
    target: np.ndarray | None = None,
    candidates: int = DEFAULT_CANDIDATES,
    server_seeds: bool = False,
    max_metric: float = MAX_METRIC,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """FOLtR-ES reports with the malicious rows (bool ``(C,)``) rewritten by ``kind`` of
    :data:`ES_ATTACKS` (module docstring). Returns new ``(seeds uint64, metric float64,
    antithetic float64 or None)``; ``targeted-seed`` needs the unit ``target``."""
    s = np.asarray(seeds).astype(np.uint64)
    m = np.asarray(metric, dtype=np.float64).copy()
    a = None if antithetic is None else np.asarray(antithetic, dtype=np.float64).copy()
    k = int(malicious.sum())
    if kind == "sign-flip":
        if a is None:
            m[malicious] = max_metric - m[malicious]
        else:
            m[malicious], a[malicious] = a[malicious], m[malicious].copy()
    elif kind == "scale":
        m[malicious] *= factor
        if a is not None:
            a[malicious] *= factor
    elif kind == "random":
        m[malicious] = rng.uniform(0.0, max_metric, size=k)
        if a is not None:
            a[malicious] = rng.uniform(0.0, max_metric, size=k)
    elif kind == "targeted-seed":
        if target is None:
            raise ConfigError("the targeted-seed attack needs a target direction")
        t = np.asarray(target, dtype=np.float64)
        if server_seeds:
            noise = gaussian_noise(s[malicious], t.size).astype(np.float64)
            up = (noise @ t > 0).astype(np.float64)
        else:
            s[malicious] = best_seeds(k, t, candidates, rng)[0]
            up = np.ones(k)
        m[malicious] = up * max_metric
        if a is not None:
            a[malicious] = (1.0 - up) * max_metric
    else:
        raise ConfigError(f"{kind} is not an attack on FOLtR-ES reports ({ES_ATTACKS})")
    return s, m, a


def out_of_range(
    metric: np.ndarray, antithetic: np.ndarray | None, low: float = 0.0, high: float = MAX_METRIC
) -> np.ndarray:
    """Bool ``(C,)``: the reports the service's metric schema refuses (422
    ``metric_range``): a metric outside ``[low, high]`` (MaxRR's ``[0, 1]``), or not a
    number."""
    bad = ~((metric >= low) & (metric <= high))
    if antithetic is not None:
        bad |= ~((antithetic >= low) & (antithetic <= high))
    return bad


# ---------------------------------------------------------------------- FedPS


def model_replacement(
    global_params: np.ndarray,
    target: np.ndarray,
    weights: np.ndarray,
    malicious: np.ndarray,
    server_learning_rate: float = 1.0,
) -> np.ndarray:
    """The delta each malicious client sends to replace the global model by ``target``
    (Bagdasaryan et al., AISTATS 2020, Sec. 4, Eq. 3): ``gamma (X - G_t)`` with ``gamma =
    sum_j n_j / (eta * sum_{a malicious} n_a)``, the boost after which the weighted mean of
    the round (FedAvg, ``M_{t+1} = M_t + eta sum_j n_j delta_j / sum_j n_j``) lands on
    ``X`` when the honest deltas cancel. Returns ``(A, d)``, one row per malicious client
    (all equal)."""
    w = np.asarray(weights, dtype=np.float64)
    mine = float(w[malicious].sum())
    if mine <= 0:
        return np.zeros((0, np.size(global_params)))
    gamma = float(w.sum()) / (server_learning_rate * mine)
    delta = gamma * (np.asarray(target, dtype=np.float64) - global_params)
    return np.repeat(delta[None, :], int(malicious.sum()), axis=0)


# ---------------------------------------------------------------------- the systems


@dataclass
class AttackLog:
    """What an attack did, per iteration: the messages the server received, those from
    malicious clients, and those refused (by the metric range check)."""

    attack: Attack
    messages: list[int] = field(default_factory=list)
    malicious: list[int] = field(default_factory=list)
    refused: list[int] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def record(self, messages: int, malicious: int, refused: int = 0) -> None:
        self.messages.append(int(messages))
        self.malicious.append(int(malicious))
        self.refused.append(int(refused))

    def to_json(self) -> dict[str, Any]:
        """``{"attack", "messages", "malicious_messages", "refused_messages",
        "malicious_per_iteration", "refused_per_iteration", ...}``."""
        return {
            "attack": self.attack.to_json(),
            "messages": int(sum(self.messages)),
            "malicious_messages": int(sum(self.malicious)),
            "refused_messages": int(sum(self.refused)),
            "malicious_per_iteration": list(self.malicious),
            "refused_per_iteration": list(self.refused),
            **self.extra,
        }


class FrecencyAttacker:
    """A fixed set of malicious treatment users for a whole frecency study (module
    docstring).

    Args:
        attack: the attack (one of :data:`VECTOR_ATTACKS`).
        treatment_users: the ids of the treatment users (the clients that send gradients).
        seed: the study's seed (keys the attack's streams).
        sign_messages: whether the wire carries signs only (``--message sign``).
        max_n: the largest weight the server accepts (``None``: the service's default
            ``[server] max_n``, 100 searches).
    """

    def __init__(
        self,
        attack: Attack,
        treatment_users: np.ndarray,
        seed: int,
        *,
        sign_messages: bool = False,
        max_n: int | None = None,
    ) -> None:
        attack.check_system(frecency.SYSTEM)
        users = np.sort(np.asarray(treatment_users, dtype=np.int64))
        self.attack, self.seed = attack, int(seed)
        self.sign_messages = bool(sign_messages)
        self.max_n = frecency.SYSTEM.max_n if max_n is None else int(max_n)
        picked = choose_malicious(attack.fraction, users.size, attack_rng(seed, _SELECT))
        self.users = users[picked]
        self.log = AttackLog(attack, extra={"malicious_users": int(self.users.size),
                                            "treatment_users": int(users.size)})  # fmt: skip

    def apply(self, iteration: int, reports: ClientReports) -> ClientReports:
        """The reports the server receives in ``iteration``: the malicious users' updates
        (and, for ``scale``, weights) rewritten; losses stay the users' true ones."""
        bad = np.isin(reports.users, self.users)
        self.log.record(reports.users.size, int(bad.sum()))
        if not bad.any():
            return reports
        kind = self.attack.kind
        rng = attack_rng(self.seed, _TRANSFORM, iteration)
        updates = poison_vectors(reports.updates, bad, kind, factor=self.attack.factor, rng=rng)
        if self.sign_messages:
            updates[bad] = np.sign(updates[bad])
        n = reports.n
        if kind == "scale":
            n = np.where(bad, self.max_n, reports.n).astype(reports.n.dtype)
        return replace(reports, updates=updates, n=n)


class FedPSAttacker:
    """A fixed set of malicious FedPS users for a whole run (module docstring).

    Args:
        attack: the attack (``model-replacement`` or one of :data:`VECTOR_ATTACKS`).
        n_users: the run's users (clients ``0 .. n_users - 1``).
        seed: the run's training seed (keys the attack's streams).
        server_learning_rate: ``eta_s``, which the replacement boost divides by.
    """

    def __init__(
        self, attack: Attack, n_users: int, seed: int, server_learning_rate: float = 1.0
    ) -> None:
        attack.check_system(fedavg.SYSTEM)
        self.attack, self.seed, self.eta = attack, int(seed), float(server_learning_rate)
        self.users = choose_malicious(attack.fraction, int(n_users), attack_rng(seed, _SELECT))
        self.target: np.ndarray | None = None
        self.log = AttackLog(attack, extra={"malicious_users": int(self.users.size),
                                            "users": int(n_users)})  # fmt: skip

    def apply(
        self, step: int, sampled: np.ndarray, messages: list[Message], global_params: np.ndarray
    ) -> list[Message]:
        """The messages the server receives in ``step`` from the ``sampled`` clients
        (run indices, in the order of ``messages``) against the broadcast model
        ``global_params``: the malicious clients' deltas rewritten, their weights kept."""
        if self.target is None:
            self.target = np.array(global_params, dtype=np.float64)  # M_0
        bad = np.isin(np.asarray(sampled), self.users)
        self.log.record(len(messages), int(bad.sum()))
        if not bad.any():
            return messages
        updates = np.stack([np.asarray(m.update, dtype=np.float64) for m in messages])
        if self.attack.kind == "model-replacement":
            weights = np.array([m.n for m in messages], dtype=np.float64)
            rows = model_replacement(global_params, self.target, weights, bad, self.eta)
            updates[bad] = rows
        else:
            rng = attack_rng(self.seed, _TRANSFORM, step)
            updates = poison_vectors(
                updates, bad, self.attack.kind, factor=self.attack.factor, rng=rng
            )
        out = list(messages)
        for i in np.flatnonzero(bad):
            dtype = np.asarray(messages[i].update).dtype
            out[i] = replace(messages[i], update=updates[i].astype(dtype))
        return out


class FoltrAttacker:
    """Malicious clients of FOLtR-ES or FPDGD, drawn afresh every iteration (module
    docstring).

    Args:
        attack: the attack.
        n_clients: clients per iteration, ``N``.
        seed: the run's seed (keys the attack's streams).
        system: the system trained: FOLtR-ES (:data:`ES_ATTACKS`) or FPDGD
            (:data:`VECTOR_ATTACKS`).
    """

    def __init__(self, attack: Attack, n_clients: int, seed: int, system: System) -> None:
        attack.check_system(system)
        self.attack, self.n_clients, self.seed = attack, int(n_clients), int(seed)
        self.log = AttackLog(attack)

    def malicious(self, iteration: int) -> np.ndarray:
        """Bool ``(N,)``: which of ``iteration``'s clients are malicious."""
        mask = np.zeros(self.n_clients, dtype=bool)
        picked = choose_malicious(
            self.attack.fraction, self.n_clients, attack_rng(self.seed, _SELECT, iteration)
        )
        mask[picked] = True
        return mask

    def es(self, iteration: int, theta: np.ndarray, batch: MessageBatch) -> MessageBatch:
        """The ES messages the server *accepts* in ``iteration`` against the model
        ``theta``: the malicious rows rewritten, then the reports outside MaxRR's range
        refused (as ``fedrank serve`` refuses them with 422)."""
        assert batch.seed is not None and batch.metric is not None
        bad = self.malicious(iteration)
        rng = attack_rng(self.seed, _TRANSFORM, iteration)
        target = None
        if self.attack.kind == "targeted-seed":
            target = unit_target(theta, attack_rng(self.seed, _TARGET))
        s, m, a = poison_es(
            batch.seed,
            batch.metric,
            batch.antithetic,
            bad,
            self.attack.kind,
            rng=rng,
            factor=self.attack.factor,
            target=target,
            candidates=self.attack.candidates,
            server_seeds=self.attack.server_seeds,
        )
        refused = out_of_range(m, a)
        self.log.record(batch.size, int(bad.sum()), int(refused.sum()))
        keep = np.flatnonzero(~refused)
        return MessageBatch.of_es(s[keep], m[keep], None if a is None else a[keep])

    def vectors(self, iteration: int, updates: np.ndarray) -> np.ndarray:
        """FPDGD's ``(N, d)`` deltas of ``iteration`` with the malicious rows rewritten."""
        bad = self.malicious(iteration)
        self.log.record(updates.shape[0], int(bad.sum()))
        rng = attack_rng(self.seed, _TRANSFORM, iteration)
        return poison_vectors(updates, bad, self.attack.kind, factor=self.attack.factor, rng=rng)


__all__ = [
    "ATTACKS",
    "ES_ATTACKS",
    "VECTOR_ATTACKS",
    "Attack",
    "AttackLog",
    "FedPSAttacker",
    "FoltrAttacker",
    "FrecencyAttacker",
    "attack_rng",
    "best_seeds",
    "choose_malicious",
    "model_replacement",
    "n_malicious",
    "out_of_range",
    "poison_es",
    "poison_vectors",
    "unit_target",
]
