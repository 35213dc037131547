"""Issue 20: one writer per result directory. The audit found that two concurrent
``topofl experiment … --resume`` on one ``--out`` duplicated a round in ``server_log.jsonl`` (397 rows
for 396) while every done-record verified. An experiment, comparison or tuning directory is now
locked (``topofl.atomic.directory_lock``, flock on ``DIR/.lock``) for as long as a process writes
there; a second writer is refused at once with a one-line error naming the directory, and the
lock goes with the process that held it (exit or crash).
"""
import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from topofl.cli import app
from topofl.experiments.runs import execute, run_paths
from topofl.job import Job

FILES = ("rounds.csv", "curves.csv", "server_log.jsonl")
HOLD = textwrap.dedent("""
    import sys
    from topofl.atomic import directory_lock
    with directory_lock(sys.argv[1], "test holder"):
        print("locked", flush=True)
        sys.stdin.readline()
""")
TRY = textwrap.dedent("""
    import sys
    from topofl.atomic import directory_lock
    try:
        with directory_lock(sys.argv[1], "test"):
            pass
    except ValueError as exc:
        print(exc)
        sys.exit(3)
""")


def specs():
    return [Job(experiment="t", data="healthcare", method=m, seed=s, rounds=3) for s in (0, 1) for m in ("ptopofl", "fedavg")]


@contextmanager
def held(directory: Path):
    """Another process holding ``directory``'s lock for the duration of the block."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(directory)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "locked", proc.stderr.read()
        yield proc
    finally:
        if proc.poll() is None:
            proc.stdin.close()
            proc.wait(timeout=60)


def other_process_can_lock(directory: Path) -> bool:
    res = subprocess.run([sys.executable, "-c", TRY, str(directory)], capture_output=True, text=True, timeout=60)
    assert res.returncode in (0, 3), res.stderr
    return res.returncode == 0


def listing(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_a_second_resume_on_one_out_is_refused_while_the_first_runs(tmp_path):
    """The audit's finding: process A resumes an experiment and is still running when process B
    resumes the same directory. B must be refused (before it touches a file), and A's results must
    equal an uninterrupted run's: no run is redone twice, no row written twice."""
    out, ref = tmp_path / "out", tmp_path / "ref"
    execute(specs(), ref)
    execute(specs()[:1], out)  # an interrupted experiment: one run of four finished
    ready, go = tmp_path / "ready", tmp_path / "go"
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from topofl.experiments.runs import execute
        from topofl.job import Job
        specs = [Job(experiment="t", data="healthcare", method=m, seed=s, rounds=3) for s in (0, 1) for m in ("ptopofl", "fedavg")]
        def pause(spec, done):  # after its second run, process A waits (still writing the directory)
            if spec == specs[1]:
                Path({str(ready)!r}).touch()
                deadline = time.time() + 120
                while not Path({str(go)!r}).exists() and time.time() < deadline:
                    time.sleep(0.02)
        execute(specs, Path({str(out)!r}), resume=True, on_done=pause)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not ready.exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        assert ready.exists(), proc.stderr.read() if proc.poll() is not None else "process A never reached its second run"
        before = listing(out)
        with pytest.raises(ValueError, match=r"another topofl process is still writing") as err:
            execute(specs(), out, resume=True)
        assert str(out) in str(err.value) and "\n" not in str(err.value)
        assert listing(out) == before  # process B changed nothing
    finally:
        go.touch()
        _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    for name in FILES:
        assert (out / name).read_bytes() == (ref / name).read_bytes(), name
    log_rows = (out / "server_log.jsonl").read_text().splitlines()
    assert len(log_rows) == len(set(log_rows)) == 4 * 3  # one row per run and round, none twice


def test_the_cli_refuses_a_second_writer_with_one_line_naming_the_directory(tmp_path):
    runner = CliRunner()
    args = ["experiment", "ablation", "--seeds", "0", "--jobs", "1", "--out", str(tmp_path)]
    exp_dir = tmp_path / "ablation"
    exp_dir.mkdir()
    (exp_dir / "notes.txt").write_text("mine")
    for extra in (["--resume"], ["--overwrite"], []):
        with held(exp_dir):
            before = listing(tmp_path)
            res = runner.invoke(app, args + extra)
            assert res.exit_code == 2, (extra, res.output)
            errors = [ln for ln in res.output.splitlines() if "Error" in ln]
            assert len(errors) == 1 and errors[0].startswith("Error: results directory") and "Traceback" not in res.output, (extra, res.output)
            assert f"{str(exp_dir)!r}: another topofl process is still writing there" in errors[0], res.output
            assert listing(tmp_path) == before, extra  # nothing written, nothing removed (--overwrite included)


def test_the_lock_goes_with_a_killed_holder(tmp_path):
    with held(tmp_path) as proc:
        with pytest.raises(ValueError, match=str(tmp_path)):
            execute(specs()[:1], tmp_path)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    execute(specs()[:1], tmp_path)  # a crash leaves no stale lock behind
    assert run_paths(tmp_path / "runs", specs()[0])["done"].is_file()


def test_the_lock_is_released_when_the_writer_is_done_or_fails(tmp_path):
    from topofl.atomic import directory_lock
    from topofl.experiments.store import results_lock

    with results_lock(tmp_path):
        with results_lock(tmp_path):  # one thread may nest (the driver locks its directory, then execute does)
            assert not other_process_can_lock(tmp_path)
        assert not other_process_can_lock(tmp_path)  # still held by the outer block
    assert other_process_can_lock(tmp_path)
    with pytest.raises(RuntimeError, match="boom"), results_lock(tmp_path):
        raise RuntimeError("boom")
    assert other_process_can_lock(tmp_path)
    execute(specs()[:1], tmp_path / "exp")
    assert other_process_can_lock(tmp_path / "exp")
    # a lock that is not re-entrant refuses even its own thread (a second Flower ServerApp in one process)
    with directory_lock(tmp_path, "run"), pytest.raises(ValueError, match="is still writing"), directory_lock(tmp_path, "run"):
        pass


def test_another_thread_is_refused_even_in_the_same_process(tmp_path):
    from topofl.experiments.store import results_lock

    errors = []

    def second():
        try:
            with results_lock(tmp_path):
                pass
        except ValueError as exc:
            errors.append(str(exc))

    with results_lock(tmp_path):
        t = threading.Thread(target=second)
        t.start()
        t.join(timeout=60)
    assert len(errors) == 1 and str(tmp_path) in errors[0] and f"process {os.getpid()} holds" in errors[0]


def test_a_symlinked_lock_file_is_refused(tmp_path):
    from topofl.atomic import directory_lock

    target = tmp_path / "elsewhere"
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / ".lock").symlink_to(target)
    with pytest.raises(ValueError, match=r"\.lock"), directory_lock(tmp_path / "d", "test"):
        pass
    assert not target.exists()


def test_compare_and_tune_directories_are_locked_too(tmp_path):
    from topofl.experiments.compare import run_compare
    from topofl.experiments.tuning import TuneSettings, tune_comparison

    tune_out = tmp_path / "tune"
    tune_out.mkdir()
    with held(tune_out):
        with pytest.raises(ValueError, match=str(tune_out)):
            tune_comparison([Job(experiment="tune", data="healthcare", method="fedavg", seed=0, rounds=2)], tune_out,
                            TuneSettings(trials=2), reference="fedavg", resume=True)
    assert sorted(p.name for p in tune_out.iterdir()) == [".lock"]
    cmp_out = tmp_path / "cmp"
    cmp_out.mkdir()
    with held(cmp_out):
        with pytest.raises(ValueError, match=str(cmp_out)):
            run_compare([Job(method="fedavg", data="healthcare", seed=0, rounds=1)], cmp_out)
    assert sorted(p.name for p in cmp_out.iterdir()) == [".lock"]


def test_the_flower_run_lock_is_the_same_lock(tmp_path):
    from topofl.flower.checkpoint import run_lock

    with held(tmp_path), pytest.raises(ValueError, match="another ServerApp is still writing that run"), run_lock(tmp_path):
        pass
    with run_lock(tmp_path):
        assert not other_process_can_lock(tmp_path)


def test_an_experiment_directory_holds_its_lock_through_the_analysis(tmp_path, monkeypatch):
    """The lock covers the merge and the analysis, not only the runs."""
    from topofl.experiments import driver
    from topofl.experiments.driver import EXPERIMENTS

    exp = EXPERIMENTS["ablation"]
    seen = []
    real = exp.analyse

    def analyse(exp_dir, done, budget):
        seen.append(other_process_can_lock(exp_dir))
        return real(exp_dir, done, budget)

    monkeypatch.setitem(EXPERIMENTS, "ablation", dataclasses.replace(exp, analyse=analyse))
    out = driver.run_experiment("ablation", [0], tmp_path)
    assert seen == [False]
    assert json.loads((out / "config.json").read_text())["experiment"] == "ablation"
