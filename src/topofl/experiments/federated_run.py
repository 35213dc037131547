"""Execution of one server-based run (pTopoFL and the federated baselines) for the experiment runner."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from topofl.experiments.results import CsvAppender, append_jsonl
from topofl.experiments.store import RunSpec, write_done
from topofl.federation.history import ROUND_FIELDS, RoundSummary

CURVE_FIELDS = tuple(RoundSummary.__dataclass_fields__)


def execute_federated(spec: RunSpec, paths: dict[str, Path]) -> dict[str, Any]:
    """Run one server-based spec, writing its files as rounds finish; return its done-record."""
    from topofl.data.scenarios import make_scenario
    from topofl.federation.runner import run_federation
    from topofl.methods import build_server

    for p in paths.values():
        p.unlink(missing_ok=True)
    key = spec.key
    fed = make_scenario(spec.scenario, seed=spec.seed, **spec.scenario_params)
    if spec.validation:
        fed = fed.with_validation(spec.validation, spec.seed)
    algo = build_server(spec.method, spec.hyperparameters)
    attackers: frozenset[int] = frozenset()
    if spec.attack:
        from topofl.robustness.attacks import attacked, parse_attack

        attack = parse_attack(spec.attack)
        attackers = attack.adversaries(fed.client_ids)
        algo = attacked(algo, attack, attackers)
    key_fields = tuple(key)
    with CsvAppender(paths["rounds"], key_fields + ROUND_FIELDS) as rounds_out, CsvAppender(paths["curves"], key_fields + CURVE_FIELDS) as curves_out:

        def on_round(history, summary) -> None:
            rounds_out.write({**key, **r} for r in history.records if r["round"] == summary.round)
            curves_out.write([{**key, **summary.as_dict()}])
            append_jsonl(paths["log"], {**key, **history.server_logs[-1]})

        t0 = time.perf_counter()
        history = run_federation(fed, algo, spec.rounds, spec.seed, on_round=on_round, model=spec.model)
    done = {
        **key, "final": history.final, "seconds": time.perf_counter() - t0,
        "client_metrics": {str(k): v for k, v in history.client_metrics.items()},
        "convergence_round": history.convergence_round("auc"),
        "total_bytes": int(sum(r.bytes_up + r.bytes_down for r in history.rounds)),
        "adversarial": sorted({c.client_id for c in fed if c.meta.get("adversarial")} | set(attackers)),
        "refused_last_round": sorted({int(f.client) for f in history.failures
                                      if f.stage == "fit" and f.client is not None and history.rounds and f.round == history.rounds[-1].round}),
    }
    return write_done(paths, done)
