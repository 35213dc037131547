"""Real data: every server-based method on the UCI Heart Disease cohorts of four hospitals
(Cleveland, Hungary, Switzerland, VA Long Beach; one client each), with two references: ``local``
(each hospital alone) and ``pooled`` (one model on all hospitals' training rows). Paired differences
with 95 % t-intervals against pTopoFL. See docs/experiments.md.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from topofl.experiments.analysis import (
    best_method,
    best_text,
    final_table,
    group_curves,
    num,
    paired_curves,
    paired_differences,
)
from topofl.experiments.base import Budget, Experiment, Manifest
from topofl.experiments.figures import band_between, colour, paired_figure, pyplot, save
from topofl.experiments.results import read_csv
from topofl.experiments.store import load_curves
from topofl.job import Job

NAME = "heart-disease"
POOLED = "pooled"
FULL = Budget()
#: a CI smoke run: pTopoFL, FedAvg and each hospital alone (and the pooled reference), three rounds
SMOKE = Budget(rounds=3, methods=("ptopofl", "fedavg", "local"))


def plan(seeds: Sequence[int], budget: Budget = FULL) -> list[Job]:
    """Every method per seed, and the pooled-data reference (``local`` trained on all sites' rows)."""
    jobs = []
    for s in seeds:
        jobs += [Job(experiment=NAME, data=NAME, method=m, seed=s, rounds=budget.rounds)
                 for m in budget.server_methods()]
        jobs.append(Job(experiment=NAME, data=NAME, method="local", seed=s, rounds=budget.rounds, label=POOLED,
                        data_params={"pooled_training": True}))
    return jobs


# ---- tables --------------------------------------------------------------------------------------
def site_names() -> dict[str, str]:
    """Client id (as written in rounds.csv) → hospital name."""
    from topofl.data.scenarios import make_scenario

    return {str(c.client_id): str(c.meta.get("site", c.client_id)) for c in make_scenario(NAME, seed=0)}


def per_hospital(rows: Sequence[Mapping[str, str]], names: Mapping[str, str]) -> list[dict[str, Any]]:
    """One row per method: its final-round AUC on each hospital, mean over seeds (``rows``: rounds.csv)."""
    last: dict[tuple[str, str], int] = {}
    for r in rows:
        key = (r["method"], r["seed"])
        last[key] = max(last.get(key, 0), int(r["round"]))
    values: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        if int(r["round"]) == last[(r["method"], r["seed"])]:
            values.setdefault(r["method"], {}).setdefault(names.get(r["client"], r["client"]), []).append(num(r["auc"]))
    out_rows = []
    for method, per in values.items():
        row: dict[str, Any] = {"method": method}
        for site in names.values():
            v = np.array(per.get(site, []), dtype=float)
            v = v[np.isfinite(v)]
            row[site] = float(v.mean()) if v.size else float("nan")
        out_rows.append(row)
    return out_rows


def paired_rows(done: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The pTopoFL minus each method and reference rows, AUC then accuracy, paired over seeds."""
    return paired_differences(done, (), "ptopofl", "auc") + paired_differences(done, (), "ptopofl", "accuracy")


def headline(rows: Sequence[Mapping[str, Any]], done: Sequence[Mapping[str, Any]]) -> list[str]:
    """The best method by final AUC — named only when its paired interval against the runner-up
    excludes 0 (:func:`~topofl.experiments.analysis.best_method`) — beside the pooled and the local references.
    """
    auc = {r["method"]: r["auc_mean"] for r in rows}
    if not auc:
        return []
    federated = [d for d in done if d["method"] != POOLED]
    return [f"Final AUC — {best_text(best_method(federated, 'auc'))}; pooled data: "
            f"{auc.get(POOLED, float('nan')):.3f}; each hospital alone: {auc.get('local', float('nan')):.3f}."]


# ---- figures -------------------------------------------------------------------------------------
def curves_figure(curve_rows: Sequence[Mapping[str, str]], methods: Sequence[str], out: Path) -> dict[str, str] | None:
    """Mean hospital AUC over rounds and each method minus FedAvg on the same seed (``None``: no curves)."""
    curves = group_curves(curve_rows, ("method",))
    if not curves:
        return None
    diffs = paired_curves(curve_rows, (), "fedavg")
    plt = pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12.5, 4.2))
    for i, m in enumerate([*methods, POOLED]):
        c, d = curves.get((m,)), diffs.get((m,))
        if c is not None:
            ax.plot(c["round"], c["mean"], label=m, color=colour(m, i), lw=2 if m == "ptopofl" else 1.2)
        if d is not None:
            band_between(bx, d["round"], d["mean"], d["low"], d["high"], m, colour(m, i))
    ax.set(title="AUC over rounds (mean over seeds)", xlabel="round", ylabel="mean hospital AUC")
    bx.legend(*ax.get_legend_handles_labels(), fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0),
              borderaxespad=0.0)  # off the curves
    bx.axhline(0.0, color="#444", lw=0.9, ls="--")
    bx.set(xlabel="round", ylabel="AUC − FedAvg")
    bx.set_title("AUC − FedAvg, same seed\n(band: pTopoFL's 95 % CI)", fontsize=10)
    return save(fig, out, "auc_curves")


# ---- analysis ------------------------------------------------------------------------------------
DESCRIPTION = ("Every server-based method on the real Cleveland, Hungary, Switzerland and VA Long Beach cohorts (one "
               "client per "
               "hospital, diagnosis > 0), 15 rounds; 'local' trains each hospital alone, 'pooled' trains one model on "
               "all "
               "hospitals' training rows (data sharing) and scores it on each hospital's test rows. AUC and accuracy "
               "are per-seed "
               "means over hospitals; the tables give mean ± std over seeds and paired differences with 95 % "
               "t-intervals.")
PAIRED_TITLE = ("pTopoFL minus each method and reference, paired over seeds (mean, 95 % t-interval, seeds won/lost; p: "
                "paired "
                "t-test, Holm-adjusted over the comparisons of one metric)")
PAIRED_CAPTION = ("pTopoFL's final AUC and accuracy minus each method's and reference's on the same seed, mean and 95 "
                  "% t-interval; "
                  "right of the dashed line pTopoFL is better.")
HOSPITAL_TITLE = ("Final AUC on each hospital's own test rows, by method (mean over seeds; a hospital whose test rows "
                  "hold one class "
                  "on a seed has no AUC there)")
CURVES_CAPTION = ("Mean hospital AUC over rounds (left) and each method's AUC minus FedAvg's on the same seed, mean "
                  "and 95 % "
                  "t-interval over seeds (right).")
DATA_NOTE = ("Switzerland's cohort is 93 % diseased and recorded no cholesterol; Hungary, Switzerland and VA lack most "
             "of slope, "
             "ca and thal. Medians are imputed per hospital from its own training rows, with a missing-value indicator "
             "per "
             "feature; features are z-scored with federated (pooled) statistics.")


def analyse(out: Path, done: list[dict[str, Any]], budget: Budget = FULL) -> Manifest:
    """Final AUC and accuracy per method with the references; paired differences against pTopoFL; AUC curves."""
    man = Manifest(NAME, "Real data: four hospitals (UCI Heart Disease)", DESCRIPTION)
    rows = final_table(done, ("method",), metrics=("auc", "accuracy", "pooled_auc"))
    man.table(out, "summary", "Final-round metrics (mean ± std over seeds)", rows)
    paired = paired_rows(done)
    man.table(out, "paired", PAIRED_TITLE, paired)
    if paired:
        panels = [(f"pTopoFL − method: {metric} (seeds pTopoFL won/lost)", [r for r in paired if r["metric"] == metric])
                  for metric in ("auc", "accuracy")]
        man.figure(paired_figure(panels, "pTopoFL − method (paired, 95 % CI)", out, "paired"), PAIRED_CAPTION)
    rounds_csv = out / "rounds.csv"
    hospitals = per_hospital(read_csv(rounds_csv), site_names()) if rounds_csv.is_file() else []
    if hospitals:
        man.table(out, "per_hospital", HOSPITAL_TITLE, hospitals)
    curves = curves_figure(load_curves(out), budget.server_methods(), out)
    if curves is not None:
        man.figure(curves, CURVES_CAPTION)
    man.notes += [*headline(rows, done), DATA_NOTE]
    return man


EXPERIMENT = Experiment(NAME, "Real data: four hospitals", plan, analyse, {"full": FULL, "smoke": SMOKE},
                        tunable=True)
