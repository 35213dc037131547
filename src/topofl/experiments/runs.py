"""Planned runs and their resumable, parallel execution.

An experiment is a list of :class:`RunSpec` (one method, one seed, one setting). Each run writes
its own files under ``DIR/runs/`` as its rounds finish — ``<id>.rounds.csv`` (per round and
client), ``<id>.curves.csv`` (per round), ``<id>.log.jsonl`` (server logs) — and, when complete,
``<id>.done.json`` (final metrics, client metrics, seconds). With ``resume=True`` completed runs
are skipped and partial ones are started again from scratch; since every run is deterministic
given its seed, a resumed experiment ends with exactly the results of an uninterrupted one.
When all runs are complete, their files are merged, in plan order, into ``DIR/rounds.csv``,
``DIR/curves.csv`` and ``DIR/server_log.jsonl``.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from topofl.experiments.results import CsvAppender, _json_default, append_jsonl, read_csv
from topofl.federation.history import ROUND_FIELDS, RoundSummary

log = logging.getLogger(__name__)

CURVE_FIELDS = tuple(RoundSummary.__dataclass_fields__)


@dataclass(frozen=True)
class RunSpec:
    """One run: ``method`` (registry name) shown as ``label``, on ``scenario`` with ``seed``.

    ``setting`` holds the experiment's own columns (e.g. ``{"attack_rate": 0.3}``); they are
    copied into every result row of the run.
    """

    experiment: str
    scenario: str
    method: str
    seed: int
    rounds: int
    label: str = ""
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)
    scenario_params: Mapping[str, Any] = field(default_factory=dict)
    setting: Mapping[str, Any] = field(default_factory=dict)
    runtime: str = "federated"  # or "decentralised" (scenario names a peer dataset, see decentralised_run)
    graph: Mapping[str, Any] = field(default_factory=dict)  # decentralised: make_graph arguments

    @property
    def key(self) -> dict[str, Any]:
        """Columns identifying the run in tidy results."""
        return {"experiment": self.experiment, "scenario": self.scenario, "method": self.label or self.method,
                **self.setting, "seed": self.seed}

    @property
    def run_id(self) -> str:
        """File-name-safe id, readable and unique (a hash guards against collisions)."""
        text = json.dumps(asdict(self), sort_keys=True, default=_json_default)
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{self.scenario}_{self.label or self.method}_{'_'.join(f'{k}{v}' for k, v in self.setting.items())}_s{self.seed}")
        return f"{slug.strip('-')}_{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def run_paths(run_dir: Path, spec: RunSpec) -> dict[str, Path]:
    rid = spec.run_id
    return {k: run_dir / f"{rid}.{k}.{ext}" for k, ext in (("rounds", "csv"), ("curves", "csv"), ("log", "jsonl"), ("done", "json"))}


def execute_run(spec: RunSpec, run_dir: Path) -> dict[str, Any]:
    """Run one spec, writing its files as rounds finish; return its done-record."""
    if spec.runtime == "decentralised":
        from topofl.experiments.decentralised_run import execute_decentralised

        return execute_decentralised(spec, run_paths(run_dir, spec))
    from topofl.algorithms.registry import build
    from topofl.data.scenarios import make_scenario
    from topofl.federation.runner import run_federation

    paths = run_paths(run_dir, spec)
    for p in paths.values():
        p.unlink(missing_ok=True)
    key = spec.key
    fed = make_scenario(spec.scenario, seed=spec.seed, **spec.scenario_params)
    algo = build(spec.method, spec.hyperparameters)
    key_fields = tuple(key)
    with CsvAppender(paths["rounds"], key_fields + ROUND_FIELDS) as rounds_out, CsvAppender(paths["curves"], key_fields + CURVE_FIELDS) as curves_out:

        def on_round(history, summary) -> None:
            rounds_out.write({**key, **r} for r in history.records if r["round"] == summary.round)
            curves_out.write([{**key, **summary.as_dict()}])
            append_jsonl(paths["log"], {**key, **history.server_logs[-1]})

        t0 = time.perf_counter()
        history = run_federation(fed, algo, spec.rounds, spec.seed, on_round=on_round)
    done = {
        **key, "final": history.final, "seconds": time.perf_counter() - t0,
        "client_metrics": {str(k): v for k, v in history.client_metrics.items()},
        "convergence_round": history.convergence_round("auc"),
        "total_bytes": int(sum(r.bytes_up + r.bytes_down for r in history.rounds)),
        "adversarial": [c.client_id for c in fed if c.meta.get("adversarial")],
    }
    write_done(paths["done"], done)
    return done


def write_done(path: Path, done: Mapping[str, Any]) -> None:
    """Atomically write a run's done-record: a run is either complete or not."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(done, default=_json_default))
    os.replace(tmp, path)


def _worker(spec: RunSpec, run_dir: str) -> dict[str, Any]:
    """One run in a worker process, with BLAS limited to one thread: the workers are forked after
    numpy loaded, so OMP_NUM_THREADS alone no longer applies, and parallel workers whose BLAS calls
    each spin several threads on the same cores run 10–100× slower (measured on 2 cores)."""
    from threadpoolctl import threadpool_limits

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with threadpool_limits(limits=1):
        return execute_run(spec, Path(run_dir))


def execute(
    specs: Sequence[RunSpec],
    out: Path,
    *,
    resume: bool = False,
    jobs: int = 1,
    on_done: Callable[[RunSpec, dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Execute ``specs`` (skipping completed ones when ``resume``) and merge their results.

    Returns the done-records in plan order.
    """
    out = Path(out)
    run_dir = out / "runs"
    if run_dir.exists() and any(run_dir.iterdir()) and not resume:
        raise ValueError(f"{out} already holds results; pass --resume to continue them or --overwrite to start again")
    run_dir.mkdir(parents=True, exist_ok=True)
    ids = [s.run_id for s in specs]
    if len(set(ids)) != len(ids):
        raise ValueError("the experiment plan holds duplicate runs")
    todo = [s for s in specs if not run_paths(run_dir, s)["done"].exists()]
    if resume and len(todo) < len(specs):
        log.info("resuming: %d of %d runs already complete", len(specs) - len(todo), len(specs))
    for spec in specs:
        if spec not in todo and on_done is not None:
            on_done(spec, load_done(run_dir, spec))
    if jobs <= 1 or len(todo) <= 1:
        for spec in todo:
            done = execute_run(spec, run_dir)
            if on_done is not None:
                on_done(spec, done)
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(_worker, s, str(run_dir)): s for s in todo}
            try:
                pending = set(futures)
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in finished:
                        done = f.result()
                        if on_done is not None:
                            on_done(futures[f], done)
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    merge(specs, out)
    return [load_done(run_dir, s) for s in specs]


def load_done(run_dir: Path, spec: RunSpec) -> dict[str, Any]:
    return json.loads(run_paths(run_dir, spec)["done"].read_text())


def merge(specs: Sequence[RunSpec], out: Path) -> None:
    """Concatenate the runs' files, in plan order, into the experiment's tidy files."""
    run_dir = out / "runs"
    for kind, name in (("rounds", "rounds.csv"), ("curves", "curves.csv"), ("log", "server_log.jsonl")):
        target = out / name
        tmp = target.with_suffix(target.suffix + ".tmp")
        with tmp.open("w") as dst:
            header_written = False
            for spec in specs:
                lines = run_paths(run_dir, spec)[kind].read_text().splitlines(keepends=True)
                if kind == "log":
                    dst.writelines(lines)
                    continue
                if lines and not header_written:
                    dst.write(lines[0])
                    header_written = True
                dst.writelines(lines[1:])
        os.replace(tmp, target)


def load_curves(out: Path) -> list[dict[str, str]]:
    """The merged per-round curves of an experiment directory."""
    return read_csv(Path(out) / "curves.csv")
