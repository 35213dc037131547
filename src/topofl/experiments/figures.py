"""Matplotlib helpers: consistent style, PNG + SVG output, readable at report size."""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

#: a matplotlib colour: a hex string, or an RGBA tuple from a colormap
Colour = str | tuple[float, float, float, float]

PALETTE = {
    "ptopofl": "#1b9e77", "fedavg": "#666666", "fedprox": "#d95f02", "scaffold": "#7570b3", "pfedme": "#e7298a",
    "ditto": "#66a61e", "perfedavg": "#e6ab02", "ifca": "#a6761d", "local": "#1f78b4",
}
#: colours for curves whose method's palette colour is already taken in the same figure (a method's
#: variant, e.g. "pTopoFL (flagged gate)"): dark, distinct from every :data:`PALETTE` entry
VARIANT_COLOURS = ("#000000", "#b2182b", "#2166ac", "#762a83", "#8c510a", "#01665e")

#: the label of the budget the figures being drawn belong to ("" at the paper's budget; :func:`labelled`)
_BUDGET_LABEL: contextvars.ContextVar[str] = contextvars.ContextVar("budget_label", default="")


@contextlib.contextmanager
def labelled(label: str) -> Iterator[None]:
    """Within the block every figure :func:`save` writes carries ``label`` (a budget below the
    paper's) in the image, bottom left; ``""`` writes none.
    """
    token = _BUDGET_LABEL.set(label)
    try:
        yield
    finally:
        _BUDGET_LABEL.reset(token)


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend (imported lazily)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "figure.dpi": 110, "font.size": 10, "axes.grid": True, "grid.alpha": 0.3,
        "axes.spines.top": False, "axes.spines.right": False, "svg.hashsalt": "topofl",
    })
    return plt


def colour(method: str, i: int = 0) -> Colour:
    """A method's colour in figures: its entry in ``PALETTE``, else colour ``i`` of matplotlib's tab10."""
    base = method.split(" ")[0].lower()
    if base in PALETTE:
        return PALETTE[base]
    import matplotlib

    return matplotlib.colormaps["tab10"](i % 10)


def colours(methods: Sequence[str]) -> list[Colour]:
    """One colour per curve label of one figure, all distinct: each method's :func:`colour`, and a
    :data:`VARIANT_COLOURS` entry for a label whose colour an earlier label already took (a variant
    of a method, such as "pTopoFL (flagged gate)" beside "ptopofl").
    """
    out: list[Colour] = []
    spare = iter(VARIANT_COLOURS)
    for i, m in enumerate(methods):
        c = colour(m, i)
        out.append(next(spare, c) if c in out else c)
    return out


def tidy_axes(fig) -> None:
    """Readable ticks: integer ticks on every axis labelled in rounds (or iterations, epochs, clients),
    and on logarithmic axes labels at whole decades only (minor labels would overlap).
    """
    from matplotlib.ticker import MaxNLocator, NullFormatter

    for ax in fig.axes:
        for axis, label in ((ax.xaxis, ax.get_xlabel()), (ax.yaxis, ax.get_ylabel())):
            scale = ax.get_xscale() if axis is ax.xaxis else ax.get_yscale()
            if scale == "log":
                axis.set_minor_formatter(NullFormatter())
            elif any(w in label.lower() for w in ("round", "iteration", "epoch")):
                axis.set_major_locator(MaxNLocator(integer=True))


def save(fig, out_dir: Path, stem: str) -> dict[str, str]:
    """Write ``stem.png`` and ``stem.svg`` (axes tidied by :func:`tidy_axes`; within :func:`labelled`,
    the budget's label in the image); return their file names.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    tidy_axes(fig)
    label = _BUDGET_LABEL.get()
    if label:
        fig.text(0.005, 0.005, label, ha="left", va="bottom", fontsize=8, color="#a40000", fontweight="bold")
        height = fig.get_size_inches()[1]
        fig.tight_layout(rect=(0, 0.18 / height, 1, 1))
    else:
        fig.tight_layout()
    fig.savefig(out_dir / f"{stem}.png", dpi=130)
    fig.savefig(out_dir / f"{stem}.svg", metadata={"Date": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return {"png": f"{stem}.png", "svg": f"{stem}.svg"}


def band(ax, x: Sequence[float] | np.ndarray, mean: np.ndarray, std: np.ndarray, label: str, color: Colour,
         **kw) -> None:
    """A mean curve with a shaded band of half-width ``std`` (pass a standard error for SE bands)."""
    ax.plot(x, mean, label=label, color=color, lw=2 if label.lower().startswith("ptopofl") else 1.3, **kw)
    ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.15, lw=0)


def band_between(ax, x: Sequence[float] | np.ndarray, mean: np.ndarray, low: np.ndarray, high: np.ndarray, label: str,
                 color: Colour, shade: bool | None = None) -> None:
    """A mean curve with a shaded ``low``–``high`` band (a confidence interval). ``shade``
    (default: only for pTopoFL, so that many overlapping bands do not hide the curves) draws the band.
    """
    main = label.lower().startswith("ptopofl")
    ax.plot(x, mean, label=label, color=color, lw=2 if main else 1.1)
    if main if shade is None else shade:
        ax.fill_between(x, low, high, color=color, alpha=0.18, lw=0)


def dot_plot(ax, labels: Sequence[str], means: Sequence[float], lows: Sequence[float], highs: Sequence[float],
             colours: Sequence[Colour], xlabel: str, zero_line: bool = False) -> None:
    """Horizontal dots with interval whiskers, one row per label (top to bottom). Dots need no
    zero baseline, unlike bars, so the axis can zoom in honestly; ``zero_line`` marks 0 (for
    differences).
    """
    y = np.arange(len(labels))
    m, lo, hi = (np.asarray(v, dtype=float) for v in (means, lows, highs))
    err = np.vstack([np.where(np.isfinite(lo), m - lo, 0.0), np.where(np.isfinite(hi), hi - m, 0.0)])
    for i in range(len(labels)):
        ax.errorbar(m[i], y[i], xerr=err[:, i:i + 1], fmt="o", color=colours[i], ms=6, capsize=3, lw=1.4)
    if zero_line:
        ax.axvline(0.0, color="#444", lw=0.9, ls="--")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(nbins=5))  # signed three-decimal labels need room
    ax.set_yticks(y, list(labels))
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xlabel(xlabel)
    ax.grid(axis="y", alpha=0)


def paired_figure(panels: Sequence[tuple[str, Sequence[dict]]], xlabel: str, out_dir: Path,
                  stem: str) -> dict[str, str]:
    """One :func:`dot_plot` panel per ``(title, rows)``: each row's ``diff_mean`` with its
    ``ci_low``–``ci_high`` interval (rows of :func:`topofl.experiments.analysis.against`), labelled
    by ``method`` and ``wins/losses`` (or, for rows of ``paired_differences``, the reference's
    ``reference_wins/other_wins``), with a dashed line at zero.
    """
    plt = pyplot()
    height = 1.2 + 0.32 * max((len(r) for _, r in panels), default=1)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), height), squeeze=False)
    for ax, (title, rows) in zip(axes[0], panels, strict=True):
        labels = [f"{r['method']} ({r.get('wins', r.get('reference_wins'))}/{r.get('losses', r.get('other_wins'))})"
                  for r in rows]
        dot_plot(ax, labels, [r["diff_mean"] for r in rows], [r["ci_low"] for r in rows], [r["ci_high"] for r in rows],
                 [colour(str(r["method"]), i) for i, r in enumerate(rows)], xlabel, zero_line=True)
        ax.set_title(title, fontsize=10)
    return save(fig, out_dir, stem)
