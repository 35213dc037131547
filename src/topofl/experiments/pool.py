"""The worker processes of the experiment runner and the tuner, and stopping them at once.

:func:`worker_pool` starts a :class:`~concurrent.futures.ProcessPoolExecutor` whose workers

* ignore SIGINT: Ctrl-C reaches the whole foreground process group, and only the parent decides
  (a worker interrupted inside a run would hand its ``KeyboardInterrupt`` back as that run's
  result and go on with the next one);
* take SIGTERM's default action (the parent's handler, inherited through ``fork``, is reset), so
  :func:`stop_workers` ends them at once;
* set their compute threads once (:func:`topofl.threads.set_threads`);
* exit when their parent is gone (a parent killed with SIGKILL leaves no orphan running runs).

:func:`stop_workers` is what the parent does on an interruption (or any error): cancel what has
not started, terminate the workers (SIGTERM, then SIGKILL after a grace period) and reap them.
A run a worker did not finish leaves no sealed done-record, so ``--resume`` redoes it; finished
runs were written atomically as they finished and are kept.
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from topofl._validation import check_int
from topofl.limits import MAX_JOBS

log = logging.getLogger(__name__)

__all__ = ["stop_workers", "worker_pool", "workers"]

#: seconds a terminated worker is given before it is killed
GRACE_SECONDS = 3.0
#: how often a worker checks that its parent is alive
PARENT_POLL_SECONDS = 1.0


def _watch_parent(parent: int, started_by: int) -> None:
    """End this worker (no clean-up: its run is unfinished and unsealed) once ``parent`` (the command's
    process) is gone, or the process that started this worker (``started_by``: the parent itself with
    ``fork`` and ``spawn``, the fork server with ``forkserver``, which exits with the parent) is.
    """
    while True:
        time.sleep(PARENT_POLL_SECONDS)
        try:
            os.kill(parent, 0)
        except ProcessLookupError:
            os._exit(1)
        except PermissionError:  # pragma: no cover - the pid now belongs to another user's process
            os._exit(1)
        if os.getppid() != started_by:
            os._exit(1)


def _init_worker(threads: int | None, parent: int) -> None:
    """A worker's start: signals (see the module), compute threads, the watch on its parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from topofl.threads import set_threads

    set_threads(threads)
    threading.Thread(target=_watch_parent, args=(parent, os.getppid()), name="topofl-parent-watch",
                     daemon=True).start()


def worker_pool(jobs: int, threads: int | None = None) -> ProcessPoolExecutor:
    """A pool of ``jobs`` worker processes with ``threads`` compute threads each (``None``:
    :func:`topofl.threads.run_threads` ``(jobs)``: the number :func:`topofl.threads.set_threads` gave
    this process — the command line's ``--threads`` — else :func:`topofl.threads.default_threads` ``(jobs)``).

    Raises
    ------
    ValueError
        ``jobs`` is not an integer from 1 to :data:`~topofl.limits.MAX_JOBS`, or ``threads`` not one from 1
        to the usable CPUs.
    """
    from topofl.threads import run_threads

    check_int("jobs", jobs, 1, MAX_JOBS)
    n = run_threads(jobs, threads)
    return ProcessPoolExecutor(max_workers=jobs, initializer=_init_worker, initargs=(n, os.getpid()))


def stop_workers(pool: Any) -> None:
    """Stop ``pool`` now: cancel the calls not started, terminate its workers (SIGTERM; SIGKILL after
    :data:`GRACE_SECONDS`), reap them and wait for the pool's manager thread to see them gone. Safe
    on a pool already shut down, and on any executor (one without worker processes is only shut down).

    The order matters: the pool is told to shut down before its workers die, and its manager thread
    has ended before this returns, so that neither this call nor the interpreter's exit wakes a
    manager that is closing its pipes (Python 3.11 can then print ``OSError: Bad file descriptor``).
    """
    processes = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for p in processes:
        with contextlib.suppress(Exception):  # already gone
            p.terminate()
    deadline = time.monotonic() + GRACE_SECONDS
    for p in processes:
        with contextlib.suppress(Exception):
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(1.0)
    if isinstance(manager, threading.Thread) and manager.is_alive():
        manager.join(GRACE_SECONDS)
    if processes:
        log.info("stopped %d worker process(es)", len(processes))


@contextlib.contextmanager
def workers(jobs: int, threads: int | None = None) -> Iterator[ProcessPoolExecutor]:
    """:func:`worker_pool` as a ``with`` block: shut down cleanly when the block ends normally,
    stopped at once (:func:`stop_workers`) when it ends with an exception — Ctrl-C, SIGTERM (the
    command line turns it into ``KeyboardInterrupt``) or an error.
    """
    pool = worker_pool(jobs, threads)
    try:
        yield pool
    except BaseException:
        stop_workers(pool)
        raise
    pool.shutdown()
