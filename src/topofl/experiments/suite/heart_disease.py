"""Real data: every server-based method on the UCI Heart Disease cohorts of four hospitals.

Cleveland, Hungary, Switzerland and VA Long Beach, one client each (920 patients, 13 clinical
features plus missing-value indicators; see :mod:`topofl.data.loaders.heart_disease` for the
missing-value policy), 15 rounds, 10 seeds (each seed draws every site's stratified split). Two
references beside the methods: **local** (each hospital alone; also a method) and **pooled** —
one model trained on all hospitals' training rows together (what sharing the data would give),
scored on each hospital's own test rows. Paired differences with 95 % t-intervals against pTopoFL.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from topofl.experiments.analysis import final_table, group_curves, paired_curves, paired_differences
from topofl.experiments.figures import band_between, colour, paired_figure, pyplot, save
from topofl.experiments.store import RunSpec, load_curves
from topofl.experiments.suite.base import Experiment, Manifest
from topofl.methods import available

ROUNDS = 15
POOLED = "pooled"


def plan(seeds: Sequence[int]) -> list[RunSpec]:
    """Every server-based method per seed, and the pooled-data reference (``local`` trained on all sites' rows)."""
    specs = []
    for s in seeds:
        specs += [RunSpec("heart-disease", "heart-disease", m, s, ROUNDS) for m in available("server")]
        specs.append(RunSpec("heart-disease", "heart-disease", "local", s, ROUNDS, label=POOLED, scenario_params={"pooled_training": True}))
    return specs


def per_hospital(out: Path) -> list[dict[str, Any]]:
    """One row per method: its final-round AUC on each hospital, mean over seeds (from ``rounds.csv``)."""
    import numpy as np

    from topofl.data.scenarios import make_scenario
    from topofl.experiments.analysis import num
    from topofl.experiments.results import read_csv

    path = out / "rounds.csv"
    if not path.is_file():
        return []
    rows = read_csv(path)
    last: dict[tuple[str, str], int] = {}
    for r in rows:
        key = (r["method"], r["seed"])
        last[key] = max(last.get(key, 0), int(r["round"]))
    names = {str(c.client_id): str(c.meta.get("site", c.client_id)) for c in make_scenario("heart-disease", seed=0)}
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


def analyse(out: Path, done: list[dict[str, Any]]) -> Manifest:
    """Final AUC and accuracy per method with the references; paired differences against pTopoFL; AUC curves."""
    man = Manifest("heart-disease", "Real data: four hospitals (UCI Heart Disease)",
                   "Every server-based method on the real Cleveland, Hungary, Switzerland and VA Long Beach cohorts (one client per "
                   "hospital, diagnosis > 0), 15 rounds; 'local' trains each hospital alone, 'pooled' trains one model on all "
                   "hospitals' training rows (data sharing) and scores it on each hospital's test rows. AUC and accuracy are per-seed "
                   "means over hospitals; the tables give mean ± std over seeds and paired differences with 95 % t-intervals.")
    rows = final_table(done, ("method",), metrics=("auc", "accuracy", "pooled_auc"))
    man.table(out, "summary", "Final-round metrics (mean ± std over seeds)", rows)
    paired = paired_differences(done, (), "ptopofl", "auc") + paired_differences(done, (), "ptopofl", "accuracy")
    man.table(out, "paired", "pTopoFL minus each method and reference, paired over seeds (mean, 95 % t-interval, seeds won/lost; p: paired "
              "t-test, Holm-adjusted over the comparisons of one metric)", paired)
    if paired:
        man.figure(paired_figure([(f"pTopoFL − method: {metric} (seeds pTopoFL won/lost)", [r for r in paired if r["metric"] == metric])
                                  for metric in ("auc", "accuracy")], "pTopoFL − method (paired, 95 % CI)", out, "paired"),
                   "pTopoFL's final AUC and accuracy minus each method's and reference's on the same seed, mean and 95 % t-interval; "
                   "right of the dashed line pTopoFL is better.")
    hospitals = per_hospital(out)
    if hospitals:
        man.table(out, "per_hospital", "Final AUC on each hospital's own test rows, by method (mean over seeds; a hospital whose "
                  "test rows hold one class on a seed has no AUC there)", hospitals)
    curve_rows = load_curves(out)
    curves = group_curves(curve_rows, ("method",))
    diffs = paired_curves(curve_rows, (), "fedavg")
    if curves:
        plt = pyplot()
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2))
        for i, m in enumerate([*available("server"), POOLED]):
            c, d = curves.get((m,)), diffs.get((m,))
            if c is not None:
                ax.plot(c["round"], c["mean"], label=m, color=colour(m, i), lw=2 if m == "ptopofl" else 1.2)
            if d is not None:
                band_between(bx, d["round"], d["mean"], d["low"], d["high"], m, colour(m, i))
        ax.set(title="AUC over rounds (mean over seeds)", xlabel="round", ylabel="mean hospital AUC")
        ax.legend(fontsize=7, ncol=2, loc="lower right")
        bx.axhline(0.0, color="#444", lw=0.9, ls="--")
        bx.set(title="AUC minus FedAvg, same seed (band: pTopoFL 95 % CI)", xlabel="round", ylabel="AUC − FedAvg")
        man.figure(save(fig, out, "auc_curves"), "Mean hospital AUC over rounds (left) and each method's AUC minus FedAvg's on the same "
                   "seed, mean and 95 % t-interval over seeds (right).")
    auc = {r["method"]: r["auc_mean"] for r in rows}
    if auc:
        best = max(auc, key=lambda m: auc[m])
        man.notes.append(f"Highest mean AUC: {best} ({auc[best]:.3f}); pooled data: {auc.get(POOLED, float('nan')):.3f}; "
                         f"each hospital alone: {auc.get('local', float('nan')):.3f}.")
    man.notes.append("Switzerland's cohort is 93 % diseased and recorded no cholesterol; Hungary, Switzerland and VA lack most of slope, "
                     "ca and thal. Medians are imputed per hospital from its own training rows, with a missing-value indicator per "
                     "feature; features are z-scored with federated (pooled) statistics.")
    return man


EXPERIMENT = Experiment("heart-disease", "Real data: four hospitals", plan, analyse, tunable=True)
