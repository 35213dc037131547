"""Planned runs and their resumable, parallel execution.

An experiment is a list of :class:`RunSpec` (one method, one seed, one setting). Each run writes
its own files under ``DIR/runs/`` as its rounds finish — ``<id>.rounds.csv`` (per round and
client), ``<id>.curves.csv`` (per round), ``<id>.log.jsonl`` (server logs) — and, when complete,
``<id>.done.json`` (final metrics, client metrics, seconds, and each file's row count and SHA-256),
written atomically. With ``resume=True`` a run counts as complete only when its done-record
parses and every file still matches it; a run whose files were torn, edited or deleted, or whose
done-record is torn, is redone from scratch with a warning naming the file. Since every run is
deterministic given its seed, a resumed experiment ends with exactly the results of an
uninterrupted one.
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

from topofl._validation import check_int
from topofl.experiments.results import CsvAppender, _json_default, append_jsonl, file_record, read_csv, write_json_atomic, write_text_atomic
from topofl.federation.history import ROUND_FIELDS, RoundSummary
from topofl.limits import MAX_JOBS

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


#: a run's result files (by kind) and whether each has a header line
RESULT_FILES = {"rounds": True, "curves": True, "log": False}


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
    return write_done(paths, done)


def write_done(paths: Mapping[str, Path], done: Mapping[str, Any]) -> dict[str, Any]:
    """Atomically write a run's done-record, with every result file's row count and SHA-256:
    a run is either complete, with files that can be verified, or not. Returns the record."""
    record = {**done, "files": {kind: file_record(paths[kind], header) for kind, header in RESULT_FILES.items()}}
    write_json_atomic(paths["done"], record, indent=None)
    return json.loads(json.dumps(record, default=_json_default))  # as a resumed run reads it back


def verified_done(paths: Mapping[str, Path]) -> tuple[dict[str, Any] | None, str | None]:
    """``(done-record, None)`` when the run is complete and its files match the record;
    ``(None, reason)`` when it must be redone (``reason`` is ``None`` for a run never finished)."""
    done = paths["done"]
    if not done.exists():
        return None, None
    try:
        record = json.loads(done.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"{done.name} is torn or not JSON ({exc})"
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict):
        return None, f"{done.name} records no file row counts and hashes (written by an older topofl)"
    for kind, header in RESULT_FILES.items():
        path = paths[kind]
        if not path.exists():
            return None, f"{path.name} is missing"
        got, want = file_record(path, header), files.get(kind)
        if got != want:
            rows = want.get("rows") if isinstance(want, dict) else "?"
            return None, f"{path.name} does not match its done-record ({got['rows']} rows now, {rows} recorded; SHA-256 differs)"
    return record, None


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
    check_int("jobs", jobs, 1, MAX_JOBS)
    out = Path(out)
    run_dir = out / "runs"
    if run_dir.exists() and any(run_dir.iterdir()) and not resume:
        raise ValueError(f"{out} already holds results; pass --resume to continue them or --overwrite to start again")
    run_dir.mkdir(parents=True, exist_ok=True)
    ids = [s.run_id for s in specs]
    if len(set(ids)) != len(ids):
        raise ValueError("the experiment plan holds duplicate runs")
    records: dict[str, dict[str, Any]] = {}
    todo = []
    for spec in specs:
        record, problem = verified_done(run_paths(run_dir, spec))
        if record is None:
            if problem:
                log.warning("run %s: %s; redoing the run", spec.run_id, problem)
            todo.append(spec)
        else:
            records[spec.run_id] = record
    if resume and len(todo) < len(specs):
        log.info("resuming: %d of %d runs already complete", len(specs) - len(todo), len(specs))
    for spec in specs:
        if spec.run_id in records and on_done is not None:
            on_done(spec, records[spec.run_id])

    def finished(spec: RunSpec, done: dict[str, Any]) -> None:
        records[spec.run_id] = done
        if on_done is not None:
            on_done(spec, done)

    if jobs <= 1 or len(todo) <= 1:
        for spec in todo:
            finished(spec, execute_run(spec, run_dir))
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(_worker, s, str(run_dir)): s for s in todo}
            try:
                pending = set(futures)
                while pending:
                    done_now, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in done_now:
                        finished(futures[f], f.result())
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    merge(specs, out)
    return [records[s.run_id] for s in specs]


def load_done(run_dir: Path, spec: RunSpec) -> dict[str, Any]:
    """A complete run's verified done-record; ``ValueError`` naming the file otherwise."""
    record, problem = verified_done(run_paths(run_dir, spec))
    if record is None:
        raise ValueError(f"run {spec.run_id} is not complete: {problem or 'no done-record'}")
    return record


def merge(specs: Sequence[RunSpec], out: Path) -> None:
    """Concatenate the runs' files, in plan order, into the experiment's tidy files (atomically)."""
    run_dir = out / "runs"
    for kind, name in (("rounds", "rounds.csv"), ("curves", "curves.csv"), ("log", "server_log.jsonl")):
        parts: list[str] = []
        header_written = False
        for spec in specs:
            lines = run_paths(run_dir, spec)[kind].read_text().splitlines(keepends=True)
            if not RESULT_FILES[kind]:
                parts.extend(lines)
                continue
            if lines and not header_written:
                parts.append(lines[0])
                header_written = True
            parts.extend(lines[1:])
        write_text_atomic(out / name, "".join(parts))


def load_curves(out: Path) -> list[dict[str, str]]:
    """The merged per-round curves of an experiment directory."""
    return read_csv(Path(out) / "curves.csv")
