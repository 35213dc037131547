"""Persistence diagrams of representative clients (one per healthcare sub-population, and a
poisoned one), with their Betti curves: what the descriptor sees.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from topofl.experiments.base import Budget, Experiment, Manifest
from topofl.experiments.figures import pyplot, save
from topofl.job import Job
from topofl.tda.descriptor import LAYOUT, descriptor, thresholds_for

NAME = "diagrams"
FULL = Budget()
#: no runs at any budget: the smoke run draws the same diagrams
SMOKE = FULL


def plan(seeds: Sequence[int], budget: Budget = FULL) -> list[Job]:
    """No runs: :func:`analyse` computes the diagrams directly."""
    return []


def representatives(fed: Any) -> list[Any]:
    """The first honest client of each sub-population (``meta["group"]``), then the first adversarial client."""
    picks, seen = [], set()
    for c in fed:
        if c.meta.get("group") not in seen and not c.meta.get("adversarial"):
            picks.append(c)
            seen.add(c.meta.get("group"))
    picks += [c for c in fed if c.meta.get("adversarial")][:1]
    return picks


def diagrams_of(picks: Sequence[Any]) -> list[tuple[Any, Any, list[Any]]]:
    """``(client, descriptor, diagrams)`` of every client in ``picks``."""
    out = []
    for c in picks:
        phi, dgms = descriptor(c.X_train, seed=c.client_id, return_diagrams=True)
        out.append((c, phi, dgms))
    return out


def pair_rows(diagrams: Sequence[tuple[Any, Any, list[Any]]]) -> list[dict[str, Any]]:
    """Every (birth, death) pair of every diagram, by client and homology dimension."""
    return [{"client": c.client_id, "dim": dim, "birth": b, "death": e}
            for c, _, dgms in diagrams for dim, d in enumerate(dgms) for b, e in d]


def diagrams_figure(diagrams: Sequence[tuple[Any, Any, list[Any]]], out: Path) -> dict[str, str]:
    """Persistence diagrams (top) and Betti curves (bottom), one column per client."""
    plt = pyplot()
    fig, axes = plt.subplots(2, len(diagrams), figsize=(4 * len(diagrams), 7.5))
    for j, (c, phi, dgms) in enumerate(diagrams):
        ax = axes[0, j]
        top = max(d[:, 1].max() for d in dgms if d.size)
        ax.plot([0, top], [0, top], color="grey", lw=0.8)
        for dim, d in enumerate(dgms):
            ax.scatter(d[:, 0], d[:, 1], s=10, label=f"H{dim} ({len(d)})", alpha=0.7)
        ax.set(title=f"client {c.client_id}: group {c.meta['group']}{', poisoned' if c.meta['adversarial'] else ''}",
               xlabel="birth", ylabel="death")
        ax.legend(fontsize=8)
        t = thresholds_for(dgms[0], 20)
        axes[1, j].step(t, LAYOUT.get(phi, "h0_curve"), where="post", label="β0")
        axes[1, j].step(t, LAYOUT.get(phi, "h1_curve"), where="post", label="β1")
        axes[1, j].set(
            title=f"Betti curves; H0 entropy {phi[LAYOUT.index('h0_entropy')]:.2f}, H1 "
                  f"{phi[LAYOUT.index('h1_entropy')]:.2f}",
            xlabel="filtration scale", ylabel="alive features",
        )
        axes[1, j].legend(fontsize=8)
    return save(fig, out, "diagrams")


def analyse(out: Path, done: list[dict[str, Any]], budget: Budget = FULL) -> Manifest:
    """Persistence diagrams and Betti curves of representative healthcare clients (seed 0), and their pairs."""
    from topofl.data.scenarios import make_scenario

    man = Manifest(NAME, "Persistence diagrams",
                   "Vietoris–Rips diagrams (80-point subsample, as pTopoFL computes them) of representative healthcare "
                   "clients, seed 0.")
    diagrams = diagrams_of(representatives(make_scenario("healthcare", seed=0)))
    man.figure(diagrams_figure(diagrams, out),
               "Persistence diagrams (top) and Betti curves (bottom) of representative clients.")
    man.table(out, "pairs", "Diagram pairs shown in the figure", pair_rows(diagrams))
    man.notes.append("The poisoned client's diagram is that of its features, which the label flip does not change.")
    return man


EXPERIMENT = Experiment(NAME, "Persistence diagrams", plan, analyse, {"full": FULL, "smoke": SMOKE})
