"""Persistence diagrams of representative clients (one per healthcare sub-population, and a
poisoned one), with their Betti curves: what the descriptor sees.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from topofl.data.scenarios import make_scenario
from topofl.experiments.figures import pyplot, save
from topofl.experiments.store import RunSpec
from topofl.experiments.suite.base import Experiment, Manifest
from topofl.tda.descriptor import LAYOUT, descriptor, thresholds_for


def plan(seeds: Sequence[int]) -> list[RunSpec]:
    """No runs: :func:`analyse` computes the diagrams directly."""
    return []


def representatives(fed) -> list[Any]:
    """The first honest client of each sub-population (``meta["group"]``), then the first adversarial client."""
    picks, seen = [], set()
    for c in fed:
        if c.meta.get("group") not in seen and not c.meta.get("adversarial"):
            picks.append(c)
            seen.add(c.meta.get("group"))
    picks += [c for c in fed if c.meta.get("adversarial")][:1]
    return picks


def analyse(out: Path, done: list[dict[str, Any]]) -> Manifest:
    """Persistence diagrams and Betti curves of representative healthcare clients (seed 0), and a table of their pairs."""
    man = Manifest(
        "diagrams", "Persistence diagrams",
        "Vietoris–Rips diagrams (80-point subsample, as pTopoFL computes them) of representative healthcare clients, seed 0.",
    )
    fed = make_scenario("healthcare", seed=0)
    picks = representatives(fed)
    plt = pyplot()
    fig, axes = plt.subplots(2, len(picks), figsize=(4 * len(picks), 7.5))
    pairs = []
    for j, c in enumerate(picks):
        phi, dgms = descriptor(c.X_train, seed=c.client_id, return_diagrams=True)
        title = f"client {c.client_id}: group {c.meta['group']}{', poisoned' if c.meta['adversarial'] else ''}"
        ax = axes[0, j]
        top = max(d[:, 1].max() for d in dgms if d.size)
        ax.plot([0, top], [0, top], color="grey", lw=0.8)
        for dim, d in enumerate(dgms):
            ax.scatter(d[:, 0], d[:, 1], s=10, label=f"H{dim} ({len(d)})", alpha=0.7)
            pairs += [{"client": c.client_id, "dim": dim, "birth": b, "death": e} for b, e in d]
        ax.set(title=title, xlabel="birth", ylabel="death")
        ax.legend(fontsize=8)
        t = thresholds_for(dgms[0], 20)
        axes[1, j].step(t, LAYOUT.get(phi, "h0_curve"), where="post", label="β0")
        axes[1, j].step(t, LAYOUT.get(phi, "h1_curve"), where="post", label="β1")
        axes[1, j].set(
            title=f"Betti curves; H0 entropy {phi[LAYOUT.index('h0_entropy')]:.2f}, H1 {phi[LAYOUT.index('h1_entropy')]:.2f}",
            xlabel="filtration scale", ylabel="alive features",
        )
        axes[1, j].legend(fontsize=8)
    man.figure(save(fig, out, "diagrams"), "Persistence diagrams (top) and Betti curves (bottom) of representative clients.")
    man.table(out, "pairs", "Diagram pairs shown in the figure", pairs)
    man.notes.append("The poisoned client's diagram is that of its features, which the label flip does not change.")
    return man


EXPERIMENT = Experiment("diagrams", "Persistence diagrams", plan, analyse)
