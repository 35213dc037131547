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
(§4.1 C), without the §3.2 feature augmentation (a CNN's input is an image).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from topofl.experiments.analysis import final_table, group_curves, paired_differences
from topofl.experiments.figures import band, colour, pyplot, save
from topofl.experiments.store import RunSpec, load_curves
from topofl.experiments.suite.base import PROFILES, Experiment, Manifest
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
            for m in methods:
                specs.append(RunSpec("deep", scen, m, s, rounds, hyperparameters={**HP, "local_epochs": epochs}, scenario_params=params,
                                     setting={"part": "C" if real_c else "C'", "alpha": f"{alpha:g}"}, model=model))
        if real_d:
            rounds = PAPER["D"]["rounds"] if profile == "full" else b["D"]["rounds"]
            scen, params, model, epochs = "femnist", {"root": data_root, "n_clients": 50}, PAPER["D"]["model"], PAPER["D"]["epochs"]
        else:
            rounds, epochs, model = b["D"]["rounds"], b["D"]["epochs"], b["D"]["model"]
            scen, params = "mnist", {"n_clients": n_d, "partition": "iid", "styles": 1.0, "n_samples": b["D"]["samples"],
                                     "min_size": 10}
        for m in methods:
            specs.append(RunSpec("deep", scen, m, s, rounds, hyperparameters={**HP, "local_epochs": epochs}, scenario_params=params,
                                 setting={"part": "D" if real_d else "D'", "alpha": "-"}, model=model))
    return specs


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
    man.table(out, "paired", "pTopoFL minus each method: final accuracy, paired over seeds (mean, 95 % t-interval, seeds pTopoFL wins)",
              paired_differences(done, ("part", "alpha"), "ptopofl", "accuracy"))
    curves = group_curves(load_curves(out), ("part", "alpha", "method"), metric="accuracy")
    parts = sorted({(k[0], k[1]) for k in curves})
    if parts:
        plt = pyplot()
        fig, axes = plt.subplots(1, len(parts), figsize=(5.2 * len(parts), 4), squeeze=False)
        for ax, (part, alpha) in zip(axes[0], parts, strict=True):
            for i, m in enumerate(available("server")):
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


EXPERIMENT = Experiment("deep", "Deep models (Table 2)", plan, analyse, default_seeds=(0, 1, 2), profiles=PROFILES)
