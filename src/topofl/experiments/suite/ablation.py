"""Ablation (pTopoFL paper §4.7, Fig. 7): full pTopoFL against one component removed at a time,
and Wasserstein vs L2 clustering distance, on healthcare; FedAvg for reference.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from topofl.experiments.analysis import against, final_table, t_interval
from topofl.experiments.figures import dot_plot, paired_figure, pyplot, save
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
    full_label = next(iter(VARIANTS))
    paired = against(done, (), full_label, "auc")
    man.table(out, "paired", f"Each variant minus {full_label}: final AUC, paired over seeds (mean, 95 % t-interval, seeds won/lost; "
              "p: paired t-test, Holm-adjusted over the variants)", paired)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    stats = [t_interval([d["final"]["auc"] for d in done if d["method"] == r["method"]]) for r in rows]
    dot_plot(ax, [r["method"] for r in rows], [m for m, _, _ in stats], [lo for _, lo, _ in stats], [hi for _, _, hi in stats],
             ["#1b9e77"] + ["#3182bd"] * (len(rows) - 2) + ["#666666"], "final mean client AUC")
    ax.set_title("Ablation on healthcare (mean, 95 % t-interval over seeds)", fontsize=10)
    man.figure(save(fig, out, "ablation"), "Final AUC of each variant, mean and 95 % t-interval over seeds (paper Fig. 7, as dots: "
               "the axis is zoomed, so bars would mislead).")
    if paired:
        order = {r["method"]: i for i, r in enumerate(rows)}
        paired.sort(key=lambda r: order.get(r["method"], 99))
        man.figure(paired_figure([(f"AUC − {full_label} (seeds won/lost)", paired)], f"final AUC − {full_label} (paired, 95 % CI)", out,
                                 "ablation_paired"),
                   f"Each variant's final AUC minus {full_label}'s on the same seed: what removing each component costs.")
    full = rows[0]["auc_mean"]
    man.notes.append("Change against full pTopoFL: " + "; ".join(f"{r['method']}: {r['auc_mean'] - full:+.3f}" for r in rows[1:]) + ".")
    return man


EXPERIMENT = Experiment("ablation", "Ablation", plan, analyse, tunable=True)
