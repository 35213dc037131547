"""Robustness (pTopoFL paper §4.4, Fig. 4): label-flip attacks on 0–4 of the 8 healthcare clients;
final AUC against the attack rate for every method, AUC curves, and how well pTopoFL's trust
weights single out the poisoned clients. pTopoFL runs with τ = 1.8 under both trust gates
(``all``, its default, and ``flagged``: :data:`FLAGGED`). See docs/experiments.md.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from topofl.experiments.analysis import against, detection_scores, final_table, group_curves, num, t_interval
from topofl.experiments.base import Budget, Experiment, Manifest, last_round, server_logs
from topofl.experiments.figures import band_between, colours, pyplot, save
from topofl.experiments.store import load_curves
from topofl.job import Job

NAME = "robustness"
N_CLIENTS = 8
RATES = tuple(m / N_CLIENTS for m in range(N_CLIENTS // 2 + 1))
FLIP_RATE = 1.0
TAU = 1.8
#: label of pTopoFL run with trust_gate="flagged" (only clients with z > τ are down-weighted)
FLAGGED = "pTopoFL (flagged gate)"


@dataclass(frozen=True)
class RobustnessBudget(Budget):
    """Rounds, methods (default: every server-based one) and the attack rates."""

    rates: tuple[float, ...] = RATES


FULL = RobustnessBudget()
#: a CI smoke run: two methods (and the flagged gate), no attack and 2 of 8 clients, three rounds
SMOKE = RobustnessBudget(rounds=3, methods=("ptopofl", "fedavg"), rates=(0.0, 0.25))


def adversaries(rate: float, seed: int, n_clients: int = N_CLIENTS) -> tuple[int, ...]:
    """A seeded choice of round(rate · K) clients (nested: a higher rate keeps the lower rate's
    adversaries).
    """
    order = np.random.default_rng(np.random.SeedSequence([int(seed), 0xBAD])).permutation(n_clients)
    return tuple(sorted(int(k) for k in order[: int(round(rate * n_clients))]))


def plan(seeds: Sequence[int], budget: RobustnessBudget = FULL) -> list[Job]:
    """Every method on healthcare at every attack rate, per seed, and pTopoFL with
    ``trust_gate="flagged"`` (label :data:`FLAGGED`).
    """
    jobs = []
    for rate in budget.rates:
        for s in seeds:
            run: dict[str, Any] = {"experiment": NAME, "data": "healthcare", "seed": s, "rounds": budget.rounds,
                   "setting": {"attack_rate": rate},
                   "data_params": {"adversarial": adversaries(rate, s), "flip_rate": FLIP_RATE}}
            jobs += [Job(method=m, hyperparameters={"tau": TAU} if m == "ptopofl" else {}, **run)
                     for m in budget.server_methods()]
            jobs.append(Job(method="ptopofl", label=FLAGGED, hyperparameters={"tau": TAU, "trust_gate": "flagged"},
                            **run))
    return jobs


# ---- tables --------------------------------------------------------------------------------------
def gate_rows(done: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """:data:`FLAGGED` minus pTopoFL's default gate, final AUC paired over seeds per attack rate."""
    return [r for r in against(done, ("attack_rate",), "ptopofl", "auc") if r["method"] == FLAGGED]


def detection(logs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per attack rate: precision/recall of pTopoFL's final-round flags (server-log entries
    ``logs``) against the poisoned clients, and mean trust weights, mean over seeds.
    """
    per: dict[float, list[dict[str, float]]] = {}
    last = last_round(logs, lambda r: (r["attack_rate"], r["seed"]) if r["method"] == "ptopofl" else None)
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


# ---- figures -------------------------------------------------------------------------------------
def _auc_limits(means: Sequence[float]) -> tuple[float, float]:
    """The AUC axis: the mean curves with a margin, within [0, 1] (a few seeds' t-intervals are wide)."""
    v = np.asarray(means, dtype=float)
    v = v[np.isfinite(v)]
    if not v.size:
        return 0.0, 1.0
    pad = max(0.02, 0.1 * float(v.max() - v.min()))
    return max(0.0, float(v.min()) - pad), min(1.0, float(v.max()) + pad)


def rate_figure(done: Sequence[Mapping[str, Any]], methods: Sequence[str], out: Path) -> dict[str, str]:
    """Final AUC against the attack rate, mean and 95 % Student-t interval over seeds (``done``: done-records)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 4.2))
    means: list[float] = []
    for m, c in zip(methods, colours(methods), strict=True):
        per: dict[float, list[float]] = {}
        for d in done:
            if d["method"] == m:
                per.setdefault(float(d["attack_rate"]), []).append(num(d["final"]["auc"]))
        if per:
            x = np.array(sorted(per))
            stats = np.array([t_interval(per[r]) for r in x])
            band_between(ax, 100 * x, stats[:, 0], stats[:, 1], stats[:, 2], m, c, shade=m == "ptopofl")
            ax.plot(100 * x, stats[:, 0], "o", color=c, ms=3)
            means.extend(stats[:, 0])
    ax.set(xlabel="adversarial clients (%)", ylabel="final mean client AUC", ylim=_auc_limits(means),
           title="Final AUC vs label-flip attack rate (band: pTopoFL's 95 % CI)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)  # off the curves
    return save(fig, out, "auc_vs_rate")


def curves_figure(curve_rows: Sequence[Mapping[str, str]], methods: Sequence[str], rates: Sequence[float],
                  out: Path) -> dict[str, str]:
    """AUC over rounds at three attack rates (none, the middle one, the largest), 95 % CI over seeds."""
    curves = group_curves(curve_rows, ("attack_rate", "method"))
    plt = pyplot()
    shown = list(dict.fromkeys((rates[0], rates[len(rates) // 2], rates[-1])))
    fig, axes = plt.subplots(1, len(shown), figsize=(4.4 * len(shown) + 2.0, 4), sharey=True, squeeze=False)
    means: list[float] = []
    for ax, rate in zip(axes[0], shown, strict=True):
        for m, col in zip(methods, colours(methods), strict=True):
            c = curves.get((repr(rate), m))  # CSV holds the rate as written by repr()
            if c is not None:
                band_between(ax, c["round"], c["mean"], c["low"], c["high"], m, col, shade=m == "ptopofl")
                means.extend(c["mean"])
        ax.set(title=f"{rate * 100:g} % adversarial", xlabel="round")
    axes[0][0].set_ylim(_auc_limits(means))
    axes[0][0].set_ylabel("mean client AUC")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)  # off the curves
    return save(fig, out, "auc_curves")


def detection_figure(det: Sequence[Mapping[str, Any]], out: Path) -> dict[str, str]:
    """Precision and recall of pTopoFL's flags, and mean trust of poisoned and honest clients."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    pct = [100 * d["attack_rate"] for d in det]
    ax.plot(pct, [d["precision"] for d in det], "o-", label="precision")
    ax.plot(pct, [d["recall"] for d in det], "s-", label="recall")
    ax.plot(pct, [d["trust_adversarial"] for d in det], "^--", label="mean trust, adversarial")
    ax.plot(pct, [d["trust_honest"] for d in det], "v--", label="mean trust, honest")
    ax.set(xlabel="adversarial clients (%)", ylabel="value", ylim=(-0.05, 1.05),
           title="Does pTopoFL single out poisoned clients?")
    ax.legend(fontsize=8)
    return save(fig, out, "detection")


# ---- analysis ------------------------------------------------------------------------------------
DESCRIPTION = ("Healthcare, 0–4 of the 8 hospitals (0–50 %) with all training labels flipped (paper §4.4, Fig. 4); "
               "pTopoFL with "
               f"τ = 1.8, trust_gate='all' (default: τ only sets the flags) and, as {FLAGGED!r}, trust_gate='flagged' "
               "(τ sets the "
               "weights).")
GATE_TITLE = (f"{FLAGGED} minus pTopoFL (trust_gate='all'): final AUC, paired over seeds, 95 % Student-t interval (p: "
              "paired "
              "t-test, Holm-adjusted over the methods at one attack rate)")
CAPTIONS = {
    "auc_vs_rate": "Final AUC against the share of label-flipping clients, mean over seeds; the band is pTopoFL's "
                   "95 % Student-t interval over seeds; its two trust gates in distinct colours (paper Fig. 4A).",
    "auc_curves": "AUC over rounds with no, the middle and the largest share of adversarial clients (the paper shows "
                  "0/30/50 %), mean over seeds; the band is pTopoFL's 95 % Student-t interval over seeds "
                  "(paper Fig. 4B).",
    "detection": "Precision/recall of pTopoFL's flags and mean trust weights of poisoned vs honest clients.",
}
BLIND_NOTE = ("pTopoFL's descriptor is computed from a client's features only. A label flip leaves the feature point "
              "cloud, and so its "
              "persistence diagram, unchanged, so the anomaly detector cannot see this attack: flags at or near chance "
              "level are the "
              "expected, honest outcome. Even a descriptor of the joint (x, y) cloud would not help against a full "
              "flip, which is an "
              "isometry (y ↦ 1 − y) of that cloud and leaves its persistent homology identical.")


def analyse(out: Path, done: list[dict[str, Any]], budget: RobustnessBudget = FULL) -> Manifest:
    """AUC by attack rate (table, figures) and pTopoFL's detection of the poisoned clients."""
    man = Manifest(NAME, "Robustness to label-flip attacks", DESCRIPTION)
    rows = final_table(done, ("attack_rate", "method"))
    man.table(out, "summary", "Final AUC by attack rate and method (mean ± std over seeds)", rows)
    man.table(out, "gate", GATE_TITLE, gate_rows(done))
    methods = [*budget.server_methods(), FLAGGED]
    man.figure(rate_figure(done, methods, out), CAPTIONS["auc_vs_rate"])
    man.figure(curves_figure(load_curves(out), methods, budget.rates, out), CAPTIONS["auc_curves"])
    det = detection(server_logs(out))
    man.table(out, "detection",
              "pTopoFL's anomaly flags (z > τ) against the truly poisoned clients, final round, mean over seeds", det)
    man.figure(detection_figure(det, out), CAPTIONS["detection"])
    man.notes.append(BLIND_NOTE)
    return man


EXPERIMENT = Experiment(NAME, "Robustness to label-flip attacks", plan, analyse,
                        {"full": FULL, "smoke": SMOKE})
