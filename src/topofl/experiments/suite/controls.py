"""Controls for the synthetic healthcare scenario (does pTopoFL win because topology predicts the
task by construction?).

Every server-based method on ``healthcare`` under three case-mix geometries (15 rounds, 10
seeds): ``coupled`` (the default: each hospital's geometry is its rule group's), ``independent``
(geometry drawn independently of the rule group) and ``shared`` (one geometry for all). Reported:
AUC and accuracy per geometry, pTopoFL's paired difference against every method with a 95 %
t-interval, and how well pTopoFL's final clusters match the rule groups (adjusted Rand index).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from topofl.experiments.analysis import final_table, paired_differences
from topofl.experiments.figures import paired_figure
from topofl.experiments.store import RunSpec
from topofl.experiments.suite.base import Experiment, Manifest, last_round_logs
from topofl.methods import available

GEOMETRIES = ("coupled", "independent", "shared")
ROUNDS = 15


def plan(seeds: Sequence[int]) -> list[RunSpec]:
    """Every server-based method under every geometry, per seed."""
    return [RunSpec("controls", "healthcare", m, s, ROUNDS, scenario_params={"geometry": g}, setting={"geometry": g})
            for g in GEOMETRIES for s in seeds for m in available("server")]


def cluster_agreement(out: Path) -> list[dict[str, Any]]:
    """Adjusted Rand index between pTopoFL's final-round clusters and the hospitals' rule groups,
    per geometry and seed (from ``server_log.jsonl`` and the regenerated scenario).
    """
    from sklearn.metrics import adjusted_rand_score

    from topofl.data.scenarios import make_scenario

    last = last_round_logs(out, lambda r: (str(r["geometry"]), int(r["seed"])) if r.get("method") == "ptopofl" and "clusters" in r else None)
    rows = []
    for (geometry, seed), entry in sorted(last.items()):
        clusters = entry["clusters"]
        fed = make_scenario("healthcare", seed=seed, geometry=geometry)
        ids = sorted(int(k) for k in clusters)
        groups = [fed.clients[k].meta["group"] for k in ids]
        rows.append({"geometry": geometry, "seed": seed, "ari": float(adjusted_rand_score(groups, [clusters[str(k)] for k in ids]))})
    return rows


def analyse(out: Path, done: list[dict[str, Any]]) -> Manifest:
    """Per-geometry tables, paired differences against pTopoFL, cluster agreement."""
    man = Manifest("controls", "Controls: when topology does not predict the task",
                   "Every method on healthcare with the hospitals' case-mix geometry tied to their rule group (coupled, the default "
                   "scenario), drawn independently of it, or shared by all; 15 rounds. Where pTopoFL's lead survives only under "
                   "'coupled', it comes from the scenario's construction, not from topology in general.")
    rows = final_table(done, ("geometry", "method"), metrics=("auc", "accuracy"))
    man.table(out, "summary", "Final-round AUC and accuracy per geometry (mean ± std over seeds)", rows)
    paired = [r for metric in ("auc", "accuracy") for r in paired_differences(done, ("geometry",), "ptopofl", metric)]
    man.table(out, "paired", "pTopoFL minus each method per geometry, paired over seeds (mean, 95 % t-interval, seeds won/lost; p: paired "
              "t-test, Holm-adjusted over the methods of one geometry and metric)", paired)
    geometries = [g for g in GEOMETRIES if any(r["geometry"] == g and r["metric"] == "auc" for r in paired)]
    if geometries:
        man.figure(paired_figure([(f"{g}: pTopoFL − method, AUC", [r for r in paired if r["geometry"] == g and r["metric"] == "auc"])
                                  for g in geometries], "pTopoFL − method (paired, 95 % CI)", out, "paired"),
                   "pTopoFL's final AUC minus each method's on the same seed, per geometry (seeds pTopoFL won/lost in brackets): "
                   "right of the dashed line pTopoFL is better. Its lead over the personalised baselines holds only where the "
                   "geometry is tied to the rule group.")
    ari = cluster_agreement(out)
    if ari:
        summary = []
        for g in GEOMETRIES:
            v = np.array([r["ari"] for r in ari if r["geometry"] == g])
            if v.size:
                summary.append({"geometry": g, "n_seeds": int(v.size), "ari_mean": float(v.mean()), "ari_std": float(v.std())})
        man.table(out, "cluster_agreement", "pTopoFL's final clusters against the rule groups: adjusted Rand index (1 = the groups, 0 = chance)",
                  summary)
    for g in GEOMETRIES:
        fa = [r for r in paired if r["geometry"] == g and r["metric"] == "auc" and r["method"] == "fedavg"]
        best = max((r for r in rows if r["geometry"] == g and r["method"] != "ptopofl"), key=lambda r: r["auc_mean"], default=None)
        if fa and best is not None:
            b = [r for r in paired if r["geometry"] == g and r["metric"] == "auc" and r["method"] == best["method"]]
            man.notes.append(f"{g}: pTopoFL − FedAvg AUC {fa[0]['diff_mean']:+.3f} (95 % CI {fa[0]['ci_low']:+.3f}, {fa[0]['ci_high']:+.3f}); "
                             f"pTopoFL − {best['method']} (best other) {b[0]['diff_mean']:+.3f} "
                             f"({b[0]['ci_low']:+.3f}, {b[0]['ci_high']:+.3f}).")
    return man


EXPERIMENT = Experiment("controls", "Controls for the synthetic scenario", plan, analyse, tunable=True)
