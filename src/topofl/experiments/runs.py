"""Resumable, parallel execution of an experiment's runs.

:func:`execute` runs the :class:`~topofl.job.Job` runs not yet complete, each through its method family's
executor, in worker processes, and merges their files into ``DIR/rounds.csv``, ``DIR/curves.csv`` and
``DIR/server_log.jsonl``; with ``resume=True`` only a run whose sealed done-record and files verify counts as
complete. ``DIR`` is locked throughout. See docs/internals.md#topofl.experiments.runs for the details.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from topofl._validation import check_int
from topofl.experiments.decentralised_run import execute_decentralised
from topofl.experiments.federated_run import execute_federated
from topofl.experiments.paper_protocol import execute_paper_protocol, is_protocol_run
from topofl.experiments.store import load_curves, load_done, merge, results_lock, run_paths, verified_done, write_done
from topofl.job import Job
from topofl.limits import MAX_JOBS
from topofl.methods import family

log = logging.getLogger(__name__)

__all__ = ["execute", "execute_run", "load_curves", "load_done", "merge", "results_lock", "run_paths", "verified_done",
           "write_done"]


def execute_run(spec: Job, run_dir: Path) -> dict[str, Any]:
    """Run one spec with the executor of its method's family; return its done-record."""
    paths = run_paths(run_dir, spec)
    if is_protocol_run(spec):  # the authors' paper-era protocol (``paper:<method>``): its own training and scoring
        return execute_paper_protocol(spec, paths)
    if family(spec.method) == "peer":
        return execute_decentralised(spec, paths)
    return execute_federated(spec, paths)


def _worker(spec: Job, run_dir: str) -> dict[str, Any]:
    """One run in a worker process, with BLAS limited to one thread: the workers are forked after
    numpy loaded, so OMP_NUM_THREADS alone no longer applies, and parallel workers whose BLAS calls
    each spin several threads on the same cores run 10–100× slower (measured on 2 cores).
    """
    from threadpoolctl import threadpool_limits

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if spec.model != "linear":  # a torch model: one thread per worker too (torch keeps its own pool)
        import torch

        torch.set_num_threads(1)
    with threadpool_limits(limits=1):
        return execute_run(spec, Path(run_dir))


def execute(
    specs: Sequence[Job],
    out: Path,
    *,
    resume: bool = False,
    jobs: int = 1,
    on_done: Callable[[Job, dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Execute ``specs`` (skipping completed ones when ``resume``) and merge their results.

    Returns the done-records in plan order. ``out`` is locked for the whole call (nested in a
    caller's own :func:`~topofl.experiments.store.results_lock` of it, if any).

    Raises
    ------
    ValueError
        When another process is writing ``out`` (naming it), when ``out`` holds results and not
        ``resume``, or when the plan holds a run twice.
    """
    check_int("jobs", jobs, 1, MAX_JOBS)
    out = Path(out)
    with results_lock(out):
        return _execute(specs, out, resume, jobs, on_done)


def _execute(
    specs: Sequence[Job], out: Path, resume: bool, jobs: int, on_done: Callable[[Job, dict[str, Any]], None] | None,
) -> list[dict[str, Any]]:
    """:func:`execute`, with ``out`` locked."""
    run_dir = out / "runs"
    if run_dir.exists() and any(run_dir.iterdir()) and not resume:
        raise ValueError(f"{out} already holds results; pass --resume to continue them or --overwrite to start again")
    run_dir.mkdir(parents=True, exist_ok=True)
    ids = [s.run_id for s in specs]
    if len(set(ids)) != len(ids):
        raise ValueError("the experiment plan holds duplicate runs")
    records, todo = _sort_done(specs, run_dir)
    if resume and len(todo) < len(specs):
        log.info("resuming: %d of %d runs already complete", len(specs) - len(todo), len(specs))
    for spec in specs:
        if spec.run_id in records and on_done is not None:
            on_done(spec, records[spec.run_id])

    def finished(spec: Job, done: dict[str, Any]) -> None:
        records[spec.run_id] = done
        if on_done is not None:
            on_done(spec, done)

    _run_todo(todo, run_dir, jobs, finished)
    merge(specs, out)
    return [records[s.run_id] for s in specs]


def _sort_done(specs: Sequence[Job], run_dir: Path) -> tuple[dict[str, dict[str, Any]], list[Job]]:
    """The done-records of the runs of ``specs`` that verify complete (by run id), and the runs still
    to do (in plan order), warning of each found torn, edited or unsealed.
    """
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
    return records, todo


def _run_todo(todo: Sequence[Job], run_dir: Path, jobs: int, finished: Callable[[Job, dict[str, Any]], None]) -> None:
    """Run ``todo``, in this process or in a pool of ``jobs`` workers, handing each done-record to
    ``finished`` as its run ends.
    """
    if jobs <= 1 or len(todo) <= 1:
        for spec in todo:
            finished(spec, execute_run(spec, run_dir))
        return
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
