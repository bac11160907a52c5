"""Learning-curve plots of federated OLTR runs, as FOLtR-ES Figures 1-5 draw them: mean
batch MaxRR (what users experienced) against interactions, smoothed by a sliding average
("smoothed by applying sliding average over four measurements")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def smooth(values: Sequence[float], window: int = 4) -> np.ndarray:
    """Sliding average over ``window`` measurements, no padding (``len - window + 1``
    values; the input itself when it is shorter than the window)."""
    v = np.asarray(values, dtype=np.float64)
    if window <= 1 or v.size < window:
        return v
    return np.convolve(v, np.ones(window) / window, mode="valid")


def plot_curves(
    panels: Mapping[str, Mapping[str, Sequence[float]]],
    interactions_per_iteration: Mapping[str, int] | int,
    path: Path,
    title: str = "",
    window: int = 4,
    references: Mapping[str, Mapping[str, float]] | None = None,
) -> Path:
    """One panel per key of ``panels`` (e.g. a click model), one line per run in it.

    Args:
        panels: ``{panel: {label: batch MaxRR per iteration}}``.
        interactions_per_iteration: x-axis scale, one for all runs or per run label.
        path: the PNG to write.
        references: optional horizontal lines per panel, ``{panel: {label: value}}``.
    """
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), squeeze=False)
    for ax, (panel, runs) in zip(axes[0], panels.items(), strict=True):
        for label, curve in runs.items():
            per_it = (
                interactions_per_iteration
                if isinstance(interactions_per_iteration, int)
                else interactions_per_iteration[label]
            )
            y = smooth(curve, window)
            x = (np.arange(y.size) + min(window, len(curve))) * per_it
            ax.plot(x, y, label=label, linewidth=1.2)
        for label, value in ((references or {}).get(panel) or {}).items():
            ax.axhline(value, linestyle="--", linewidth=0.9, color="grey")
            ax.annotate(label, (0.01, value), xycoords=("axes fraction", "data"), fontsize=7)
        ax.set_title(panel)
        ax.set_xlabel("interactions")
        ax.set_ylabel("mean batch MaxRR")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
