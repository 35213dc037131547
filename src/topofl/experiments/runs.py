"""Resumable, parallel execution of an experiment's runs.

:func:`execute` runs the :class:`~topofl.job.Job` runs not yet complete, each through its method family's
executor, in worker processes, and merges their files into ``DIR/rounds.csv``, ``DIR/curves.csv`` and
``DIR/server_log.jsonl``; with ``resume=True`` only a run whose sealed done-record and files verify counts as
complete. ``DIR`` is locked throughout. See docs/internals.md#topofl.experiments.runs for the details.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, wait
from pathlib import Path
from typing import Any

from topofl._validation import check_int
from topofl.experiments.decentralised_run import execute_decentralised
from topofl.experiments.federated_run import execute_federated
from topofl.experiments.paper_protocol import execute_paper_protocol, is_protocol_run
from topofl.experiments.pool import workers
from topofl.experiments.store import load_curves, load_done, merge, results_lock, run_paths, verified_done, write_done
from topofl.job import Job
from topofl.limits import MAX_JOBS
from topofl.methods import family
from topofl.threads import check_threads, limited_threads, run_threads

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
    """One run in a worker process of :func:`topofl.experiments.pool.worker_pool`, with the worker's
    compute threads (:func:`topofl.threads.limited_threads`: re-applied for each run, since a run may
    load torch or a BLAS the worker had not loaded yet); in this process, with its own number.
    """
    with limited_threads(None, model=spec.model):
        return execute_run(spec, Path(run_dir))


def execute(
    specs: Sequence[Job],
    out: Path,
    *,
    resume: bool = False,
    jobs: int = 1,
    on_done: Callable[[Job, dict[str, Any]], None] | None = None,
    threads: int | None = None,
) -> list[dict[str, Any]]:
    """Execute ``specs`` (skipping completed ones when ``resume``) and merge their results.

    Returns the done-records in plan order. ``out`` is locked for the whole call (nested in a
    caller's own :func:`~topofl.experiments.store.results_lock` of it, if any). ``threads``: the
    compute threads of each run (``None``: :mod:`topofl.threads`' policy for ``jobs`` processes).

    An interruption (``KeyboardInterrupt``; the command line turns SIGTERM into one) stops the
    workers at once (:func:`topofl.experiments.pool.stop_workers`) and propagates: the runs that
    finished are on disk, sealed, and ``resume=True`` reuses them.

    Raises
    ------
    ValueError
        When another process is writing ``out`` (naming it), when ``out`` holds results and not
        ``resume``, when the plan holds a run twice, or for a bad ``jobs`` or ``threads``.
    """
    check_int("jobs", jobs, 1, MAX_JOBS)
    if threads is not None:
        check_threads(threads)
    out = Path(out)
    with results_lock(out):
        return _execute(specs, out, resume, jobs, on_done, threads)


def _execute(
    specs: Sequence[Job], out: Path, resume: bool, jobs: int, on_done: Callable[[Job, dict[str, Any]], None] | None,
    threads: int | None = None,
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

    _run_todo(todo, run_dir, jobs, finished, threads)
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


def _run_todo(todo: Sequence[Job], run_dir: Path, jobs: int, finished: Callable[[Job, dict[str, Any]], None],
              threads: int | None = None) -> None:
    """Run ``todo``, in this process or in a pool of ``jobs`` workers (:func:`~topofl.experiments.pool.workers`:
    stopped at once on an interruption), handing each done-record to ``finished`` as its run ends.
    """
    if jobs <= 1 or len(todo) <= 1:
        n = run_threads(jobs, threads)   # the last run left takes the workers' number: the flags decide, not the plan
        for spec in todo:
            with limited_threads(n, model=spec.model):
                record = execute_run(spec, run_dir)
            finished(spec, record)
        return
    with workers(jobs, threads) as pool:
        futures = {pool.submit(_worker, s, str(run_dir)): s for s in todo}
        pending = set(futures)
        while pending:
            done_now, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done_now:
                finished(futures[f], f.result())
