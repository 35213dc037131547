"""Interrupting a command that runs worker processes: Ctrl-C (SIGINT to the process group), SIGINT or
SIGTERM to the parent alone (what a scheduler sends) stops the parent and every worker within
seconds, exits 130, keeps the finished runs sealed, and ``--resume`` reuses them.

Real ``topofl`` subprocesses with ``--jobs 2``; slow (a few experiments of a few seconds each).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.slow

#: the budget of the interrupted experiment: 36 runs of about half a second each on two workers
EXPERIMENT = ["experiment", "comparison", "--seeds", "0-1", "--rounds", "25", "--jobs", "2"]
#: how long every process may take to be gone after the signal (the issue's acceptance: 10 s)
GONE_WITHIN = 10.0


def _start(args: list[str], out: Path, *, group: bool) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    env.pop("PYTEST_XDIST_WORKER", None)
    return subprocess.Popen([sys.executable, "-m", "topofl.cli", *args, "--out", str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=group)


def _wait_for(predicate, proc: subprocess.Popen, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the command ended (rc {proc.returncode}) before {what}:\n{out}\n{err}")
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"no {what} within {timeout} s")


def _done_records(out: Path) -> dict[str, int]:
    """Every sealed done-record under ``out`` with its modification time (ns)."""
    return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.rglob("runs/*.done.json")}


def _interrupt(proc: subprocess.Popen, sig: int, *, group: bool) -> tuple[str, float]:
    """Send ``sig`` (to the process group: Ctrl-C in a terminal; else to the parent alone), then check that
    the parent and every worker it had are gone within :data:`GONE_WITHIN` s; the stderr and the seconds taken.
    """
    parent = psutil.Process(proc.pid)
    family = [parent, *parent.children(recursive=True)]
    assert len(family) >= 3, f"expected the parent and two workers; got {[p.pid for p in family]}"
    t0 = time.monotonic()
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=GONE_WITHIN)
    except subprocess.TimeoutExpired:
        for p in family:
            p.kill()
        pytest.fail(f"the parent still ran {GONE_WITHIN} s after signal {sig}")
    _, alive = psutil.wait_procs(family, timeout=max(0.0, GONE_WITHIN - (time.monotonic() - t0)))
    for p in alive:
        p.kill()
    assert not alive, f"processes left running after signal {sig}: {[p.pid for p in alive]}"
    return err, time.monotonic() - t0


def _check_kept(out: Path, before: dict[str, int]) -> None:
    """The done-records written before the interruption are still there and verify (sealed, files intact)."""
    from topofl.experiments.store import verified_done

    for rel in before:
        stem = (out / rel).name[: -len(".done.json")]
        run_dir = (out / rel).parent
        paths = {k: run_dir / f"{stem}.{ext}" for k, ext in
                 (("rounds", "rounds.csv"), ("curves", "curves.csv"), ("log", "log.jsonl"), ("done", "done.json"))}
        record, problem = verified_done(paths)
        assert record is not None, f"{rel} no longer verifies after the interruption: {problem}"


@pytest.mark.parametrize(("sig", "group"), [(signal.SIGINT, True), (signal.SIGINT, False), (signal.SIGTERM, False)],
                         ids=["ctrl-c", "sigint-parent", "sigterm-parent"])
def test_experiment_stops_within_seconds_and_resumes(tmp_path: Path, sig: int, group: bool) -> None:
    out = tmp_path / "exp"
    proc = _start(EXPERIMENT, out, group=group)
    _wait_for(lambda: len(_done_records(out)) >= 4, proc, 240, "four finished runs")
    err, seconds = _interrupt(proc, sig, group=group)
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Interrupted" in err and "--resume" in err, err
    assert "Traceback" not in err and "Error" not in err, err   # one line, no thread's dying words
    kept = _done_records(out)
    assert len(kept) >= 4
    _check_kept(out, kept)
    total = 36
    assert len(kept) < total, "the queue was not stopped: every run finished"
    if sig == signal.SIGTERM:  # one resume is enough to show the kept runs are reused (the others would repeat it)
        env = {**os.environ, "COLUMNS": "200"}
        env.pop("PYTEST_XDIST_WORKER", None)
        done = subprocess.run([sys.executable, "-m", "topofl.cli", *EXPERIMENT, "--out", str(out), "--resume"],
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        after = _done_records(out)
        assert len(after) == total
        assert {k: after[k] for k in kept} == kept, "a run finished before the interruption was redone"
        config = json.loads(next(out.rglob("config.json")).read_text())
        assert config["n_runs"] == total


def test_tune_stops_on_sigint_to_the_parent(tmp_path: Path) -> None:
    out = tmp_path / "tune"
    args = ["tune", "--methods", "ptopofl,fedavg,fedprox", "--trials", "6", "--seeds", "0-1", "--rounds", "20",
            "--jobs", "2"]
    proc = _start(args, out, group=False)
    _wait_for(lambda: len(_done_records(out)) >= 3, proc, 240, "three finished tuning runs")
    err, _ = _interrupt(proc, signal.SIGINT, group=False)
    assert proc.returncode == 130, (proc.returncode, err)
    assert "--resume" in err, err
    _check_kept(out, _done_records(out))


def test_compare_stops_on_sigterm(tmp_path: Path) -> None:
    """``compare`` runs in one process: SIGTERM ends it with 130, its finished rounds on disk."""
    out = tmp_path / "cmp"
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.Popen([sys.executable, "-m", "topofl.cli", "compare", "--seeds", "0-9", "--rounds", "40",
                             "--out", str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rounds = out / "rounds.csv"
    _wait_for(lambda: rounds.exists() and len(rounds.read_text().splitlines()) > 20, proc, 240, "twenty rounds")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=GONE_WITHIN)
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Interrupted" in err
    assert len(rounds.read_text().splitlines()) > 20


def test_workers_exit_when_their_parent_is_killed(tmp_path: Path) -> None:
    """SIGKILL cannot be handled: the workers notice their parent is gone and exit (no orphan keeps running runs)."""
    out = tmp_path / "exp"
    proc = _start(EXPERIMENT, out, group=False)
    _wait_for(lambda: len(_done_records(out)) >= 2, proc, 240, "two finished runs")
    workers = psutil.Process(proc.pid).children(recursive=True)
    assert len(workers) >= 2
    proc.kill()
    proc.wait(timeout=GONE_WITHIN)   # not communicate(): orphaned workers would hold its pipes open
    _, alive = psutil.wait_procs(workers, timeout=GONE_WITHIN)
    for p in alive:
        p.kill()
    assert not alive, f"workers orphaned by their killed parent: {[p.pid for p in alive]}"


def test_a_second_sigterm_during_shutdown_is_ignored() -> None:
    """After the first SIGTERM the command is shutting down (stopping its workers, printing the hint): a
    second one must not kill it with -15 instead of its exit code 130.
    """
    from topofl.cli_common import _sigterm_interrupts

    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(KeyboardInterrupt):
            with _sigterm_interrupts():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN   # checked before the second signal is sent
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
    finally:
        signal.signal(signal.SIGTERM, previous)
