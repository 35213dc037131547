"""Deep models (pTopoFL paper §4.1 Scenarios C and D, §4.3, Table 2): every server-based method
training a CNN under label skew and under writer-style skew.

With real data (``--data-root DIR`` holding CIFAR-10's python pickles and/or LEAF FEMNIST's
``train/`` and ``test/``) the paper's protocol: C — CIFAR-10, Dirichlet α ∈ {0.1, 0.5} over 10
clients, ResNet-18 (GroupNorm), 5 local epochs, 100 rounds; D — FEMNIST, 50 writers, ConvNet-2,
3 local epochs, 200 rounds. Offline, the same protocol on MNIST-10k (10,000 real digits shipped
with topofl) at budgets that fit 2 CPU cores:

C′  MNIST-10k, Dirichlet α ∈ {0.1, 0.5} over 10 clients (label skew, as C);
D′  MNIST-10k over 50 clients, each drawn in its own writing style (a fixed random affine map
    and stroke thickness per client: writer-like feature skew, as FEMNIST's writers).

pTopoFL computes its descriptor on the penultimate-layer activations of a 200-point subsample
(§4.1 C), without the §3.2 feature augmentation (a CNN's input is an image), with M = 3 clusters
in every part: Table 3 gives M = 3 for Scenarios C/D, and C′/D′ stand in for them (before this
was stated, M = 2, the default of Scenarios A/B, was used here). Its descriptors are computed at the
first round, on the untrained common initial network, as §3.3 clusters once at round 0; the label
``ptopofl-trained`` (C and C′ only) is the same method with ``cluster_after`` = a third of the
rounds: FedAvg-like warm-up rounds, then descriptors of the *trained* network's representation
and the clustering on them.

What the clusters are is reported (``clusters.csv``): per run, the sizes of pTopoFL's last-round
clusters and, under label skew, their agreement (adjusted Rand index) with the partition's
groups. A Dirichlet partition has no groups of its own; here they are the M groups an
average-linkage clustering of the clients' training-label proportions (total-variation distance)
forms, i.e. what clustering by label distribution would find. D′'s clients each have their own
writing style and the same label distribution (as FEMNIST's writers): no groups, sizes only.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from topofl.experiments.analysis import final_table, group_curves, num, paired_differences
from topofl.experiments.figures import band, colour, pyplot, save
from topofl.experiments.store import RunSpec, load_curves, run_paths
from topofl.experiments.suite.base import PROFILES, Experiment, Manifest, last_round_logs
from topofl.methods import available

#: pTopoFL paper, Table 2 (top-1 accuracy; CIFAR-10 at round 100, FEMNIST at round 200)
PAPER_TABLE2 = {
    "ptopofl": {"C a=0.1": 0.74, "C a=0.5": 0.86, "D": 0.84},
    "fedavg": {"C a=0.1": 0.68, "C a=0.5": 0.82, "D": 0.79},
    "fedprox": {"C a=0.1": 0.69, "C a=0.5": 0.83, "D": 0.80},
    "scaffold": {"C a=0.1": 0.70, "C a=0.5": 0.82, "D": 0.78},
    "pfedme": {"C a=0.1": 0.72, "C a=0.5": 0.83, "D": 0.68},
}

#: budgets: rounds, local epochs, images, model per scenario (offline stand-ins)
BUDGETS: dict[str, dict[str, Any]] = {
    "full": {"C": {"rounds": 40, "epochs": 5, "samples": 10_000, "model": "cnn-medium"},
             "D": {"rounds": 40, "epochs": 3, "samples": 10_000, "model": "cnn-medium"}},
    "quick": {"C": {"rounds": 15, "epochs": 2, "samples": 3_000, "model": "cnn-small"},
              "D": {"rounds": 12, "epochs": 1, "samples": 10_000, "model": "cnn-small"}},
    "smoke": {"C": {"rounds": 2, "epochs": 1, "samples": 400, "model": "cnn-small"},
              "D": {"rounds": 2, "epochs": 1, "samples": 400, "model": "cnn-small"}},
}
PAPER: dict[str, dict[str, Any]] = {"C": {"rounds": 100, "epochs": 5, "model": "resnet18"}, "D": {"rounds": 200, "epochs": 3, "model": "convnet2"}}
SMOKE_METHODS = ("ptopofl", "fedavg")
HP = {"lr": 0.05, "batch_size": 32}
#: pTopoFL in C/D: Table 3's M = 3 (β = 0.3 and n_sub = 200 are its defaults for deep models)
PTOPOFL_HP = {"n_clusters": 3}
#: pTopoFL clustering on the trained representation (C parts): ``cluster_after`` = rounds // 3
TRAINED = "ptopofl-trained"
#: a cluster holding at least this share of the clients makes pTopoFL nearly FedAvg (clusters.csv's note)
DOMINANT_SHARE = 0.8


def _real(root: str | None, what: str) -> bool:
    if not root:
        return False
    r = Path(root)
    return (r / "data_batch_1").is_file() if what == "C" else (r / "train").is_dir() and (r / "test").is_dir()


def plan(seeds: Sequence[int], profile: str = "full", data_root: str | None = None) -> list[RunSpec]:
    """Runs of ``deep``: every server-based method (two in the smoke budget) on C′/D′ (or C/D with real data)."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}; got {profile!r}")
    methods = SMOKE_METHODS if profile == "smoke" else tuple(available("server"))
    b = BUDGETS[profile]
    specs = []
    real_c, real_d = _real(data_root, "C"), _real(data_root, "D")
    if data_root and not (real_c or real_d):
        raise ValueError(f"--data-root {data_root!r} holds neither CIFAR-10 pickles (data_batch_1, ...) nor LEAF FEMNIST (train/, test/)")
    n_c = 4 if profile == "smoke" else 10
    n_d = 4 if profile == "smoke" else 50
    for s in seeds:
        for alpha in ((0.5,) if profile == "smoke" else (0.1, 0.5)):
            if real_c:
                rounds = PAPER["C"]["rounds"] if profile == "full" else b["C"]["rounds"]
                scen, params, model = "cifar10", {"root": data_root, "n_clients": 10, "alpha": alpha}, PAPER["C"]["model"]
                epochs = PAPER["C"]["epochs"]
            else:
                rounds, epochs, model = b["C"]["rounds"], b["C"]["epochs"], b["C"]["model"]
                scen, params = "mnist", {"n_clients": n_c, "partition": "dirichlet", "alpha": alpha, "n_samples": b["C"]["samples"],
                                         "min_size": 20 if profile != "smoke" else 10}
            setting = {"part": "C" if real_c else "C'", "alpha": f"{alpha:g}"}
            for m in methods:
                specs.append(RunSpec("deep", scen, m, s, rounds, hyperparameters=_hp(m, epochs), scenario_params=params,
                                     setting=setting, model=model))
            specs.append(RunSpec("deep", scen, "ptopofl", s, rounds, label=TRAINED, scenario_params=params, setting=setting, model=model,
                                 hyperparameters={**_hp("ptopofl", epochs), "cluster_after": max(1, rounds // 3)}))
        if real_d:
            rounds = PAPER["D"]["rounds"] if profile == "full" else b["D"]["rounds"]
            scen, params, model, epochs = "femnist", {"root": data_root, "n_clients": 50}, PAPER["D"]["model"], PAPER["D"]["epochs"]
        else:
            rounds, epochs, model = b["D"]["rounds"], b["D"]["epochs"], b["D"]["model"]
            scen, params = "mnist", {"n_clients": n_d, "partition": "iid", "styles": 1.0, "n_samples": b["D"]["samples"],
                                     "min_size": 10}
        for m in methods:
            specs.append(RunSpec("deep", scen, m, s, rounds, hyperparameters=_hp(m, epochs), scenario_params=params,
                                 setting={"part": "D" if real_d else "D'", "alpha": "-"}, model=model))
    return specs


def _hp(method: str, epochs: int) -> dict[str, Any]:
    """A method's hyper-parameters in this experiment: the common ones, and pTopoFL's M = 3."""
    return {**HP, "local_epochs": epochs, **(PTOPOFL_HP if method == "ptopofl" else {})}


def label_groups(y_per_client: Sequence[np.ndarray], n_groups: int, n_classes: int) -> list[int]:
    """The partition's groups under label skew: ``n_groups`` groups of clients by an average-linkage
    clustering of their label proportions, at total-variation distance ½‖p_i − p_j‖₁.
    """
    from topofl.algorithms.ptopofl.maths import cluster_clients

    P = np.vstack([np.bincount(np.asarray(y, dtype=np.int64), minlength=n_classes) / max(len(y), 1) for y in y_per_client])
    D = 0.5 * np.abs(P[:, None, :] - P[None, :, :]).sum(axis=2)
    return [int(g) for g in cluster_clients(D, min(n_groups, len(y_per_client)))]


def _offline_spec(out: Path, part: str, alpha: str, seed: int) -> RunSpec | None:
    """An offline (MNIST-10k) spec of the setting and seed that finished in ``out``, found among
    every budget's plan (every method of a setting and seed shares its federation); ``None`` for real data.
    """
    for profile in PROFILES:
        for spec in plan([seed], profile):
            if spec.setting == {"part": part, "alpha": alpha} and run_paths(out / "runs", spec)["done"].exists():
                return spec
    return None


def cluster_note(rows: Sequence[dict[str, Any]]) -> str:
    """What the clusters explain: how often one cluster holds nearly every client, and pTopoFL's gap to FedAvg then."""
    parts = []
    for method in sorted({r["method"] for r in rows}):
        mine = [r for r in rows if r["method"] == method]
        dominant = [r for r in mine if r["largest_share"] >= DOMINANT_SHARE]
        gap = [r["accuracy_minus_fedavg"] for r in dominant if np.isfinite(r["accuracy_minus_fedavg"])]
        parts.append(f"{method}: in {len(dominant)} of {len(mine)} runs one cluster holds at least {DOMINANT_SHARE:.0%} of the clients"
                     + (f" (accuracy minus FedAvg's there: mean {np.mean(gap):+.3f})" if gap else ""))
    return ("Why pTopoFL can tie FedAvg: when one cluster holds nearly every client, that cluster's model is a (topology-"
            "weighted) FedAvg of nearly all of them, the few clients left out get models of their own, and blending (β = 0.3) "
            "pulls those towards the consensus: the method then behaves as FedAvg, and a tie measures the clustering, not the "
            "aggregation. " + "; ".join(parts) + ".")


def cluster_table(out: Path, done: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per pTopoFL run: its last round's cluster sizes, largest share, the label groups' sizes and
    the adjusted Rand index between the two (C′ only: D′ has no groups; real data are not
    regenerated here), and the run's accuracy minus FedAvg's on the same seed.
    """
    from sklearn.metrics import adjusted_rand_score

    from topofl.data.scenarios import make_scenario

    last = last_round_logs(out, lambda r: (str(r["part"]), str(r["alpha"]), str(r["method"]), int(r["seed"]))
                           if str(r.get("method", "")).startswith("ptopofl") and r.get("clusters") else None)
    acc = {(str(d["part"]), str(d["alpha"]), str(d["method"]), int(d["seed"])): num(d["final"]["accuracy"]) for d in done}
    rows = []
    for (part, alpha, method, seed), entry in sorted(last.items()):
        clusters = {int(k): int(v) for k, v in entry["clusters"].items()}
        ids = sorted(clusters)
        sizes = sorted(np.bincount([clusters[k] for k in ids]).tolist(), reverse=True)
        row: dict[str, Any] = {"part": part, "alpha": alpha, "method": method, "seed": seed, "clusters": "/".join(map(str, sizes)),
                               "largest_share": sizes[0] / len(ids), "label_groups": "", "ari_label_groups": float("nan"),
                               "accuracy_minus_fedavg": acc.get((part, alpha, method, seed), float("nan"))
                               - acc.get((part, alpha, "fedavg", seed), float("nan"))}
        spec = _offline_spec(out, part, alpha, seed) if part == "C'" else None
        if spec is not None:
            fed = make_scenario(spec.scenario, seed=seed, **spec.scenario_params)
            groups = label_groups([fed.clients[k].y_train for k in ids], len(sizes), fed.n_classes)
            row["label_groups"] = "/".join(map(str, sorted(np.bincount(groups).tolist(), reverse=True)))
            row["ari_label_groups"] = float(adjusted_rand_score(groups, [clusters[k] for k in ids]))
        rows.append(row)
    return rows


def analyse(out: Path, done: list[dict[str, Any]]) -> Manifest:
    """Accuracy and AUC per part (C′ α, D′) and method, next to the paper's Table 2; accuracy curves."""
    man = Manifest("deep", "Deep models: label skew (C) and writer skew (D)",
                   "Every server-based method trains a CNN (pTopoFL paper §4.1 C–D, §4.3, Table 2). Offline: MNIST-10k with "
                   "Dirichlet label skew over 10 clients (C′) and 50 clients each in its own writing style (D′). Accuracy and AUC are "
                   "per-seed means over clients of each client's score with the model it would use; the table gives mean ± std "
                   "over seeds.")
    rows = final_table(done, ("part", "alpha", "method"))
    man.table(out, "summary", "Final-round metrics (mean ± std over seeds)", rows)
    paper = []
    for r in rows:
        key = "D" if r["part"].startswith("D") else f"C a={r['alpha']}"
        p = PAPER_TABLE2.get(r["method"], {}).get(key)
        if p is not None:
            paper.append({"part": r["part"], "alpha": r["alpha"], "method": r["method"], "paper_accuracy": p,
                          "ours_accuracy_mean": r["accuracy_mean"], "ours_accuracy_std": r["accuracy_std"]})
    man.table(out, "paper_vs_ours", "Our accuracy next to the paper's Table 2 (different data and budgets: see the notes)", paper)
    man.table(out, "paired", "pTopoFL minus each method: final accuracy, paired over seeds (mean, 95 % t-interval, seeds pTopoFL wins; "
              "p: paired t-test, Holm-adjusted over the methods of one part and α)",
              paired_differences(done, ("part", "alpha"), "ptopofl", "accuracy"))
    clusters = cluster_table(out, done)
    man.table(out, "clusters", "pTopoFL's last-round clusters per run: sizes, largest share, the label groups of C′ (average-linkage "
              "clusters of the clients' label proportions) and their agreement (adjusted Rand index; 1 = the groups, 0 = chance), "
              "and accuracy minus FedAvg's on the same seed", clusters)
    if clusters:
        man.notes.append(cluster_note(clusters))
    curves = group_curves(load_curves(out), ("part", "alpha", "method"), metric="accuracy")
    parts = sorted({(k[0], k[1]) for k in curves})
    if parts:
        plt = pyplot()
        fig, axes = plt.subplots(1, len(parts), figsize=(5.2 * len(parts), 4), squeeze=False)
        for ax, (part, alpha) in zip(axes[0], parts, strict=True):
            for i, m in enumerate([*available("server"), TRAINED]):
                c = curves.get((part, alpha, m))
                if c is not None:
                    band(ax, c["round"], c["mean"], c["se"], m, colour(m, i))
            title = f"{part} α={alpha}" if part.startswith("C") else part
            ax.set(title=f"{title}: accuracy (mean ± s.e. over seeds)", xlabel="round", ylabel="mean client accuracy", ylim=(0, 1))
        axes[0][-1].legend(fontsize=7, ncol=2, loc="lower right")
        man.figure(save(fig, out, "accuracy_curves"), "Mean client test accuracy over rounds, ±1 standard error over seeds.")
    man.notes.append("What differs from the paper: offline, 10,000 real MNIST digits stand in for CIFAR-10 (C′) and FEMNIST (D′); the "
                     "models are the Sheaf-FMTL paper's small/medium CNNs instead of ResNet-18 and ConvNet-2, and the rounds and local "
                     "epochs are cut to fit 2 CPU cores (see BUDGETS in topofl/experiments/suite/deep.py and the run config). With "
                     "--data-root holding CIFAR-10 or LEAF FEMNIST the paper's protocol runs instead (a GPU is advised). The absolute "
                     "accuracies are therefore not comparable with Table 2's; the ranking of the methods and pTopoFL's gap to FedAvg are.")
    return man


EXPERIMENT = Experiment("deep", "Deep models (Table 2)", plan, analyse, default_seeds=(0, 1, 2), profiles=PROFILES, tunable=True)
