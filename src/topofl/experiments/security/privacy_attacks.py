"""Privacy, empirically: attacks on what healthcare clients transmit, next to ρ of Eqs. 10–11.
An honest-but-curious server attacks the model channel (gradient inversion: closed form for one
row, iDLG for a batch), the descriptor channel (nearest descriptor over a public pool) and the
final models (loss-threshold membership inference). Each run's attacks are computed by its own job
(the probe of :mod:`~topofl.experiments.security.privacy_probe`); the analysis reads done-records.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from topofl.experiments.analysis import interval_text, t_interval
from topofl.experiments.base import Budget, Experiment, Manifest
from topofl.experiments.figures import colour, dot_plot, pyplot, save
from topofl.experiments.results import write_csv
from topofl.experiments.security.privacy_probe import CHANNELS, FULL, NAME, RECOVERED, SCENARIO, ProbeBudget
from topofl.job import Job
from topofl.tda.descriptor import DESCRIPTOR_DIM

METHODS = ("fedavg", "ptopofl", "ditto", "local")
LABELS = {"fedavg": "FedAvg (global model)", "ptopofl": "pTopoFL (personalised)", "ditto": "Ditto (personalised)",
          "local": "Local only"}


@dataclass(frozen=True)
class PrivacyAttacksBudget(Budget):
    """Rounds, the methods attacked (FedAvg among them: its run carries the inversion attacks), the attacks' spend."""

    methods: tuple[str, ...] | None = METHODS
    probe: ProbeBudget = field(default_factory=ProbeBudget)


FULL_BUDGET = PrivacyAttacksBudget()
#: a CI smoke run: FedAvg and pTopoFL, three rounds, two batch sizes, one short restart, a small pool
SMOKE = PrivacyAttacksBudget(rounds=3, methods=("fedavg", "ptopofl"),
                             probe=ProbeBudget(batch_sizes=(1, 4), restarts=1, max_iter=100, pool_seeds=(1000, 1001)))


def plan(seeds: Sequence[int], budget: PrivacyAttacksBudget = FULL_BUDGET) -> list[Job]:
    """One healthcare run per method and seed (default hyper-parameters), each probed by its own job."""
    methods = budget.server_methods()
    if "fedavg" not in methods:
        raise ValueError(f"{NAME} attacks FedAvg's broadcasts: its methods must include 'fedavg'; got "
                         f"{', '.join(methods)}")
    return [Job(experiment=NAME, data=SCENARIO, method=m, seed=s, rounds=budget.rounds,
                setting={"probe": budget.probe.spec()})
            for s in seeds for m in methods]


# ---- tables --------------------------------------------------------------------------------------
def probe_rows(done: Sequence[Mapping[str, Any]], part: str) -> list[dict[str, Any]]:
    """The rows of one part (``membership``, ``inversion``, ``descriptor``, ``statistics``) of every run's probe."""
    return [dict(r) for d in done for r in d.get("probe", {}).get(part, [])]


def _seed_mean(sub: Sequence[Mapping[str, Any]], metric: str, seed: int) -> float:
    vals = [float(r[metric]) for r in sub if r["seed"] == seed]
    return float(np.nanmean(vals)) if any(np.isfinite(v) for v in vals) else float("nan")


def summary(rows: Sequence[Mapping[str, Any]], by: Sequence[str], metrics: Sequence[str]) -> list[dict[str, Any]]:
    """Mean and 95 % t-interval over seeds of each metric, per ``by`` group (per-seed means over clients first)."""
    keys: dict[tuple, None] = {}
    for r in rows:
        keys.setdefault(tuple(r[b] for b in by), None)
    out = []
    for key in keys:
        sub = [r for r in rows if tuple(r[b] for b in by) == key]
        seeds = sorted({r["seed"] for r in sub})
        row: dict[str, Any] = dict(zip(by, key, strict=True))
        row["n_seeds"] = len(seeds)
        for m in metrics:
            mean, lo, hi = t_interval([_seed_mean(sub, m, s) for s in seeds])
            row.update({f"{m}_mean": mean, f"{m}_ci_low": lo, f"{m}_ci_high": hi})
        out.append(row)
    return out


def inversion_summary(inv: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Gradient inversion per batch, channel and observed uploads, with ρ for one and for all uploads."""
    rows = summary(inv, ("batch", "channel", "observed_rounds", "attack"),
                   ("relative_error", "recovered", "mean_cosine", "label_accuracy",
                                                                              "label_count_error", "label_count_exact"))
    for r in rows:
        first = next(x for x in inv if x["batch"] == r["batch"] and x["observed_rounds"] == r["observed_rounds"])
        r["rho_one_upload"], r["rho_all_uploads"] = first["rho_one_upload"], first["rho_all_uploads"]
    return rows


def membership_summary(mem: Sequence[Mapping[str, Any]], done: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Membership attack per method (labelled), with each run's recorded test AUC beside it."""
    recorded = {(int(d["seed"]), str(d["method"])): float(d["final"]["auc"]) for d in done}
    rows = [{**r, "test_auc": recorded.get((r["seed"], r["method"]), float("nan")), "method": LABELS[r["method"]]}
            for r in mem]
    return summary(rows, ("method",),
                   ("auc", "advantage", "null_advantage", "yeom_advantage", "train_loss", "test_loss", "test_auc"))


def _get(rows: Sequence[Mapping[str, Any]], **where: Any) -> Mapping[str, Any]:
    return next(r for r in rows if all(r[k] == v for k, v in where.items()))


def _recovered(inv: Sequence[Mapping[str, Any]], channel: str, T: int) -> str:
    """Batch sizes recovered (relative error < :data:`RECOVERED`) in some seeds, with the share of seeds:
    "1, 2 (all), 4 (80 %)".
    """
    hits = [r for r in inv if r["channel"] == channel and r["observed_rounds"] == T and r["batch"] != FULL
            and r["recovered_mean"] > 0]
    return ", ".join(f"{r['batch']} ({'all' if r['recovered_mean'] == 1 else format(r['recovered_mean'], '.0%')})"
                     for r in hits) or "none"


def _identifiable_up_to(d: int, T: int) -> int:
    """Largest B with ρ_T = min(1, T·(d + 1)/(B·d)) = 1: as many numbers observed as unknown."""
    return int(T * (d + 1) // d)


@dataclass(frozen=True)
class Summaries:
    """The four summaries an analysis tabulates, with the data's dimension and the rounds observed."""

    inv: list[dict[str, Any]]
    desc: list[dict[str, Any]]
    stat: list[dict[str, Any]]
    mem: list[dict[str, Any]]
    d: int
    rounds: int


def channel_rows(s: Summaries) -> list[dict[str, Any]]:
    """Per channel: the paper's ρ next to what the attacks recover."""
    T, d = s.rounds, s.d
    one = _get(s.inv, batch=1, channel="gradient", observed_rounds=1)
    full1 = _get(s.inv, batch=FULL, channel="gradient", observed_rounds=1)
    fullT = _get(s.inv, batch=FULL, channel="gradient", observed_rounds=T)
    nn, rnd = _get(s.desc, attack="nearest descriptor"), _get(s.desc, attack="random pool cloud (mean)")
    floor = _get(s.desc, attack="same distribution (own test rows)")
    pc1, n = _get(s.stat, statistic="pc1_fraction"), _get(s.stat, statistic="n")
    return [
        {"channel": "model: 1 example, 1 upload", "rho": one["rho_one_upload"],
         "measured": f"row recovered exactly (relative error {one['relative_error_mean']:.1e}); label by the sign of "
                     "∇_b"},
        {"channel": "model: hospital's training set, 1 upload", "rho": full1["rho_one_upload"],
         "measured": f"rows not recovered (error {full1['relative_error_mean']:.2f}); label count exact at round 1 "
                     f"(error {full1['label_count_error_mean']:.1e})"},
        {"channel": f"model: hospital's training set, {T} uploads", "rho": fullT["rho_all_uploads"],
         "measured": f"rows not recovered (error {fullT['relative_error_mean']:.2f}, cosine "
                     f"{fullT['mean_cosine_mean']:.2f})"},
        {"channel": f"model: batch of B rows, {T} uploads", "rho": 1.0,
         "measured": f"ρ_T = 1 for B ≤ {_identifiable_up_to(d, T)}; rows recovered (error < {RECOVERED}; share of "
                     "seeds) for B = "
                     f"{_recovered(s.inv, 'gradient', T)} from gradients; {_recovered(s.inv, 'update (unrolled)', T)} "
                     "from FedAvg's "
                     f"updates unrolled; {_recovered(s.inv, 'update (naive)', T)} read naively"},
        {"channel": f"descriptor ({DESCRIPTOR_DIM} numbers, once)", "rho": float(n["rho_descriptor_mean"]),
         "measured": f"cloud not recovered (Chamfer/radius {nn['relative_chamfer_mean']:.2f}; random pool cloud "
                     f"{rnd['relative_chamfer_mean']:.2f}; fresh rows of the same distribution "
                     f"{floor['relative_chamfer_mean']:.2f}); "
                     f"sub-population right {nn['group_correct_mean']:.0%}; PC1 share of variance to "
                     f"{pc1['error_from_phi_mean']:.0%} "
                     f"(without φ {pc1['error_pool_mean_mean']:.0%}); n to {n['error_from_phi_mean']:.0%} (without φ "
                     f"{n['error_pool_mean_mean']:.0%})"},
        {"channel": "final model: membership", "rho": float("nan"),
         "measured": "; ".join(f"{r['method']}: AUC {r['auc_mean']:.3f}" for r in s.mem)},
    ]


# ---- figures -------------------------------------------------------------------------------------
def inversion_figure(inv: Sequence[Mapping[str, Any]], batch_sizes: Sequence[int], rounds: int,
                     out: Path) -> dict[str, str]:
    """Relative error of every channel's inversion against the batch size, for one and for all uploads."""
    observed = (1, rounds)
    plt = pyplot()
    fig, axes = plt.subplots(1, len(observed), figsize=(11, 3.8), sharey=True)
    xs = list(batch_sizes)
    for ax, T in zip(axes, observed, strict=True):
        for i, ch in enumerate(CHANNELS):
            sub = [_get(inv, batch=b, channel=ch, observed_rounds=T) for b in xs]
            m, lo, hi = (np.array([r[f"relative_error_{k}"] for r in sub]) for k in ("mean", "ci_low", "ci_high"))
            err = np.vstack([np.where(np.isfinite(lo), m - lo, 0), np.where(np.isfinite(hi), hi - m, 0)])
            ax.errorbar(np.array(xs) * (1 + 0.06 * (i - 1)), m, yerr=err, marker="o", capsize=3, label=ch,
                        color=colour(ch, i))
        ax.axhline(1.0, color="#888", ls=":", lw=1)
        ax.set_xscale("log", base=2)
        ax.set(title=f"{T} upload{'s' if T > 1 else ''} observed", xlabel="batch size B (rows the client holds)",
               ylabel="relative L2 error")
        ax.legend(fontsize=8)
    return save(fig, out, "inversion")


def _statistics_panel(ax: Any, stat: Sequence[Mapping[str, Any]]) -> None:
    x = np.arange(len(stat))
    for j, (col, lab) in enumerate((("error_from_phi", "ridge on φ"), ("error_nearest_cloud", "nearest cloud"),
                                    ("error_pool_mean", "pool mean (no φ)"))):
        ax.bar(x + (j - 1) * 0.27, [r[f"{col}_mean"] for r in stat], 0.27, label=lab)
    ax.set_xticks(x,
                  [{"n": "n", "rms_radius": "scale", "pc1_fraction": "PC1 share"}.get(r["statistic"], r["statistic"])
                   for r in stat])
    ax.set_ylabel("relative error")
    ax.set_title("Statistics recovered from φ", fontsize=10)
    ax.legend(fontsize=8)


def descriptor_membership_figure(desc: Sequence[Mapping[str, Any]], stat: Sequence[Mapping[str, Any]],
                                 mem: Sequence[Mapping[str, Any]],
                                 out: Path) -> dict[str, str]:
    """Descriptor inversion, statistics recovered from φ, and membership-attack AUC per method."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    dot_plot(axes[0], [r["attack"] for r in desc], [r["relative_chamfer_mean"] for r in desc],
             [r["relative_chamfer_ci_low"] for r in desc],
             [r["relative_chamfer_ci_high"] for r in desc], [colour(r["attack"], i) for i, r in enumerate(desc)],
             "Chamfer distance / RMS radius")
    axes[0].set_title("Descriptor inversion", fontsize=10)
    _statistics_panel(axes[1], stat)
    dot_plot(axes[2], [r["method"] for r in mem], [r["auc_mean"] for r in mem], [r["auc_ci_low"] for r in mem],
             [r["auc_ci_high"] for r in mem], [colour(r["method"], i) for i, r in enumerate(mem)],
             "membership attack AUC")
    axes[2].axvline(0.5, color="#444", lw=0.9, ls="--")
    axes[2].set_title("Membership inference (loss threshold)", fontsize=10)
    return save(fig, out, "descriptor_membership")


# ---- notes ---------------------------------------------------------------------------------------
def model_note(inv: Sequence[Mapping[str, Any]], d: int, T: int) -> str:
    """What the model channel gives away: one example, a batch over one and over all uploads, the label count."""
    one = _get(inv, batch=1, channel="gradient", observed_rounds=1)
    naive1 = _get(inv, batch=1, channel="update (naive)", observed_rounds=1)
    unr1 = _get(inv, batch=1, channel="update (unrolled)", observed_rounds=1)
    t1 = [r["relative_error_mean"] for r in inv if r["observed_rounds"] == 1 and r["batch"] != 1]
    full = _get(inv, batch=FULL, channel="gradient", observed_rounds=1)
    fullT = _get(inv, batch=FULL, channel="gradient", observed_rounds=T)
    hidden = [r for r in inv if r["channel"] == "gradient" and r["observed_rounds"] == T and r["batch"] != FULL
              and r["batch"] <= _identifiable_up_to(d, T) and r["recovered_mean"] < 1]
    return (
        "Model channel. One example is recovered exactly from one logistic-regression gradient (x = ∇_w/∇_b: relative "
        "error "
        f"{one['relative_error_mean']:.1e}, label right {one['label_accuracy_mean']:.0%}), where ρ_grad = 1. FedAvg's "
        "default update "
        f"(2 local steps) gives it away as well: error {naive1['relative_error_mean']:.1e} read as one gradient, "
        f"{unr1['relative_error_mean']:.1e} when the attacker unrolls the two steps. From one upload a batch is not "
        "identifiable "
        f"(d + 1 = {d + 1} numbers for B·d unknowns): errors {min(t1):.2f}–{max(t1):.2f} for B ≥ 2, as far as guessing "
        "zeros. But "
        f"FedAvg shows the server the same data at {T} different models: with all {T} uploads, rows are recovered "
        "(error < "
        f"{RECOVERED}; share of seeds in brackets) for B = {_recovered(inv, 'gradient', T)} from gradients, "
        f"{_recovered(inv, 'update (unrolled)', T)} from FedAvg's updates unrolled and "
        f"{_recovered(inv, 'update (naive)', T)} read "
        f"naively. ρ_T = min(1, T·p/(B·d)) = 1 up to B = {_identifiable_up_to(d, T)}"
        + (f", yet from B = {hidden[0]['batch']} on some seeds fail (mean error "
           f"{hidden[0]['relative_error_mean']:.2f}; B = "
           f"{hidden[-1]['batch']}: {hidden[-1]['relative_error_mean']:.2f}): near FedAvg's small early models σ is "
           "almost linear, so "
           "the uploads mostly carry the first two moments of the batch and matching is ill-conditioned (a server that "
           "chose the "
           "broadcast models could do better)" if hidden else "")
        + ". A hospital's "
        f"whole training set is not recovered row by row (error {full['relative_error_mean']:.2f} from one upload, "
        f"{fullT['relative_error_mean']:.2f} from {T}), but its label count is exact from the first upload (FedAvg "
        "starts at w = 0: "
        f"error {full['label_count_error_mean']:.1e}): the hospital's prevalence leaks.")


def descriptor_note(desc: Sequence[Mapping[str, Any]], stat: Sequence[Mapping[str, Any]], d: int) -> str:
    """What the descriptor channel gives away: distribution-level facts, not the cloud."""
    nn, rs = _get(desc, attack="nearest descriptor"), _get(desc, attack="nearest, rescaled to φ's H0 amplitude")
    rnd, orc = _get(desc, attack="random pool cloud (mean)"), _get(desc, attack="best pool cloud (oracle)")
    floor = _get(desc, attack="same distribution (own test rows)")
    st = {r["statistic"]: r for r in stat}
    return (
        "Descriptor channel. φ is blind to location and orientation and is computed on an 80-point subsample, so the "
        "cloud is not "
        f"recovered: the nearest-descriptor pool cloud is at Chamfer/radius {nn['relative_chamfer_mean']:.3f} "
        f"({rs['relative_chamfer_mean']:.3f} rescaled), a random pool cloud at {rnd['relative_chamfer_mean']:.3f}, the "
        "best pool cloud "
        f"(oracle) at {orc['relative_chamfer_mean']:.3f}, and fresh rows of the same distribution at "
        f"{floor['relative_chamfer_mean']:.3f} "
        f"(in d = {d} nearest-neighbour distances are of the order of the radius); its centroid is off by "
        f"{nn['centroid_error_mean']:.2f} radii ({rnd['centroid_error_mean']:.2f} for a random cloud), its covariance "
        "by "
        f"{nn['covariance_error_mean']:.2f} (relative; random {rnd['covariance_error_mean']:.2f}, oracle "
        f"{orc['covariance_error_mean']:.2f}). What φ gives away is distribution-level: the hospital's sub-population "
        "(nearest "
        f"descriptor right {nn['group_correct_mean']:.0%} of the time, {rnd['group_correct_mean']:.0%} by chance), the "
        "shape of its "
        f"spread (PC1 share of variance to {st['pc1_fraction']['error_from_phi_mean']:.0%} relative error, "
        f"{st['pc1_fraction']['error_pool_mean_mean']:.0%} without φ), its size n "
        f"({st['n']['error_from_phi_mean']:.0%}, "
        f"{st['n']['error_pool_mean_mean']:.0%} without φ; φ's counts saturate at the 80-point subsample) and little "
        "of its scale "
        f"({st['rms_radius']['error_from_phi_mean']:.1%}, {st['rms_radius']['error_pool_mean_mean']:.1%} without φ: "
        "healthcare "
        f"hospitals differ little in scale). ρ_topo = {st['n']['rho_descriptor_mean']:.4f} (Eq. 11) counts numbers and "
        "does not say "
        "which of these leak.")


def _chance(r: Mapping[str, Any]) -> str:
    lo, hi = r["auc_ci_low"], r["auc_ci_high"]
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "one seed: no interval"
    return "above chance" if lo > 0.5 else "below chance" if hi < 0.5 else "not distinguishable from chance"


def membership_note(mem: Sequence[Mapping[str, Any]]) -> str:
    """The membership attack per method against chance, and the generalisation gap it follows."""
    parts = "; ".join(f"{r['method']} {r['auc_mean']:.3f} {interval_text(r['auc_ci_low'], r['auc_ci_high'], '.3f')}, "
                      f"{_chance(r)}" for r in mem)
    advantages = ", ".join(f"{r['advantage_mean']:.3f}" for r in mem)
    gaps = ", ".join(f"{r['test_loss_mean'] - r['train_loss_mean']:.3f}" for r in mem)
    yeom = ", ".join(f"{r['yeom_advantage_mean']:.3f}" for r in mem)
    return (f"Membership. Attack AUC (0.5 = no signal): {parts}. The best-threshold advantages ({advantages}) are to "
            "be read against "
            f"their expectation without any signal at these sample sizes ({mem[0]['null_advantage_mean']:.3f}); at "
            "Yeom et al.'s own "
            f"threshold (the mean training loss) they are {yeom}. Leakage follows the generalisation gap (test minus "
            "training loss: "
            f"{gaps}), as Yeom et al. predict.")


def reading_note(inv: Sequence[Mapping[str, Any]], d: int) -> str:
    """How to read ρ of Eqs. 10–11 beside what the attacks recover."""
    full = _get(inv, batch=FULL, channel="gradient", observed_rounds=1)
    return ("Reading ρ. ρ_grad = min(1, p/(n·d)) (Eq. 10) is right at its extreme — a one-example gradient (ρ = 1) is "
            "fully inverted — "
            f"but one upload of a hospital (ρ ≈ {full['rho_one_upload']:.3f}) still gives away its label count, and "
            "the model channel's ρ "
            "grows with every round the server observes (T uploads: min(1, T·p/(n·d))); ρ_topo (Eq. 11) is smaller, "
            "but the "
            "descriptor leaks distribution-level facts (sub-population, spread, size) rather than rows, which a count "
            "of numbers does "
            "not capture. pTopoFL uploads its model as well as φ, so its upload carries the model channel's leaks too. "
            "Theorem 3.7 "
            f"compares the channels when m ≪ p; here m = {DESCRIPTOR_DIM} > p = {d + 1}.")


def provenance_note(done: Sequence[Mapping[str, Any]]) -> str:
    """Which models were attacked, and how far FedAvg's replay was from its record."""
    drift = max((float(d["probe"].get("replay_auc_difference", 0.0)) for d in done), default=0.0)
    return ("The attacked models are those of the recorded runs: each run's job attacked its own final models. "
            "FedAvg's broadcast "
            "models, which a run does not keep, were replayed in process; the replay's final AUC matched the record "
            f"to {drift:.1e}. "
            "Adversarial hospitals (flipped training labels) are left out of the membership attack.")


# ---- analysis ------------------------------------------------------------------------------------
TITLES = {
    "inversion": "Gradient inversion of a logistic-regression client by batch size: relative L2 error after matching "
                 "rows (0 = exact, "
                 f"1 = guessing zeros), share of seeds with error < {RECOVERED} (recovered), cosine similarity, label "
                 "accuracy, share "
                 "of seeds whose label count was inferred exactly; mean (95 % CI) over {n} seeds. ρ = min(1, "
                 "T·p/(B·d)) for T "
                 "observed uploads (Eq. 10; T = 1: the paper's ρ_grad)",
    "descriptor_inversion": "Descriptor inversion on healthcare hospitals: Chamfer distance to the true cloud relative "
                            "to its RMS "
                            "radius, centroid distance / radius, covariance relative error, sub-population recovered; "
                            "mean over "
                            "hospitals, 95 % CI over seeds",
    "descriptor_statistics": "Statistics recovered from φ: relative error of a ridge regression on φ over the public "
                             "pool, of the "
                             "nearest pool cloud's value, and of the pool's mean (no φ); mean over hospitals, 95 % CI "
                             "over seeds",
    "membership": "Loss-threshold membership inference on honest hospitals' final models (members: training rows; "
                  "non-members: "
                  "test rows): attack AUC (0.5 = no signal), best-threshold advantage TPR − FPR and its expectation "
                  "without signal, "
                  "Yeom et al.'s threshold (mean training loss); mean over hospitals, 95 % CI over seeds",
}
_CI = ("mean", "ci_low", "ci_high")
INVERSION_COLUMNS = ("batch", "channel", "observed_rounds", "attack", "n_seeds",
                     *(f"{m}_{k}"
                       for m in ("relative_error", "recovered", "mean_cosine", "label_accuracy", "label_count_exact")
                       for k in _CI),
                     "rho_one_upload", "rho_all_uploads")
INVERSION_SHOW = ("batch", "channel", "observed_rounds", "attack",
                  *(f"{m}_{k}" for m in ("relative_error", "recovered", "label_accuracy")
                                                                    for k in _CI), "rho_one_upload", "rho_all_uploads")
MEMBERSHIP_SHOW = ("method", *(f"{m}_{k}" for m in ("auc", "advantage", "null_advantage", "test_auc") for k in _CI))
CAPTIONS = {
    "inversion": "Gradient inversion of a logistic-regression client: relative error after matching rows (mean, 95 % "
                 "CI over seeds); "
                 "dotted: guessing zeros. B = 1 is recovered exactly from one upload; a batch needs several uploads "
                 "(ρ_T = 1 for "
                 "B ≤ 15 at T = 15) and an optimiser that finds the match.",
    "descriptor_membership": "Left: descriptor inversion over a public pool (Chamfer / radius; lower is better for the "
                             "attacker). "
                             "Middle: statistics regressed on φ vs the pool mean. Right: membership-attack AUC per "
                             "method (0.5: no "
                             "signal). Means and 95 % CIs over seeds.",
}


def summaries(done: Sequence[Mapping[str, Any]], rounds: int) -> Summaries:
    """The four summaries of the runs' probes."""
    d = next(int(r["probe"]["n_features"]) for r in done if "n_features" in r.get("probe", {}))
    return Summaries(
        inversion_summary(probe_rows(done, "inversion")),
        summary(probe_rows(done, "descriptor"), ("attack",),
                ("relative_chamfer", "centroid_error", "covariance_error", "group_correct")),
        summary(probe_rows(done, "statistics"), ("statistic",),
                ("error_from_phi", "error_nearest_cloud", "error_pool_mean", "true",
                                                                 "rho_descriptor")),
        membership_summary(probe_rows(done, "membership"), done), d, rounds)


def analyse(out: Path, done: list[dict[str, Any]], budget: PrivacyAttacksBudget = FULL_BUDGET) -> Manifest:
    """The runs' attacks: per-seed rows, tables, figures and notes."""
    seeds = sorted({int(d["seed"]) for d in done})
    if not seeds:
        raise ValueError(f"{NAME} needs its runs (one per method and seed); got none")
    man = Manifest(NAME, "Privacy, empirically: inversion and membership attacks",
                   "Gradient inversion (closed form, iDLG) on the model channel, nearest-descriptor inversion on the "
                   "descriptor "
                   "channel and loss-threshold membership inference, on healthcare clients, seeds "
                   f"{seeds[0]}–{seeds[-1]}; ρ of Eqs. 10–11 beside them.")
    for stem, part in (("inversion_by_seed", "inversion"), ("membership_by_client", "membership"),
                       ("descriptor_by_client", "descriptor"),
                       ("statistics_by_client", "statistics")):
        write_csv(out / f"{stem}.csv", probe_rows(done, part))
    s = summaries(done, budget.rounds)
    man.table(out, "inversion", TITLES["inversion"].format(n=len(seeds)), s.inv, INVERSION_COLUMNS, show=INVERSION_SHOW)
    man.table(out, "descriptor_inversion", TITLES["descriptor_inversion"], s.desc)
    man.table(out, "descriptor_statistics", TITLES["descriptor_statistics"], s.stat)
    man.table(out, "membership", TITLES["membership"], s.mem, show=MEMBERSHIP_SHOW)
    man.table(out, "channels", "Per channel: the paper's ρ (Eqs. 10–11) next to what the attacks recover",
              channel_rows(s))
    man.figure(inversion_figure(s.inv, budget.probe.batch_sizes, budget.rounds, out), CAPTIONS["inversion"])
    man.figure(descriptor_membership_figure(s.desc, s.stat, s.mem, out), CAPTIONS["descriptor_membership"])
    man.notes += [model_note(s.inv, s.d, s.rounds), descriptor_note(s.desc, s.stat, s.d), membership_note(s.mem),
                  reading_note(s.inv, s.d),
                  provenance_note(done)]
    return man


EXPERIMENT = Experiment(NAME, "Privacy, empirically: inversion and membership attacks", plan, analyse,
                        {"full": FULL_BUDGET, "smoke": SMOKE},
                        default_seeds=tuple(range(5)))
