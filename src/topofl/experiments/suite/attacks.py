"""Attacks and defences: which attacks each method survives, and which defences catch which attacks.

Methods and defences (:data:`DEFENCES`): FedAvg with its mean and with every robust rule of
:mod:`topofl.robustness.aggregators` (coordinate-wise median and trimmed mean, Yin et al. 2018;
Krum and Multi-Krum, Blanchard et al. 2017; Bulyan, El Mhamdi et al. 2018; norm clipping, Sun et
al. 2019), pTopoFL (its trust weights and anomaly flags, paper §3.4; also with
``trust_gate="flagged"`` and with the median inside its clusters) and Ditto. Attacks
(:data:`topofl.robustness.attacks.KINDS`, default parameters): label flip, feature-space poisoning,
sign flip, scaled model replacement, Gaussian-noise updates, descriptor forgery, collusion and free
riding, plus a crude descriptor forgery, by a nested, seeded share of the clients from round 1 on. Scenarios: ``healthcare`` (its
built-in label-flipping hospitals removed, so the attack is the only adversary), ``benchmark`` and
the real ``heart-disease`` cohort.

Reported: final AUC per (scenario, attack, share, method); each method's AUC under attack minus
its own clean AUC and each defence's AUC minus plain FedAvg's under the same attack, paired over
seeds (95 % Student-t interval); and, for the methods that single clients out — pTopoFL's flags
(z > τ) and the clients a rule excluded (Krum, Multi-Krum, Bulyan) — precision, recall and F1 of
the final round's choice against the true adversaries, and the share of adversaries whose final
reply the server's checks refused outright (``refused``: the norm bound, or a descriptor no point
cloud can have). The defences' f is 1 (what Bulyan allows
with 8 clients; the defender does not know the true number), so Krum-type rules are
under-provisioned at higher shares: that is part of what is measured.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from topofl.experiments.analysis import add_holm, against, detection_scores, final_table
from topofl.experiments.figures import pyplot, save
from topofl.experiments.store import RunSpec
from topofl.experiments.suite.base import Experiment, Manifest, last_round_logs

ROUNDS = 15
#: label → (method, hyper-parameters)
DEFENCES: dict[str, tuple[str, dict[str, Any]]] = {
    "FedAvg": ("fedavg", {}),
    "FedAvg + median": ("fedavg", {"aggregator": "median"}),
    "FedAvg + trimmed mean": ("fedavg", {"aggregator": "trimmed_mean"}),
    "FedAvg + Krum": ("fedavg", {"aggregator": "krum"}),
    "FedAvg + Multi-Krum": ("fedavg", {"aggregator": "multi_krum"}),
    "FedAvg + Bulyan": ("fedavg", {"aggregator": "bulyan"}),
    "FedAvg + norm clip": ("fedavg", {"aggregator": "norm_clip"}),
    "pTopoFL": ("ptopofl", {}),
    "pTopoFL (flagged gate)": ("ptopofl", {"trust_gate": "flagged", "tau": 1.8}),
    "pTopoFL + median": ("ptopofl", {"intra_aggregator": "median"}),
    "Ditto": ("ditto", {}),
}
KINDS = ("label_flip", "feature_poison", "sign_flip", "scaled_replacement", "gaussian_noise", "descriptor_forgery", "crude_forgery",
         "collusion", "free_rider")
#: scenario → (scenario parameters, attack shares of the full budget)
SCENARIOS: dict[str, tuple[dict[str, Any], tuple[float, ...]]] = {
    "healthcare": ({"adversarial": ()}, (0.125, 0.25, 0.375, 0.5)),
    "benchmark": ({}, (0.1, 0.2, 0.3, 0.4, 0.5)),
    "heart-disease": ({}, (0.25, 0.5)),
}
QUICK_SHARES = {"healthcare": (0.25, 0.5), "benchmark": (0.2, 0.5), "heart-disease": (0.25, 0.5)}
CLEAN = "none"
#: labels whose runs single out clients (pTopoFL's flags, or a rule's exclusions)
DETECTORS = ("pTopoFL", "pTopoFL (flagged gate)", "FedAvg + Krum", "FedAvg + Multi-Krum", "FedAvg + Bulyan")


def plan(seeds: Sequence[int], profile: str = "full", data_root: str | None = None) -> list[RunSpec]:
    """Every defence under every attack and share (and clean), on every scenario, per seed.
    ``quick``: two shares per scenario (default seeds 0–2); ``smoke``: healthcare, one share, three attacks, 3 rounds.
    """
    if data_root:
        raise ValueError("experiment 'attacks' takes no --data-root")
    scenarios = {"healthcare": SCENARIOS["healthcare"]} if profile == "smoke" else SCENARIOS
    kinds = ("label_flip", "sign_flip", "descriptor_forgery") if profile == "smoke" else KINDS
    rounds = 3 if profile == "smoke" else ROUNDS
    specs = []
    for sc, (params, shares) in scenarios.items():
        shares = (0.25,) if profile == "smoke" else QUICK_SHARES[sc] if profile == "quick" else shares
        for s in seeds:
            for label, (method, hp) in DEFENCES.items():
                specs.append(RunSpec("attacks", sc, method, s, rounds, label=label, hyperparameters=hp, scenario_params=params,
                                     setting={"attack": CLEAN, "share": 0.0}))
                for kind in kinds:
                    for share in shares:
                        specs.append(RunSpec("attacks", sc, method, s, rounds, label=label, hyperparameters=hp, scenario_params=params,
                                             setting={"attack": kind, "share": share}, attack=f"{kind}:fraction={share!r},seed={s}"))
    return specs


def detection(out: Path, done: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Precision, recall and F1 of the final round's flagged (pTopoFL) or excluded (Krum-type)
    clients against each run's true adversaries, mean over seeds per (scenario, attack, share, method).
    """
    truth = {(d["scenario"], d["method"], d["attack"], str(d["share"]), int(d["seed"])): set(d.get("adversarial", [])) for d in done}
    refused = {(d["scenario"], d["method"], d["attack"], str(d["share"]), int(d["seed"])): set(d.get("refused_last_round", [])) for d in done}
    last = last_round_logs(out, lambda r: (r["scenario"], r["method"], r["attack"], str(r["share"]), int(r["seed"]))
                           if r.get("method") in DETECTORS and r.get("attack") != CLEAN else None)
    per: dict[tuple, list[dict[str, float]]] = defaultdict(list)
    for key, r in last.items():
        chosen = r.get("flagged", []) if str(key[1]).startswith("pTopoFL") else r.get("excluded", [])
        adv = truth.get(key, set())
        s = detection_scores([int(c) for c in chosen], adv)
        s["refused"] = len(refused.get(key, set()) & adv) / len(adv) if adv else float("nan")
        p, q = s["precision"], s["recall"]
        s["f1"] = 0.0 if (p == 0 or q == 0) else (2 * p * q / (p + q) if np.isfinite(p) and np.isfinite(q) else float("nan"))
        per[key[:4]].append(s)
    rows = []
    for (sc, m, kind, share), ss in sorted(per.items()):
        row: dict[str, Any] = {"scenario": sc, "attack": kind, "share": float(share), "method": m, "n_seeds": len(ss)}
        for k in ("precision", "recall", "f1", "n_flagged", "refused"):
            v = np.array([x[k] for x in ss], float)
            row[k] = float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")
        rows.append(row)
    return rows


def analyse(out: Path, done: list[dict[str, Any]]) -> Manifest:
    """Final AUC tables, paired drops against clean and against FedAvg, detection scores, heat maps."""
    man = Manifest("attacks", "Attacks and defences",
                   "Every defence under nine attacks by a share of the clients, on healthcare (built-in label flips removed), "
                   "benchmark and the real heart-disease cohort, 15 rounds. Paired differences compare runs on the same seed "
                   "(same data and split; the adversaries are a nested, seeded choice).")
    for d in done:
        d["share"] = float(d["share"])
    rows = final_table(done, ("scenario", "attack", "share", "method"), metrics=("auc", "accuracy"))
    man.table(out, "summary", "Final AUC and accuracy (mean ± std over seeds)", rows)
    clean = [d for d in done if d["attack"] == CLEAN]
    drops = []
    for d_att in sorted({(d["attack"], d["share"]) for d in done if d["attack"] != CLEAN}):
        sub = [d for d in done if (d["attack"], d["share"]) == d_att]
        relabel = [{**d, "method": d["method"] + " | attacked"} for d in sub]
        for sc in sorted({d["scenario"] for d in sub}):
            for m in DEFENCES:
                pair = [d for d in clean if d["scenario"] == sc and d["method"] == m] + \
                       [d for d in relabel if d["scenario"] == sc and d["method"] == m + " | attacked"]
                for r in against(pair, (), m, "auc"):
                    drops.append({"scenario": sc, "attack": d_att[0], "share": d_att[1], "method": m, "n_seeds": r["n_seeds"],
                                  "diff_mean": r["diff_mean"], "ci_low": r["ci_low"], "ci_high": r["ci_high"], "p_value": r["p_value"]})
    add_holm(drops, ("scenario", "share"))
    man.table(out, "drop", "AUC under attack minus the same method's clean AUC, paired over seeds (mean, 95 % t-interval; p: paired "
              "t-test, Holm-adjusted over every method and attack of one scenario and share)", drops)
    versus = against(done, ("scenario", "attack", "share"), "FedAvg", "auc")
    man.table(out, "paired_vs_fedavg", "Each defence minus plain FedAvg under the same attack (attack 'none': what the defence costs "
              "on clean data), paired over seeds (mean, 95 % t-interval, seeds won/lost; p: paired t-test, Holm-adjusted over the "
              "defences under one attack, share and scenario)", versus)
    det = detection(out, done)
    if det:
        man.table(out, "detection", "Who is singled out: pTopoFL's flags (z > τ) and the clients Krum-type rules excluded, final round, "
                  "against the true adversaries (mean over seeds)", det)
    _heatmaps(out, man, drops)
    if det:
        _detection_figure(out, man, det)
    for sc in sorted({r["scenario"] for r in drops}):
        share = min({r["share"] for r in drops if r["scenario"] == sc}, key=lambda x: (abs(x - 0.25), x))
        mean = {m: float(np.mean([r["diff_mean"] for r in drops if (r["scenario"], r["share"], r["method"]) == (sc, share, m)]))
                for m in DEFENCES if any((r["scenario"], r["share"], r["method"]) == (sc, share, m) for r in drops)}
        if mean:
            best = max(mean, key=lambda m: mean[m])
            man.notes.append(f"{sc}, {share:.0%} adversaries: mean AUC drop over the nine attacks {mean.get('FedAvg', float('nan')):+.3f} "
                             f"for FedAvg, {mean.get('pTopoFL', float('nan')):+.3f} for pTopoFL; smallest: {best} ({mean[best]:+.3f}).")
    f1 = {(r["scenario"], r["share"], r["attack"]): r["f1"] for r in det if r["method"] == "pTopoFL"}
    for (sc, share, kind), v in sorted(f1.items()):
        if kind == "feature_poison" and (sc, share, "descriptor_forgery") in f1:
            ref = {r["attack"]: r["refused"] for r in det if (r["scenario"], r["share"], r["method"]) == (sc, share, "pTopoFL")}
            man.notes.append(f"pTopoFL's flags, {sc} at {share:.0%}: F1 {v:.2f} against feature poisoning, "
                             f"{f1[(sc, share, 'descriptor_forgery')]:.2f} when the same poisoning sends a forged honest descriptor, "
                             f"{f1.get((sc, share, 'label_flip'), float('nan')):.2f} against label flips; a crude (random) forged "
                             f"descriptor is refused by the server's checks for {ref.get('crude_forgery', float('nan')):.0%} of the adversaries.")
    return man


def _heatmaps(out: Path, man: Manifest, drops: list[dict[str, Any]]) -> None:
    """One panel per scenario: mean AUC drop (method × attack) at the scenario's share nearest 25 %
    (the robust rules promise nothing from 50 % on; the table 'drop' has every share).
    """
    scenarios = sorted({r["scenario"] for r in drops})
    if not scenarios:
        return
    plt = pyplot()
    fig, axes = plt.subplots(1, len(scenarios), figsize=(5.2 * len(scenarios), 5.2), squeeze=False)
    methods = list(DEFENCES)
    for ax, sc in zip(axes[0], scenarios, strict=True):
        top = min({r["share"] for r in drops if r["scenario"] == sc}, key=lambda x: (abs(x - 0.25), x))
        kinds = [k for k in KINDS if any(r["attack"] == k and r["scenario"] == sc for r in drops)]
        grid = np.full((len(methods), len(kinds)), np.nan)
        for r in drops:
            if r["scenario"] == sc and r["share"] == top and r["method"] in methods and r["attack"] in kinds:
                grid[methods.index(r["method"]), kinds.index(r["attack"])] = r["diff_mean"]
        im = ax.imshow(grid, cmap="RdBu", vmin=-0.3, vmax=0.3, aspect="auto")
        ax.set_xticks(range(len(kinds)), [k.replace("_", " ") for k in kinds], rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(len(methods)), methods, fontsize=8)
        ax.set_title(f"{sc}: AUC drop at {top:.0%} adversaries", fontsize=10)
        ax.grid(False)
        for i in range(grid.shape[0]):
            for j in range(grid.shape[1]):
                if np.isfinite(grid[i, j]):
                    ax.text(j, i, f"{grid[i, j]:+.2f}", ha="center", va="center", fontsize=6)
    fig.colorbar(im, cax=axes[0][-1].inset_axes((1.04, 0.0, 0.04, 1.0)), label="AUC under attack − clean AUC")
    man.figure(save(fig, out, "drop_heatmap"), "Mean AUC under attack minus the same method's clean AUC (paired over seeds) at each "
               "scenario's adversary share nearest 25 %; red: the attack hurts. The table 'drop' gives every share with its interval.")


def _detection_figure(out: Path, man: Manifest, det: list[dict[str, Any]]) -> None:
    """F1 of pTopoFL's flags and of Krum-type exclusions per attack (healthcare, share nearest 25 %)."""
    sc = "healthcare" if any(r["scenario"] == "healthcare" for r in det) else det[0]["scenario"]
    top = min({r["share"] for r in det if r["scenario"] == sc}, key=lambda x: (abs(x - 0.25), x))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(DETECTORS)
    for i, m in enumerate(DETECTORS):
        vals = [next((r["f1"] for r in det if (r["scenario"], r["share"], r["method"], r["attack"]) == (sc, top, m, k)), np.nan)
                for k in KINDS]
        ax.bar(np.arange(len(KINDS)) + (i - len(DETECTORS) / 2 + 0.5) * width, np.nan_to_num(vals), width, label=m)
    ax.set_xticks(range(len(KINDS)), [k.replace("_", " ") for k in KINDS], rotation=30, ha="right")
    ax.set(ylim=(0, 1), ylabel="F1", title=f"{sc}, {top:.0%} adversaries: who singles the adversaries out")
    ax.legend(fontsize=7, ncol=2)
    man.figure(save(fig, out, "detection"), "F1 of the final round's flagged (pTopoFL) or excluded (Krum, Multi-Krum, Bulyan) clients "
               "against the true adversaries, mean over seeds; bars start at zero (no choice or no hit scores 0).")


EXPERIMENT = Experiment("attacks", "Attacks and defences", plan, analyse, default_seeds=tuple(range(10)),
                        profiles=("full", "quick", "smoke"), quick_seeds=(0, 1, 2))
