"""Differential privacy in training: what a formal (ε, δ) costs in AUC and in pTopoFL's clusters.
On healthcare, pTopoFL and FedAvg without DP, with DP-FedAvg on the updates (clip :data:`CLIP`,
noise multipliers z), and pTopoFL with the Gaussian mechanism on its descriptors (ε per release);
ε as each run's server logged it (dp-accounting, RDP, δ = 1e-5). Clip constants are calibrated on a
federation no run uses (:data:`CALIBRATION_SEED`). See docs/experiments.md.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from topofl.experiments.analysis import against, final_table, interval_text
from topofl.experiments.base import Budget, Experiment, Manifest, last_round, server_logs
from topofl.experiments.figures import colour, pyplot, save
from topofl.job import Job

NAME = "privacy-dp"
METHODS = ("ptopofl", "fedavg")
#: DP-FedAvg's clip norm C (about the median clean change on the calibration federation)
CLIP = 0.25
DELTA = 1e-5
#: the public calibration federation (no run uses this seed)
CALIBRATION_SEED = 1000
BASELINE = "no-dp"


@dataclass(frozen=True)
class PrivacyDpBudget(Budget):
    """Rounds, the noise multipliers z of DP-FedAvg and the ε of each descriptor release (64 and 256
    promise next to nothing and test whether the clusters come back).
    """

    noise_multipliers: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
    descriptor_epsilons: tuple[float, ...] = (0.5, 1.0, 4.0, 16.0, 64.0, 256.0)


FULL = PrivacyDpBudget()
#: a CI smoke run: one noise multiplier, two descriptor ε, three rounds
SMOKE = PrivacyDpBudget(rounds=3, noise_multipliers=(1.0,), descriptor_epsilons=(1.0, 64.0))


@lru_cache(maxsize=1)
def descriptor_radius(seed: int = CALIBRATION_SEED) -> float:
    """B: the median norm of the clean descriptors (n_sub = 80, L = 20, no scaling: pTopoFL's
    defaults) of the clients of the calibration federation ``healthcare`` seed ``seed`` — data of
    no run, so B is a public constant, and the descriptor mechanism is DP for any B.
    """
    from topofl.data.scenarios import make_scenario
    from topofl.tda.descriptor import descriptor

    fed = make_scenario("healthcare", seed=seed)
    norms = [float(np.linalg.norm(descriptor(c.X_train, 80, 20,
                                             np.random.default_rng(np.random.SeedSequence([seed, k])), "none")))
             for k, c in enumerate(fed.clients)]
    return float(np.median(norms))


def settings(radius: float, budget: PrivacyDpBudget = FULL) -> list[tuple[str, str, dict[str, Any]]]:
    """``(method, label, hyperparameters)`` of every setting; the label names the setting."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for m in METHODS:
        out.append((m, BASELINE, {}))
        out.extend((m, f"updates z={z:g}", {"dp_noise_multiplier": z, "dp_clip": CLIP, "dp_delta": DELTA})
                   for z in budget.noise_multipliers)
    out.extend(("ptopofl", f"descriptor eps={e:g}",
                {"descriptor_dp_radius": radius, "descriptor_dp_epsilon": e, "dp_delta": DELTA})
               for e in budget.descriptor_epsilons)
    return out


def plan(seeds: Sequence[int], budget: PrivacyDpBudget = FULL) -> list[Job]:
    """Every setting of :func:`settings` per seed."""
    radius = descriptor_radius()
    return [Job(experiment=NAME, data="healthcare", method=m, seed=s, rounds=budget.rounds, label=label,
                hyperparameters=hp,
                setting={"algorithm": m}) for s in seeds for m, label, hp in settings(radius, budget)]


def _order(key: tuple[str, str], budget: PrivacyDpBudget = FULL) -> tuple[int, int]:
    """Report order of ``(algorithm, setting label)``: the methods in :data:`METHODS` order, then
    no DP, the update noise from small to large z, the descriptor ε from small to large.
    """
    alg, label = key
    labels = [BASELINE, *(f"updates z={z:g}" for z in budget.noise_multipliers),
              *(f"descriptor eps={e:g}" for e in budget.descriptor_epsilons)]
    return (METHODS.index(alg) if alg in METHODS else len(METHODS), labels.index(label) if label in labels
            else len(labels))


# ---- tables --------------------------------------------------------------------------------------
def final_logs(logs: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, int], dict[str, Any]]:
    """The last server-log entry of every run among ``logs``, by ``(algorithm, setting label, seed)``."""
    return last_round(logs, lambda r: (str(r["algorithm"]), str(r["method"]), int(r["seed"]))
                      if r.get("experiment") == NAME else None)


def _epsilon_row(alg: str, label: str, rs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    row: dict[str, Any] = {"algorithm": alg, "setting": label, "n_runs": len(rs)}
    for k in ("dp_epsilon", "dp_epsilon_descriptor", "dp_epsilon_total", "dp_delta", "dp_descriptor_releases"):
        vals = {r[k] for r in rs if k in r}
        row[k] = max(vals) if vals else ""
        if k.startswith("dp_epsilon"):
            row[f"{k}_n_distinct"] = len(vals)
    row["dp_clipped_last_round_mean"] = float(np.mean([len(r.get("dp_clipped", []))
                                                       for r in rs])) if "dp_clipped" in rs[0] else ""
    return row


def epsilon_table(logs: Mapping[tuple[str, str, int], Mapping[str, Any]],
                  budget: PrivacyDpBudget = FULL) -> list[dict[str, Any]]:
    """ε per setting from the runs' final server logs (the accountant's numbers; the same on every
    seed, which is checked: ``n_distinct`` counts the distinct values logged).
    """
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for (alg, label, _), r in sorted(logs.items()):
        groups.setdefault((alg, label), []).append(r)
    ordered = sorted(groups.items(), key=lambda kv: _order(kv[0], budget))
    return [_epsilon_row(alg, label, rs) for (alg, label), rs in ordered]


def cluster_stability(logs: Mapping[tuple[str, str, int], Mapping[str, Any]],
                      budget: PrivacyDpBudget = FULL) -> list[dict[str, Any]]:
    """Adjusted Rand index of pTopoFL's final clusters in every setting against its no-DP clusters
    on the same seed (``ari_vs_no_dp``) and against the hospitals' rule groups (``ari_vs_groups``).
    """
    from sklearn.metrics import adjusted_rand_score

    from topofl.data.scenarios import make_scenario

    rows = []
    for (alg, label, seed), r in sorted(logs.items(), key=lambda kv: (*_order(kv[0][:2], budget), kv[0][2])):
        if alg != "ptopofl" or "clusters" not in r:
            continue
        ids = sorted(r["clusters"], key=int)
        labels = [r["clusters"][k] for k in ids]
        groups = [make_scenario("healthcare", seed=seed).clients[int(k)].meta["group"] for k in ids]
        ref = logs.get(("ptopofl", BASELINE, seed))
        vs_clean = float(adjusted_rand_score([ref["clusters"][k] for k in ids],
                                             labels)) if ref and "clusters" in ref else float("nan")
        rows.append({"setting": label, "seed": seed, "ari_vs_no_dp": vs_clean,
                     "ari_vs_groups": float(adjusted_rand_score(groups, labels)),
                     "dp_epsilon_descriptor": r.get("dp_epsilon_descriptor", "")})
    return rows


def stability_summary(stab: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Mean and std over seeds of :func:`cluster_stability`'s indices, per setting."""
    out = []
    for label in dict.fromkeys(r["setting"] for r in stab):
        sub = [r for r in stab if r["setting"] == label]
        a, g = np.array([r["ari_vs_no_dp"] for r in sub]), np.array([r["ari_vs_groups"] for r in sub])
        out.append({"setting": label, "n_seeds": len(sub), "ari_vs_no_dp_mean": float(np.nanmean(a)),
                    "ari_vs_no_dp_std": float(np.nanstd(a)),
                    "ari_vs_groups_mean": float(g.mean()), "ari_vs_groups_std": float(g.std())})
    return out


def missing_epsilon(done: Sequence[Mapping[str, Any]],
                    logs: Mapping[tuple[str, str, int], Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The DP runs whose final server log holds no ε."""
    return [r for r in done if r["method"] != BASELINE and (r["algorithm"], r["method"], int(r["seed"])) in logs
            and not any(k.startswith("dp_epsilon") for k in logs[(r["algorithm"], r["method"], int(r["seed"]))])]


# ---- figures -------------------------------------------------------------------------------------
def _utility_panel(ax: Any, rows: Sequence[Mapping[str, Any]],
                   eps_of: Mapping[tuple[str, str], Mapping[str, Any]]) -> None:
    """Final AUC against the accountant's ε (updates: both methods; descriptors: pTopoFL); dotted: no DP."""
    series = (("ptopofl", "updates", "dp_epsilon", "o-"), ("fedavg", "updates", "dp_epsilon", "s-"),
              ("ptopofl", "descriptor", "dp_epsilon_descriptor", "^--"))
    for i, (alg, channel, key, marker) in enumerate(series):
        pts = sorted((float(eps_of[(alg, r["method"])][key]), r["auc_mean"], r["auc_std"]) for r in rows
                     if r["algorithm"] == alg and r["method"].startswith(channel) and (alg, r["method"]) in eps_of
                     and eps_of[(alg, r["method"])][key] != "")
        if pts:
            x, m, s = (np.array(v) for v in zip(*pts, strict=True))
            ax.errorbar(x, m, yerr=s, fmt=marker, color=colour(alg, i), capsize=3, label=f"{alg}, DP on {channel}")
    for i, alg in enumerate(METHODS):
        base = [r for r in rows if r["algorithm"] == alg and r["method"] == BASELINE]
        if base:
            ax.axhline(base[0]["auc_mean"], color=colour(alg, i), ls=":", lw=1, label=f"{alg}, no DP")
    ax.set_xscale("log")
    ax.set(xlabel="ε at δ = 1e-5 (RDP accountant; 15 rounds)", ylabel="final AUC (mean ± std over seeds)",
           title="Utility against privacy")
    ax.legend(fontsize=7)


def _clusters_panel(ax: Any, summ: Sequence[Mapping[str, Any]],
                    eps_of: Mapping[tuple[str, str], Mapping[str, Any]]) -> None:
    """Agreement of pTopoFL's clusters under descriptor DP with no DP and with the rule groups, against ε."""
    dpts = sorted(((float(eps_of[("ptopofl", r["setting"])]["dp_epsilon_descriptor"]), r) for r in summ
                   if r["setting"].startswith("descriptor") and ("ptopofl", r["setting"]) in eps_of),
                   key=lambda p: p[0])
    if dpts:
        x = np.array([p[0] for p in dpts])
        for key, marker, lab in (("ari_vs_no_dp", "o-", "vs pTopoFL without DP (same seed)"),
                                 ("ari_vs_groups", "s--", "vs the rule groups")):
            ax.errorbar(x, [p[1][f"{key}_mean"] for p in dpts], yerr=[p[1][f"{key}_std"] for p in dpts], fmt=marker,
                        capsize=3, label=lab)
        clean = [r for r in summ if r["setting"] == BASELINE]
        if clean:
            ax.axhline(clean[0]["ari_vs_groups_mean"], color="#444", ls=":", lw=1, label="no DP vs the rule groups")
        ax.set_xscale("log")
    ax.set(xlabel="ε of the descriptor release (δ = 1e-5)", ylabel="adjusted Rand index",
           title="pTopoFL's clusters under descriptor DP")
    ax.legend(fontsize=7)


def dp_figure(rows: Sequence[Mapping[str, Any]], eps: Sequence[Mapping[str, Any]], summ: Sequence[Mapping[str, Any]],
              out: Path) -> dict[str, str]:
    """AUC against ε and ARI against the descriptor's ε."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    eps_of = {(e["algorithm"], e["setting"]): e for e in eps}
    _utility_panel(axes[0], rows, eps_of)
    _clusters_panel(axes[1], summ, eps_of)
    return save(fig, out, "privacy_dp")


# ---- analysis ------------------------------------------------------------------------------------
TITLES = {
    "paired": "Each DP setting minus no DP, final AUC, paired over seeds (mean, 95 % t-interval, seeds higher/lower; "
              "p: paired t-test, "
              "Holm-adjusted over the settings of one method)",
    "epsilon": "ε per setting from the runs' final server logs (accountant: RDP; dp_epsilon: updates, add/remove one "
               "client; "
               "dp_epsilon_descriptor: descriptor releases)",
    "cluster_stability": "pTopoFL's final clusters: adjusted Rand index against no DP on the same seed and against the "
                         "rule groups "
                         "(mean ± std over seeds)",
}
CAPTION = ("Left: final AUC against the accountant's ε (dotted: no DP). Right: agreement of pTopoFL's final clusters "
           "under descriptor "
           "DP with its clusters without DP and with the rule groups.")


def paired_notes(paired: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each DP setting's AUC minus no DP, with its interval and seeds higher and lower."""
    return [f"{r['algorithm']}, {r['method']}: AUC {r['diff_mean']:+.3f} vs no DP "
            f"{interval_text(r['ci_low'], r['ci_high'], prefix='95 % CI ')}, "
            f"higher on {r['wins']}, lower on {r['losses']} of {r['n_seeds']} seeds." for r in paired]


def analyse(out: Path, done: list[dict[str, Any]], budget: PrivacyDpBudget = FULL) -> Manifest:
    """AUC per setting, paired differences against no DP, ε per setting, cluster stability, figure."""
    radius = descriptor_radius()
    man = Manifest(NAME, "Differential privacy: ε against AUC and clusters",
                   f"healthcare, {budget.rounds} rounds, 8 clients, full participation. DP-FedAvg on the updates (clip "
                   f"C = {CLIP:g}, "
                   "noise multiplier z) for pTopoFL and FedAvg, and the Gaussian mechanism on pTopoFL's descriptors "
                   "(radius B = "
                   f"{radius:.1f}, the median clean descriptor norm of the public calibration federation, seed "
                   f"{CALIBRATION_SEED}). "
                   "ε from dp-accounting (RDP, δ = 1e-5) as logged by each run's server.")
    rows = final_table(done, ("algorithm", "method"), metrics=("auc", "accuracy"))
    man.table(out, "summary", "Final-round AUC and accuracy per setting (mean ± std over seeds)", rows)
    paired = against(done, ("algorithm",), BASELINE, "auc")
    man.table(out, "paired", TITLES["paired"], paired)
    logs = final_logs(server_logs(out))
    eps = epsilon_table(logs, budget)
    man.table(out, "epsilon", TITLES["epsilon"], eps)
    summ = stability_summary(cluster_stability(logs, budget))
    if summ:
        man.table(out, "cluster_stability", TITLES["cluster_stability"], summ)
    if rows and eps:
        man.figure(dp_figure(rows, eps, summ, out), CAPTION)
    man.notes.append(f"Descriptor radius B = {radius:.2f} (public: calibration seed {CALIBRATION_SEED}); clip C = "
                     f"{CLIP:g}.")
    missing = missing_epsilon(done, logs)
    if missing:
        man.notes.append(f"{len(missing)} DP run(s) have no ε in their server log.")
    man.notes += paired_notes(paired)
    return man


EXPERIMENT = Experiment(NAME, "Differential privacy: ε against AUC and clusters", plan, analyse,
                        {"full": FULL, "smoke": SMOKE},
                        default_seeds=tuple(range(5)))
