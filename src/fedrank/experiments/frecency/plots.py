"""PNG plots of a frecency study (Mozilla paper, Figures 4 and 7; Section 6.3)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fedrank.experiments.frecency.study import StudyResult  # noqa: E402
from fedrank.models.frecency.scorer import page_scorer


def rolling_mean(values: list[float] | np.ndarray, window: int = 5) -> np.ndarray:
    """Mean of the last ``window`` values at every position (fewer at the start), ignoring
    NaN."""
    x = np.asarray(values, dtype=np.float64)
    out = np.empty_like(x)
    for i in range(x.size):  # one value per iteration: tens, not a hot path
        chunk = x[max(0, i - window + 1) : i + 1]
        finite = chunk[np.isfinite(chunk)]
        out[i] = finite.mean() if finite.size else np.nan
    return out


def plot_loss(result: StudyResult, path: Path, window: int = 5) -> Path:
    """Rolling mean (last ``window`` iterations) of the reported loss per branch (Fig. 4)."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, losses in result.branch_loss_per_iteration.items():
        ax.plot(np.arange(1, len(losses) + 1), rolling_mean(losses, window), label=name)
    ax.set_xlabel("iteration")
    ax.set_ylabel(f"SVM loss (rolling mean of {window})")
    ax.set_title("Reported loss per branch")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_weights(result: StudyResult, path: Path) -> Path:
    """Trajectory of every weight that moved, as change from its starting value."""
    names = page_scorer(result.config.model).names
    traj = result.weight_trajectory()
    change = traj - traj[0]
    moved = np.flatnonzero(np.abs(change).max(axis=0) > 0)
    fig, ax = plt.subplots(figsize=(8, 5))
    for line, i in enumerate(moved):
        # Ten colours, then a new line style, so that no two weights look the same.
        style = ("-", "--", ":")[line // 10 % 3]
        ax.plot(np.arange(traj.shape[0]), change[:, i], f"C{line % 10}", ls=style, label=names[i])
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xlabel("iteration")
    ax.set_ylabel("change from Firefox default")
    ax.set_title(f"Frecency weight trajectories ({result.config.model})")
    if moved.size:
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_chars_typed(result: StudyResult, path: Path) -> Path:
    """Distribution of characters typed per branch in the evaluation phase."""
    fig, ax = plt.subplots(figsize=(7, 4))
    samples = {
        name: s["chars_typed"] for name, s in result.eval_samples.items() if s["chars_typed"].size
    }
    top = int(max(v.max() for v in samples.values())) if samples else 1
    chars = np.arange(1, max(top, 1) + 1)
    width = 0.8 / max(len(samples), 1)
    # Side-by-side bars (branches with equal shares would hide each other as histograms).
    for b, (name, values) in enumerate(samples.items()):
        share = (values[:, None] == chars[None, :]).mean(axis=0)
        offset = (b - (len(samples) - 1) / 2) * width
        ax.bar(chars + offset, share, width, label=f"{name} (mean {values.mean():.3f})")
    ax.set_xticks(chars)
    ax.set_xlabel("characters typed before selecting")
    ax.set_ylabel("share of searches")
    ax.set_title("Evaluation phase: characters typed")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_stability(stability: list[dict[str, float]], path: Path) -> Path:
    """Mean and standard deviation of the L1 distance to the full update (Fig. 7)."""
    mean = np.array([s["mean"] for s in stability])
    std = np.array([s["std"] for s in stability])
    it = np.arange(1, mean.size + 1)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(it, mean, label="mean L1 distance")
    ax.fill_between(it, mean - std, mean + std, alpha=0.3, label="+- 1 std")
    ax.set_xlabel("iteration")
    ax.set_ylabel("L1(full update, update of a subsample)")
    ax.set_title("Update stability")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_study(result: StudyResult, out_dir: Path) -> list[Path]:
    """Every plot of a study run, written into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [
        plot_loss(result, out_dir / "loss.png"),
        plot_weights(result, out_dir / "weights.png"),
        plot_chars_typed(result, out_dir / "chars_typed.png"),
    ]
    if result.stability:
        paths.append(plot_stability(result.stability, out_dir / "stability.png"))
    return paths
