"""The comparison experiment: several methods × several seeds on one scenario.

Writes, as rounds finish:

``rounds.csv``      one row per (method, seed, round, client): auc, accuracy, loss, bytes_up, bytes_down
                    (regression: mse and r2 too; auc and accuracy are empty)
``curves.csv``      one row per (method, seed, round): client-mean and pooled metrics, bytes
``server_log.jsonl`` the server's per-round log (clusters, trust weights, flags, drift, ...)
``summary.csv``     one row per method: final AUC / accuracy mean ± std over seeds (each seed's
                    value is the mean over clients of each client's score with the model it would
                    use), pooled AUC, convergence round (first round reaching 95 % of the final
                    AUC), total bytes per run, seconds per run, and the method's AUC minus FedAvg's
                    and minus the best other method's, paired over seeds (mean, 95 % Student-t
                    interval, seeds won and lost). Regression tasks get MSE, RMSE and R² instead
                    of AUC, accuracy and pooled AUC, the convergence round on R², and paired
                    differences of the MSE (lower is better: a win is a lower MSE)
``config.json``     the scenario, methods, hyper-parameters, seeds, rounds and package versions
"""
from __future__ import annotations

import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from topofl.data.scenarios import make_scenario
from topofl.decentralised.graphs import make_graph
from topofl.experiments.results import CsvAppender, append_jsonl, write_csv, write_json_atomic
from topofl.experiments.store import results_lock
from topofl.federation.history import ROUND_FIELDS, History, RoundSummary, regression_summary
from topofl.federation.messages import BYTES_PER_FLOAT
from topofl.federation.runner import run_federation
from topofl.methods import build_peer, build_server, family
from topofl.models.registry import build_model

CURVE_FIELDS = ("method", "seed") + tuple(RoundSummary.__dataclass_fields__)
def _paired_fields(metric: str) -> tuple[str, ...]:
    return (
        f"{metric}_vs_fedavg_mean", f"{metric}_vs_fedavg_ci_low", f"{metric}_vs_fedavg_ci_high", f"{metric}_vs_fedavg_wins",
        f"{metric}_vs_fedavg_losses", f"{metric}_vs_fedavg_p", f"{metric}_vs_fedavg_p_holm", "best_other",
        f"{metric}_vs_best_other_mean", f"{metric}_vs_best_other_ci_low", f"{metric}_vs_best_other_ci_high",
        f"{metric}_vs_best_other_wins", f"{metric}_vs_best_other_losses", f"{metric}_vs_best_other_p", f"{metric}_vs_best_other_p_holm",
    )



_RUN_FIELDS = ("convergence_round_mean", "convergence_round_std", "bytes_up_per_run", "bytes_down_per_run", "seconds_per_run")
#: summary.csv of a classification task (paired differences of the final AUC; higher is better)
SUMMARY_FIELDS = (
    "method", "n_seeds", "auc_mean", "auc_std", "accuracy_mean", "accuracy_std", "pooled_auc_mean", "pooled_auc_std",
) + _RUN_FIELDS + _paired_fields("auc")
#: summary.csv of a regression task (MSE, RMSE, R²; paired differences of the final MSE; lower is better)
REGRESSION_SUMMARY_FIELDS = (
    "method", "n_seeds", "mse_mean", "mse_std", "rmse_mean", "rmse_std", "r2_mean", "r2_std",
) + _RUN_FIELDS + _paired_fields("mse")


def summary_fields(task: str) -> tuple[str, ...]:
    """The columns of ``summary.csv`` for a task: AUC-based for classification, MSE-based for regression."""
    return REGRESSION_SUMMARY_FIELDS if task == "regression" else SUMMARY_FIELDS


@dataclass(frozen=True)
class CompareSpec:
    """What to compare. ``hyperparameters`` maps a method name to its hyper-parameter overrides."""

    scenario: str = "healthcare"
    methods: tuple[str, ...] = ("ptopofl", "fedavg")
    seeds: tuple[int, ...] = tuple(range(10))
    rounds: int = 15
    client_fraction: float = 1.0
    scenario_params: Mapping[str, Any] = field(default_factory=dict)
    hyperparameters: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    graph: str = "erdos_renyi"
    graph_params: Mapping[str, Any] = field(default_factory=dict)
    model: str = "linear"

    def validate(self) -> None:
        """Fail fast (before any run starts) on unknown names or bad values."""
        if not self.methods:
            raise ValueError("methods must name at least one method")
        if not self.seeds:
            raise ValueError("seeds must hold at least one seed")
        federation = make_scenario(self.scenario, seed=self.seeds[0], **self.scenario_params)
        for m in self.methods:
            if family(m) == "peer":
                peer = build_peer(m, self.hyperparameters.get(m, {}))
                graph = make_graph(self.graph, len(federation), seed=self.seeds[0], **dict(self.graph_params))
                dim = build_model(self.model, task=federation.task, n_features=federation.n_features,
                                  n_classes=max(federation.n_classes, 2)).n_params
                peer.node_specs({k: dim for k in graph.nodes}, graph, np.random.default_rng(0))  # edge spaces, map storage
                continue
            algorithm = build_server(m, self.hyperparameters.get(m, {}))
            model = algorithm.build_model(self.model, federation.task, federation.n_features, federation.n_classes)
            algorithm.setup(model, federation.client_ids, np.random.default_rng(0))


def summarise(method: str, histories: Sequence[History], seconds: Sequence[float]) -> dict[str, Any]:
    """One summary row for a method from its per-seed histories."""
    finals = [h.final for h in histories]

    def ms(key: str) -> tuple[float, float]:
        v = np.array([f[key] for f in finals], float)
        v = v[~np.isnan(v)]
        return (float(v.mean()), float(v.std())) if v.size else (float("nan"), float("nan"))

    regression = bool(histories) and histories[0].model is not None and histories[0].model.task == "regression"
    conv = np.array([h.convergence_round("r2" if regression else "auc") for h in histories], float)
    row = {"method": method, "n_seeds": len(histories)}
    for key in ("mse", "rmse", "r2") if regression else ("auc", "accuracy", "pooled_auc"):
        row[f"{key}_mean"], row[f"{key}_std"] = ms(key)
    row["convergence_round_mean"], row["convergence_round_std"] = float(conv.mean()), float(conv.std())
    row["bytes_up_per_run"] = float(np.mean([sum(r.bytes_up for r in h.rounds) for h in histories]))
    row["bytes_down_per_run"] = float(np.mean([sum(r.bytes_down for r in h.rounds) for h in histories]))
    row["seconds_per_run"] = float(np.mean(seconds))
    return row


def add_paired(summary: list[dict[str, Any]], runs: Mapping[str, Mapping[int, History]], metric: str = "auc") -> None:
    """Add to each summary row the method's final ``metric`` minus FedAvg's and minus the best other
    method's (by mean; highest AUC, or lowest MSE), paired over the seeds both ran: mean, 95 %
    Student-t interval (see :func:`topofl.experiments.analysis.paired_differences`), seeds won and
    lost (won: higher AUC, or lower MSE), the paired t-test's p-value and the Holm-adjusted one.
    Each column is one family for Holm's method: every method against FedAvg (``_vs_fedavg_p_holm``)
    and every method against its best other (``_vs_best_other_p_holm``; two methods that are each
    other's best other are one test, counted once). Runs with the same seed
    share the data, so pairing removes the seed-to-seed difficulty they share.
    """
    from topofl.experiments.analysis import holm, paired_differences

    lower_is_better = metric in ("mse", "rmse", "loss")
    done = [{"method": m, "seed": s, "final": h.final} for m, per in runs.items() for s, h in per.items()]
    score = {r["method"]: r[f"{metric}_mean"] for r in summary}
    for row in summary:
        m = row["method"]
        others = [o for o in score if o != m and score[o] == score[o]]
        best = (min if lower_is_better else max)(others, key=lambda o: score[o]) if others else None
        row["best_other"] = best or ""
        for tag, ref in (("fedavg", "fedavg" if m != "fedavg" and "fedavg" in runs else None), ("best_other", best)):
            d = next((p for p in paired_differences(done, (), m, metric) if p["method"] == ref), None) if ref else None
            row[f"{metric}_vs_{tag}_mean"] = d["diff_mean"] if d else float("nan")
            row[f"{metric}_vs_{tag}_ci_low"] = d["ci_low"] if d else float("nan")
            row[f"{metric}_vs_{tag}_ci_high"] = d["ci_high"] if d else float("nan")
            wins, losses = (d["other_wins"], d["reference_wins"]) if d and lower_is_better else (d["reference_wins"], d["other_wins"]) if d else (0, 0)
            row[f"{metric}_vs_{tag}_wins"], row[f"{metric}_vs_{tag}_losses"] = wins, losses
            row[f"{metric}_vs_{tag}_p"] = d["p_value"] if d else float("nan")
    for tag in ("fedavg", "best_other"):
        # one test per unordered pair: two methods that are each other's best other are one comparison, counted once
        pairs: dict[frozenset[str], float] = {}
        for row in summary:
            other = "fedavg" if tag == "fedavg" else row["best_other"]
            if other and row[f"{metric}_vs_{tag}_p"] == row[f"{metric}_vs_{tag}_p"]:
                pairs.setdefault(frozenset((row["method"], other)), row[f"{metric}_vs_{tag}_p"])
        adjusted = dict(zip(pairs, holm(list(pairs.values())), strict=True))
        for row in summary:
            other = "fedavg" if tag == "fedavg" else row["best_other"]
            row[f"{metric}_vs_{tag}_p_holm"] = adjusted.get(frozenset((row["method"], other)), float("nan"))


def run_compare(
    spec: CompareSpec,
    out: Path | None,
    *,
    on_run_done: Callable[[str, int, History], None] | None = None,
    on_round: Callable[[History, RoundSummary], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every (method, seed), writing results under ``out`` as rounds finish; return summary rows.

    ``out`` is locked throughout (:func:`~topofl.experiments.store.results_lock`): a second process
    writing it is refused with a ``ValueError`` naming it, before anything there changes.
    """
    spec.validate()  # writes nothing: bad input leaves ``out`` as it was (no lock file either)
    if out is None:
        return _run_compare(spec, None, on_run_done, on_round)
    with results_lock(out):
        return _run_compare(spec, Path(out), on_run_done, on_round)


def _run_compare(spec: CompareSpec, out: Path | None, on_run_done: Callable[[str, int, History], None] | None,
                 on_round: Callable[[History, RoundSummary], None] | None) -> list[dict[str, Any]]:
    """:func:`run_compare`, validated, with ``out`` locked."""
    writers = _open_outputs(spec, out) if out is not None else None
    histories: dict[str, list[History]] = {m: [] for m in spec.methods}
    seconds: dict[str, list[float]] = {m: [] for m in spec.methods}
    try:
        for seed in spec.seeds:
            federation = make_scenario(spec.scenario, seed=seed, **spec.scenario_params)
            for method in spec.methods:

                def record(history: History, summary: RoundSummary, method=method, seed=seed) -> None:
                    if writers is not None and out is not None:  # writers exist exactly when out is given
                        rows = [r for r in history.records if r["round"] == summary.round]
                        writers["rounds"].write({"method": method, "seed": seed, **r} for r in rows)
                        writers["curves"].write([{"method": method, "seed": seed, **summary.as_dict()}])
                        append_jsonl(out / "server_log.jsonl", {"method": method, "seed": seed, **history.server_logs[-1]})
                    if on_round is not None:
                        on_round(history, summary)

                t0 = time.perf_counter()
                if family(method) == "peer":
                    history = run_peers(federation, method, spec, seed, record)
                else:
                    algorithm = build_server(method, spec.hyperparameters.get(method, {}))
                    history = run_federation(federation, algorithm, spec.rounds, seed, client_fraction=spec.client_fraction, on_round=record,
                                             model=spec.model)
                seconds[method].append(time.perf_counter() - t0)
                histories[method].append(history)
                if on_run_done is not None:
                    on_run_done(method, seed, history)
    finally:
        if writers is not None:
            for w in writers.values():
                w.close()
    summary = [summarise(m, histories[m], seconds[m]) for m in spec.methods]
    task = next((h[0].model.task for h in histories.values() if h and h[0].model is not None), "binary")
    add_paired(summary, {m: dict(zip(spec.seeds, histories[m], strict=True)) for m in spec.methods}, "mse" if task == "regression" else "auc")
    if out is not None:
        write_csv(out / "summary.csv", summary, summary_fields(task))
    return summary


def run_peers(federation: Any, method: str, spec: CompareSpec, seed: int,
              on_round: Callable[[History, RoundSummary], None] | None = None) -> History:
    """Run a decentralised method on the scenario's clients (graph ``spec.graph``, seeded) and
    report it as a :class:`History`, so that both families fill the same tables.

    Every payload is counted as floats and, as for the server-based methods, 8 bytes per float
    (the Sheaf-FMTL experiments count float32, as the paper does).
    """
    from topofl.api import peer_models
    from topofl.decentralised import run_decentralised

    graph = make_graph(spec.graph, len(federation), seed=seed, **dict(spec.graph_params))
    algo = build_peer(method, spec.hyperparameters.get(method, {}))
    history = History(method=method, seed=seed)

    def adapt(dh: Any, row: dict[str, Any]) -> None:
        rows = [{k: r[k] for k in ("round", "client", "auc", "accuracy", "loss", "floats_up", "floats_down", "mse", "r2") if k in r}
                for r in dh.records if r["round"] == row["round"]]
        for r in rows:
            r["bytes_up"], r["bytes_down"] = r["floats_up"] * BYTES_PER_FLOAT, r["floats_down"] * BYTES_PER_FLOAT
        history.records.extend(rows)
        summary = RoundSummary(
            round=row["round"], auc=row["auc"], auc_std=row["auc_std"], accuracy=row["accuracy"], accuracy_std=row["accuracy_std"],
            loss=row["loss"], pooled_auc=row.get("pooled_auc", float("nan")), pooled_accuracy=row.get("pooled_accuracy", float("nan")),
            n_clients_auc=row["n_clients_auc"], bytes_up=sum(r["bytes_up"] for r in rows), bytes_down=sum(r["bytes_down"] for r in rows),
            **regression_summary(rows),
        )
        history.rounds.append(summary)
        history.server_logs.append({"round": row["round"], "graph": spec.graph, "graph_edges": graph.number_of_edges(), **algo.log()})
        if on_round is not None:
            on_round(history, summary)

    models = peer_models(spec.model, federation.clients, federation.task, max(federation.n_classes, 2), algo.config.l2)
    dh = run_decentralised(federation.clients, graph, algo, spec.rounds, seed, task=federation.task,
                           n_classes=max(federation.n_classes, 2), models=models, on_round=adapt)
    history.model = dh.model
    history.client_models = dict(dh.client_models)
    return history


def _open_outputs(spec: CompareSpec, out: Path) -> dict[str, CsvAppender]:
    out.mkdir(parents=True, exist_ok=True)
    for name in ("rounds.csv", "curves.csv", "server_log.jsonl", "summary.csv"):
        (out / name).unlink(missing_ok=True)
    write_json_atomic(out / "config.json", {**asdict(spec), "versions": versions()})
    return {
        "rounds": CsvAppender(out / "rounds.csv", ("method", "seed") + ROUND_FIELDS),
        "curves": CsvAppender(out / "curves.csv", CURVE_FIELDS),
    }


def versions() -> dict[str, str]:
    """Versions of Python and the packages that shape the numbers, and the git commit of the
    topofl source that ran (``git commit``).
    """
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version(), "git commit": git_commit()}
    for pkg in ("topofl", "numpy", "scipy", "scikit-learn", "giotto-ph", "gudhi", "torch", "flwr"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def git_commit() -> str:
    """The commit of the git checkout topofl runs from (``+ local changes`` when its tracked files
    differ), or why there is none: an installed package has no checkout.
    """
    import subprocess

    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return "unknown (not a git checkout)"
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({type(exc).__name__})"
    return head.stdout.strip() + (" + local changes" if dirty.stdout.strip() else "")
