"""Comparison (pTopoFL paper §4.2, Table 1, Figs 2–3): every method on healthcare and benchmark,
15 rounds, final AUC / accuracy (mean ± std over seeds), convergence round, AUC curves, bars.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from topofl.experiments.analysis import final_table, group_curves
from topofl.experiments.figures import band, colour, pyplot, save
from topofl.experiments.store import RunSpec, load_curves
from topofl.experiments.suite.base import Experiment, Manifest
from topofl.methods import available

SCENARIOS = ("healthcare", "benchmark")
ROUNDS = 15
# pTopoFL paper, Table 1 (final-round AUC-ROC, authors' data and code).
PAPER_AUC = {
    "healthcare": {"ptopofl": 0.841, "fedprox": 0.829, "pfedme": 0.821, "scaffold": 0.805, "fedavg": 0.790},
    "benchmark": {"ptopofl": 0.910, "fedprox": 0.909, "pfedme": 0.902, "fedavg": 0.897, "scaffold": 0.846},
}


def plan(seeds: Sequence[int]) -> list[RunSpec]:
    """Runs of ``comparison``: every server-based method on every scenario of ``SCENARIOS``, per seed."""
    return [RunSpec("comparison", sc, m, s, ROUNDS) for sc in SCENARIOS for s in seeds for m in available("server")]


def analyse(out: Path, done: list[dict[str, Any]]) -> Manifest:
    """Tables (ours, and next to the paper's AUC), AUC curves, final-AUC and convergence bars of ``comparison``."""
    man = Manifest("comparison", "Comparison against baselines",
                   "Every method on the healthcare and benchmark scenarios, 15 rounds (paper §4.2, Table 1, Figs 2–3). "
                   "AUC and accuracy are per-seed means over clients of each client's score with the model it would use; "
                   "the table gives their mean ± std over seeds.")
    rows = final_table(done, ("scenario", "method"))
    man.table(out, "summary", "Final-round metrics (mean ± std over seeds)", rows)
    paper = []
    for r in rows:
        p = PAPER_AUC.get(r["scenario"], {}).get(r["method"])
        if p is not None:
            paper.append({"scenario": r["scenario"], "method": r["method"], "paper_auc": p, "ours_auc_mean": r["auc_mean"],
                          "ours_auc_std": r["auc_std"], "difference": r["auc_mean"] - p})
    man.table(out, "paper_vs_ours", "Our AUC next to the paper's published AUC (Table 1)", paper)
    curves = group_curves(load_curves(out), ("scenario", "method"))
    plt = pyplot()
    fig, axes = plt.subplots(1, len(SCENARIOS), figsize=(11, 4.2), sharey=False)
    for ax, sc in zip(axes, SCENARIOS, strict=True):
        for i, m in enumerate(available("server")):
            c = curves.get((sc, m))
            if c is not None:
                band(ax, c["round"], c["mean"], c["se"], m, colour(m, i))
        ax.set(title=f"{sc}: AUC over rounds (mean ± s.e. over seeds)", xlabel="round", ylabel="mean client AUC")
    axes[-1].legend(fontsize=8, ncol=2, loc="lower right")
    man.figure(
        save(fig, out, "auc_curves"),
        "AUC-ROC over rounds: mean over seeds of the mean client AUC, shaded ±1 standard error over seeds (paper Fig. 2; "
        "the seeds differ in difficulty, so ±1 std bands would hide the curves — the table gives the std).",
    )
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    methods = [m for m in available("server") if any(r["method"] == m for r in rows)]
    x = np.arange(len(methods))
    for j, sc in enumerate(SCENARIOS):
        by = {r["method"]: r for r in rows if r["scenario"] == sc}
        vals = [by[m]["auc_mean"] if m in by else np.nan for m in methods]
        errs = [by[m]["auc_std"] if m in by else 0 for m in methods]
        a1.bar(
            x + (j - 0.5) * 0.4, vals, 0.4, yerr=errs, label=sc, color=[colour(m, i) for i, m in enumerate(methods)], alpha=1.0 if j == 0 else 0.45,
            capsize=2,
        )
        conv = [by[m]["convergence_round_mean"] if m in by else np.nan for m in methods]
        a2.bar(x + (j - 0.5) * 0.4, conv, 0.4, label=sc, color=[colour(m, i) for i, m in enumerate(methods)], alpha=1.0 if j == 0 else 0.45)
    lo = np.nanmin([r["auc_mean"] - r["auc_std"] for r in rows])
    a1.set(ylim=(max(0.0, lo - 0.05), 1.0), ylabel="final AUC", title="Final AUC (solid: healthcare, faded: benchmark)")
    a2.set(ylabel="round", title="Convergence round (first reaching 95 % of final AUC)")
    for a in (a1, a2):
        a.set_xticks(x, methods, rotation=35, ha="right")
    man.figure(save(fig, out, "final_bars"), "Final AUC and convergence round per method (paper Fig. 3).")
    best = {
        sc: max((r for r in rows if r["scenario"] == sc), key=lambda r: r["auc_mean"])["method"]
        for sc in SCENARIOS if any(r["scenario"] == sc for r in rows)
    }
    man.notes.append("Best mean AUC: " + ", ".join(f"{sc}: {m}" for sc, m in best.items()) + ".")
    man.notes.append("The paper's numbers come from the authors' own data generators (on which, as reported in topofl's issue 2, every "
                     "method scores AUC 1.000 with their public code); our scenarios follow the paper's description but are calibrated to be "
                     "harder (pooled logistic-regression AUC 0.86 on healthcare, 0.90 on benchmark), so absolute values are not comparable "
                     "with the paper's; rankings and gaps are. docs/REPRODUCTION.md discusses each difference.")
    return man


EXPERIMENT = Experiment("comparison", "Comparison against baselines", plan, analyse)
