"""Robustness (pTopoFL paper §4.4, Fig. 4): label-flip attacks on 0–50 % of the healthcare
clients; final AUC vs attack rate for every method, AUC curves at 0/30/50 %, and how well
pTopoFL's trust weights single out the poisoned clients (precision and recall of its flags).

Attack levels: 0, 1, 2, 3 and 4 of the 8 hospitals (0, 12.5, 25, 37.5 and 50 %; with 8 clients
no other shares exist, and rounding a 10 %-step sweep would repeat levels). The adversaries (a
seeded random, nested choice) have all their training labels flipped (``flip_rate = 1``, the classic label-flipping attack); test labels
stay clean. pTopoFL uses τ = 1.8 (paper Table 3, robustness runs).

With pTopoFL's default ``trust_gate="all"`` the trust t_k = exp(−max(z_k − 1, 0)) weighs every
client whatever τ, so τ only decides which clients are reported as flagged; the models do not
depend on it. pTopoFL is therefore also run with ``trust_gate="flagged"`` (labelled
:data:`FLAGGED`), where only clients with z_k > τ are down-weighted and τ changes the models; its
paired AUC difference against the default gate is tabulated.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from topofl.experiments.analysis import against, detection_scores, final_table, group_curves, num
from topofl.experiments.figures import band, colour, pyplot, save
from topofl.experiments.store import RunSpec, load_curves
from topofl.experiments.suite.base import Experiment, Manifest, last_round_logs
from topofl.methods import available

N_CLIENTS = 8
RATES = tuple(m / N_CLIENTS for m in range(N_CLIENTS // 2 + 1))
ROUNDS = 15
FLIP_RATE = 1.0
TAU = 1.8
#: label of pTopoFL run with trust_gate="flagged" (only clients with z > τ are down-weighted)
FLAGGED = "pTopoFL (flagged gate)"


def adversaries(rate: float, seed: int, n_clients: int = N_CLIENTS) -> tuple[int, ...]:
    """A seeded choice of round(rate · K) clients (nested: a higher rate keeps the lower rate's
    adversaries).
    """
    order = np.random.default_rng(np.random.SeedSequence([int(seed), 0xBAD])).permutation(n_clients)
    return tuple(sorted(int(k) for k in order[: int(round(rate * n_clients))]))


def plan(seeds: Sequence[int]) -> list[RunSpec]:
    """Runs of ``robustness``: every server-based method on healthcare at every attack rate of ``RATES``, per seed,
    and pTopoFL with ``trust_gate="flagged"`` (label :data:`FLAGGED`).
    """
    specs = []
    for rate in RATES:
        for s in seeds:
            params = {"adversarial": adversaries(rate, s), "flip_rate": FLIP_RATE}
            setting = {"attack_rate": rate}
            for m in available("server"):
                hp = {"tau": TAU} if m == "ptopofl" else {}
                specs.append(RunSpec("robustness", "healthcare", m, s, ROUNDS, hyperparameters=hp, scenario_params=params, setting=setting))
            specs.append(RunSpec("robustness", "healthcare", "ptopofl", s, ROUNDS, label=FLAGGED,
                                 hyperparameters={"tau": TAU, "trust_gate": "flagged"}, scenario_params=params, setting=setting))
    return specs


def analyse(out: Path, done: list[dict[str, Any]]) -> Manifest:
    """AUC by attack rate (table, figures) and pTopoFL's detection of the poisoned clients, for ``robustness``."""
    man = Manifest("robustness", "Robustness to label-flip attacks",
                   "Healthcare, 0–4 of the 8 hospitals (0–50 %) with all training labels flipped (paper §4.4, Fig. 4); pTopoFL with τ = 1.8, "
                   f"trust_gate='all' (default: τ only sets the flags) and, as {FLAGGED!r}, trust_gate='flagged' (τ sets the weights).")
    rows = final_table(done, ("attack_rate", "method"))
    man.table(out, "summary", "Final AUC by attack rate and method (mean ± std over seeds)", rows)
    gate = [r for r in against(done, ("attack_rate",), "ptopofl", "auc") if r["method"] == FLAGGED]
    man.table(out, "gate", f"{FLAGGED} minus pTopoFL (trust_gate='all'): final AUC, paired over seeds, 95 % Student-t interval (p: paired "
              "t-test, Holm-adjusted over the methods at one attack rate)", gate)
    curves = group_curves(load_curves(out), ("attack_rate", "method"))
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, m in enumerate([*available("server"), FLAGGED]):
        pts = sorted((float(r["attack_rate"]), r["auc_mean"], r["auc_std"] / np.sqrt(r["n_seeds"])) for r in rows if r["method"] == m)
        if pts:
            x, y, e = map(np.array, zip(*pts, strict=True))
            band(ax, 100 * x, y, e, m, colour(m, i), marker="o", ms=3)
    ax.set(xlabel="adversarial clients (%)", ylabel="final mean client AUC", title="Final AUC vs label-flip attack rate")
    ax.legend(fontsize=8, ncol=2)
    man.figure(save(fig, out, "auc_vs_rate"), "Final AUC against the share of label-flipping clients, ±1 standard error over seeds (paper Fig. 4A).")
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), sharey=True)
    for ax, rate in zip(axes, (RATES[0], RATES[len(RATES) // 2 + 1], RATES[-1]), strict=True):
        for i, m in enumerate([*available("server"), FLAGGED]):
            c = curves.get((repr(rate), m))  # CSV holds the rate as written by repr()
            if c is not None:
                band(ax, c["round"], c["mean"], c["se"], m, colour(m, i))
        ax.set(title=f"{rate * 100:g} % adversarial", xlabel="round")
    axes[0].set_ylabel("mean client AUC")
    axes[-1].legend(fontsize=7, ncol=2)
    man.figure(
        save(fig, out, "auc_curves"),
        "AUC over rounds at 0, 37.5 and 50 % adversarial clients (the paper shows 0/30/50 %), ±1 standard error over seeds (paper Fig. 4B).",
    )
    det = detection(out)
    man.table(out, "detection", "pTopoFL's anomaly flags (z > τ) against the truly poisoned clients, final round, mean over seeds", det)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    pct = [100 * d["attack_rate"] for d in det]
    ax.plot(pct, [d["precision"] for d in det], "o-", label="precision")
    ax.plot(pct, [d["recall"] for d in det], "s-", label="recall")
    ax.plot(pct, [d["trust_adversarial"] for d in det], "^--", label="mean trust, adversarial")
    ax.plot(pct, [d["trust_honest"] for d in det], "v--", label="mean trust, honest")
    ax.set(xlabel="adversarial clients (%)", ylabel="value", ylim=(-0.05, 1.05), title="Does pTopoFL single out poisoned clients?")
    ax.legend(fontsize=8)
    man.figure(save(fig, out, "detection"), "Precision/recall of pTopoFL's flags and mean trust weights of poisoned vs honest clients.")
    man.notes.append(
        "pTopoFL's descriptor is computed from a client's features only. A label flip leaves the feature point cloud, and so its "
        "persistence diagram, unchanged, so the anomaly detector cannot see this attack: flags at or near chance level are the "
        "expected, honest outcome. Even a descriptor of the joint (x, y) cloud would not help against a full flip, which is an "
        "isometry (y ↦ 1 − y) of that cloud and leaves its persistent homology identical."
    )
    return man


def detection(out: Path) -> list[dict[str, Any]]:
    """Per attack rate: precision/recall of pTopoFL's final-round flags, and mean trust weights."""
    per: dict[float, list[dict[str, float]]] = {}
    last = last_round_logs(out, lambda r: (r["attack_rate"], r["seed"]) if r["method"] == "ptopofl" else None)
    for (rate, seed), rec in last.items():
        adv = adversaries(float(rate), int(seed))
        s = detection_scores(rec["flagged"], adv)
        trust = {int(k): v for k, v in rec["trust"].items()}
        s["trust_adversarial"] = float(np.mean([trust[k] for k in adv])) if adv else float("nan")
        s["trust_honest"] = float(np.mean([v for k, v in trust.items() if k not in adv]))
        per.setdefault(float(rate), []).append(s)
    rows = []
    for rate in sorted(per):
        ss = per[rate]
        row = {"attack_rate": rate, "n_seeds": len(ss)}
        for k in ("precision", "recall", "n_flagged", "trust_adversarial", "trust_honest"):
            v = np.array([num(s[k]) for s in ss])
            row[k] = float(np.nanmean(v)) if np.any(~np.isnan(v)) else float("nan")
        rows.append(row)
    return rows


EXPERIMENT = Experiment("robustness", "Robustness to label-flip attacks", plan, analyse)
