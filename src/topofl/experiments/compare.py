"""The comparison: several methods × several seeds on one data source (a list of :class:`~topofl.job.Job`).

Writes ``rounds.csv``, ``curves.csv``, ``server_log.jsonl``, ``summary.csv`` and ``config.json`` as rounds
finish; see docs/internals.md#topofl.experiments.compare for what each holds.
"""
from __future__ import annotations

import platform
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from topofl.decentralised.graphs import make_graph
from topofl.experiments.results import CsvAppender, append_jsonl, write_csv, write_json_atomic
from topofl.experiments.store import results_lock
from topofl.federation.history import ROUND_FIELDS, ROUND_SUMMARY_FIELDS, Result, RoundSummary
from topofl.job import DEFAULT_GRAPH, Job
from topofl.methods import build_peer, build_server
from topofl.models.registry import build_model


def _paired_fields(metric: str) -> tuple[str, ...]:
    return (
        f"{metric}_vs_fedavg_mean", f"{metric}_vs_fedavg_ci_low", f"{metric}_vs_fedavg_ci_high",
        f"{metric}_vs_fedavg_wins", f"{metric}_vs_fedavg_losses", f"{metric}_vs_fedavg_p", f"{metric}_vs_fedavg_p_holm",
        "best_other", f"{metric}_vs_best_other_mean", f"{metric}_vs_best_other_ci_low",
        f"{metric}_vs_best_other_ci_high", f"{metric}_vs_best_other_wins", f"{metric}_vs_best_other_losses",
        f"{metric}_vs_best_other_p", f"{metric}_vs_best_other_p_holm",
    )



_RUN_FIELDS = ("convergence_round_mean", "convergence_round_std", "bytes_up_per_run", "bytes_down_per_run",
               "seconds_per_run")
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


def plan_compare(template: Job, methods: Sequence[str], seeds: Sequence[int],
                 hyperparameters: Mapping[str, Mapping[str, Any]] | None = None) -> list[Job]:
    """The jobs of a comparison: every method of ``methods`` on every seed of ``seeds`` (seed-major:
    all methods of the first seed, then the next), each a copy of ``template`` with the method's
    hyper-parameter overrides from ``hyperparameters``.
    """
    if not methods:
        raise ValueError("methods must name at least one method")
    if not seeds:
        raise ValueError("seeds must hold at least one seed")
    overrides = hyperparameters or {}
    return [template.with_(method=m, seed=s, hyperparameters=dict(overrides.get(m, {})))
            for s in seeds for m in methods]


def validate_jobs(jobs: Sequence[Job]) -> None:
    """Fail fast (before any run starts) on bad hyper-parameters, data or graphs: every method is
    built and set up on the first job's data, so a bad value is a ``ValueError`` before ``out`` changes.
    """
    from topofl.api import load_job_data, peer_models, per_client

    if not jobs:
        raise ValueError("a comparison needs at least one job")
    seen: set[str] = set()
    for job in jobs:
        if job.method in seen:
            continue
        seen.add(job.method)
        data = load_job_data(job)
        if job.family == "peer":
            peer = build_peer(job.method, job.hyperparameters)
            graph = make_graph(job.graph, len(data.clients), seed=job.seed, **dict(job.graph_params))
            models = peer_models(per_client(job.model, len(data.clients)), data.clients, data.task, data.n_classes,
                                 peer.config.l2, input_shape=job.input_shape)
            dims = [m.n_params for m in models] if models else [
                build_model("linear", task=data.task, n_features=c.n_features,
                            n_classes=max(data.n_classes, 2)).n_params
                for c in data.clients]
            peer.node_specs(dict(enumerate(dims)), graph, np.random.default_rng(0))  # edge spaces, map storage
            continue
        algorithm = build_server(job.method, job.hyperparameters)
        model = algorithm.build_model(job.model, data.task, data.n_features, data.n_classes,
                                      **({"input_shape": job.input_shape} if job.input_shape else {}))
        algorithm.setup(model, data.client_ids, np.random.default_rng(0))


def summarise(method: str, histories: Sequence[Result], seconds: Sequence[float]) -> dict[str, Any]:
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


def add_paired(summary: list[dict[str, Any]], runs: Mapping[str, Mapping[int, Result]], metric: str = "auc") -> None:
    """Add to each summary row the method's final ``metric`` minus FedAvg's and minus the best other
    method's (by mean; highest AUC, or lowest MSE), paired over the seeds both ran: mean, 95 %
    Student-t interval (see :func:`topofl.experiments.analysis.paired_differences`), seeds won and
    lost (won: higher AUC, or lower MSE), the paired t-test's p-value and the Holm-adjusted one.
    Each column is one family for Holm's method: every method against FedAvg (``_vs_fedavg_p_holm``)
    and every method against its best other (``_vs_best_other_p_holm``; two methods that are each
    other's best other are one test, counted once). Runs with the same seed
    share the data, so pairing removes the seed-to-seed difficulty they share.
    """
    from topofl.experiments.analysis import holm

    lower_is_better = metric in ("mse", "rmse", "loss")
    done = [{"method": m, "seed": s, "final": h.final} for m, per in runs.items() for s, h in per.items()]
    score = {r["method"]: r[f"{metric}_mean"] for r in summary}
    for row in summary:
        _add_paired_row(row, runs, done, score, metric, lower_is_better)
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


def _add_paired_row(row: dict[str, Any], runs: Mapping[str, Mapping[int, Result]], done: list[dict[str, Any]],
                    score: Mapping[str, float], metric: str, lower_is_better: bool) -> None:
    """:func:`add_paired` for one summary row: its best other method and its paired columns (all but
    the Holm-adjusted p-values).
    """
    from topofl.experiments.analysis import paired_differences

    m = row["method"]
    others = [o for o in score if o != m and score[o] == score[o]]
    best = (min if lower_is_better else max)(others, key=lambda o: score[o]) if others else None
    row["best_other"] = best or ""
    for tag, ref in (("fedavg", "fedavg" if m != "fedavg" and "fedavg" in runs else None), ("best_other", best)):
        d = next((p for p in paired_differences(done, (), m, metric) if p["method"] == ref), None) if ref else None
        _set_paired(row, f"{metric}_vs_{tag}", d, lower_is_better)


def _set_paired(row: dict[str, Any], prefix: str, d: Mapping[str, Any] | None, lower_is_better: bool) -> None:
    """Fill ``row``'s paired columns ``prefix_*`` (mean, interval, wins, losses, p) from the paired
    difference ``d`` (won: higher, or lower where ``lower_is_better``); NaN and no wins without one.
    """
    if d:
        wins, losses = d["reference_wins"], d["other_wins"]
        if lower_is_better:
            wins, losses = losses, wins
        values = (d["diff_mean"], d["ci_low"], d["ci_high"], wins, losses, d["p_value"])
    else:
        values = (float("nan"), float("nan"), float("nan"), 0, 0, float("nan"))
    for suffix, value in zip(("mean", "ci_low", "ci_high", "wins", "losses", "p"), values, strict=True):
        row[f"{prefix}_{suffix}"] = value


def run_compare(
    jobs: Sequence[Job],
    out: Path | None,
    *,
    on_run_done: Callable[[str, int, Result], None] | None = None,
    on_round: Callable[[Result, RoundSummary], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every job (:func:`plan_compare`), writing results under ``out`` as rounds finish; return
    the summary rows, one per method.

    ``out`` is locked throughout (:func:`~topofl.experiments.store.results_lock`): a second process
    writing it is refused with a ``ValueError`` naming it, before anything there changes.
    """
    validate_jobs(jobs)  # writes nothing: bad input leaves ``out`` as it was (no lock file either)
    if out is None:
        return _run_compare(jobs, None, on_run_done, on_round)
    with results_lock(out):
        return _run_compare(jobs, Path(out), on_run_done, on_round)


def _run_compare(jobs: Sequence[Job], out: Path | None, on_run_done: Callable[[str, int, Result], None] | None,
                 on_round: Callable[[Result, RoundSummary], None] | None) -> list[dict[str, Any]]:
    """:func:`run_compare`, validated, with ``out`` locked."""
    from topofl.api import load_job_data, run

    methods = list(dict.fromkeys(j.method for j in jobs))
    writers = _open_outputs(jobs, out) if out is not None else None
    results: dict[str, dict[int, Result]] = {m: {} for m in methods}
    seconds: dict[str, list[float]] = {m: [] for m in methods}
    data_cache: dict[tuple[int, str], Any] = {}
    try:
        for job in jobs:
            cache_key = (job.seed, repr((job.data, sorted(job.data_params.items()), job.validation)))
            if cache_key not in data_cache:  # the methods of one seed share its data (server family: a Federation)
                data_cache.clear()
                reference = job.with_(method=_SERVER_REFERENCE, hyperparameters={}, graph=DEFAULT_GRAPH,
                                      graph_params={})
                data_cache[cache_key] = load_job_data(reference)
            federation = data_cache[cache_key]

            def record(result: Result, summary: RoundSummary, job: Job = job) -> None:
                if writers is not None and out is not None:  # writers exist exactly when out is given
                    tag = {"method": job.method, "seed": job.seed}
                    rows = result.round_records(summary.round)
                    writers["rounds"].write({**tag, **r} for r in rows)
                    writers["curves"].write([{**tag, **summary.as_dict()}])
                    append_jsonl(out / "server_log.jsonl", {**tag, **_log_entry(job, result, summary.round)})
                if on_round is not None:
                    on_round(result, summary)

            t0 = time.perf_counter()
            result = run(job.with_(data=federation, data_params={}, validation=0.0), on_round=record)
            seconds[job.method].append(time.perf_counter() - t0)
            results[job.method][job.seed] = result
            if on_run_done is not None:
                on_run_done(job.method, job.seed, result)
    finally:
        if writers is not None:
            for w in writers.values():
                w.close()
    summary = [summarise(m, list(results[m].values()), seconds[m]) for m in methods]
    task = next((r.model.task for per in results.values() for r in per.values() if r.model is not None), "binary")
    add_paired(summary, results, "mse" if task == "regression" else "auc")
    if out is not None:
        write_csv(out / "summary.csv", summary, summary_fields(task))
    return summary


#: the method whose family loads a comparison's data: every method of a comparison runs on the scenario's
#: federation (peer methods on its clients, on the job's graph)
_SERVER_REFERENCE = "fedavg"


def _log_entry(job: Job, result: Result, round_: int) -> dict[str, Any]:
    """The round's log line: the server's; for a peer method the graph and its algorithm's log."""
    if job.family == "server":
        return result.logs[-1]
    last = result.logs[-1] if result.logs and result.logs[-1]["round"] == round_ else {}
    graph = job.graph if isinstance(job.graph, str) else "custom"
    return {"round": round_, "graph": graph, "graph_edges": result.graph.number_of_edges(),
            **{k: v for k, v in last.items() if k != "round"}}


def _open_outputs(jobs: Sequence[Job], out: Path) -> dict[str, CsvAppender]:
    out.mkdir(parents=True, exist_ok=True)
    for name in ("rounds.csv", "curves.csv", "server_log.jsonl", "summary.csv"):
        (out / name).unlink(missing_ok=True)
    first = jobs[0].file_dict()
    config = {**{k: v for k, v in first.items() if k not in ("method", "seed", "hyperparameters")},
              "methods": list(dict.fromkeys(j.method for j in jobs)),
              "seeds": list(dict.fromkeys(j.seed for j in jobs)),
              "hyperparameters": {j.method: dict(j.hyperparameters) for j in jobs}, "versions": versions()}
    write_json_atomic(out / "config.json", config)
    return {
        "rounds": CsvAppender(out / "rounds.csv", ("method", "seed") + ROUND_FIELDS),
        "curves": CsvAppender(out / "curves.csv", ("method", "seed") + ROUND_SUMMARY_FIELDS),
    }


def versions() -> dict[str, str]:
    """Versions of Python and the packages that shape the numbers, and the git commit of the
    topofl source that ran (``git commit``).
    """
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version(), "git commit": git_commit()}
    for pkg in ("topofl", "numpy", "scipy", "scikit-learn", "giotto-ph", "gudhi", "pot", "fastcluster", "torch",
                "flwr"):
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
