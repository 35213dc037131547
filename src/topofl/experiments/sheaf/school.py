"""Sheaf-FMTL on the real School data (Sheaf-FMTL paper Fig. 6, third row; Table 7): 139 schools,
exam-score regression with a linear model, the paper's protocol, Erdős–Rényi p = 0.2, λ = 0.01;
inputs and targets z-scored per school (MSE also in score units). Sheaf-FMTL at γ ∈ {0.1, 0.3}
(paper and compact exchange) against dFedU, D-PSGD and Local, paired against Local.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from topofl.experiments.analysis import against
from topofl.experiments.base import Budget, Experiment, Manifest, iter_csv
from topofl.experiments.sheaf.common import curve_figure, curves_with_bits, final_rows, model_bytes
from topofl.experiments.sheaf.digits import HIDDEN as DIGITS_HIDDEN
from topofl.experiments.store import load_curves
from topofl.job import Job

#: summary columns the CSV keeps but the report leaves out (it must fit a 760-pixel window)
HIDDEN = (*DIGITS_HIDDEN, "TFLOPs", "storage_MB")

NAME = "sheaf-school"
GAMMAS = (0.1, 0.3)
GRAPH, GRAPH_PARAMS = "erdos_renyi", {"p": 0.2}
BASE_HP = {"lr": 0.1, "batch_size": 32}
SHEAF_HP = {**BASE_HP, "lam": 0.01, "eta": 0.01}
DFEDU_HP = {**BASE_HP, "lam": 0.01}


@dataclass(frozen=True)
class SchoolBudget(Budget):
    """Iterations and the γ values of Sheaf-FMTL."""

    rounds: int = 200
    gammas: tuple[float, ...] = GAMMAS


FULL = SchoolBudget()
#: a CI smoke run: one γ, five iterations
SMOKE = SchoolBudget(rounds=5, gammas=GAMMAS[:1])


def _runs(budget: SchoolBudget) -> list[tuple[str, str, dict[str, Any], float]]:
    """(label, method, hyper-parameters, γ) of every run of a seed, in plan order."""
    out: list[tuple[str, str, dict[str, Any], float]] = []
    for g in budget.gammas:
        out += [(f"Sheaf-FMTL γ={g:g}", "sheaf", {**SHEAF_HP, "gamma": g}, g),
                (f"Sheaf-FMTL γ={g:g}, compact exchange", "sheaf", {**SHEAF_HP, "gamma": g, "exchange": "compact"}, g)]
    baselines: tuple[tuple[str, str, dict[str, Any]], ...] = (
        ("dfedu", "dFedU", DFEDU_HP), ("dpsgd", "D-PSGD", BASE_HP), ("local-peers", "Local", BASE_HP))
    return out + [(label, m, hp, float("nan")) for m, label, hp in baselines]


def plan(seeds: Sequence[int], budget: SchoolBudget = FULL) -> list[Job]:
    """Sheaf-FMTL at each γ (paper and compact exchange), dFedU, D-PSGD and Local on School, per seed."""
    return [Job(experiment=NAME, data="school", method=m, seed=s, rounds=budget.rounds, label=label, hyperparameters=hp,
                setting={"gamma": g}, graph=GRAPH, graph_params=GRAPH_PARAMS) for s in seeds for label, m, hp,
                g in _runs(budget)]


# ---- tables --------------------------------------------------------------------------------------
def target_variances(done: Iterable[Mapping[str, Any]]) -> dict[int, list[float]]:
    """Per seed, each school's target variance (the data's own ``y_scale``²), from the runs' done-records
    (``y_scales``), so that the analysis reads the data from wherever the runs did (``-s path=FILE``);
    a seed whose records hold none (runs of a topofl before them) loads School where
    :func:`topofl.data.sources.school_path` finds it.
    """
    from topofl.data.sources import load

    out: dict[int, list[float]] = {}
    seeds: set[int] = set()
    for d in done:
        seeds.add(int(d["seed"]))
        if d.get("y_scales") is not None:
            out.setdefault(int(d["seed"]), [float(v) ** 2 for v in d["y_scales"]])
    for s in sorted(seeds - set(out)):
        out[s] = [c.meta["y_scale"] ** 2 for c in load("school", s).clients]
    return out


def original_units(rounds: Iterable[Mapping[str, str]], scales: Mapping[int, Sequence[float]]) -> dict[tuple[str, int],
                                                                                                       float]:
    """Final-round MSE in score units per (method, seed): each school's standardised MSE (rows of
    rounds.csv) times its target variance (``scales``: :func:`target_variances`), averaged over schools.
    """
    last: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
    final_round: dict[tuple[str, int], int] = {}
    for r in rounds:
        key, rnd = (r["method"], int(r["seed"])), int(r["round"])
        if rnd > final_round.get(key, -1):
            final_round[key], last[key] = rnd, {}
        if rnd == final_round[key]:
            last[key][int(r["client"])] = float(r["mse"]) * scales[int(r["seed"])][int(r["client"])]
    return {k: float(np.mean(list(v.values()))) for k, v in last.items()}


def summary_rows(done: Sequence[Mapping[str, Any]], models: Mapping[tuple[str, int], int],
                 orig: Mapping[tuple[str, int], float]) -> list[dict[str, Any]]:
    """Final MSE (standardised and in score units), R² and the costs per method."""
    rows = final_rows(done, ("method", "gamma"), metric="mse", models=models)
    for r in rows:
        vals = [v for (m, _), v in orig.items() if m == r["method"]]
        r["mse_original_mean"], r["mse_original_std"] = float(np.mean(vals)), float(np.std(vals))
        r2 = [float(d["final"].get("r2", np.nan)) for d in done if d["method"] == r["method"]]
        r["r2_mean"], r["r2_std"] = float(np.nanmean(r2)), float(np.nanstd(r2))
    return rows


def paired_rows(done: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each method minus Local, final standardised MSE, with seeds of lower / higher MSE."""
    return [{k: v for k, v in p.items() if k not in ("wins", "losses")} | {"lower_mse_on": p["losses"],
                                                                           "higher_mse_on": p["wins"]}
            for p in against(done, (), "Local", "mse")]


def bits_notes(rows: Sequence[Mapping[str, Any]], gammas: Sequence[float] = GAMMAS) -> list[str]:
    """How many times fewer bits than dFedU each γ sends, paper and compact exchange."""
    by = {r["method"]: r for r in rows}
    ratios = [f"γ={g:g}: {by['dFedU']['transmitted_MB'] / by[f'Sheaf-FMTL γ={g:g}']['transmitted_MB']:.1f}× (paper "
              "exchange), "
              f"{by['dFedU']['transmitted_MB'] / by[f'Sheaf-FMTL γ={g:g}, compact exchange']['transmitted_MB']:.1f}× "
              "(compact exchange)"
              for g in gammas if {"dFedU", f"Sheaf-FMTL γ={g:g}", f"Sheaf-FMTL γ={g:g}, compact exchange"} <= set(by)]
    return ["Fewer bits than dFedU: " + "; ".join(ratios) + "."] if ratios else []


# ---- analysis ------------------------------------------------------------------------------------
TITLES = {
    "summary": "Final test MSE (standardised: mse; score units: mse_original), R² (mean over schools), transmitted "
               "data, map storage "
               "and storage of models plus maps (storage_MB, paper Table 3)",
    "paired_vs_local": "Each method minus Local: final standardised MSE, paired over seeds (mean, 95 % t-interval; "
                       "negative = lower "
                       "MSE than Local; seeds with lower / higher MSE; p: paired t-test, Holm-adjusted over the "
                       "methods)",
}
SHAPES_NOTE = ("The paper reports School in a figure only (no table); compare shapes: whether Sheaf-FMTL reaches "
               "dFedU's MSE with "
               "fewer bits, and whether either beats Local.")


def analyse(out: Path, done: list[dict[str, Any]], budget: SchoolBudget = FULL) -> Manifest:
    """MSE table (standard and original units), MSE vs rounds and bits, paired differences against Local."""
    man = Manifest(NAME, "Sheaf-FMTL on School (real data)",
                   "139 schools, exam-score regression with a linear model, the paper's protocol, Erdős–Rényi p = 0.2, "
                   "λ = 0.01 "
                   f"(paper Fig. 6, Table 7), {budget.rounds} rounds; inputs and targets z-scored per school. Lower "
                   "MSE is better.")
    scales = target_variances(done)
    rows = summary_rows(done, model_bytes(iter_csv(out / "rounds.csv")),
                        original_units(iter_csv(out / "rounds.csv"), scales))
    man.table(out, "summary", TITLES["summary"], rows,
              show=[c for c in rows[0] if c not in HIDDEN] if rows else None)
    man.table(out, "paired_vs_local", TITLES["paired_vs_local"], paired_rows(done))
    man.figure(curve_figure(curves_with_bits(load_curves(out), "mse"), [r["method"] for r in rows], out, "mse",
                            metric="mse"),
               "Test MSE (standardised) against rounds and against transmitted data.")
    man.notes += [SHAPES_NOTE, *bits_notes(rows, budget.gammas)]
    return man


EXPERIMENT = Experiment(NAME, "Sheaf-FMTL on School (real data)", plan, analyse, {"full": FULL, "smoke": SMOKE},
                        default_seeds=(0, 1, 2, 3, 4))
