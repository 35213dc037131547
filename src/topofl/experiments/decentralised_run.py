"""Execution of one decentralised run (Sheaf-FMTL and its baselines) for the experiment runner."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from topofl.experiments.results import CsvAppender, append_jsonl
from topofl.experiments.store import write_done
from topofl.federation.history import ITERATION_FIELDS, PEER_RECORD_FIELDS
from topofl.job import Job


def execute_decentralised(job: Job, paths: dict[str, Path]) -> dict[str, Any]:
    """Run one decentralised ``job``, writing its per-client rows, curves and log to ``paths``;
    return its done-record (final metrics, timings, graph size, client dimensions, each client's
    target scale when the data were standardised per client (``y_scales``: what an analysis needs to
    report an MSE in the target's units without loading the data again), and the restriction maps'
    Frobenius norms for Sheaf-FMTL).
    """
    from topofl.api import load_job_data, run
    from topofl.methods import build_peer

    for p in paths.values():
        p.unlink(missing_ok=True)
    data = load_job_data(job)
    algo = build_peer(job.method, job.hyperparameters)
    key = job.key
    eval_every = int(job.setting["eval_every"]) if "eval_every" in job.setting else max(1, job.rounds // 50)
    with CsvAppender(paths["rounds"], tuple(key) + PEER_RECORD_FIELDS) as rounds_out, \
            CsvAppender(paths["curves"], tuple(key) + ITERATION_FIELDS) as curves_out:

        def on_round(history: Any, summary: Any) -> None:
            rounds_out.write({**key, **r} for r in history.round_records(summary.round))
            curves_out.write([{**key, **history.iterations[-1]}])

        t0 = time.perf_counter()
        history = run(job.with_(data=data, data_params={}, validation=0.0), on_round=on_round, algorithm=algo,
                      eval_every=eval_every)
    graph = history.graph
    append_jsonl(paths["log"], {**key, "graph_edges": graph.number_of_edges(),
                                **(history.logs[-1] if history.logs else {})})
    final = history.iterations[-1]
    finals: dict[str, Any] = {k: final.get(k) for k in ("accuracy", "accuracy_std", "loss", "cumulative_bits",
                                                          "cumulative_flops", "map_storage_bytes")}
    finals.update({k: final[k] for k in ("mse", "rmse", "r2") if k in final})   # regression only
    done = {
        **key, "final": finals,
        "seconds": time.perf_counter() - t0, "graph_edges": graph.number_of_edges(),
        "client_dims": [c.n_features for c in data.clients],
    }
    scales = [c.meta.get("y_scale") for c in data.clients]
    if all(v is not None for v in scales):
        done["y_scales"] = [float(v) for v in scales]
    if hasattr(algo, "frobenius_matrix"):
        done["frobenius"] = algo.frobenius_matrix()
    return write_done(paths, done)
