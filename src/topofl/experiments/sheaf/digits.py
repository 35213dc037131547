"""Sheaf-FMTL on rotated digits (Ben Issaid, Vepakomma, Bennis, TMLR 2025; Figs 2, 6, Tables 3–4):
40 clients in 4 rotation groups of scikit-learn's 8×8 digits, the paper's protocol; Sheaf-FMTL at
γ ∈ {0.01, 0.03, 0.1, 0.3} against dFedU, D-PSGD and Local, the compact exchange, and variants
that test the negative result (shared initial maps, the public code's step sizes), each paired
against Local over seeds. The paper reports 5 runs; seeds 0–4 by default. See docs/experiments.md.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from topofl.experiments.analysis import interval_text
from topofl.experiments.base import Budget, Experiment, Manifest, iter_csv
from topofl.experiments.sheaf.common import (
    curve_figure,
    curves_with_bits,
    final_rows,
    model_bytes,
    paired_vs,
    sheaf_label,
)
from topofl.experiments.store import load_curves
from topofl.job import Job

NAME = "sheaf-digits"
SEEDS = tuple(range(5))
DATA = "rotated-digits"
GAMMAS = (0.01, 0.03, 0.1, 0.3)
GRAPH, GRAPH_PARAMS = "erdos_renyi", {"p": 0.15}
# Step sizes and λ from a grid search on held-out seeds 100–101 (not the reported seeds), as the
# paper tunes on a validation set (docs/REPRODUCTION.md lists the grid): lr ∈ {0.1, 0.5};
# dFedU λ ∈ {0.005, 0.01, 0.05, 0.2}; Sheaf-FMTL λ ∈ {0.001, 0.003, 0.01} with the paper's N(0, 1)
# maps (λ·lr·‖P‖² must stay below ~1, and ‖P‖² ≈ 900 here), η ∈ {0.01, 0.05, 0.1}. Sheaf-FMTL keeps
# the paper's own λ = 0.001 (Table 1, R-MNIST): no value in the grid did better.
SHEAF_HP = {"lr": 0.5, "lam": 0.001, "eta": 0.05, "batch_size": 32}
DFEDU_HP = {"lr": 0.5, "lam": 0.05, "batch_size": 32}
BASE_HP = {"lr": 0.5, "batch_size": 32}
#: γ values also run with the compact exchange (identical iterates, fewer bits)
COMPACT_GAMMAS = (0.01, 0.03, 0.1)
#: γ values also run with shared initial maps (both ends of an edge start from the same N(0, 1) map)
SHARED_GAMMAS = (0.03, 0.3)
#: the authors' public code's step sizes (α, η), here with one mini-batch step per iteration
PUBLIC_LR, PUBLIC_ETA = 5e-4, 1e-5
PUBLIC_LOCAL = "Local, α=5e-4"
#: (method, label, hyper-parameters) of the baselines
BASELINES = (("dfedu", "dFedU", DFEDU_HP), ("dpsgd", "D-PSGD", BASE_HP), ("local-peers", "Local", BASE_HP))


@dataclass(frozen=True)
class DigitsBudget(Budget):
    """Iterations, and the γ values of the paper's runs, of the compact exchange and of shared initial maps."""

    rounds: int = 300
    gammas: tuple[float, ...] = GAMMAS
    compact_gammas: tuple[float, ...] = COMPACT_GAMMAS
    shared_gammas: tuple[float, ...] = SHARED_GAMMAS


FULL = DigitsBudget()
#: a CI smoke run: one γ in each part, five iterations
SMOKE = DigitsBudget(rounds=5, gammas=(0.03,), compact_gammas=(0.03,), shared_gammas=(0.03,))


def digits_variants(budget: DigitsBudget = FULL) -> list[tuple[str, str, dict[str, Any], float]]:
    """(label, method, hyper-parameters, γ) of ``sheaf-digits``' runs beyond the paper's comparison:
    compact exchange, shared initial maps, the public code's η and step sizes, Local at that α.
    """
    nan = float("nan")
    out = [(f"{sheaf_label(g)}, compact exchange", "sheaf", {**SHEAF_HP, "gamma": g, "exchange": "compact"}, g)
           for g in budget.compact_gammas]
    out += [(f"{sheaf_label(g)}, shared maps", "sheaf", {**SHEAF_HP, "gamma": g, "map_init": "shared"}, g)
            for g in budget.shared_gammas]
    out += [(f"{sheaf_label(0.03)}, η=1e-5", "sheaf", {**SHEAF_HP, "gamma": 0.03, "eta": PUBLIC_ETA}, 0.03),
            (f"{sheaf_label(0.03)}, α=5e-4, η=1e-5", "sheaf",
             {**SHEAF_HP, "gamma": 0.03, "lr": PUBLIC_LR, "eta": PUBLIC_ETA}, 0.03),
            (PUBLIC_LOCAL, "local-peers", {**BASE_HP, "lr": PUBLIC_LR}, nan)]
    return out


def runs(budget: DigitsBudget = FULL) -> list[tuple[str, str, dict[str, Any], float]]:
    """(label, method, hyper-parameters, γ) of every run of a seed, in plan order."""
    nan = float("nan")
    return ([(sheaf_label(g), "sheaf", {**SHEAF_HP, "gamma": g}, g) for g in budget.gammas]
            + [(label, m, hp, nan) for m, label, hp in BASELINES]
            + digits_variants(budget))


def plan(seeds: Sequence[int], budget: DigitsBudget = FULL) -> list[Job]:
    """Sheaf-FMTL at every γ, dFedU, D-PSGD and Local, and the :func:`digits_variants`, per seed."""
    return [Job(experiment=NAME, data=DATA, method=m, seed=s, rounds=budget.rounds, label=label, hyperparameters=hp,
                setting={"gamma": g},
                graph=GRAPH, graph_params=GRAPH_PARAMS) for s in seeds for label, m, hp, g in runs(budget)]


# ---- tables --------------------------------------------------------------------------------------
def paired_rows(done: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> list[dict[str, Any]]:
    """Each method minus Local, and the public-code step sizes also minus Local at that α."""
    pairs = paired_vs(done, "Local", only=[lab for lab in labels if lab != PUBLIC_LOCAL])
    if PUBLIC_LOCAL in labels:
        pairs += paired_vs(done, PUBLIC_LOCAL, only=[lab for lab in labels if lab.endswith("α=5e-4, η=1e-5")])
    return pairs


def local_note(pairs: Sequence[Mapping[str, Any]]) -> str:
    """Each method's final accuracy minus Local's, with its interval."""
    return "Final accuracy against Local (paired, 95 % CI): " + "; ".join(
        f"{p['method']}: {p['diff_mean']:+.3f} {interval_text(p['ci_low'], p['ci_high'])}" for p in pairs
        if p["versus"] == "Local") + "."


def bits_note(rows: Sequence[Mapping[str, Any]], compact_gammas: Sequence[float] = COMPACT_GAMMAS) -> str:
    """How many times fewer bits than dFedU each γ sends, with the paper's exchange and the compact one."""
    by = {r["method"]: r for r in rows}
    ratios = []
    for g in compact_gammas:
        paper, compact = by.get(sheaf_label(g)), by.get(f"{sheaf_label(g)}, compact exchange")
        if paper and compact:
            ratios.append(f"γ={g:g}: {by['dFedU']['transmitted_MB'] / paper['transmitted_MB']:.0f}× (paper exchange, "
                          "2·d_ij per edge and "
                          f"iteration), {by['dFedU']['transmitted_MB'] / compact['transmitted_MB']:.0f}× (compact "
                          "exchange, d_ij + 1)")
    return "Fewer bits than dFedU: " + "; ".join(ratios) + "."


def plotted(labels: Sequence[str]) -> list[str]:
    """The runs the accuracy figure shows: the paper's comparison and the compact / shared-map variants."""
    return [lab for lab in labels if lab in ("dFedU", "D-PSGD", "Local") or lab.startswith("Sheaf")
            and ("α=" not in lab and "η=" not in lab)]


# ---- analysis ------------------------------------------------------------------------------------
SUMMARY_TITLE = ("Final mean test accuracy (mean ± std over seeds), transmitted data, FLOPs, restriction-map storage "
                 "(map_storage_MB) "
                 "and storage of models plus maps (storage_MB, paper Table 3) per run")
#: summary columns the CSV keeps but the report leaves out (it must fit a 760-pixel window)
HIDDEN = ("transmitted_bits", "seconds_per_run")
PAIRED_TITLE = ("Each method minus Local (the public-code step sizes also minus Local at that α): final accuracy "
                "paired over seeds "
                "(mean, 95 % t-interval, seeds won and lost; p: paired t-test, Holm-adjusted over the methods against "
                "one reference)")


def analyse(out: Path, done: list[dict[str, Any]], budget: DigitsBudget = FULL) -> Manifest:
    """Tables, accuracy figures and notes (against Local, bits against dFedU)."""
    man = Manifest(NAME, "Sheaf-FMTL on rotated digits",
                   "40 clients in 4 rotation groups (0/90/180/270°) of scikit-learn's 8×8 digits, the paper's protocol "
                   "(75/25 split, "
                   "80 % of training data removed from half the clients), multinomial logistic regression (d = 650), "
                   "Erdős–Rényi "
                   f"p = 0.15, {budget.rounds} rounds (one mini-batch step and two exchanges per round; one in the "
                   "compact-exchange "
                   "rows) (paper Figs 2, 6; Tables 3–4).")
    rows = final_rows(done, ("method", "gamma"), models=model_bytes(iter_csv(out / "rounds.csv")))
    man.table(out, "summary", SUMMARY_TITLE, rows, show=[c for c in rows[0] if c not in HIDDEN] if rows else None)
    labels = [r["method"] for r in rows]
    man.figure(curve_figure(curves_with_bits(load_curves(out)), plotted(labels), out, "accuracy"),
               "Accuracy against rounds and against transmitted data (paper Figs 2 and 6).")
    if "Local" in labels:
        pairs = paired_rows(done, labels)
        man.table(out, "paired_vs_local", PAIRED_TITLE, pairs)
        man.notes.append(local_note(pairs))
    if "dFedU" in labels:
        man.notes.append(bits_note(rows, budget.compact_gammas))
    return man


EXPERIMENT = Experiment(NAME, "Sheaf-FMTL on rotated digits", plan, analyse, {"full": FULL, "smoke": SMOKE},
                        SEEDS, tunable=True)
