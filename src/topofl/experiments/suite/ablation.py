"""Ablation (pTopoFL paper §4.7, Fig. 7): full pTopoFL against one component removed at a time,
and Wasserstein vs L2 clustering distance, on healthcare; FedAvg for reference.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from topofl.experiments.analysis import final_table
from topofl.experiments.figures import pyplot, save
from topofl.experiments.store import RunSpec
from topofl.experiments.suite.base import Experiment, Manifest

ROUNDS = 15
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "pTopoFL (full)": ("ptopofl", {}),
    "M = 1 (no clustering)": ("ptopofl", {"n_clusters": 1}),
    "β = 0 (no blending)": ("ptopofl", {"beta": 0.0}),
    "no trust weights": ("ptopofl", {"use_trust": False}),
    "no feature augmentation": ("ptopofl", {"augment": False}),
    "Wasserstein clustering": ("ptopofl", {"cluster_distance": "wasserstein"}),
    "FedAvg": ("fedavg", {}),
}
PAPER = {"pTopoFL (full)": 0.841, "M = 1 (no clustering)": 0.790, "β = 0 (no blending)": 0.838, "FedAvg": 0.790}


def plan(seeds: Sequence[int]) -> list[RunSpec]:
    """Runs of ``ablation``: every variant of ``VARIANTS`` on healthcare, per seed."""
    return [RunSpec("ablation", "healthcare", m, s, ROUNDS, label=label, hyperparameters=hp)
            for s in seeds for label, (m, hp) in VARIANTS.items()]


def analyse(out: Path, done: list[dict[str, Any]]) -> Manifest:
    """Final AUC per variant (table with the paper's values, bar figure) and each variant's change against full pTopoFL."""
    man = Manifest("ablation", "Ablation", "pTopoFL with one component removed at a time, healthcare, 15 rounds (paper §4.7, Fig. 7).")
    rows = final_table(done, ("method",))
    order = {k: i for i, k in enumerate(VARIANTS)}
    rows.sort(key=lambda r: order[r["method"]])
    for r in rows:
        r["paper_auc"] = PAPER.get(r["method"], float("nan"))
    man.table(out, "summary", "Final AUC per variant (mean ± std over seeds), with the paper's value where it gives one", rows)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    y = np.arange(len(rows))
    ax.barh(y, [r["auc_mean"] for r in rows], xerr=[r["auc_std"] for r in rows], color=["#1b9e77"] + ["#9ecae1"] * (len(rows) - 2) + ["#666666"], capsize=3)
    ax.set_yticks(y, [r["method"] for r in rows])
    ax.invert_yaxis()
    lo = min(r["auc_mean"] - r["auc_std"] for r in rows)
    ax.set(xlim=(max(0.0, lo - 0.05), 1.0), xlabel="final mean client AUC", title="Ablation on healthcare")
    man.figure(save(fig, out, "ablation"), "Final AUC of each variant, ±1 std over seeds (paper Fig. 7).")
    full = rows[0]["auc_mean"]
    man.notes.append("Change against full pTopoFL: " + "; ".join(f"{r['method']}: {r['auc_mean'] - full:+.3f}" for r in rows[1:]) + ".")
    return man


EXPERIMENT = Experiment("ablation", "Ablation", plan, analyse)
