"""The federated frecency study run through the real service: ``fedrank demo``.

A ``fedrank serve`` process runs on loopback. The users of the simulated study
(:class:`~fedrank.simulation.frecency.world.FrecencyWorld`: synthetic histories, hidden
preferences, the URL bar) are real HTTP clients (:class:`~fedrank.client.sdk.Client`), each
with its own random enrollment id, so the *server* assigns their study branches. Every
iteration, each client fetches the model it is served (``ETag``-cached), searches, and sends
what the paper's clients sent: treatment users the mean finite-difference gradient of their
searches with their metrics, control users their metrics only. Then the operator closes the
iteration through the admin API (the deployed system closed one every 30 minutes; closing
when every client has reported keeps the demo short and deterministic), and the server
aggregates, steps Rprop, applies the safeguards and publishes the next version. An
evaluation phase follows: every client searches with its final model and reports its
metrics. Each treatment client also runs the same searches (the same targets, typing and
attention draws) under the weights the treatment started from, the control's, and reports
both per-user means of characters typed: a paired comparison, which a simulation allows
and a deployed study does not (a real user sees one ranking).

The report is made from what the server stored, as the paper's analysis was: the loss per
iteration and branch from ``GET /v1/summary``, and the evaluation metrics read back from
the server's store. The paired differences give the demo's effect (mean, 95% t interval,
paired t and Wilcoxon signed-rank tests, :func:`paired_effect`); the branches are also
compared as the paper did (Sec. 6.3), with Mann-Whitney U tests on per-user means
(Bonferroni alpha 0.05/6), which at the demo's scale are not significant (docs/frecency.md).
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields
from numbers import Integral
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

from fedrank.client.sdk import Client, SendResult, ServedModel
from fedrank.core.message import MessageBatch
from fedrank.core.validation import Interval, Validated
from fedrank.errors import FedrankError
from fedrank.experiments.frecency.presets import hidden_weights
from fedrank.experiments.frecency.study import (
    MAX_USERS,
    FrecencyStudyConfig,
    StudyResult,
    build_world,
    optimization_phase,
    study_streams,
)
from fedrank.experiments.stats import compare_branches
from fedrank.server.process import ServerProcess
from fedrank.simulation.frecency.branches import BRANCHES
from fedrank.simulation.frecency.messages import ClientReports
from fedrank.simulation.frecency.urlbar import SearchBatch
from fedrank.simulation.frecency.world import FrecencyWorld
from fedrank.systems.frecency import SYSTEM as FRECENCY
from fedrank.systems.frecency.client import FrecencyClient
from fedrank.systems.frecency.config import FrecencyConfig
from fedrank.systems.frecency.wire import FrecencyWire

METRICS = ("loss", "chars_typed", "selected_rank")

#: The evaluation metrics of the paired design: a treatment user's mean characters typed
#: on the same evaluation searches under the trained weights and under the weights the
#: treatment started from (the control's).
PAIRED_METRICS = ("paired_chars_trained", "paired_chars_control")


@dataclass(frozen=True)
class ServiceDemoConfig(Validated):
    """The demo's size and seed.

    Attributes:
        users: simulated users (all real HTTP clients).
        iterations: optimization iterations.
        searches_per_iteration: mean (Poisson) searches per user per iteration.
        eval_searches: searches per user in the evaluation phase.
        preset: hidden preference of the users (``shifted``: something to learn).
        concurrency: client requests in flight at once.
        seed: seed of every random choice (population, searches, ids).
    """

    users: int = 600
    iterations: int = 20
    searches_per_iteration: float = 3.0
    eval_searches: int = 10
    preset: str = "shifted"
    concurrency: int = 32
    seed: int = 0

    ACCEPTS = {
        "users": Interval(Integral, 3, MAX_USERS),
        "iterations": FrecencyStudyConfig.ACCEPTS["iterations"],
        "searches_per_iteration": FrecencyStudyConfig.ACCEPTS["searches_per_iteration"],
        "eval_searches": FrecencyStudyConfig.ACCEPTS["eval_searches_per_user"],
        "preset": FrecencyStudyConfig.ACCEPTS["preset"],
        "concurrency": Interval(Integral, 1, None),
        "seed": FrecencyStudyConfig.ACCEPTS["seed"],
    }


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def _server_toml(path: Path, token: str, strategy: FrecencyConfig) -> Path:
    """The server's config: the study's own strategy section (the same chain on both
    sides), and an iteration policy that never closes by itself (the operator does, with
    the admin API, once every client has reported), and the system's metrics with the
    paired design's two."""
    chars = next(m for m in FRECENCY.metrics if m[0] == "chars_typed")
    metrics = [*FRECENCY.metrics, *((name, chars[1], chars[2]) for name in PAIRED_METRICS)]
    section = "".join(
        f"{f.name} = {_toml_value(getattr(strategy, f.name))}\n"
        for f in fields(FrecencyConfig)
        if getattr(strategy, f.name) is not None
    )
    path.write_text(
        "[server]\n"
        'workload = "frecency"\n'
        f'admin_token = "{token}"\n'
        "[iteration]\n"
        "seconds = 0.0\n"
        "min_updates = 1000000000\n"
        f"[frecency]\n{section}"
        "[metrics]\n" + "".join(f"{name} = [{low!r}, {high!r}]\n" for name, low, high in metrics)
    )
    return path


def _paired_chars(
    batch: SearchBatch, paired: SearchBatch, treated: np.ndarray, n_users: int
) -> dict[str, np.ndarray]:
    """The paired design's two per-user means of characters typed, over the same ``treated``
    searches (every one: the whole text counts when no history row was selected): under the
    trained weights (``batch``) and under the control weights (``paired``, which holds the
    ``treated`` searches only, in order). NaN for users outside ``treated``."""
    at = np.flatnonzero(treated)
    users = batch.user[at]
    trained = batch.chars_typed[at].astype(float)
    control = paired.chars_typed.astype(float)
    return {
        PAIRED_METRICS[0]: _per_user(trained, users, n_users),
        PAIRED_METRICS[1]: _per_user(control, users, n_users),
    }


def _per_user(values: np.ndarray, users: np.ndarray, n_users: int) -> np.ndarray:
    """Mean of ``values`` per user (NaN where a user has no finite value)."""
    ok = np.isfinite(values)
    total = np.bincount(users[ok], weights=values[ok], minlength=n_users)
    count = np.bincount(users[ok], minlength=n_users)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


class ServiceServer:
    """The study's server half as a real service (:class:`~fedrank.experiments.frecency.
    study.StudyServer`): every client fetches its model, sends its message over HTTP, and
    the operator closes the iteration through the admin API."""

    def __init__(
        self,
        url: str,
        clients: list[Client],
        pool: ThreadPoolExecutor,
        http: httpx.Client,
        wire: FrecencyWire,
        token: str,
    ) -> None:
        self.url = url
        self.clients = clients
        self.pool = pool
        self.http = http
        self.wire = wire
        self.admin = {"Authorization": f"Bearer {token}"}
        self.models: list[ServedModel] = []
        self.requests = 0

    def fetch(self) -> list[ServedModel]:
        """Every client fetches the model it is served (ETag-cached)."""
        self.models = list(self.pool.map(Client.fetch_model, self.clients))
        self.requests += len(self.clients)
        return self.models

    def model(self) -> np.ndarray:
        return next(m.params for m in self.fetch() if m.served == "trained")

    def weights(self) -> np.ndarray:
        return next(m.params for m in self.models if m.served == "trained")

    def report(
        self,
        world: FrecencyWorld,
        batch: SearchBatch,
        losses: np.ndarray,
        reports: ClientReports,
    ) -> None:
        n_users = len(self.clients)
        sent = np.flatnonzero(reports.n > 0)
        encoded = self.wire.encode(
            MessageBatch.of_vectors(reports.updates[sent], reports.n[sent].astype(np.int64))
        )
        payload = {int(reports.users[i]): body for i, body in zip(sent, encoded, strict=True)}
        metric = {
            "loss": _per_user(losses, batch.user, n_users),
            "chars_typed": _per_user(
                np.where(batch.found, batch.chars_typed, np.nan).astype(float), batch.user, n_users
            ),
            "selected_rank": _per_user(
                np.where(batch.found, batch.selected_rank, np.nan).astype(float),
                batch.user,
                n_users,
            ),
        }
        version = self.models[0].version
        messages = []
        for u in np.unique(batch.user):
            body: dict[str, Any] = payload.get(int(u), {})
            values = {k: float(v[u]) for k, v in metric.items() if np.isfinite(v[u])}
            messages.append((self.clients[u], body, values))
        results = list(self.pool.map(lambda m: m[0].send(m[1], version, m[2]), messages))
        self.requests += len(results)
        bad = [r for r in results if r.status not in ("accepted", "duplicate")]
        if bad:
            raise FedrankError(f"the server refused {len(bad)} reports, e.g. {bad[0]}")

    def close(self) -> None:
        closed = self.http.post(f"{self.url}/v1/admin/close", headers=self.admin)
        if closed.status_code != 200:
            raise FedrankError(f"closing the iteration failed: {closed.text}")


def run_service_demo(
    config: ServiceDemoConfig,
    out_dir: Path,
    progress: Callable[[int, int], None] | None = None,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the demo; returns the report (also written as JSON by the caller).
    ``progress(done, iterations)`` after every closed iteration; ``say`` gets a line at
    every phase (the server starting, its dashboard URL, the evaluation). The
    optimization phase is :func:`~fedrank.experiments.frecency.study.optimization_phase`
    with the service as the server half and the study's random streams, so
    ``run_study(study, branches=report["branches"])`` in one process gives the same model
    (``report["study"]`` is that study's config)."""
    start = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    store = out_dir / "store"
    if store.exists():
        shutil.rmtree(store)  # a fresh study every run
    study = demo_study(config)
    c = study.resolved()
    world_seed, train_seed, eval_seed, client_seed = study_streams(study.seed)
    ids = np.random.default_rng(client_seed)
    token = ids.bytes(16).hex()
    toml = _server_toml(out_dir / "server.toml", token, c)
    world = build_world(c, np.random.default_rng(world_seed))
    client = FrecencyClient(c)  # the client half; the server runs the same chain
    wire = FrecencyWire(c, FRECENCY.max_n)
    tell = say or (lambda _: None)
    tell("starting the server...")
    with (
        ServerProcess(store, config=toml, log=out_dir / "server.log") as server,
        httpx.Client(timeout=30.0, limits=httpx.Limits(max_connections=config.concurrency)) as http,
        ThreadPoolExecutor(config.concurrency) as pool,
    ):
        clients = [
            Client(server.url, rng=np.random.default_rng(ids.integers(2**63)), http=http)
            for _ in range(config.users)
        ]
        tell(f"server at {server.url}; dashboard: {server.url}/dashboard")
        tell(f"enrolling {config.users} users (the server assigns their branches)...")
        service = ServiceServer(server.url, clients, pool, http, wire, token)
        index = {name: i for i, name in enumerate(BRANCHES)}
        world.set_branches(np.array([index[m.branch] for m in service.fetch()]))  # the server's
        theta0 = service.weights().copy()  # the weights the treatment starts from (control's)
        tell(f"training: {config.iterations} iterations through the service...")
        result = StudyResult(config=study)
        optimization_phase(
            world, c, client, service, np.random.default_rng(train_seed), result,
            progress=progress,
        )  # fmt: skip
        tell(f"evaluation: {config.eval_searches} searches per user with the final model...")

        # Evaluation phase: fresh searches with the final models, metrics only. Paired
        # design: every treatment user's same searches (same targets, same typing draws) run
        # a second time under the weights the treatment started from (the control weights),
        # so the within-user difference isolates what training changed.
        rng = np.random.default_rng(eval_seed)
        theta = service.model()
        searchers = np.repeat(np.arange(config.users), config.eval_searches)
        world.due_searches(study.eval_days)
        searches = world.draw_searches(searchers, rng, state_for=theta)
        attention = int(rng.integers(2**63))
        batch = world.search(searches, theta, np.random.default_rng(attention))
        treated = world.branch[searches.users] == BRANCHES.index("treatment")
        paired = world.search(searches, theta0, np.random.default_rng(attention), only=treated)
        losses = world.branch_losses(batch, theta)
        found_rank = np.where(batch.found, batch.selected_rank, np.nan).astype(float)
        found_chars = np.where(batch.found, batch.chars_typed, np.nan).astype(float)
        eval_metrics = {
            "chars_typed": _per_user(found_chars, batch.user, config.users),
            "selected_rank": _per_user(found_rank, batch.user, config.users),
            "loss": _per_user(losses, batch.user, config.users),
            **_paired_chars(batch, paired, treated, config.users),
        }
        eval_version = service.models[0].version

        def evaluate(u: int) -> SendResult:
            values = {k: float(v[u]) for k, v in eval_metrics.items() if np.isfinite(v[u])}
            return clients[u].send({}, eval_version, {**values, "evaluation": 1.0})

        list(pool.map(evaluate, range(config.users)))
        requests = service.requests + config.users
        # the operator's view (the admin token: under [privacy] the counts are its only)
        summary = http.get(f"{server.url}/v1/summary", headers=service.admin).json()["iterations"]
        status = http.get(f"{server.url}/v1/status", headers=service.admin).json()
        trained = next(m for m in service.models if m.served == "trained")
        final = dict(zip(trained.parameter_names or [], trained.params.tolist(), strict=True))
        tell("reading the results from the server's store...")
    report = _report(config, store, summary, status, world, requests, time.perf_counter() - start)
    report["final_weights"] = final
    report["hidden_weights"] = dict(zip(final, hidden_weights(config.preset).tolist(), strict=True))
    report["served_weights_per_iteration"] = [
        *result.weights_per_iteration,
        final,
    ]  # the served model at the start of every iteration, then the final one
    report["branches"] = world.branch.tolist()
    report["study"] = asdict(study)
    return report


def demo_study(config: ServiceDemoConfig) -> FrecencyStudyConfig:
    """The study the demo runs (for ``run_study`` in one process, the same)."""
    return FrecencyStudyConfig(
        n_users=config.users,
        preset=config.preset,
        iterations=config.iterations,
        searches_per_iteration=config.searches_per_iteration,
        eval_searches_per_user=config.eval_searches,
        seed=config.seed,
    )


def _evaluation_rows(store: Path) -> dict[str, dict[str, np.ndarray]]:
    """Per-branch arrays of the evaluation pings' metrics, read from the server's store."""
    conn = sqlite3.connect(f"file:{store / 'fedrank.sqlite3'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT branch, metrics FROM updates WHERE kind = 'ping'").fetchall()
    finally:
        conn.close()
    out: dict[str, dict[str, list[float]]] = {b: {m: [] for m in METRICS} for b in BRANCHES}
    for branch, text in rows:
        metrics = orjson.loads(text)
        if metrics.get("evaluation") != 1.0:
            continue
        for m in METRICS:
            if m in metrics:
                out[branch][m].append(metrics[m])
    return {b: {m: np.asarray(v) for m, v in ms.items()} for b, ms in out.items()}


def _paired_rows(store: Path) -> tuple[np.ndarray, np.ndarray]:
    """The paired design's per-user means (trained, control weights) of the evaluation
    pings that carry both, read from the server's store."""
    conn = sqlite3.connect(f"file:{store / 'fedrank.sqlite3'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT metrics FROM updates WHERE kind = 'ping'").fetchall()
    finally:
        conn.close()
    pairs = []
    for (text,) in rows:
        metrics = orjson.loads(text)
        if metrics.get("evaluation") == 1.0 and all(m in metrics for m in PAIRED_METRICS):
            pairs.append([metrics[m] for m in PAIRED_METRICS])
    arr = np.asarray(pairs, dtype=float).reshape(-1, 2)
    return arr[:, 0], arr[:, 1]


def paired_effect(trained: np.ndarray, control: np.ndarray) -> dict[str, Any]:
    """The paired comparison of one group of users under two weight sets: the mean
    within-user difference ``trained - control`` with its 95% t interval (Student's t on
    the ``n`` differences), the two-sided paired t-test's p-value and the Wilcoxon
    signed-rank test's (scipy.stats ``ttest_rel``, ``wilcoxon``), and both means."""
    from scipy import stats

    diff = np.asarray(trained, dtype=float) - np.asarray(control, dtype=float)
    n = int(diff.size)
    out: dict[str, Any] = {
        "n_users": n,
        "trained_mean": float(np.mean(trained)) if n else None,
        "control_mean": float(np.mean(control)) if n else None,
        "diff": float(diff.mean()) if n else None,
        "diff_ci95": None,
        "t_pvalue": None,
        "wilcoxon_pvalue": None,
    }
    if n < 3 or not np.any(diff):
        return out
    se = float(diff.std(ddof=1) / np.sqrt(n))
    half = float(stats.t.ppf(0.975, n - 1)) * se
    out["diff_ci95"] = [out["diff"] - half, out["diff"] + half]
    out["t_pvalue"] = float(stats.ttest_rel(trained, control).pvalue)
    out["wilcoxon_pvalue"] = float(stats.wilcoxon(diff).pvalue)
    return out


def _report(
    config: ServiceDemoConfig,
    store: Path,
    summary: list[dict[str, Any]],
    status: dict[str, Any],
    world: FrecencyWorld,
    requests: int,
    seconds: float,
) -> dict[str, Any]:
    closed = [it for it in summary if it.get("closed_at") is not None]
    loss = {
        b: [it["branches"].get(b, {}).get("metrics", {}).get("loss") for it in closed]
        for b in BRANCHES
    }
    evaluation = _evaluation_rows(store)
    tests = compare_branches(
        {b: {m: evaluation[b][m] for m in ("chars_typed", "selected_rank")} for b in BRANCHES},
        alpha=0.05,
    )
    eval_summary = {
        b: {
            "users": int(evaluation[b]["chars_typed"].size),
            **{f"{m}_mean": float(np.mean(evaluation[b][m])) if evaluation[b][m].size else None
               for m in METRICS},
        }
        for b in BRANCHES
    }  # fmt: skip
    first, last = loss["treatment"][:3], loss["treatment"][-3:]
    return {
        "config": asdict(config),
        "seconds": seconds,
        "requests": requests,
        "server_status": status,
        "users_per_branch": {b: int((world.branch == i).sum()) for i, b in enumerate(BRANCHES)},
        "loss_per_iteration": loss,
        "treatment_loss_first3_mean": float(np.mean(first)) if first else None,
        "treatment_loss_last3_mean": float(np.mean(last)) if last else None,
        "eval": eval_summary,
        "tests": tests,
        "bonferroni_alpha": 0.05 / len(tests) if tests else None,
        "paired": {
            "design": (
                "paired: every treatment user's evaluation searches (after training) run "
                "under the trained weights and again, with the same targets and typing "
                "draws, under the control weights the treatment started from; unit: the "
                "user's mean characters typed over all those searches"
            ),
            **paired_effect(*_paired_rows(store)),
        },
    }


def write_service_report(report: dict[str, Any], out_dir: Path, command: str) -> list[Path]:
    """``report.md`` and two PNG plots in ``out_dir``: ``loss.png`` (the loss per iteration
    and branch, the controls muted, the legend outside the data) and ``chars_typed.png``
    (characters typed under the trained and the control weights, paired, with the 95% CI
    of the difference, n and p); returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    paths = []
    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    for branch, values in report["loss_per_iteration"].items():
        y = np.array([np.nan if v is None else v for v in values], dtype=float)
        treated = branch == "treatment"
        ax.plot(np.arange(1, y.size + 1), y, marker=".", label=branch,
                lw=2.0 if treated else 1.0, alpha=1.0 if treated else 0.5)  # fmt: skip
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("iteration")
    ax.set_ylabel("mean reported loss")
    ax.set_title("Loss reported per iteration (server summary)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    paths.append(out_dir / "loss.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    paired = report["paired"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.4), width_ratios=(1.1, 1.0))
    if paired["diff_ci95"] is not None:
        means = [paired["control_mean"], paired["trained_mean"]]
        left.plot([0, 1], means, "o-", color="tab:blue", ms=8)
        for x, m in enumerate(means):
            left.annotate(f"{m:.3f}", (x, m), textcoords="offset points", xytext=(8, 4))
        left.set_xticks([0, 1], ["control weights\n(baseline)", "trained weights"])
        left.set_xlim(-0.4, 1.6)
        left.margins(y=0.3)
        left.set_ylabel("mean characters typed per search")
        left.set_title(f"The same {paired['n_users']} treatment users' searches")
        low, high = paired["diff_ci95"]
        err = [[paired["diff"] - low], [high - paired["diff"]]]
        right.errorbar([paired["diff"]], [0], xerr=err, fmt="o", color="tab:green", capsize=6)
        right.axvline(0.0, color="black", lw=0.8, ls="--")
        right.set_yticks([])
        right.margins(x=0.6)
        right.set_xlabel("trained - control (characters per search)")
        right.set_title(
            f"difference {paired['diff']:+.3f}, 95% CI [{low:+.3f}, {high:+.3f}]\n"
            f"n = {paired['n_users']}, paired t p = {paired['t_pvalue']:.2g}",
            fontsize=10,
        )
    fig.tight_layout()
    paths.append(out_dir / "chars_typed.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    ev, loss = report["eval"], report["loss_per_iteration"]["treatment"]
    lines = [
        "# fedrank demo: federated frecency through the real service",
        "",
        f"Command: `{command}`. A `fedrank serve` process on loopback; "
        f"{report['config']['users']} simulated users as HTTP clients "
        f"({report['users_per_branch']}), {report['config']['iterations']} iterations, "
        f"{report['requests']:,} requests in {report['seconds']:.1f} s.",
        "",
        "## The result: characters typed, trained vs control weights (paired)",
        "",
        f"Design: {paired['design']}.",
        "",
    ]
    if paired["diff_ci95"] is not None:
        low, high = paired["diff_ci95"]
        lines += [
            "| weights | users | mean characters typed per search |",
            "|---|---|---|",
            f"| control (the baseline: no training) | {paired['n_users']} | "
            f"{paired['control_mean']:.4f} |",
            f"| trained | {paired['n_users']} | {paired['trained_mean']:.4f} |",
            "",
            f"Difference {paired['diff']:+.4f}, 95% CI [{low:+.4f}, {high:+.4f}] (t interval "
            f"on the {paired['n_users']} within-user differences); paired t-test p = "
            f"{paired['t_pvalue']:.3g}, Wilcoxon signed-rank p = "
            f"{paired['wilcoxon_pvalue']:.3g}.",
            "",
        ]
    else:
        lines += ["Too few treatment users with evaluation searches for the paired test.", ""]
    lines += [
        "## Loss per iteration (treatment, from the server's summary)",
        "",
        " ".join(f"{v:.4f}" if v is not None else "-" for v in loss),
        "",
        f"Mean of the first 3 iterations {report['treatment_loss_first3_mean']:.4f}, "
        f"of the last 3 {report['treatment_loss_last3_mean']:.4f}.",
        "",
        "## Between branches (independent users, as the paper; per-user means)",
        "",
        "| branch | users | chars typed | selected rank | loss |",
        "|---|---|---|---|---|",
    ]
    for b in BRANCHES:
        e = ev[b]
        cells = [f"{e[k]:.4f}" if e[k] is not None else "-" for k in
                 ("chars_typed_mean", "selected_rank_mean", "loss_mean")]  # fmt: skip
        lines.append(f"| {b} | {e['users']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Mann-Whitney U, two-sided, Bonferroni alpha {report['bonferroni_alpha']:.5f}:",
        "",
    ]
    for t in report["tests"]:
        lines.append(f"- {t['metric']}: {t['a']} vs {t['b']}: p = {t['pvalue']:.3g}")
    lines += ["", "Plots: " + ", ".join(p.name for p in paths) + "; report.html", ""]
    (out_dir / "report.md").write_text("\n".join(lines))
    return [out_dir / "report.md", *paths]
