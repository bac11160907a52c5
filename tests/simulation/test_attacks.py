"""Simulated poisoning attacks (:mod:`fedrank.simulation.attacks`): each transform does what
its docstring says, the malicious share is exact and reproducible, the targeted-seed attack
finds noise along its target (and cannot with server-issued seeds), and, end to end, an
undefended attack hurts FOLtR-ES while the defense limits the damage."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedrank.aggregators.es_gradient import ESGradient
from fedrank.core.message import Message, MessageBatch
from fedrank.core.seeded_noise import gaussian_noise
from fedrank.errors import ConfigError
from fedrank.federation.registry import SYSTEMS
from fedrank.simulation.attacks import (
    ATTACKS,
    Attack,
    FedPSAttacker,
    FoltrAttacker,
    FrecencyAttacker,
    attack_rng,
    best_seeds,
    choose_malicious,
    model_replacement,
    n_malicious,
    out_of_range,
    poison_es,
    poison_vectors,
    unit_target,
)
from fedrank.simulation.frecency.messages import ClientReports

DIM = 46


def _updates(rng: np.random.Generator, c: int = 50, d: int = 22) -> np.ndarray:
    g = rng.normal(size=(c, d))
    g[::3] = 0.0  # many frecency clients send zero gradients
    return g


def _mask(c: int, rows: list[int]) -> np.ndarray:
    mask = np.zeros(c, dtype=bool)
    mask[rows] = True
    return mask


# ------------------------------------------------------------------------ the settings


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5, float("nan"), True])
def test_fraction_outside_zero_one_is_refused(fraction: float) -> None:
    with pytest.raises(ConfigError, match=r"\[0, 1\)"):
        Attack(fraction, "sign-flip")


def test_bad_kind_factor_and_candidates_are_refused() -> None:
    with pytest.raises(ConfigError, match="attack must be one of"):
        Attack(0.1, "flip")
    with pytest.raises(ConfigError, match="factor"):
        Attack(0.1, "scale", factor=0.0)
    with pytest.raises(ConfigError, match="candidate seeds"):
        Attack(0.1, "targeted-seed", candidates=0)


def test_each_system_takes_only_its_attacks() -> None:
    with pytest.raises(ConfigError, match="does not apply to fpdgd"):
        Attack(0.1, "targeted-seed").check_system(SYSTEMS["fpdgd"])
    with pytest.raises(ConfigError, match="does not apply to frecency"):
        Attack(0.1, "targeted-seed").check_system(SYSTEMS["frecency"])
    with pytest.raises(ConfigError, match="FOLtR-ES defense"):
        Attack(0.1, "sign-flip", server_seeds=True).check_system(SYSTEMS["fpdgd"])
    with pytest.raises(ConfigError, match="does not apply to foltr-es"):
        Attack(0.1, "model-replacement").check_system(SYSTEMS["foltr-es"])
    for kind in ATTACKS:  # every kind runs on some system
        assert any(kind in s.attacks for s in SYSTEMS.values())


# ------------------------------------------------------------------------ who is malicious


@pytest.mark.parametrize(("fraction", "n", "k"), [(0.2, 2000, 400), (0.1, 15, 2), (0.25, 10, 3),
                                                  (0.0, 100, 0), (0.05, 10, 1)])  # fmt: skip
def test_the_malicious_share_is_exact(fraction: float, n: int, k: int) -> None:
    assert n_malicious(fraction, n) == k  # round half up
    picked = choose_malicious(fraction, n, attack_rng(0, 0))
    assert picked.size == k and np.unique(picked).size == k
    assert np.all(np.diff(picked) > 0) and (k == 0 or 0 <= picked.min() <= picked.max() < n)


def test_the_choice_is_reproducible_and_seeded() -> None:
    a = choose_malicious(0.2, 1000, attack_rng(7, 0, 3))
    assert np.array_equal(a, choose_malicious(0.2, 1000, attack_rng(7, 0, 3)))
    assert not np.array_equal(a, choose_malicious(0.2, 1000, attack_rng(8, 0, 3)))
    assert not np.array_equal(a, choose_malicious(0.2, 1000, attack_rng(7, 0, 4)))


def test_foltr_attackers_are_fresh_every_iteration_and_exact() -> None:
    attacker = FoltrAttacker(Attack(0.2, "sign-flip"), 500, seed=3, system=SYSTEMS["foltr-es"])
    masks = [attacker.malicious(t) for t in range(5)]
    assert all(m.sum() == 100 for m in masks)
    assert not np.array_equal(masks[0], masks[1])
    again = FoltrAttacker(Attack(0.2, "random"), 500, seed=3, system=SYSTEMS["foltr-es"])
    assert np.array_equal(again.malicious(2), masks[2])  # the kind does not change who


def test_frecency_attackers_are_a_fixed_share_of_the_treatment_users() -> None:
    treatment = np.arange(0, 3000, 5)  # 600 treatment users among others
    attacker = FrecencyAttacker(Attack(0.2, "sign-flip"), treatment, seed=1)
    assert attacker.users.size == 120 and np.isin(attacker.users, treatment).all()
    same = FrecencyAttacker(Attack(0.2, "scale"), treatment[::-1], seed=1)
    assert np.array_equal(same.users, attacker.users)
    other = FrecencyAttacker(Attack(0.2, "sign-flip"), treatment, seed=2)
    assert not np.array_equal(other.users, attacker.users)


# ------------------------------------------------------------------------ vector updates


def test_sign_flip_negates_the_malicious_rows_only() -> None:
    g = _updates(np.random.default_rng(0))
    bad = _mask(len(g), [1, 4, 7])
    out = poison_vectors(g, bad, "sign-flip")
    assert np.array_equal(out[bad], -g[bad]) and np.array_equal(out[~bad], g[~bad])
    assert out is not g and out.dtype == g.dtype


def test_scale_multiplies_by_the_factor() -> None:
    g = _updates(np.random.default_rng(1))
    bad = _mask(len(g), [2, 5])
    out = poison_vectors(g, bad, "scale", factor=100.0)
    assert np.allclose(out[bad], 100.0 * g[bad]) and np.array_equal(out[~bad], g[~bad])


def test_random_has_the_median_norm_of_the_nonzero_honest_updates() -> None:
    g = _updates(np.random.default_rng(2))
    bad = _mask(len(g), [1, 2, 4, 5])
    out = poison_vectors(g, bad, "random", rng=np.random.default_rng(9))
    norms = np.linalg.norm(g[~bad], axis=1)
    expected = np.median(norms[norms > 0])
    assert np.allclose(np.linalg.norm(out[bad], axis=1), expected)
    assert np.array_equal(out[~bad], g[~bad])
    cos = (out[bad] * g[bad]).sum(1) / np.linalg.norm(out[bad], axis=1)
    assert not np.allclose(cos, 0.0)  # a fresh direction, not the honest one scaled
    again = poison_vectors(g, bad, "random", rng=np.random.default_rng(9))
    assert np.array_equal(out, again)


def test_frecency_scale_claims_the_largest_weight_and_keeps_true_losses() -> None:
    rng = np.random.default_rng(3)
    users = np.arange(40)
    reports = ClientReports(users, rng.normal(size=(40, 22)), np.ones(40, np.int64),
                            rng.random(40))  # fmt: skip
    attacker = FrecencyAttacker(Attack(0.25, "scale"), users, seed=0)
    sent = attacker.apply(0, reports)
    bad = np.isin(users, attacker.users)
    assert bad.sum() == 10
    assert np.all(sent.n[bad] == 100) and np.all(sent.n[~bad] == 1)
    assert np.allclose(sent.updates[bad], 100 * reports.updates[bad])
    assert np.array_equal(sent.loss, reports.loss)
    log = attacker.log.to_json()
    assert log["malicious_messages"] == 10 and log["messages"] == 40
    assert log["attack"] == {"fraction": 0.25, "kind": "scale", "factor": 100.0}


def test_frecency_sign_messages_stay_signs() -> None:
    rng = np.random.default_rng(4)
    users = np.arange(30)
    signs = np.sign(rng.normal(size=(30, 22)))
    reports = ClientReports(users, signs, np.ones(30, np.int64), rng.random(30))
    attacker = FrecencyAttacker(Attack(0.3, "random"), users, seed=0, sign_messages=True)
    sent = attacker.apply(2, reports)
    assert set(np.unique(sent.updates)) <= {-1.0, 0.0, 1.0}


# ------------------------------------------------------------------------ FOLtR-ES reports


def _es(rng: np.random.Generator, c: int = 40) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    seeds = rng.integers(0, 2**32, size=c, dtype=np.uint64)
    metric = rng.choice([0.0, 0.1, 0.25, 0.5, 1.0], size=c)
    anti = rng.choice([0.0, 0.1, 0.25, 0.5, 1.0], size=c)
    return seeds, metric, anti


def test_es_sign_flip_reverses_the_estimate() -> None:
    rng = np.random.default_rng(5)
    s, m, a = _es(rng)
    bad = _mask(len(s), [0, 3, 9])
    s2, m2, a2 = poison_es(s, m, a, bad, "sign-flip", rng=rng)
    assert np.array_equal(s2, s)
    assert np.array_equal(m2[bad], a[bad]) and np.array_equal(a2[bad], m[bad])
    assert np.array_equal(m2[~bad], m[~bad]) and np.array_equal(a2[~bad], a[~bad])
    # The server's estimate from the flipped messages is the honest one's negation.
    agg = ESGradient(DIM)
    honest = agg.finalize(agg.accumulate_batch(agg.zero(), MessageBatch.of_es(s, m, a)))
    everyone = np.ones(len(s), dtype=bool)
    _, mf, af = poison_es(s, m, a, everyone, "sign-flip", rng=rng)
    flipped = agg.finalize(agg.accumulate_batch(agg.zero(), MessageBatch.of_es(s, mf, af)))
    assert np.allclose(flipped, -honest)
    # Without antithetic variates: max_metric - metric.
    _, m3, a3 = poison_es(s, m, None, bad, "sign-flip", rng=rng)
    assert a3 is None and np.allclose(m3[bad], 1.0 - m[bad])


def test_es_scale_is_refused_by_the_range_check() -> None:
    rng = np.random.default_rng(6)
    s, m, a = _es(rng)
    bad = _mask(len(s), list(range(0, 40, 4)))
    _, m2, a2 = poison_es(s, m, a, bad, "scale", rng=rng, factor=100.0)
    refused = out_of_range(m2, a2)
    assert not refused[~bad].any()  # honest reports always pass
    assert np.array_equal(refused[bad], (m[bad] > 0) | (a[bad] > 0))  # 100 x 0 = 0 passes
    assert refused[bad].sum() >= 8


def test_out_of_range_also_refuses_nan() -> None:
    refused = out_of_range(np.array([0.0, 1.0, 1.0001, -0.1, np.nan]), None)
    assert refused.tolist() == [False, False, True, True, True]


def test_es_random_metrics_are_uniform_in_range() -> None:
    rng = np.random.default_rng(7)
    s, m, a = _es(rng, 4000)
    bad = np.ones(len(s), dtype=bool)
    _, m2, a2 = poison_es(s, m, a, bad, "random", rng=np.random.default_rng(0))
    assert not out_of_range(m2, a2).any()
    assert abs(m2.mean() - 0.5) < 0.02 and abs(a2.mean() - 0.5) < 0.02
    assert np.unique(m2).size > 3900


def test_targeted_seeds_project_far_more_on_the_target_than_honest_seeds() -> None:
    rng = np.random.default_rng(8)
    target = unit_target(rng.normal(size=DIM), rng)
    assert np.isclose(np.linalg.norm(target), 1.0)
    chosen, proj = best_seeds(200, target, 1000, np.random.default_rng(1))
    # The projection is of the noise the server rebuilds from the seed.
    rebuilt = gaussian_noise(chosen, DIM).astype(np.float64) @ target
    assert np.allclose(rebuilt, proj, atol=1e-4)
    honest = gaussian_noise(rng.integers(0, 2**32, size=2000, dtype=np.uint64), DIM) @ target
    # E[max of 1000 standard normals] = 3.24; an honest seed's projection has mean 0, sd 1.
    assert 2.8 < proj.mean() < 3.7 and proj.min() > 2.0
    assert abs(honest.mean()) < 0.1 and honest.std() < 1.1
    again, _ = best_seeds(200, target, 1000, np.random.default_rng(1))
    assert np.array_equal(chosen, again)


def test_targeted_seed_messages_push_along_the_target_and_server_seeds_limit_it() -> None:
    rng = np.random.default_rng(9)
    target = unit_target(rng.normal(size=DIM), rng)
    s, m, a = _es(rng, 600)
    bad = np.zeros(len(s), dtype=bool)
    bad[::3] = True  # 200 attackers
    k = int(bad.sum())

    def push(seeds: np.ndarray, metric: np.ndarray, anti: np.ndarray) -> float:
        """The mean move along the target of the attackers' messages: (f+ - f-) v . t."""
        coeff = metric[bad] - anti[bad]
        return float((coeff * (gaussian_noise(seeds[bad], DIM) @ target)).mean())

    chosen = poison_es(s, m, a, bad, "targeted-seed", rng=np.random.default_rng(2),
                       target=target, candidates=1000)  # fmt: skip
    assert not np.array_equal(chosen[0][bad], s[bad])
    assert np.all(chosen[1][bad] == 1.0) and np.all(chosen[2][bad] == 0.0)
    issued = poison_es(s, m, a, bad, "targeted-seed", rng=np.random.default_rng(2),
                       target=target, server_seeds=True)  # fmt: skip
    assert np.array_equal(issued[0], s)  # the attacker keeps the seed it was given
    up = gaussian_noise(s[bad], DIM) @ target > 0
    assert np.array_equal(issued[1][bad], up.astype(float))
    assert np.array_equal(issued[2][bad], 1.0 - up)
    honest = push(s, m, a)
    with_choice, with_issued = push(*chosen), push(*issued)  # type: ignore[arg-type]
    assert with_choice > 2.8  # E[max of 1000 normals] = 3.24
    assert 0.6 < with_issued < 1.0  # E|z| = sqrt(2 / pi) = 0.80: the metric lie alone
    assert abs(honest) < 0.1 and with_choice > 3 * with_issued
    assert k == 200 and not out_of_range(chosen[1], chosen[2]).any()


def test_target_is_minus_the_model_or_a_fixed_direction_at_zero() -> None:
    theta = np.arange(1.0, 5.0)
    assert np.allclose(unit_target(theta, np.random.default_rng(0)), -theta / np.linalg.norm(theta))
    at_zero = unit_target(np.zeros(4), attack_rng(3, 2))
    assert np.isclose(np.linalg.norm(at_zero), 1.0)
    assert np.array_equal(at_zero, unit_target(np.zeros(4), attack_rng(3, 2)))


def test_foltr_attacker_refuses_scaled_reports_and_counts_them() -> None:
    rng = np.random.default_rng(10)
    s, m, a = _es(rng, 100)
    m[:] = 0.5  # every report would leave the range when scaled
    attacker = FoltrAttacker(Attack(0.2, "scale"), 100, seed=4, system=SYSTEMS["foltr-es"])
    accepted = attacker.es(0, np.zeros(DIM), MessageBatch.of_es(s, m, a))
    bad = attacker.malicious(0)
    assert accepted.size == 80
    assert np.array_equal(np.sort(accepted.seed), np.sort(s[~bad]))
    log = attacker.log.to_json()
    assert (log["messages"], log["malicious_messages"], log["refused_messages"]) == (100, 20, 20)
    assert log["refused_per_iteration"] == [20]


def test_fpdgd_attacker_rewrites_its_rows() -> None:
    rng = np.random.default_rng(11)
    deltas = rng.normal(size=(10, 46))
    attacker = FoltrAttacker(Attack(0.3, "sign-flip"), 10, seed=0, system=SYSTEMS["fpdgd"])
    out = attacker.vectors(5, deltas)
    bad = attacker.malicious(5)
    assert bad.sum() == 3 and np.array_equal(out[bad], -deltas[bad])
    assert np.array_equal(out[~bad], deltas[~bad])


# ------------------------------------------------------------------------ model replacement


def test_model_replacement_lands_the_weighted_mean_on_the_target() -> None:
    """Bagdasaryan et al. 2020, Eq. 3: with honest deltas that cancel, the FedAvg step of
    the boosted deltas moves the global model onto the target."""
    rng = np.random.default_rng(12)
    g, x = rng.normal(size=8), rng.normal(size=8)
    weights = rng.integers(1, 50, size=20).astype(float)
    bad = _mask(20, [3, 11])
    deltas = np.zeros((20, 8))  # honest deltas that cancel
    deltas[bad] = model_replacement(g, x, weights, bad)
    step = (weights[:, None] * deltas).sum(0) / weights.sum()
    assert np.allclose(g + step, x)


def test_fedps_attacker_replaces_the_global_model_with_the_first_one() -> None:
    """After the first step the boosted deltas of the step's attackers bring the weighted
    mean back onto M_0 (with honest deltas that cancel)."""
    rng = np.random.default_rng(13)
    attacker = FedPSAttacker(Attack(0.3, "model-replacement"), 10, seed=2)
    m0 = rng.normal(size=6).astype(np.float32)
    honest = [Message(np.zeros(6, np.float32), n=int(n)) for n in rng.integers(1, 30, 10)]
    first = attacker.apply(0, np.arange(10), honest, m0)  # remembers M_0
    assert all(np.array_equal(a.update, b.update) for a, b in zip(first, honest, strict=True))
    g = m0 + rng.normal(size=6).astype(np.float32)  # the model has moved since
    sampled = np.arange(10)
    sent = attacker.apply(1, sampled, honest, g)
    bad = np.isin(sampled, attacker.users)
    assert bad.sum() == 3 and attacker.log.to_json()["malicious_per_iteration"] == [3, 3]
    weights = np.array([m.n for m in sent], dtype=np.float64)
    step = sum(w * m.update.astype(np.float64) for w, m in zip(weights, sent, strict=True))
    assert np.allclose(g + step / weights.sum(), m0, atol=1e-4)
    assert all(m.update.dtype == np.float32 for m in sent)
    assert [m.n for m in sent] == [m.n for m in honest]  # weights as the clients' own


# ------------------------------------------------------------------------ end to end


def test_targeted_seed_hurts_foltr_es_and_server_seeds_limit_the_damage(
    mq2008_dir: Path,
) -> None:
    """A small FOLtR-ES run (200 clients x 4, 80,000 interactions): 10% attackers with
    chosen seeds cost expected MaxRR; with server-issued seeds they cost less."""
    from fedrank.data.letor.folds import load_fold
    from fedrank.experiments.foltr.run import FoltrConfig, run_foltr

    fold = load_fold(mq2008_dir, 1)
    config = FoltrConfig(clients=200, interactions=80_000, seed=0)

    def quality(attack: Attack | None) -> float:
        return run_foltr(config, fold, attack=attack).expected_maxrr["train"]

    clean = quality(None)
    attacked = quality(Attack(0.1, "targeted-seed", candidates=200))
    defended = quality(Attack(0.1, "targeted-seed", candidates=200, server_seeds=True))
    assert attacked < clean - 0.03
    assert defended > attacked + 0.02
