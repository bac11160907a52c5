"""Simulated poisoning: what a share of malicious clients does to federated frecency and to
FOLtR-ES, with and without defenses (docs/service.md, "Poisoning: attacks and defenses";
the attacks: :mod:`fedrank.simulation.attacks`).

**Frecency** (``fedrank frecency simulate`` in process, the synthetic world, ``--users``
users, ``--iterations`` iterations): for every seed the world is built once and each run
starts from a copy of it (the same users, histories and branches), with the same
optimization stream; only the attack and the server's aggregation differ. Per run:

* ``raw_drop``: the study's own measure, the treatment loss of the first iteration minus
  the mean of the last 5 (``loss_per_iteration``; one iteration is too noisy to end on);
* ``held_out_gain``: the treatment loss of Firefox's default weights minus that of the
  published final model, both on the *same* held-out searches (the evaluation phase run
  on a copy of the world as it was before the study, the evaluation stream of the seed,
  ``--eval-searches`` per user): what learning bought, paired, without the world's own
  dynamics.

The raw drop mostly measures the world: every selection is recorded as a typed visit, so
selected pages climb and the loss falls with a frozen model too. Each seed also runs the
study with a server that never steps (``frozen_raw_drop``), which shows how much.

Defenses: ``none`` (the default configuration: the gated mean at the ``paper`` setting's
gate z = 1, no norm bound), ``gate-2`` (the gate at 2 standard errors, the default until
2026-11-27), ``norm-bound`` (every gradient clipped to an adaptive L2 bound tracking the
median norm, Andrew et al. 2021; start ``--norm-bound``), ``median`` and ``trimmed-mean``
(coordinate-wise, Yin et al. 2018, trim 0.1). Attacks: ``sign-flip`` and ``scale``
(factor 100 and the largest weight n = 100) at ``--fractions``. Each cell is the ratio to
the clean run with no defense of the same seed; mean and standard deviation over seeds.

**FOLtR-ES** (``fedrank foltr train`` in process: MQ2008 Fold 1, Navigational users, linear
ranker, 2,000 clients x B = 4, p = 0.9, ``--interactions``): ``sign-flip``, ``scale``,
``random`` and ``targeted-seed`` (1,000 candidate seeds per attacker), the last also with
server-issued seeds, with a bound on every report's antithetic difference
(``--difference-bound``, default 0.5: ``ESGradient``'s ``difference_bound``), and with
both; the server always refuses metrics outside MaxRR's [0, 1] (as ``fedrank serve``
does). Reported: the final model's expected MaxRR on the train and test queries minus the
clean undefended run's of the same seed (so a defense's own cost counts: the clean run
with the bound is a row too), and the refused messages.

Writes results/benchmarks/attacks_frecency.json, attacks_foltr.json and a PNG of each, and
prints the tables in markdown.

Run: nice python benchmarks/bench_attacks.py [--only frecency|foltr] [--seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from fedrank.core.json_io import write_json
from fedrank.data.letor.folds import load_fold
from fedrank.experiments.foltr.run import FoltrConfig, run_foltr
from fedrank.experiments.frecency import study as S
from fedrank.simulation.attacks import Attack

OUT = Path("results/benchmarks")
FRECENCY_ATTACKS = ("sign-flip", "scale")
#: FOLtR-ES rows: (attack, server-issued seeds, the difference bound on)
FOLTR_ROWS: dict[str, tuple[str, bool, bool]] = {
    "sign-flip": ("sign-flip", False, False),
    "scale": ("scale", False, False),
    "random": ("random", False, False),
    "targeted-seed": ("targeted-seed", False, False),
    "targeted-seed+server-seeds": ("targeted-seed", True, False),
    "targeted-seed+difference-bound": ("targeted-seed", False, True),
    "targeted-seed+server-seeds+difference-bound": ("targeted-seed", True, True),
}
FOLTR_ATTACKS = tuple(FOLTR_ROWS)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True)  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        return out.stdout.strip() + ("+uncommitted" if dirty.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _stats(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=np.float64)
    return {"mean": float(arr.mean()), "sd": float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
            "min": float(arr.min()), "max": float(arr.max())}  # fmt: skip


def _cell(s: dict[str, float], digits: int = 2, signed: bool = False) -> str:
    fmt = f"{{:{'+' if signed else ''}.{digits}f}}"
    return f"{fmt.format(s['mean'])} ± {s['sd']:.{digits}f}"


# ------------------------------------------------------------------------------ frecency


def frecency_defenses(norm_bound: float) -> dict[str, dict[str, Any]]:
    """The aggregation settings compared (FrecencyConfig fields)."""
    return {
        "none": {},
        "gate-2": {"significance_z": 2.0},
        "norm-bound": {"norm_bound": norm_bound, "norm_quantile": 0.5},
        "median": {"aggregator": "median"},
        "trimmed-mean": {"aggregator": "trimmed-mean", "trim": 0.1},
    }


def frecency_seed(seed: int, args: argparse.Namespace, done: Callable[[], None]) -> dict[str, Any]:
    """Every run of one seed: the frozen model, then defenses x (clean, attacks x
    fractions)."""
    base = S.FrecencyStudyConfig(
        n_users=args.users, iterations=args.iterations, seed=seed,
        eval_searches_per_user=args.eval_searches,
    )  # fmt: skip
    world_seed, train_seed, eval_seed, _ = S.study_streams(seed)
    template = S.build_world(base.resolved(), np.random.default_rng(world_seed))

    def held_out_loss(theta: np.ndarray, config: Any) -> float:
        result = S.StudyResult(config=config)
        S.evaluate_phase(copy.deepcopy(template), theta, config, eval_seed, result, compare=False)
        return float(result.eval["treatment"]["loss_mean"])

    class FrozenServer(S.InProcessServer):
        """Takes the messages, never steps: the study without learning."""

        def close(self) -> None:
            self.state = self.strategy.zero()

    def run(defense: dict[str, Any], attack: Attack | None, frozen: bool = False) -> dict:
        config = replace(base, **defense).resolved()
        strategy = S.FrecencyStrategy(config)
        server = (FrozenServer if frozen else S.InProcessServer)(strategy)
        result = S.StudyResult(config=config)
        start = time.perf_counter()
        S.optimization_phase(
            copy.deepcopy(template), config, strategy, server,
            np.random.default_rng(train_seed), result, attack=attack,
        )  # fmt: skip
        losses = result.loss_per_iteration
        final = strategy.publish(server.params)
        row = {
            "raw_drop": float(losses[0] - np.mean(losses[-5:])),
            "held_out_loss": held_out_loss(final, config),
            "first_loss": float(losses[0]),
            "last5_loss": float(np.mean(losses[-5:])),
            "seconds": time.perf_counter() - start,
            "attack": result.attack,
        }
        done()
        return row

    defaults_loss = held_out_loss(S.FrecencyStrategy(base.resolved()).initial_params(),
                                  base.resolved())  # fmt: skip
    out: dict[str, Any] = {"seed": seed, "defaults_held_out_loss": defaults_loss}
    out["frozen"] = run({}, None, frozen=True)
    runs: dict[str, Any] = {}
    for name, defense in frecency_defenses(args.norm_bound).items():
        runs[f"{name}/clean/0"] = run(defense, None)
        for kind in FRECENCY_ATTACKS:
            for fraction in args.fractions:
                runs[f"{name}/{kind}/{fraction:g}"] = run(defense, Attack(fraction, kind))
        _log(f"  seed {seed}: {name} done")
    for row in [out["frozen"], *runs.values()]:
        row["held_out_gain"] = defaults_loss - row["held_out_loss"]
    out["runs"] = runs
    return out


def frecency_sweep(args: argparse.Namespace) -> dict[str, Any]:
    n_defenses = len(frecency_defenses(args.norm_bound))
    n_runs = len(args.seeds) * (1 + n_defenses * (1 + len(FRECENCY_ATTACKS) * len(args.fractions)))
    count = [0]
    start = time.perf_counter()

    def done() -> None:
        count[0] += 1
        _log(f"frecency run {count[0]}/{n_runs} ({time.perf_counter() - start:.0f} s)")

    per_seed = [frecency_seed(seed, args, done) for seed in args.seeds]
    keys = list(per_seed[0]["runs"])
    table: dict[str, Any] = {}
    for key in keys:
        cells: dict[str, Any] = {}
        for measure in ("raw_drop", "held_out_gain"):
            ratios = [s["runs"][key][measure] / s["runs"]["none/clean/0"][measure]
                      for s in per_seed]  # fmt: skip
            cells[f"{measure}_ratio"] = _stats(ratios)
            cells[measure] = _stats([s["runs"][key][measure] for s in per_seed])
        table[key] = cells
    frozen = {m: _stats([s["frozen"][m] / s["runs"]["none/clean/0"][m] for s in per_seed])
              for m in ("raw_drop", "held_out_gain")}  # fmt: skip
    targets = {}
    if 0.2 in args.fractions:
        cell = table["none/sign-flip/0.2"]
        targets["sign_flip_20_default_defense"] = {
            "want": ">= 0.8 of the clean run's loss drop",
            "raw_drop_ratio": cell["raw_drop_ratio"]["mean"],
            "held_out_gain_ratio": cell["held_out_gain_ratio"]["mean"],
            "met_raw": cell["raw_drop_ratio"]["mean"] >= 0.8,
            "met_held_out": cell["held_out_gain_ratio"]["mean"] >= 0.8,
        }
    return {
        "settings": {
            "users": args.users,
            "iterations": args.iterations,
            "seeds": args.seeds,
            "fractions": args.fractions,
            "eval_searches_per_user": args.eval_searches,
            "defenses": frecency_defenses(args.norm_bound),
            "attacks": list(FRECENCY_ATTACKS),
        },  # fmt: skip
        "table": table,
        "targets": targets,
        "frozen_ratio": frozen,
        "per_seed": per_seed,
        "seconds": time.perf_counter() - start,
    }


def frecency_markdown(report: dict[str, Any]) -> str:
    fractions = report["settings"]["fractions"]
    head = "| attack | defense | 0 | " + " | ".join(f"{100 * f:g}%" for f in fractions) + " |"
    lines: list[str] = []
    for measure, title in (("held_out_gain", "held-out loss gain"), ("raw_drop", "raw loss drop")):
        lines += [f"\n{title}, relative to the clean undefended run (mean ± sd over seeds)\n",
                  head, "|" + "---|" * (3 + len(fractions))]  # fmt: skip
        for kind in FRECENCY_ATTACKS:
            for defense in report["settings"]["defenses"]:
                clean = report["table"][f"{defense}/clean/0"][f"{measure}_ratio"]
                cells = [report["table"][f"{defense}/{kind}/{f:g}"][f"{measure}_ratio"]
                         for f in fractions]  # fmt: skip
                lines.append(f"| {kind} | {defense} | {_cell(clean)} | "
                             + " | ".join(_cell(c) for c in cells) + " |")  # fmt: skip
        frozen = report["frozen_ratio"][measure]
        blanks = " |" * len(fractions)
        lines.append(f"| (no learning: frozen model) | | {_cell(frozen)} |{blanks}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ FOLtR-ES


def _foltr_run(
    name: str, fraction: float, config: FoltrConfig, bound: float
) -> tuple[FoltrConfig, Attack | None]:
    """The configuration and attack of row ``name`` (``clean``, ``clean+difference-bound``
    or a :data:`FOLTR_ROWS` key) at ``fraction``."""
    if name.startswith("clean"):
        return replace(config, difference_bound=bound if name != "clean" else 0.0), None
    kind, server_seeds, bounded = FOLTR_ROWS[name]
    run_config = replace(config, difference_bound=bound if bounded else 0.0)
    return run_config, Attack(fraction, kind, server_seeds=server_seeds)


def foltr_sweep(args: argparse.Namespace) -> dict[str, Any]:
    fold = load_fold(args.mq2008, 1)
    n_runs = len(args.seeds) * (2 + len(FOLTR_ATTACKS) * len(args.fractions))
    start = time.perf_counter()
    per_seed: list[dict[str, Any]] = []
    count = 0
    for seed in args.seeds:
        config = FoltrConfig(interactions=args.interactions, seed=seed)
        runs: dict[str, Any] = {}
        for name in ("clean", "clean+difference-bound", *FOLTR_ATTACKS):
            for fraction in (0.0,) if name.startswith("clean") else args.fractions:
                run_config, attack = _foltr_run(name, fraction, config, args.difference_bound)
                t0 = time.perf_counter()
                result = run_foltr(run_config, fold, attack=attack)
                runs[f"{name}/{fraction:g}"] = {
                    "expected_maxrr": result.expected_maxrr,
                    "ndcg10": result.ndcg10,
                    "attack": result.attack,
                    "seconds": time.perf_counter() - t0,
                }
                count += 1
                _log(f"foltr run {count}/{n_runs} ({time.perf_counter() - start:.0f} s)")
        per_seed.append({"seed": seed, "runs": runs})
    table: dict[str, Any] = {}
    for key in per_seed[0]["runs"]:
        table[key] = {
            f"delta_{split}": _stats(
                [
                    s["runs"][key]["expected_maxrr"][split]
                    - s["runs"]["clean/0"]["expected_maxrr"][split]
                    for s in per_seed
                ]
            )  # fmt: skip
            for split in ("train", "test")
        }
        table[key]["expected_maxrr_test"] = _stats(
            [s["runs"][key]["expected_maxrr"]["test"] for s in per_seed]
        )
        table[key]["refused_share_of_malicious"] = _stats([
            s["runs"][key]["attack"]["refused_messages"]
            / max(1, s["runs"][key]["attack"]["malicious_messages"])
            if s["runs"][key]["attack"] else 0.0 for s in per_seed
        ])  # fmt: skip
    targets = {}
    if 0.2 in args.fractions:
        worst = {name: min(table[f"{name}/0.2"][f"delta_{split}"]["mean"]
                           for split in ("train", "test"))
                 for name in FOLTR_ATTACKS}  # fmt: skip
        targets["loss_at_20_percent"] = {
            "want": "each attack costs at most 0.02 expected MaxRR (train and test)",
            "worst_mean_delta": worst,
            "met": {name: value >= -0.02 for name, value in worst.items()},
        }
    return {
        "settings": {
            "data": "MQ2008 Fold 1",
            "click_model": "navigational",
            "ranker": "linear",
            "clients": 2000,
            "batch": 4,
            "p": 0.9,
            "interactions": args.interactions,
            "seeds": args.seeds,
            "fractions": args.fractions,
            "attacks": list(FOLTR_ATTACKS),
            "candidates": 1000,
            "difference_bound": args.difference_bound,
        },  # fmt: skip
        "table": table,
        "targets": targets,
        "per_seed": per_seed,
        "seconds": time.perf_counter() - start,
    }


def foltr_markdown(report: dict[str, Any]) -> str:
    fractions = report["settings"]["fractions"]
    clean = report["table"]["clean/0"]["expected_maxrr_test"]
    bounded = report["table"]["clean+difference-bound/0"]
    lines = [f"\nclean expected MaxRR (test): {_cell(clean, 4)}; with the difference bound "
             f"{report['settings']['difference_bound']:g}, no attack: "
             f"{_cell(bounded['delta_train'], 3, True)} / {_cell(bounded['delta_test'], 3, True)}",
             "\nexpected MaxRR minus the clean run's, train / test (mean ± sd over seeds)\n",
             "| attack | " + " | ".join(f"{100 * f:g}%" for f in fractions)
             + f" | refused at {100 * fractions[-1]:g}% |",
             "|" + "---|" * (2 + len(fractions))]  # fmt: skip
    for name in FOLTR_ATTACKS:
        cells = []
        for f in fractions:
            row = report["table"][f"{name}/{f:g}"]
            cells.append(f"{_cell(row['delta_train'], 3, True)} / "
                         f"{_cell(row['delta_test'], 3, True)}")  # fmt: skip
        refused = report["table"][f"{name}/{fractions[-1]:g}"]["refused_share_of_malicious"]
        lines.append(f"| {name} | " + " | ".join(cells)
                     + f" | {100 * refused['mean']:.1f}% of malicious messages |")  # fmt: skip
    return "\n".join(lines)


# ------------------------------------------------------------------------------ plots


def plot(report: dict[str, Any], kind: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fractions = [0.0, *report["settings"]["fractions"]]
    if kind == "frecency":
        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        for ax, attack in zip(axes, FRECENCY_ATTACKS, strict=True):
            for defense in report["settings"]["defenses"]:
                keys = [f"{defense}/clean/0"] + [f"{defense}/{attack}/{f:g}" for f in fractions[1:]]
                cells = [report["table"][k]["held_out_gain_ratio"] for k in keys]
                ax.errorbar([100 * f for f in fractions], [c["mean"] for c in cells],
                            yerr=[c["sd"] for c in cells], marker="o", capsize=3,
                            label=defense)  # fmt: skip
            ax.axhline(1.0, color="grey", lw=0.8, ls=":")
            ax.set_title(f"frecency, {attack}")
            ax.set_xlabel("malicious treatment users (%)")
        axes[0].set_ylabel("held-out loss gain / clean undefended")
        axes[0].legend()
    else:
        fig, ax = plt.subplots(figsize=(6, 4))
        for name in FOLTR_ATTACKS:
            keys = ["clean/0"] + [f"{name}/{f:g}" for f in fractions[1:]]
            cells = [report["table"][k]["delta_test"] for k in keys]
            ax.errorbar([100 * f for f in fractions], [c["mean"] for c in cells],
                        yerr=[c["sd"] for c in cells], marker="o", capsize=3,
                        label=name)  # fmt: skip
        ax.axhline(-0.02, color="grey", lw=0.8, ls=":")
        ax.set_xlabel("malicious clients per iteration (%)")
        ax.set_ylabel("test expected MaxRR - clean")
        ax.set_title("FOLtR-ES, MQ2008 Fold 1")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=["frecency", "foltr"], default=None)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--fractions", default="0.1,0.2,0.3")
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--eval-searches", type=int, default=6)
    parser.add_argument("--norm-bound", type=float, default=0.05,
                        help="the adaptive bound's start (about the honest gradients' "
                        "90th-percentile norm in the first iteration)")  # fmt: skip
    parser.add_argument("--interactions", type=int, default=500_000)
    parser.add_argument("--difference-bound", type=float, default=0.5,
                        help="FOLtR-ES: the bound on every report's antithetic difference in "
                        "the defended rows")  # fmt: skip
    parser.add_argument("--mq2008", type=Path, default=Path("../shared/data/MQ2008"))
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.fractions = [float(f) for f in args.fractions.split(",")]
    meta = {"command": " ".join(["python", *sys.argv]), "commit": _commit(),
            "python": platform.python_version(), "machine": platform.machine()}  # fmt: skip
    if args.only in (None, "frecency"):
        report = {**meta, **frecency_sweep(args)}
        write_json(report, args.out / "attacks_frecency.json")
        plot(report, "frecency", args.out / "attacks_frecency.png")
        print("## frecency\n" + frecency_markdown(report))
        print(json.dumps(report["targets"], indent=2))
    if args.only in (None, "foltr"):
        report = {**meta, **foltr_sweep(args)}
        write_json(report, args.out / "attacks_foltr.json")
        plot(report, "foltr", args.out / "attacks_foltr.png")
        print("\n## FOLtR-ES\n" + foltr_markdown(report))
        print(json.dumps(report["targets"], indent=2))


if __name__ == "__main__":
    main()
