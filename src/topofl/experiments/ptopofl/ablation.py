"""Ablation (pTopoFL paper §4.7, Fig. 7): full pTopoFL against one component removed at a time,
and Wasserstein vs L2 clustering distance, on healthcare; FedAvg for reference.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from topofl.experiments.analysis import against, final_table, t_interval
from topofl.experiments.base import Budget, Experiment, Manifest
from topofl.experiments.figures import dot_plot, paired_figure, pyplot, save
from topofl.job import Job

NAME = "ablation"
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "pTopoFL (full)": ("ptopofl", {}),
    "M = 1 (no clustering)": ("ptopofl", {"n_clusters": 1}),
    "β = 0 (no blending)": ("ptopofl", {"beta": 0.0}),
    "no trust weights": ("ptopofl", {"use_trust": False}),
    "no feature augmentation": ("ptopofl", {"augment": False}),
    "Wasserstein clustering": ("ptopofl", {"cluster_distance": "wasserstein"}),
    "FedAvg": ("fedavg", {}),
}
FULL_LABEL = next(iter(VARIANTS))
PAPER = {"pTopoFL (full)": 0.841, "M = 1 (no clustering)": 0.790, "β = 0 (no blending)": 0.838, "FedAvg": 0.790}
FULL = Budget()
#: a CI smoke run: three rounds
SMOKE = Budget(rounds=3)


def plan(seeds: Sequence[int], budget: Budget = FULL) -> list[Job]:
    """Every variant of :data:`VARIANTS` on healthcare, per seed."""
    return [Job(experiment=NAME, data="healthcare", method=m, seed=s, rounds=budget.rounds, label=label,
                hyperparameters=hp)
            for s in seeds for label, (m, hp) in VARIANTS.items()]


# ---- tables --------------------------------------------------------------------------------------
def summary_rows(done: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Final metrics per variant in :data:`VARIANTS` order, with the paper's AUC where it gives one."""
    rows = final_table(done, ("method",))
    order = {k: i for i, k in enumerate(VARIANTS)}
    rows.sort(key=lambda r: order[r["method"]])
    for r in rows:
        r["paper_auc"] = PAPER.get(r["method"], float("nan"))
    return rows


def in_order(paired: Sequence[dict[str, Any]], rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Paired rows (each variant minus full pTopoFL) in the order of the summary ``rows``."""
    order = {r["method"]: i for i, r in enumerate(rows)}
    return sorted(paired, key=lambda r: order.get(r["method"], 99))


def change_note(rows: Sequence[Mapping[str, Any]]) -> str:
    """Each variant's mean AUC minus full pTopoFL's (the first row)."""
    full = rows[0]["auc_mean"]
    return "Change against full pTopoFL: " + "; ".join(f"{r['method']}: {r['auc_mean'] - full:+.3f}"
                                                       for r in rows[1:]) + "."


# ---- figures -------------------------------------------------------------------------------------
def ablation_figure(done: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]], out: Path) -> dict[str, str]:
    """Final AUC of each variant, mean and 95 % t-interval over seeds."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 3.6))
    stats = [t_interval([d["final"]["auc"] for d in done if d["method"] == r["method"]]) for r in rows]
    dot_plot(ax, [r["method"] for r in rows], [m for m, _, _ in stats], [lo for _, lo, _ in stats],
             [hi for _, _, hi in stats],
             ["#1b9e77"] + ["#3182bd"] * (len(rows) - 2) + ["#666666"], "final mean client AUC")
    ax.set_title("Ablation on healthcare (mean, 95 % t-interval over seeds)", fontsize=10)
    return save(fig, out, "ablation")


# ---- analysis ------------------------------------------------------------------------------------
PAIRED_TITLE = (f"Each variant minus {FULL_LABEL}: final AUC, paired over seeds (mean, 95 % t-interval, seeds "
                "won/lost; "
                "p: paired t-test, Holm-adjusted over the variants)")


def analyse(out: Path, done: list[dict[str, Any]], budget: Budget = FULL) -> Manifest:
    """Final AUC per variant (table with the paper's values, figure) and each variant's change against full pTopoFL."""
    man = Manifest(NAME, "Ablation",
                   "pTopoFL with one component removed at a time, healthcare, 15 rounds (paper §4.7, Fig. 7).")
    rows = summary_rows(done)
    man.table(out, "summary",
              "Final AUC per variant (mean ± std over seeds), with the paper's value where it gives one", rows)
    paired = against(done, (), FULL_LABEL, "auc")
    man.table(out, "paired", PAIRED_TITLE, paired)
    man.figure(ablation_figure(done, rows, out),
               "Final AUC of each variant, mean and 95 % t-interval over seeds (paper Fig. 7, as "
               "dots: the axis is zoomed, so bars would mislead).")
    if paired:
        panel = [(f"AUC − {FULL_LABEL} (seeds won/lost)", in_order(paired, rows))]
        man.figure(paired_figure(panel, f"final AUC − {FULL_LABEL} (paired, 95 % CI)", out, "ablation_paired"),
                   f"Each variant's final AUC minus {FULL_LABEL}'s on the same seed: what removing each component "
                   "costs.")
    man.notes.append(change_note(rows))
    return man


EXPERIMENT = Experiment(NAME, "Ablation", plan, analyse, {"full": FULL, "smoke": SMOKE}, tunable=True)
