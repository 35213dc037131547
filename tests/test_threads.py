"""The thread policy (:mod:`topofl.threads`): its defaults, its validation, and that the number set
takes effect — in this process (torch, BLAS through threadpoolctl), in a fresh process before torch
loads, and in the experiment runner's worker processes.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from threadpoolctl import threadpool_info

from topofl import threads as th


def _blas_threads() -> set[int]:
    return {int(i["num_threads"]) for i in threadpool_info()}


@pytest.mark.parametrize(("cpus", "processes", "expected"),
                         [(1, 1, 1), (2, 1, 1), (2, 2, 1), (8, 1, 4), (16, 1, 4), (16, 2, 4), (16, 4, 2), (16, 16, 1),
                          (6, 1, 3)])
def test_default_threads_never_oversubscribes(monkeypatch: pytest.MonkeyPatch, cpus: int, processes: int,
                                              expected: int) -> None:
    monkeypatch.setattr(th, "usable_cpus", lambda: cpus)
    n = th.default_threads(processes)
    assert n == expected
    assert n >= 1 and (n * processes <= max(cpus // 2, processes))


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, None])
def test_check_threads_refuses_what_is_not_a_positive_integer(bad: object) -> None:
    with pytest.raises(ValueError, match="threads must be an integer|threads must be >= 1|threads must be"):
        th.check_threads(bad)


def test_check_threads_refuses_more_than_the_cpus() -> None:
    too_many = th.usable_cpus() + 1
    with pytest.raises(ValueError, match=rf"--threads must be at most {too_many - 1} .*got {too_many}"):
        th.check_threads(too_many, "--threads")
    assert th.check_threads(1) == 1


def test_limited_threads_sets_torch_and_blas_and_restores_them() -> None:
    torch = pytest.importorskip("torch")
    torch_before, blas_before = torch.get_num_threads(), _blas_threads()
    other = 1 if torch_before != 1 else min(2, th.usable_cpus())
    with th.limited_threads(other) as n:
        assert n == other
        assert torch.get_num_threads() == other
        assert _blas_threads() == {other}
    assert torch.get_num_threads() == torch_before
    assert _blas_threads() == blas_before


def test_the_library_scan_is_kept_until_a_module_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    """threadpoolctl's scan of the loaded libraries (~0.65 ms) is made once, not at every block (issue 25), and
    again when an import may have brought a new pool; the limits still take effect and are restored."""
    if th.usable_cpus() < 2:
        pytest.skip("needs two CPUs to see a change of the BLAS threads")
    monkeypatch.setattr(th, "_controller", None)
    before = _blas_threads()
    scans = []
    for n in (1, 2, 1):
        with th.limited_threads(n):
            assert _blas_threads() == {n}
        assert _blas_threads() == before
        scans.append(th._controller[1])
    assert scans[0] is scans[1] is scans[2]
    monkeypatch.setitem(sys.modules, "topofl_test_new_module", object())  # an import since the scan
    with th.limited_threads(2):
        assert _blas_threads() == {2}
    assert th._controller[1] is not scans[0]


class _SharedNumber:
    """Fake pools of one shared thread number (an OpenMP-threaded OpenBLAS and the libgomp it uses: setting one
    sets the other), recording each set with the pool's name."""

    def __init__(self, n: int, calls: list[tuple[str, int]]) -> None:
        self.n, self.calls = n, calls

    def pool(self, name: str) -> object:
        shared = self

        class Pool:
            def get_num_threads(self) -> int:
                return shared.n

            def set_num_threads(self, n: int) -> None:
                shared.calls.append((name, n))
                shared.n = n

        return Pool()


def _fake_pools(monkeypatch: pytest.MonkeyPatch, n: int) -> tuple[_SharedNumber, list[tuple[str, int]]]:
    calls: list[tuple[str, int]] = []
    shared = _SharedNumber(n, calls)
    controller = type("Controller", (), {"lib_controllers": [shared.pool("openblas"), shared.pool("gomp")]})()
    monkeypatch.setattr(th, "_controller", (len(sys.modules), controller))
    return shared, calls


def test_pools_that_share_one_number_are_put_back_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review of issue 25 (helper-46): every pool's number is read before any is set — an OpenMP OpenBLAS shares
    its number with libgomp, so reading the second after setting the first would put it back to the block's."""
    shared, _ = _fake_pools(monkeypatch, 2)
    with th.limited_threads(1):
        assert shared.n == 1
    assert shared.n == 2


def test_a_block_sets_every_pool_and_puts_every_pool_back_as_threadpoolctl(monkeypatch: pytest.MonkeyPatch) -> None:
    """Review of issue 25 (helper-46): as threadpoolctl's limiter, a block sets every pool — also one already at the
    number: a pthreads OpenBLAS obeys the thread that set it first, so skipping the call would change whose limits
    hold — and puts every pool back to its number from before the block."""
    shared, calls = _fake_pools(monkeypatch, 1)
    with th.limited_threads(1):
        assert calls == [("openblas", 1), ("gomp", 1)]
    assert calls == [("openblas", 1), ("gomp", 1), ("openblas", 1), ("gomp", 1)]


def test_thread_variables_already_at_the_number_are_left_and_all_are_put_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread variables (issue 25): one that already says the number is not written; afterwards every variable
    is back where it was — also one the block itself changed — and one that was unset is unset again."""
    import os

    _fake_pools(monkeypatch, 1)
    variable, unset = th.THREAD_VARIABLES[0], th.THREAD_VARIABLES[1]
    monkeypatch.setenv(variable, "1")
    monkeypatch.delenv(unset, raising=False)
    writes: list[str] = []
    environ = type(os.environ)
    real = environ.__setitem__
    monkeypatch.setattr(environ, "__setitem__", lambda self, k, v: (writes.append(k), real(self, k, v))[1])
    with th.limited_threads(1):
        assert variable not in writes and os.environ[unset] == "1"
        os.environ[variable] = "7"
    assert os.environ[variable] == "1" and unset not in os.environ
    with th.limited_threads(2):
        assert all(os.environ[v] == "2" for v in th.THREAD_VARIABLES)
    assert os.environ[variable] == "1" and unset not in os.environ


def test_simulate_runs_with_the_threads_asked_for_and_restores_them() -> None:
    torch = pytest.importorskip("torch")
    import numpy as np

    import topofl
    from helpers import blob_client

    rng = np.random.default_rng(0)
    fed = topofl.Federation.from_arrays([blob_client(rng, 40) for _ in range(3)])
    before = torch.get_num_threads()
    seen: list[tuple[int, set[int]]] = []
    topofl.simulate(fed, "fedavg", rounds=1, seed=0, model="mlp", threads=1,
                    on_round=lambda result, summary: seen.append((torch.get_num_threads(), _blas_threads())))
    assert seen == [(1, {1})]
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads must be at most"):
        topofl.simulate(fed, "fedavg", rounds=1, threads=th.usable_cpus() + 1)


def test_set_threads_reaches_torch_loaded_afterwards() -> None:
    """The command line sets the threads before torch loads: torch must still start with that number."""
    pytest.importorskip("torch")
    code = ("import json, numpy\nfrom topofl.cli_common import apply_threads\napply_threads(1)\nimport torch\n"
            "from topofl.threads import thread_info\nprint(json.dumps(thread_info()))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["torch"] == 1 and info["setting"] == 1
    assert {b["num_threads"] for b in info["blas"]} == {1}


def _worker_state() -> dict:
    import torch

    return {"info": th.thread_info(), "torch": torch.get_num_threads(),
            "sigint": signal.getsignal(signal.SIGINT) == signal.SIG_IGN,
            "sigterm": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL}


def test_worker_processes_take_their_threads_and_ignore_sigint() -> None:
    pytest.importorskip("torch")
    from topofl.experiments.pool import worker_pool

    pool = worker_pool(2, threads=1)
    try:
        states = [f.result(timeout=120) for f in [pool.submit(_worker_state) for _ in range(4)]]
    finally:
        pool.shutdown()
    for s in states:
        assert s["torch"] == 1 and s["info"]["setting"] == 1
        assert {b["num_threads"] for b in s["info"]["blas"]} == {1}
        assert s["sigint"] and s["sigterm"]


def test_worker_default_shares_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    from topofl.experiments.pool import worker_pool

    monkeypatch.setattr(th, "_process_setting", None)
    monkeypatch.setattr(th, "usable_cpus", lambda: 16)   # so that 4 workers' share (2) differs from one process's (4)
    pool = worker_pool(4)
    try:
        info = pool.submit(th.thread_info).result(timeout=120)
    finally:
        pool.shutdown()
    assert info["setting"] == th.default_threads(4) == 2 != th.default_threads(1)


def test_a_run_left_alone_takes_the_workers_threads(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """With --jobs P, the thread count of a run is a function of the flags and the machine, never of how
    many runs are left: one run left runs in this process with the workers' count.
    """
    from topofl.experiments import runs
    from topofl.job import Job

    monkeypatch.setattr(th, "_process_setting", None)
    monkeypatch.setattr(th, "usable_cpus", lambda: 16)
    seen: list[int] = []
    monkeypatch.setattr(runs, "execute_run", lambda spec, run_dir: seen.append(th._resolve(None)) or {})
    runs._run_todo([Job(method="fedavg")], tmp_path, 4, lambda spec, done: None)
    assert seen == [th.run_threads(4)] == [th.default_threads(4)] == [2]
    runs._run_todo([Job(method="fedavg")], tmp_path, 1, lambda spec, done: None)
    assert seen[-1] == th.run_threads(1) == th.default_threads(1) == 4


def test_cli_refuses_a_bad_thread_count_in_one_line() -> None:
    for value in ("0", str(th.usable_cpus() + 1)):
        proc = subprocess.run([sys.executable, "-m", "topofl.cli", "run", "--rounds", "1", "--threads", value],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "--threads" in lines[0] and value in lines[0], proc.stderr


def test_an_enclosing_block_governs_the_calls_within_it() -> None:
    outer = min(2, th.usable_cpus())
    with th.limited_threads(outer):
        with th.limited_threads() as inner:
            assert inner == outer
            assert _blas_threads() == {outer}
        with th.limited_threads(1) as explicit:
            assert explicit == 1


@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as a Flower node's would start: no thread setting yet, 16 CPUs (and set_threads only
    recording its number: the test process's own pools stay as they are).
    """
    monkeypatch.setattr(th, "_process_setting", None)

    def record(threads=None, **_):
        th._process_setting = threads if threads is not None else th.default_threads(1)
        return th._process_setting

    monkeypatch.setattr(th, "set_threads", record)
    monkeypatch.setattr(th, "_node_threads", None)
    monkeypatch.setattr(th, "usable_cpus", lambda: 16)
    for var in th.THREAD_VARIABLES:
        monkeypatch.delenv(var, raising=False)


def test_a_flower_node_takes_the_runtimes_thread_count_once(fresh_process, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")   # what Ray (or a LocalDeployment) gave the node's process
    assert th.node_threads() == 3 == th.process_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert th.node_threads() == 3   # once per process


def test_a_flower_node_without_a_setting_takes_the_default_policy(fresh_process) -> None:
    assert th.node_threads() == th.default_threads(1) == th.process_threads()


def test_a_flower_node_in_this_process_keeps_the_enclosing_block(fresh_process) -> None:
    """In-process Flower runs (tests, FakeGrid) inside limited_threads keep its number: results stay
    those of the in-process run.
    """
    with th.limited_threads(2):
        assert th.node_threads() == 2
    assert th.process_threads() is None


def test_the_client_app_applies_the_thread_policy_at_its_first_message(fresh_process) -> None:
    pytest.importorskip("flwr")
    from topofl.flower import client_app

    seen: list = []
    assert client_app.thread_policy in client_app.app._mods
    client_app.thread_policy("msg", "ctx", lambda m, c: seen.append((m, c, th.process_threads())) or "reply")
    assert seen == [("msg", "ctx", th.default_threads(1))]


def test_each_supernode_of_a_local_deployment_gets_its_share_of_threads(fresh_process, tmp_path) -> None:
    pytest.importorskip("flwr")
    from topofl.deploy import LocalDeployment

    env = LocalDeployment(4, tmp_path / "a")._node_thread_env()
    assert {env[v] for v in th.THREAD_VARIABLES} == {str(th.default_threads(4))} == {"2"}
    th.set_threads(3)   # --threads 3 in this process (recorded only)
    env = LocalDeployment(4, tmp_path / "b")._node_thread_env()
    assert {env[v] for v in th.THREAD_VARIABLES} == {"3"}
    env = LocalDeployment(4, tmp_path / "c", env={"OMP_NUM_THREADS": "5"})._node_thread_env()
    assert env == {}   # the user's own setting stands


def test_tunings_serial_runs_apply_the_thread_policy(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Tuning with jobs=1 runs each trial in this process under limited_threads, as runs.py does."""
    from topofl.experiments import runs, tuning
    from topofl.job import Job

    seen: list = []
    monkeypatch.setattr(runs, "execute_run", lambda spec, run_dir: seen.append(list(th._active)) or {})
    tuning._Inline().submit(tuning._run_quietly, Job(method="fedavg"), str(tmp_path)).result()
    assert seen == [[th.run_threads(1)]]
