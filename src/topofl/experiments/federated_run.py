"""Execution of one server-based run (pTopoFL and the federated baselines) for the experiment runner."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from topofl.experiments.results import CsvAppender, append_jsonl
from topofl.experiments.store import write_done
from topofl.federation.history import ROUND_FIELDS, ROUND_SUMMARY_FIELDS, RoundSummary
from topofl.job import Job


def execute_federated(job: Job, paths: dict[str, Path]) -> dict[str, Any]:
    """Run one server-based job, writing its files as rounds finish; return its done-record.

    A job whose ``setting`` names a ``probe`` (:mod:`topofl.experiments.probes`) has the probe run
    on its result; what it measures is kept in the done-record (``probe``), so resuming skips it too.
    """
    from topofl.api import load_job_data, run

    for p in paths.values():
        p.unlink(missing_ok=True)
    key = job.key
    fed = load_job_data(job)
    attackers: frozenset[int] = frozenset()
    if job.attack:
        from topofl.robustness.attacks import parse_attack

        attackers = parse_attack(job.attack).adversaries(fed.client_ids)
    key_fields = tuple(key)
    with CsvAppender(paths["rounds"], key_fields + ROUND_FIELDS) as rounds_out, \
            CsvAppender(paths["curves"], key_fields + ROUND_SUMMARY_FIELDS) as curves_out:

        def on_round(history: Any, summary: RoundSummary) -> None:
            rounds_out.write({**key, **r} for r in history.round_records(summary.round))
            curves_out.write([{**key, **summary.as_dict()}])
            append_jsonl(paths["log"], {**key, **history.server_logs[-1]})

        t0 = time.perf_counter()
        history = run(job.with_(data=fed, data_params={}, validation=0.0), on_round=on_round)
    last = history.rounds[-1].round if history.rounds else None
    done = {
        **key, "final": history.final, "seconds": time.perf_counter() - t0,
        "client_metrics": {str(k): v for k, v in history.client_metrics.items()},
        "convergence_round": history.convergence_round("auc"),
        "total_bytes": int(sum(r.bytes_up + r.bytes_down for r in history.rounds)),
        "adversarial": sorted({c.client_id for c in fed if c.meta.get("adversarial")} | set(attackers)),
        "refused_last_round": sorted({int(f.client) for f in history.failures
                                      if f.stage == "fit" and f.client is not None and f.round == last}),
    }
    if "probe" in job.setting:
        from topofl.experiments.probes import run_probe

        done["probe"] = run_probe(str(job.setting["probe"]), job, history, fed)
    return write_done(paths, done)
