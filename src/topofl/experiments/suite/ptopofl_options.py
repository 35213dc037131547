"""pTopoFL's faithfulness options against its defaults (docs/ptopofl-options.md).

Two places where the paper says two things, each measured on healthcare under the controls' three
geometries (coupled — the default scenario —, independent, shared) and on the real heart-disease
cohorts, 15 rounds, 10 seeds, paired against pTopoFL as it runs by default:

* **Within-cluster weights.** Eq. 6 and Algorithm 1 weight a cluster's members by
  n_k · exp(−‖φ̂_k − φ̂_C‖) · t_k; §1, Eq. 12 and Theorems 3.5 and 3.9 by
  α_k ∝ exp(−λ W_p(PD_k, PD̄)), PD̄ a Wasserstein barycentre of the cluster's diagrams
  (:mod:`topofl.tda.barycentre`). ``ptopofl-eq12`` is Eq. 12 at λ = 1 (the default; the paper
  gives no value), ``-l0.1`` and ``-l10`` at λ = 0.1 and 10.
* **§3.2.** The text appends four TDA features to each sample (``ptopofl``, the default); the
  authors' paper-era code weights each sample's loss instead (``ptopofl-sw``,
  ``topo_features="sample_weight"``); ``ptopofl-nofeat`` uses neither.

FedAvg runs beside them for scale.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from topofl.experiments.analysis import final_table, paired_differences
from topofl.experiments.store import RunSpec
from topofl.experiments.suite.base import Experiment, Manifest

ROUNDS = 15
#: (setting label, scenario, scenario parameters)
SETTINGS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("healthcare/coupled", "healthcare", {"geometry": "coupled"}),
    ("healthcare/independent", "healthcare", {"geometry": "independent"}),
    ("healthcare/shared", "healthcare", {"geometry": "shared"}),
    ("heart-disease", "heart-disease", {}),
)
#: label → (method, hyper-parameters); "ptopofl" is the reference (Eq. 6, §3.2 as feature augmentation)
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "ptopofl": ("ptopofl", {}),
    "ptopofl-eq12": ("ptopofl", {"intra_weighting": "wasserstein_exp"}),
    "ptopofl-eq12-l0.1": ("ptopofl", {"intra_weighting": "wasserstein_exp", "wasserstein_temperature": 0.1}),
    "ptopofl-eq12-l10": ("ptopofl", {"intra_weighting": "wasserstein_exp", "wasserstein_temperature": 10.0}),
    "ptopofl-sw": ("ptopofl", {"topo_features": "sample_weight"}),
    "ptopofl-nofeat": ("ptopofl", {"topo_features": "off"}),
    "fedavg": ("fedavg", {}),
}


def plan(seeds: Sequence[int]) -> list[RunSpec]:
    """Every variant in every setting, per seed."""
    return [RunSpec("ptopofl-options", scenario, method, s, ROUNDS, label="" if label == method else label, hyperparameters=hp,
                    scenario_params=params, setting={"setting": name})
            for name, scenario, params in SETTINGS for s in seeds for label, (method, hp) in VARIANTS.items()]


def analyse(out: Path, done: list[dict[str, Any]]) -> Manifest:
    """Final AUC and accuracy per setting and variant; each variant minus pTopoFL's default, paired over seeds."""
    man = Manifest("ptopofl-options", "pTopoFL: Eq. 12's weights and §3.2 as sample weighting",
                   "pTopoFL with Eq. 6's within-cluster weights and §3.2's feature augmentation (its defaults) against Eq. 12's "
                   "Wasserstein-exponential weights (λ = 0.1, 1, 10), the paper-era code's sample weighting and neither, on healthcare "
                   "under three geometries and on heart-disease; 15 rounds.")
    man.table(out, "summary", "Final-round AUC and accuracy per setting (mean ± std over seeds)",
              final_table(done, ("setting", "method"), metrics=("auc", "accuracy")))
    paired = [r for metric in ("auc", "accuracy") for r in paired_differences(done, ("setting",), "ptopofl", metric)]
    man.table(out, "paired", "pTopoFL's defaults minus each variant, paired over seeds (mean, 95 % t-interval, seeds won/lost; "
              "Holm over the variants of one setting and metric)", paired,
              show=[c for c in (paired[0] if paired else {}) if c != "reference"])
    for r in paired:
        if r["metric"] == "auc" and r["method"] == "ptopofl-eq12":
            man.notes.append(f"{r['setting']}: Eq. 6 minus Eq. 12 (λ = 1) AUC {r['diff_mean']:+.4f} "
                             f"(95 % CI {r['ci_low']:+.4f}, {r['ci_high']:+.4f}; {r['reference_wins']}/{r['other_wins']} seeds).")
    return man


EXPERIMENT = Experiment("ptopofl-options", "pTopoFL's options: Eq. 12 and §3.2", plan, analyse)
