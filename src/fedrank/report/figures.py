"""The report's charts (matplotlib, drawn off-screen and inlined as SVG text).

Readable defaults: the legend outside the data, integer ticks on iteration axes, axes that
start where the data start (differences between close values stay visible), and every
mean drawn with its interval when the run gives one.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np

_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#7f7f7f")


def _pyplot():  # noqa: ANN202 (matplotlib's module)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def to_svg(fig) -> str:  # noqa: ANN001 (a matplotlib Figure)
    """The figure as an inline ``<svg>`` element (the XML prologue dropped); closes it."""
    plt = _pyplot()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def mean_ci95(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column means of ``rows`` (``(n, T)``, NaN ignored) and the half-width of their 95%
    Student-t interval (0 where a column has fewer than two finite values)."""
    from scipy import stats

    rows = np.asarray(rows, dtype=float)
    n = np.isfinite(rows).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.nanmean(np.where(n > 0, rows, 0.0), axis=0)
        sd = np.nanstd(rows, axis=0, ddof=1) if rows.shape[0] > 1 else np.zeros(rows.shape[1])
        t = stats.t.ppf(0.975, np.maximum(n - 1, 1))
        half = np.where(n > 1, t * sd / np.sqrt(np.maximum(n, 1)), 0.0)
    return mean, np.nan_to_num(half)


def curves(
    series: dict[str, Sequence],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    x0: int = 1,
    muted: Sequence[str] = (),
) -> str:
    """Lines over iterations, one per entry of ``series``: a flat list is one run; a list of
    lists is one run per seed, drawn as the mean with its 95% t band (the legend says how
    many seeds). Names in ``muted`` are drawn thin and grey-toned (e.g. control branches
    beside the treatment). ``x0``: the first iteration's number."""
    from matplotlib.ticker import MaxNLocator

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    for i, (name, values) in enumerate(series.items()):
        arr = np.array([[np.nan if v is None else v for v in row] for row in values], dtype=float) \
            if values and isinstance(values[0], (list, tuple)) \
            else np.array([[np.nan if v is None else v for v in values]], dtype=float)  # fmt: skip
        if arr.size == 0:
            continue
        x = np.arange(x0, x0 + arr.shape[1])
        mean, half = mean_ci95(arr)
        color = _PALETTE[i % len(_PALETTE)]
        faint = name in muted
        label = name if arr.shape[0] == 1 else f"{name} (mean of {arr.shape[0]} seeds, 95% CI)"
        ax.plot(x, mean, color=color, lw=1.0 if faint else 2.0, alpha=0.55 if faint else 1.0,
                marker="." if arr.shape[1] <= 60 else None, label=label)  # fmt: skip
        if arr.shape[0] > 1:
            ax.fill_between(x, mean - half, mean + half, color=color, alpha=0.2, lw=0)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return to_svg(fig)


def interval_dots(
    labels: Sequence[str],
    means: Sequence[float],
    cis: Sequence[tuple[float, float] | None],
    *,
    title: str,
    xlabel: str,
    notes: Sequence[str] = (),
    paper: Sequence[float | None] = (),
    zero_line: bool = False,
) -> str:
    """One row per label: the mean as a dot with its 95% interval as a bar, ``notes`` (e.g.
    ``n = 370``) printed at the right, the paper's figure as a hollow diamond where given.
    The axis spans the data (not from zero), so close means stay apart; ``zero_line``
    draws x = 0 (for differences)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 0.55 * len(labels) + 1.3))
    y = np.arange(len(labels))[::-1]
    ours = "ours: mean, 95% CI" if any(ci is not None for ci in cis) else "ours: mean"
    for i, (m, ci) in enumerate(zip(means, cis, strict=True)):
        color = _PALETTE[i % len(_PALETTE)]
        if ci is not None:
            ax.plot(ci, [y[i], y[i]], color=color, lw=3, alpha=0.6, solid_capstyle="butt")
        ax.plot([m], [y[i]], "o", color=color, ms=7,
                label=ours if i == 0 else None)  # fmt: skip
    drew_paper = False
    for i, p in enumerate(paper):
        if p is not None:
            ax.plot([p], [y[i]], "D", mfc="none", mec="black", ms=8,
                    label=None if drew_paper else "the paper")  # fmt: skip
            drew_paper = True
    if zero_line:
        ax.axvline(0.0, color="black", lw=0.8, ls="--")
    ax.set_yticks(y, labels)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    ax.margins(x=0.15, y=0.25)
    if notes:
        for i, note in enumerate(notes):
            ax.annotate(note, (1.01, y[i]), xycoords=("axes fraction", "data"), va="center",
                        fontsize=9)  # fmt: skip
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, -0.18 if notes else 1.0), frameon=False,
              ncol=2)  # fmt: skip
    return to_svg(fig)
