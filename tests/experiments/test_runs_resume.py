"""Resumable execution: interrupted + resumed == uninterrupted, byte for byte; jobs don't matter."""
import os
import signal
import subprocess
import sys
import time

import pytest

from topofl.experiments.runs import execute, run_paths
from topofl.job import Job

FILES = ("rounds.csv", "curves.csv", "server_log.jsonl")


def specs():
    return [
        Job(experiment="t", data="healthcare", method=m, seed=s, rounds=3, setting={"variant": "a"})
        for s in (0, 1) for m in ("ptopofl", "fedavg")
    ]


def read(d):
    return {f: (d / f).read_bytes() for f in FILES}


def test_resume_after_interruption_gives_identical_results(tmp_path):
    full, part = tmp_path / "full", tmp_path / "part"
    execute(specs(), full)
    # interrupted run: the first two runs completed, the third left a partial file behind
    execute(specs()[:2], part)
    partial = run_paths(part / "runs", specs()[2])["rounds"]
    partial.write_text("experiment,scenario\nt,healthcare\n")
    done = execute(specs(), part, resume=True)
    assert read(full) == read(part)
    assert [d["seed"] for d in done] == [0, 0, 1, 1]


def test_existing_results_are_never_overwritten_silently(tmp_path):
    execute(specs()[:1], tmp_path)
    with pytest.raises(ValueError, match="already holds results; pass --resume"):
        execute(specs(), tmp_path)


def test_parallel_execution_matches_serial(tmp_path):
    execute(specs(), tmp_path / "one", jobs=1)
    execute(specs(), tmp_path / "two", jobs=2)
    assert read(tmp_path / "one") == read(tmp_path / "two")


def test_rows_carry_the_run_key(tmp_path):
    execute(specs()[:1], tmp_path)
    header = (tmp_path / "rounds.csv").read_text().splitlines()[0].split(",")
    assert header[:5] == ["experiment", "scenario", "method", "variant", "seed"]


@pytest.mark.slow
def test_interrupting_the_cli_and_resuming_matches_an_uninterrupted_run(tmp_path):
    # four seeds (28 runs): enough that the runs in flight when SIGINT lands cannot finish the plan
    cmd = [sys.executable, "-m", "topofl.cli", "experiment", "ablation", "--seeds", "0-3", "--jobs", "1"]
    env = {**os.environ, "COLUMNS": "100"}
    subprocess.run(cmd + ["--out", str(tmp_path / "full")], check=True, capture_output=True, timeout=600, env=env)
    # a shell that starts CI in the background makes SIGINT ignored in its children; give the CLI
    # the default disposition back, as a terminal would, so that Ctrl-C reaches it
    proc = subprocess.Popen(cmd + ["--out", str(tmp_path / "cut")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    runs = tmp_path / "cut" / "ablation" / "runs"
    try:
        deadline = time.time() + 300
        while time.time() < deadline and len(list(runs.glob("*.done.json")) if runs.exists() else []) < 4:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    n_done = len(list(runs.glob("*.done.json")))
    assert 4 <= n_done < 28, n_done  # really interrupted part-way
    res = subprocess.run(cmd + ["--out", str(tmp_path / "cut"), "--resume"], capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr
    assert read(tmp_path / "full" / "ablation") == read(tmp_path / "cut" / "ablation")


def test_the_thread_count_is_recorded_and_a_different_one_is_warned_of_at_resume(tmp_path, monkeypatch, caplog):
    import json
    import logging

    from topofl import threads as th
    from topofl.experiments.driver import run_experiment

    monkeypatch.setattr(th, "_process_setting", None)
    exp = run_experiment("diagrams", [0], tmp_path, jobs=1)
    assert json.loads((exp / "config.json").read_text())["threads"] == th.run_threads(1)
    monkeypatch.setattr(th, "_process_setting", th.run_threads(1) + 1)   # as --threads N on resume
    monkeypatch.setattr(th, "usable_cpus", lambda: 16)
    with caplog.at_level(logging.WARNING):
        run_experiment("diagrams", [0], tmp_path, jobs=1, resume=True)
    assert any("thread" in r.getMessage() and "resum" in r.getMessage() for r in caplog.records), caplog.text
