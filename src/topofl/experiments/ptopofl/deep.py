"""Deep models (pTopoFL paper §4.1 Scenarios C and D, §4.3, Table 2): every server-based method
training a CNN under label skew (C′: MNIST-10k, Dirichlet α ∈ {0.1, 0.5}, 10 clients) and writer
skew (D′: 50 clients, each in its own writing style); with ``--data-root`` holding CIFAR-10 or LEAF
FEMNIST, the paper's protocol (C, D). pTopoFL clusters with Table 3's M = 3, also (``ptopofl-trained``)
on the trained representation; ``clusters.csv`` says what its clusters are. See docs/experiments.md.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from topofl.experiments.analysis import final_table, group_curves, num, paired_differences
from topofl.experiments.base import Experiment, Manifest, last_round, server_logs, server_methods
from topofl.experiments.figures import band, colour, pyplot, save
from topofl.experiments.store import load_curves, run_paths
from topofl.job import Job

NAME = "deep"
#: pTopoFL paper, Table 2 (top-1 accuracy; CIFAR-10 at round 100, FEMNIST at round 200)
PAPER_TABLE2 = {
    "ptopofl": {"C a=0.1": 0.74, "C a=0.5": 0.86, "D": 0.84},
    "fedavg": {"C a=0.1": 0.68, "C a=0.5": 0.82, "D": 0.79},
    "fedprox": {"C a=0.1": 0.69, "C a=0.5": 0.83, "D": 0.80},
    "scaffold": {"C a=0.1": 0.70, "C a=0.5": 0.82, "D": 0.78},
    "pfedme": {"C a=0.1": 0.72, "C a=0.5": 0.83, "D": 0.68},
}


@dataclass(frozen=True)
class Part:
    """One scenario's budget: rounds, local epochs, images and model."""

    rounds: int
    epochs: int
    samples: int = 10_000
    model: str = "cnn-small"


@dataclass(frozen=True)
class DeepBudget:
    """Offline C′ and D′ parts, the methods (``None``: every server-based one), Dirichlet α values,
    client counts, C′'s smallest client, and whether real data run the paper's rounds.
    """

    c: Part
    d: Part
    methods: tuple[str, ...] | None = None
    alphas: tuple[float, ...] = (0.1, 0.5)
    clients_c: int = 10
    clients_d: int = 50
    min_size_c: int = 20
    paper_rounds: bool = False


BUDGETS: dict[str, DeepBudget] = {
    "full": DeepBudget(Part(40, 5, model="cnn-medium"), Part(40, 3, model="cnn-medium"), paper_rounds=True),
    "quick": DeepBudget(Part(15, 2, 3_000), Part(12, 1)),
    "smoke": DeepBudget(Part(2, 1, 400), Part(2, 1, 400), methods=("ptopofl", "fedavg"), alphas=(0.5,), clients_c=4,
                        clients_d=4,
                        min_size_c=10),
}
#: the paper's protocol on real data
PAPER: dict[str, Part] = {"C": Part(100, 5, model="resnet18"), "D": Part(200, 3, model="convnet2")}
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


def _hp(method: str, epochs: int) -> dict[str, Any]:
    """A method's hyper-parameters in this experiment: the common ones, and pTopoFL's M = 3."""
    return {**HP, "local_epochs": epochs, **(PTOPOFL_HP if method == "ptopofl" else {})}


def _part_c(b: DeepBudget, alpha: float, data_root: str | None) -> tuple[str, dict[str, Any], Part]:
    """C (real CIFAR-10) or C′ (MNIST-10k): data source, its parameters and the part's budget."""
    if _real(data_root, "C"):
        p = PAPER["C"]
        part = Part(p.rounds if b.paper_rounds else b.c.rounds, p.epochs, model=p.model)
        return "cifar10", {"root": data_root, "n_clients": 10, "alpha": alpha}, part
    return "mnist", {"n_clients": b.clients_c, "partition": "dirichlet", "alpha": alpha, "n_samples": b.c.samples,
                     "min_size": b.min_size_c}, b.c


def _part_d(b: DeepBudget, data_root: str | None) -> tuple[str, dict[str, Any], Part]:
    """D (real FEMNIST) or D′ (MNIST-10k in writing styles): data source, its parameters and the part's budget."""
    if _real(data_root, "D"):
        p = PAPER["D"]
        part = Part(p.rounds if b.paper_rounds else b.d.rounds, p.epochs, model=p.model)
        return "femnist", {"root": data_root, "n_clients": 50}, part
    return "mnist", {"n_clients": b.clients_d, "partition": "iid", "styles": 1.0, "n_samples": b.d.samples,
                     "min_size": 10}, b.d


def plan(seeds: Sequence[int], budget: DeepBudget = BUDGETS["full"], data_root: str | None = None) -> list[Job]:
    """Every method of the budget on C′/D′ (or C/D with real data), and pTopoFL on the trained representation in C."""
    methods = server_methods(budget.methods)
    real_c, real_d = _real(data_root, "C"), _real(data_root, "D")
    if data_root and not (real_c or real_d):
        raise ValueError(f"--data-root {data_root!r} holds neither CIFAR-10 pickles (data_batch_1, ...) nor LEAF "
                         "FEMNIST (train/, test/)")
    jobs = []
    for s in seeds:
        for alpha in budget.alphas:
            data, params, p = _part_c(budget, alpha, data_root)
            setting = {"part": "C" if real_c else "C'", "alpha": f"{alpha:g}"}
            run: dict[str, Any] = {"experiment": NAME, "data": data, "seed": s, "rounds": p.rounds,
                                   "data_params": params, "model": p.model, "setting": setting}
            jobs += [Job(method=m, hyperparameters=_hp(m, p.epochs), **run) for m in methods]
            jobs.append(Job(method="ptopofl", label=TRAINED,
                            hyperparameters={**_hp("ptopofl", p.epochs), "cluster_after": max(1, p.rounds // 3)},
                            **run))
        data, params, p = _part_d(budget, data_root)
        jobs += [Job(experiment=NAME, data=data, method=m, seed=s, rounds=p.rounds, hyperparameters=_hp(m, p.epochs),
                     data_params=params,
                     setting={"part": "D" if real_d else "D'", "alpha": "-"}, model=p.model) for m in methods]
    return jobs


# ---- tables --------------------------------------------------------------------------------------
def label_groups(y_per_client: Sequence[np.ndarray], n_groups: int, n_classes: int) -> list[int]:
    """The partition's groups under label skew: ``n_groups`` groups of clients by an average-linkage
    clustering of their label proportions, at total-variation distance ½‖p_i − p_j‖₁.
    """
    from topofl.algorithms.ptopofl.maths import cluster_clients

    P = np.vstack([np.bincount(np.asarray(y, dtype=np.int64), minlength=n_classes) / max(len(y), 1)
                   for y in y_per_client])
    D = 0.5 * np.abs(P[:, None, :] - P[None, :, :]).sum(axis=2)
    return [int(g) for g in cluster_clients(D, min(n_groups, len(y_per_client)))]


def offline_job(out: Path, part: str, alpha: str, seed: int, budgets: Sequence[DeepBudget]) -> Job | None:
    """An offline (MNIST-10k) job of the setting and seed that finished in ``out``, found among the
    plans of ``budgets`` (every method of a setting and seed shares its federation).
    """
    for b in budgets:
        for job in plan([seed], b):
            if job.setting == {"part": part, "alpha": alpha} and run_paths(out / "runs", job)["done"].exists():
                return job
    return None


def _label_group_columns(job: Job | None, ids: Sequence[int], clusters: Mapping[int, int], n: int) -> dict[str, Any]:
    """The label groups' sizes and their adjusted Rand index against ``clusters`` (C′ runs only)."""
    from sklearn.metrics import adjusted_rand_score

    from topofl.data.scenarios import make_scenario

    if job is None:
        return {}
    fed = make_scenario(job.data, seed=job.seed, **job.data_params)
    groups = label_groups([fed.clients[k].y_train for k in ids], n, fed.n_classes)
    return {"label_groups": "/".join(map(str, sorted(np.bincount(groups).tolist(), reverse=True))),
            "ari_label_groups": float(adjusted_rand_score(groups, [clusters[k] for k in ids]))}


def cluster_table(logs: Sequence[Mapping[str, Any]], done: Sequence[Mapping[str, Any]],
                  job_of: Callable[[str, str, int], Job | None]) -> list[dict[str, Any]]:
    """Per pTopoFL run: its last round's cluster sizes (server-log entries ``logs``), largest share,
    the label groups' sizes and the adjusted Rand index between the two (C′ only: ``job_of(part,
    alpha, seed)`` gives the run whose federation is regenerated; D′ has no groups; real data are
    not regenerated), and the run's accuracy minus FedAvg's on the same seed.
    """
    last = last_round(logs, lambda r: (str(r["part"]), str(r["alpha"]), str(r["method"]), int(r["seed"]))
                      if str(r.get("method", "")).startswith("ptopofl") and r.get("clusters") else None)
    acc = {(str(d["part"]), str(d["alpha"]), str(d["method"]), int(d["seed"])): num(d["final"]["accuracy"])
           for d in done}
    rows = []
    for (part, alpha, method, seed), entry in sorted(last.items()):
        clusters = {int(k): int(v) for k, v in entry["clusters"].items()}
        ids = sorted(clusters)
        sizes = sorted(np.bincount([clusters[k] for k in ids]).tolist(), reverse=True)
        row: dict[str, Any] = {"part": part, "alpha": alpha, "method": method, "seed": seed,
                               "clusters": "/".join(map(str, sizes)),
                               "largest_share": sizes[0] / len(ids), "label_groups": "",
                               "ari_label_groups": float("nan"),
                               "accuracy_minus_fedavg": acc.get((part, alpha, method, seed), float("nan"))
                               - acc.get((part, alpha, "fedavg", seed), float("nan"))}
        row.update(_label_group_columns(job_of(part, alpha, seed) if part == "C'" else None, ids, clusters, len(sizes)))
        rows.append(row)
    return rows


def cluster_note(rows: Sequence[Mapping[str, Any]]) -> str:
    """What the clusters explain: how often one cluster holds nearly every client, and pTopoFL's gap to FedAvg then."""
    parts = []
    for method in sorted({r["method"] for r in rows}):
        mine = [r for r in rows if r["method"] == method]
        dominant = [r for r in mine if r["largest_share"] >= DOMINANT_SHARE]
        gap = [r["accuracy_minus_fedavg"] for r in dominant if np.isfinite(r["accuracy_minus_fedavg"])]
        parts.append(f"{method}: in {len(dominant)} of {len(mine)} runs one cluster holds at least "
                     f"{DOMINANT_SHARE:.0%} of the clients"
                     + (f" (accuracy minus FedAvg's there: mean {np.mean(gap):+.3f})" if gap else ""))
    return ("Why pTopoFL can tie FedAvg: when one cluster holds nearly every client, that cluster's model is a "
            "(topology-"
            "weighted) FedAvg of nearly all of them, the few clients left out get models of their own, and blending (β "
            "= 0.3) "
            "pulls those towards the consensus: the method then behaves as FedAvg, and a tie measures the clustering, "
            "not the "
            "aggregation. " + "; ".join(parts) + ".")


def paper_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Our accuracy (rows of ``final_table``) next to the paper's Table 2, where it has the method."""
    paper = []
    for r in rows:
        key = "D" if r["part"].startswith("D") else f"C a={r['alpha']}"
        p = PAPER_TABLE2.get(r["method"], {}).get(key)
        if p is not None:
            paper.append({"part": r["part"], "alpha": r["alpha"], "method": r["method"], "paper_accuracy": p,
                          "ours_accuracy_mean": r["accuracy_mean"], "ours_accuracy_std": r["accuracy_std"]})
    return paper


# ---- figures -------------------------------------------------------------------------------------
def curves_figure(curve_rows: Sequence[Mapping[str, str]], out: Path) -> dict[str, str] | None:
    """Mean client accuracy over rounds per part, ±1 standard error (``None``: no curves); every
    server-based method keeps its colour whichever the budget runs.
    """
    curves = group_curves(curve_rows, ("part", "alpha", "method"), metric="accuracy")
    parts = sorted({(k[0], k[1]) for k in curves})
    if not parts:
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, len(parts), figsize=(5.2 * len(parts), 4), squeeze=False)
    for ax, (part, alpha) in zip(axes[0], parts, strict=True):
        for i, m in enumerate([*server_methods(None), TRAINED]):
            c = curves.get((part, alpha, m))
            if c is not None:
                band(ax, c["round"], c["mean"], c["se"], m, colour(m, i))
        title = f"{part} α={alpha}" if part.startswith("C") else part
        ax.set(title=f"{title}: accuracy (mean ± s.e. over seeds)", xlabel="round", ylabel="mean client accuracy",
               ylim=(0, 1))
    axes[0][-1].legend(fontsize=7, ncol=2, loc="lower right")
    return save(fig, out, "accuracy_curves")


# ---- analysis ------------------------------------------------------------------------------------
DESCRIPTION = ("Every server-based method trains a CNN (pTopoFL paper §4.1 C–D, §4.3, Table 2). Offline: MNIST-10k "
               "with "
               "Dirichlet label skew over 10 clients (C′) and 50 clients each in its own writing style (D′). Accuracy "
               "and AUC are "
               "per-seed means over clients of each client's score with the model it would use; the table gives mean ± "
               "std "
               "over seeds.")
TITLES = {
    "paired": "pTopoFL minus each method: final accuracy, paired over seeds (mean, 95 % t-interval, seeds pTopoFL "
              "wins; p: paired "
              "t-test, Holm-adjusted over the methods of one part and α)",
    "clusters": "pTopoFL's last-round clusters per run: sizes, largest share, the label groups of C′ (average-linkage "
                "clusters of the "
                "clients' label proportions) and their agreement (adjusted Rand index; 1 = the groups, 0 = chance), "
                "and accuracy "
                "minus FedAvg's on the same seed",
}
DIFFERENCES = ("What differs from the paper: offline, 10,000 real MNIST digits stand in for CIFAR-10 (C′) and FEMNIST "
               "(D′); the "
               "models are the Sheaf-FMTL paper's small/medium CNNs instead of ResNet-18 and ConvNet-2, and the rounds "
               "and local "
               "epochs are cut to fit 2 CPU cores (see BUDGETS in topofl/experiments/ptopofl/deep.py and the run "
               "config). With "
               "--data-root holding CIFAR-10 or LEAF FEMNIST the paper's protocol runs instead (a GPU is advised). The "
               "absolute "
               "accuracies are therefore not comparable with Table 2's; the ranking of the methods and pTopoFL's gap "
               "to FedAvg are.")


def analyse(out: Path, done: list[dict[str, Any]], budget: DeepBudget = BUDGETS["full"]) -> Manifest:
    """Accuracy and AUC per part (C′ α, D′) and method, next to the paper's Table 2; clusters; accuracy curves."""
    man = Manifest(NAME, "Deep models: label skew (C) and writer skew (D)", DESCRIPTION)
    rows = final_table(done, ("part", "alpha", "method"))
    man.table(out, "summary", "Final-round metrics (mean ± std over seeds)", rows)
    man.table(out, "paper_vs_ours",
              "Our accuracy next to the paper's Table 2 (different data and budgets: see the notes)", paper_rows(rows))
    man.table(out, "paired", TITLES["paired"], paired_differences(done, ("part", "alpha"), "ptopofl", "accuracy"))
    budgets = [budget, *(b for b in BUDGETS.values() if b != budget)]
    clusters = cluster_table(server_logs(out), done, lambda part, alpha,
                             seed: offline_job(out, part, alpha, seed, budgets))
    man.table(out, "clusters", TITLES["clusters"], clusters)
    if clusters:
        man.notes.append(cluster_note(clusters))
    curves = curves_figure(load_curves(out), out)
    if curves is not None:
        man.figure(curves, "Mean client test accuracy over rounds, ±1 standard error over seeds.")
    man.notes.append(DIFFERENCES)
    return man


EXPERIMENT = Experiment(NAME, "Deep models (Table 2)", plan, analyse, BUDGETS, default_seeds=(0, 1, 2), tunable=True,
                        takes_data_root=True)
