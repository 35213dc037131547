"""Matplotlib helpers: consistent style, PNG + SVG output, readable at report size."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

#: a matplotlib colour: a hex string, or an RGBA tuple from a colormap
Colour = str | tuple[float, float, float, float]

PALETTE = {
    "ptopofl": "#1b9e77", "fedavg": "#666666", "fedprox": "#d95f02", "scaffold": "#7570b3", "pfedme": "#e7298a",
    "ditto": "#66a61e", "perfedavg": "#e6ab02", "ifca": "#a6761d", "local": "#1f78b4",
}


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


def save(fig, out_dir: Path, stem: str) -> dict[str, str]:
    """Write ``stem.png`` and ``stem.svg``; return their file names."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out_dir / f"{stem}.png", dpi=130)
    fig.savefig(out_dir / f"{stem}.svg", metadata={"Date": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return {"png": f"{stem}.png", "svg": f"{stem}.svg"}


def band(ax, x: Sequence[float] | np.ndarray, mean: np.ndarray, std: np.ndarray, label: str, color: Colour, **kw) -> None:
    """A mean curve with a shaded band of half-width ``std`` (pass a standard error for SE bands)."""
    ax.plot(x, mean, label=label, color=color, lw=2 if label.lower().startswith("ptopofl") else 1.3, **kw)
    ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.15, lw=0)
