"""The benchmark scripts' own logic: like-for-like contenders, argument checks and the setup split of
benchmarks/bench_scale.py (the timings themselves are the scripts' printouts, never a test's)."""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _script(name: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))   # the scripts import their neighbours (round_timer)
    return importlib.import_module(name)


@pytest.fixture
def bench_scale(monkeypatch: pytest.MonkeyPatch):
    return _script("bench_scale", monkeypatch)


def _times(per_run: dict[str, tuple[list[float], float]], lengths: tuple[int, ...]) -> dict[str, dict[str, list[float]]]:
    """Wall seconds per round of runs that take ``setup + r * round`` seconds: ``{contender: (setups a pass, round)}``."""
    return {f"{k}@{r}": {"wall": [(setup + r * rnd) / r for setup in setups]}
            for k, (setups, rnd) in per_run.items() for r in lengths}


def test_split_recovers_a_known_round_and_setup(bench_scale) -> None:
    # topofl: 0.3 ms of setup and 1.3 ms a round; the hand loop: 0.05 ms and 1.1 ms; five passes
    times = _times({"topofl": ([3.0e-4, 3.1e-4, 2.9e-4, 3.0e-4, 3.2e-4], 1.3e-3),
                    "hand": ([5.0e-5] * 5, 1.1e-3)}, (3, 15))
    r = bench_scale.split_setup(times, 3, 15)
    assert r["round"]["topofl"] == pytest.approx(1.3e-3) and r["round"]["hand"] == pytest.approx(1.1e-3)
    assert r["setup"]["topofl"] == pytest.approx(3.0e-4) and r["setup"]["hand"] == pytest.approx(5.0e-5)
    assert r["gap"] == pytest.approx(2.5e-4)
    assert (r["low"], r["high"]) == (pytest.approx(2.5e-4), pytest.approx(2.6e-4))   # inclusive quartiles
    assert not r["unresolved"]


def test_split_marks_a_gap_it_cannot_resolve(bench_scale) -> None:
    # the setup gap changes sign from pass to pass: its spread includes 0
    times = _times({"topofl": ([2e-3, -1e-3, 3e-3, -2e-3], 0.13), "hand": ([0.0] * 4, 0.12)}, (3, 15))
    assert bench_scale.split_setup(times, 3, 15)["unresolved"]
    # under 4 passes the spread is the min and the max
    few = _times({"topofl": ([1e-4, 3e-4], 1e-3), "hand": ([0.0, 0.0], 1e-3)}, (3, 15))
    r = bench_scale.split_setup(few, 3, 15)
    assert (r["low"], r["high"]) == (pytest.approx(1e-4), pytest.approx(3e-4))


@pytest.mark.parametrize("option", [("--loop-rounds", "3,3"), ("--loop-rounds", "0"), ("--loop-rounds", "x"),
                                    ("--loop-rounds", ""), ("--loop-rounds", "15,,3"), ("--loop-rounds", "-1"),
                                    ("--loop-rounds", "\u00b3"), ("--passes", "0")])
def test_bench_scale_refuses_bad_loop_options_before_running(bench_scale, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str],
                                                             option: tuple[str, str]) -> None:
    def ran(*args: object) -> None:
        raise AssertionError(f"the loop ran with {args}")

    monkeypatch.setattr(bench_scale, "loop", ran)
    monkeypatch.setattr(sys, "argv", ["bench_scale.py", "--no-scale", f"{option[0]}={option[1]}"])
    with pytest.raises(SystemExit) as exit_:
        bench_scale.main()
    assert exit_.value.code == 2
    assert f"{option[0]} must be" in capsys.readouterr().err


@pytest.mark.deep
@pytest.mark.parametrize("method", ["fedavg", "ptopofl"])
def test_deep_round_runs_topofl_on_the_bare_loops_threads(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str], method: str) -> None:
    """topofl.simulate's own default is half the CPUs: the benchmark must hand it the bare loop's ``--threads``."""
    pytest.importorskip("torch")
    bench = _script("bench_deep_round", monkeypatch)
    seen: list[object] = []

    def timed_rounds(simulate: object, *args: object, **kwargs: object) -> list[float]:
        seen.append(kwargs.get("threads", "not given"))
        return [1.0, 2.0]

    monkeypatch.setattr(bench, "timed_rounds", timed_rounds)
    monkeypatch.setattr(bench, "mnist_federation", lambda *a, **k: object())
    bench.worker(argparse.Namespace(worker=method, model="cnn-small", clients=10, epochs=1, repeats=1, threads=2,
                                    deployment_defaults=False))
    assert seen == [2]
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["times"] == [2.0]
