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


@pytest.fixture
def round_timer(monkeypatch: pytest.MonkeyPatch):
    return _script("round_timer", monkeypatch)


def test_alternating_passes_turns_the_order_and_pairs_the_passes(round_timer) -> None:
    calls: list[str] = []

    def contender(name: str):
        def call() -> str:
            calls.append(name)
            return f"{name}{len(calls)}"
        return call

    groups = [{"a": contender("a"), "b": contender("b")}, {"c": contender("c")}, {"d": contender("d")}]
    times, last, repeats = round_timer.alternating_passes(groups, 3, fill=0.0)
    assert repeats == [1, 1, 1]   # nothing to fill: one call a pass
    # pass 0: each contender's untimed first call, then its warm-up call; then the groups take turns
    assert calls == ["a", "a", "b", "b", "c", "c", "d", "d",
                     "c", "d", "a", "b",   # pass 1 starts with the second group
                     "d", "a", "b", "c",   # pass 2 with the third
                     "a", "b", "c", "d"]   # pass 3 with the first again
    assert {k: len(v["wall"]) for k, v in times.items()} == dict.fromkeys("abcd", 3)
    assert all(len(v["cpu"]) == 3 and min(v["wall"]) >= 0 for v in times.values())
    assert last == {"a": "a17", "b": "b18", "c": "c19", "d": "d20"}


def test_alternating_passes_fills_a_pass_and_refuses_bad_arguments(round_timer, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    monkeypatch.setattr(round_timer.time, "perf_counter", lambda: clock[0])

    def slow() -> None:   # 0.01 s a call on the patched clock
        clock[0] += 0.01

    _, _, repeats = round_timer.alternating_passes([{"slow": slow}], 1, fill=0.25)
    assert repeats == [25]
    with pytest.raises(ValueError, match="passes must be at least 1"):
        round_timer.alternating_passes([{"a": slow}], 0)
    with pytest.raises(ValueError, match="distinct names"):
        round_timer.alternating_passes([{"a": slow}, {"a": slow}], 1)


@pytest.fixture
def bench_ablation(monkeypatch: pytest.MonkeyPatch):
    return _script("bench_ablation", monkeypatch)


def test_bench_ablation_knocks_out_only_the_setup_and_puts_the_library_back(bench_ablation,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from threadpoolctl import threadpool_limits

    from topofl import api, threads
    from topofl.job import Job

    bench_ablation.contenders(8, 1)["hand loop"]()   # the BLAS that SciPy loads when first used: loaded before the limit
    with threadpool_limits(1):
        result = bench_ablation.worker(8, 2, 1, fill=0.0)   # fails itself if a knock-out changed the global model
    assert api.limited_threads is threads.limited_threads and api.Job is Job
    assert set(result["wall"]) == set(bench_ablation.CONTENDERS)
    assert all(len(v) == 1 and v[0] > 0 for v in result["wall"].values())
    assert result["hand_gap"] <= 1e-9
    # each knock-out skips its part and only it: the pools' limits, the job's checks and the replies' checks,
    # counted run by run (the spies in place before the contenders are made: a knock-out puts back what it found)
    from topofl.federation import runner

    counts = {"pools": 0, "job checks": 0, "reply checks": 0}
    real_pools, real_checks, real_screen = threads._threadpool_limits, Job.__post_init__, runner.screen_updates

    def pools(n: int):
        counts["pools"] += 1
        return real_pools(n)

    def checks(self: Job) -> None:
        counts["job checks"] += 1
        real_checks(self)

    def screen(*args: object):
        counts["reply checks"] += 1
        return real_screen(*args)

    monkeypatch.setattr(threads, "_threadpool_limits", pools)
    monkeypatch.setattr(Job, "__post_init__", checks)
    monkeypatch.setattr(runner, "screen_updates", screen)
    calls = bench_ablation.contenders(8, 2)
    seen = {}
    for name in bench_ablation.CONTENDERS[:-1]:
        counts.update(dict.fromkeys(counts, 0))
        calls[name]()
        seen[name] = dict(counts)
    assert seen == {"topofl as shipped": {"pools": 1, "job checks": 1, "reply checks": 2},
                    "no thread policy": {"pools": 0, "job checks": 1, "reply checks": 2},
                    "no job checks": {"pools": 1, "job checks": 0, "reply checks": 2},
                    "neither of the two": {"pools": 0, "job checks": 0, "reply checks": 2},
                    "no reply checks": {"pools": 1, "job checks": 1, "reply checks": 0},
                    "none of the three": {"pools": 0, "job checks": 0, "reply checks": 0}}
    assert runner.screen_updates is screen and api.limited_threads is threads.limited_threads and api.Job is Job


def test_bench_ablation_refuses_pools_above_one_thread(bench_ablation, monkeypatch: pytest.MonkeyPatch) -> None:
    from topofl import threads

    monkeypatch.setattr(threads, "thread_info", lambda: {"blas": [{"api": "openblas", "num_threads": 2}]})
    with pytest.raises(RuntimeError, match="one thread before timing"):
        bench_ablation.worker(8, 1, 1, fill=0.0)


@pytest.mark.parametrize("option", [("--clients", "1"), ("--rounds", "0"), ("--passes", "0")])
def test_bench_ablation_refuses_bad_options_before_running(bench_ablation, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str],
                                                        option: tuple[str, str]) -> None:
    def ran(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"the benchmark ran with {args}")

    monkeypatch.setattr(bench_ablation, "_run", ran)
    with pytest.raises(SystemExit) as exit_:
        bench_ablation.main([f"{option[0]}={option[1]}"])
    assert exit_.value.code == 2
    assert f"{option[0]} must be at least" in capsys.readouterr().err
