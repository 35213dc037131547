"""One policy for the compute threads of BLAS/OpenMP (NumPy, SciPy) and PyTorch, in every entry point.

Federated runs train many small models: a thread pool per process that is larger than the cores
left to it makes every parallel region wait for a descheduled thread (one ``cnn-small`` FedAvg
round took 240 s with torch's default threads on a busy 2-core machine, 36 s with one). So:

* a single run in this process (:func:`topofl.simulate`, ``topofl run``, ``topofl compare``,
  an experiment with ``--jobs 1``) uses :func:`default_threads` ``(1)`` threads: half the CPUs
  this process may use (the physical cores of a two-way SMT machine, torch's own default), at
  most :data:`MAX_DEFAULT_THREADS`, at least 1;
* ``P`` worker processes (``--jobs P``) use :func:`default_threads` ``(P)`` threads each, so that
  together they never take more than half the CPUs (at least one thread each), and so does a run
  of such a command that runs in this process (the last run left): :func:`run_threads`;
* ``--threads N`` on the command line, ``threads=N`` of :func:`topofl.simulate`, or
  :func:`set_threads` sets ``N`` per process instead, ``1 <= N <=`` :func:`usable_cpus`.

The same number goes to every pool: the BLAS and OpenMP pools already loaded (through
threadpoolctl), torch's intra-op pool (when torch is loaded or the model needs it), and the
``OMP_NUM_THREADS``-style variables that libraries loaded later (and child processes) read.
Torch's results can differ in the last bit between thread counts (the order of a float sum), so
the count is a function of the machine and the flags only, never of the machine's load.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

from topofl._validation import check_int

log = logging.getLogger(__name__)

__all__ = ["MAX_DEFAULT_THREADS", "THREAD_VARIABLES", "check_threads", "default_threads", "limited_threads",
           "node_threads", "process_threads", "run_threads", "set_threads", "thread_info", "usable_cpus"]

#: most threads a process gets by default (small federated models gain little beyond)
MAX_DEFAULT_THREADS = 4
#: the environment variables that the BLAS/OpenMP libraries and torch read when they load
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")

_process_setting: int | None = None   # what set_threads gave this process (None: the default policy)
_active: list[int] = []   # the numbers of the limited_threads blocks open in this process, innermost last
_node_threads: int | None = None   # what node_threads applied in this process (None: not yet)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one, else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


def default_threads(processes: int = 1) -> int:
    """The default threads of each of ``processes`` processes working side by side: half the usable
    CPUs shared among them, at most :data:`MAX_DEFAULT_THREADS`, at least 1.

    Raises
    ------
    ValueError
        ``processes`` is not a positive integer.
    """
    check_int("processes", processes, 1, None)
    return max(1, min(MAX_DEFAULT_THREADS, usable_cpus() // (2 * processes)))


def check_threads(threads: Any, name: str = "threads") -> int:
    """``threads`` as an ``int``, or ``ValueError`` naming ``name`` unless it is an integer from 1 to
    :func:`usable_cpus` (more threads than CPUs only make the threads wait for each other).
    """
    check_int(name, threads, 1, None)
    cpus = usable_cpus()
    if int(threads) > cpus:
        raise ValueError(f"{name} must be at most {cpus} (the CPUs this process may use); got {threads}")
    return int(threads)


def process_threads() -> int | None:
    """The threads :func:`set_threads` gave this process, or ``None`` (the default policy applies)."""
    return _process_setting


def _resolve(threads: int | None, name: str = "threads") -> int:
    """``threads`` checked; for ``None`` the innermost open :func:`limited_threads` block's number, else
    :func:`set_threads`' number, else :func:`default_threads` ``(1)``.
    """
    if threads is not None:
        return check_threads(threads, name)
    if _active:
        return _active[-1]
    return _process_setting if _process_setting is not None else default_threads(1)


def run_threads(jobs: int = 1, threads: int | None = None) -> int:
    """The compute threads of each run of a command that runs ``jobs`` at a time, in this process or in
    workers alike (a function of the flags and the machine, never of how many runs are left):
    ``threads`` (checked), else the number :func:`set_threads` gave this process (``--threads``), else
    for one job the enclosing :func:`limited_threads` block's number or :func:`default_threads` ``(1)``,
    for several :func:`default_threads` ``(jobs)``.

    Raises
    ------
    ValueError
        ``jobs`` is not a positive integer, or ``threads`` not one from 1 to :func:`usable_cpus`.
    """
    check_int("jobs", jobs, 1, None)
    if threads is not None:
        return check_threads(threads)
    if jobs == 1:
        return _resolve(None)
    return _process_setting if _process_setting is not None else default_threads(jobs)


def _torch(load: bool) -> Any:
    """The torch module when it is loaded (or ``load`` and it is installed), else ``None``."""
    if "torch" in sys.modules:
        return sys.modules["torch"]
    if load:
        try:
            import torch
        except ImportError:
            return None
        return torch
    return None


#: threadpoolctl's view of the loaded BLAS/OpenMP libraries, and ``len(sys.modules)`` when it was taken
_controller: tuple[int, Any] | None = None


def _threadpool_limits(threads: int) -> _PoolLimits | None:
    """Set the BLAS/OpenMP pools loaded now to ``threads`` (``None`` without threadpoolctl); what it returns puts
    the earlier numbers back.

    What threadpoolctl's ``limit(limits=threads)`` does — every pool's number read first (pools can share one: an
    OpenMP-threaded OpenBLAS and its libgomp), then every pool set (also one already at the number: a pthreads
    OpenBLAS obeys the thread that set it first) — with each pool's own ``get_num_threads`` and ``set_num_threads``
    instead of its ``info()`` records. The scan of the process's libraries (about 0.65 ms, twice per
    :func:`limited_threads` before) is kept while no module has been imported since: a native library comes with the
    import of the module that loads it (numpy's, SciPy's, torch's pools), and one loaded by other means still starts
    with the thread variables.
    """
    global _controller
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - a core dependency; kept optional here
        return None
    loaded = len(sys.modules)
    if _controller is None or _controller[0] != loaded:
        _controller = (loaded, ThreadpoolController())
    pools = list(_controller[1].lib_controllers)
    before = [(pool, pool.get_num_threads()) for pool in pools]
    for pool in pools:
        pool.set_num_threads(threads)
    return _PoolLimits(before)


class _PoolLimits:
    """The pools :func:`_threadpool_limits` set and the numbers they had before."""

    __slots__ = ("before",)

    def __init__(self, before: list[tuple[Any, Any]]) -> None:
        self.before = before

    def restore_original_limits(self) -> None:
        """Every pool back to its number from before, as threadpoolctl's limiter puts them back."""
        for pool, n in self.before:
            pool.set_num_threads(n)


def set_threads(threads: int | None = None, *, torch: bool = False) -> int:
    """Set this process's compute threads, for the rest of its life, and return the number.

    ``threads=None`` applies :func:`default_threads` ``(1)``. Sets the thread variables
    (:data:`THREAD_VARIABLES`, read by libraries loaded later and by child processes), the
    BLAS/OpenMP pools loaded now (threadpoolctl) and torch's intra-op threads when torch is
    loaded, or with ``torch=True`` when it is installed. Later calls of
    :func:`limited_threads` with ``threads=None`` use this number.

    Raises
    ------
    ValueError
        ``threads`` is not an integer from 1 to :func:`usable_cpus`.
    """
    global _process_setting
    n = check_threads(threads) if threads is not None else default_threads(1)
    for var in THREAD_VARIABLES:
        os.environ[var] = str(n)
    _threadpool_limits(n)
    module = _torch(torch)
    if module is not None and module.get_num_threads() != n:
        module.set_num_threads(n)
    _process_setting = n
    log.debug("compute threads of process %d: %d", os.getpid(), n)
    return n


def node_threads() -> int:
    """Apply a Flower node's thread policy, once per process, and return its number (what the
    ClientApp does at its first message: :func:`topofl.flower.client_app.thread_policy`).

    The number set before wins: an enclosing :func:`limited_threads` block's (an in-process run,
    left as it is) or :func:`set_threads`' (``--threads``); else ``OMP_NUM_THREADS`` when the
    runtime set it (Ray, to the CPUs of the node's actor; a
    :class:`~topofl.deploy.LocalDeployment`, to each node's share of the machine), at most
    :func:`usable_cpus`; else :func:`default_threads` ``(1)``.
    """
    global _node_threads
    if _active:
        return _active[-1]
    if _process_setting is not None:
        return _process_setting
    if _node_threads is None:
        given = os.environ.get("OMP_NUM_THREADS", "").strip()
        n = min(int(given), usable_cpus()) if given.isascii() and given.isdigit() and int(given) >= 1 else None
        _node_threads = set_threads(n)
    return _node_threads


def needs_torch(model: Any) -> bool:
    """Whether a model spec (``None``, a name, a comma list or a list of names, an object) trains with torch:
    every spec but ``None`` and ``"linear"``.
    """
    if model is None:
        return False
    if isinstance(model, str):
        return any(m.strip() not in ("", "linear") for m in model.split(","))
    if isinstance(model, (list, tuple)):
        return any(needs_torch(m) for m in model)
    return True  # a torch.nn.Module, a factory of one, or a ready model object (torch is then loaded if installed)


@contextlib.contextmanager
def limited_threads(threads: int | None = None, *, model: Any = None, name: str = "threads") -> Iterator[int]:
    """Run the ``with`` block with ``threads`` compute threads, restoring the earlier numbers after.

    ``threads=None``: the number of the enclosing ``limited_threads`` block, else the number
    :func:`set_threads` gave this process, else :func:`default_threads` ``(1)``. Limits the
    BLAS/OpenMP pools loaded now (threadpoolctl) and torch's intra-op pool when torch is loaded or
    ``model`` needs it (:func:`needs_torch`; torch is then loaded here), and sets the thread
    variables for the block, so that a BLAS loaded within it starts with the same number (and
    keeps it: a library's pool cannot be unloaded). A variable that ``os.environ`` already shows at the
    number is not written again, and each is put back as ``os.environ`` showed it (Python's view of the
    environment, which ``os.putenv`` leaves behind).

    Raises
    ------
    ValueError
        ``threads`` is not an integer from 1 to :func:`usable_cpus` (``name`` names it).
    """
    n = _resolve(threads, name)
    module = _torch(needs_torch(model))
    before = module.get_num_threads() if module is not None else None
    environ, value = os.environ, str(n)
    variables = {var: environ.get(var) for var in THREAD_VARIABLES}
    for var, earlier in variables.items():  # a BLAS that loads within the block (SciPy's own) starts with n threads
        if earlier != value:
            environ[var] = value
    limits = _threadpool_limits(n)
    if module is not None and before != n:
        module.set_num_threads(n)
    _active.append(n)
    try:
        yield n
    finally:
        _active.pop()
        if module is not None and before is not None and module.get_num_threads() != before:
            module.set_num_threads(before)
        if limits is not None:
            limits.restore_original_limits()
        for var, earlier in variables.items():
            if environ.get(var) == earlier:
                continue
            if earlier is None:
                environ.pop(var, None)
            else:
                environ[var] = earlier


def thread_info() -> dict[str, Any]:
    """The compute threads of this process: ``{"torch": n or None (not loaded), "blas": [{"api", "num_threads"}, ...],
    "setting": process_threads()}`` — what the tests check.
    """
    try:
        from threadpoolctl import threadpool_info
        blas = [{"api": i.get("internal_api"), "num_threads": i.get("num_threads")} for i in threadpool_info()]
    except ImportError:  # pragma: no cover
        blas = []
    module = sys.modules.get("torch")
    return {"torch": module.get_num_threads() if module is not None else None, "blas": blas,
            "setting": _process_setting}
