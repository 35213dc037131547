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
    # topofl: 0.3 ms of setup and 1.3 ms a round; the hand loop: 0.05 ms and 1.1 ms; six passes
    times = _times({"topofl": ([3.0e-4, 3.1e-4, 2.9e-4, 3.0e-4, 3.2e-4, 3.0e-4], 1.3e-3),
                    "hand": ([5.0e-5] * 6, 1.1e-3)}, (3, 15))
    r = bench_scale.split_setup(times, 3, 15)
    assert r["round"]["topofl"] == pytest.approx(1.3e-3) and r["round"]["hand"] == pytest.approx(1.1e-3)
    assert r["setup"]["topofl"] == pytest.approx(3.0e-4) and r["setup"]["hand"] == pytest.approx(5.0e-5)
    gap = r["gap"]
    assert gap["median"] == pytest.approx(2.5e-4)
    assert (gap["low"], gap["high"]) == (pytest.approx(2.4e-4), pytest.approx(2.7e-4))   # 6 passes: the min and max
    assert gap["resolved"]


def test_split_marks_a_gap_it_cannot_resolve(bench_scale) -> None:
    # the setup gap changes sign from pass to pass: its interval includes 0
    times = _times({"topofl": ([2e-3, -1e-3, 3e-3, -2e-3, 1e-3, 2e-3], 0.13), "hand": ([0.0] * 6, 0.12)}, (3, 15))
    assert not bench_scale.split_setup(times, 3, 15)["gap"]["resolved"]
    # under 6 passes there is no 95 % interval: nothing is resolved, however steady
    few = _times({"topofl": ([1e-4, 1e-4, 1e-4, 1e-4, 1e-4], 1e-3), "hand": ([0.0] * 5, 1e-3)}, (3, 15))
    gap = bench_scale.split_setup(few, 3, 15)["gap"]
    assert gap["low"] is None and not gap["resolved"]


@pytest.mark.parametrize("option", [("--loop-rounds", "3,3"), ("--loop-rounds", "0"), ("--loop-rounds", "x"),
                                    ("--loop-rounds", ""), ("--loop-rounds", "15,,3"), ("--loop-rounds", "-1"),
                                    ("--loop-rounds", "\u00b3"), ("--loop-rounds", "3,100001"), ("--passes", "0"),
                                    ("--passes", "1001")])
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
    assert {k: (len(v["wall"]), len(v["cpu"])) for k, v in times.items()} == dict.fromkeys("abcd", (3, 3))
    assert last == {"a": "a17", "b": "b18", "c": "c19", "d": "d20"}


def test_alternating_passes_fills_a_pass_and_times_one_call(round_timer, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    monkeypatch.setattr(round_timer.time, "perf_counter", lambda: clock[0])
    calls = {"slow": 0, "fast": 0}

    def contender(name: str, seconds: float):
        def call() -> None:   # ``seconds`` a call on the patched clock
            calls[name] += 1
            clock[0] += seconds
        return call

    # the group's repeats: what its faster contender needs to fill 0.25 s, whichever runs first
    for order in (("slow", "fast"), ("fast", "slow")):
        calls.update(dict.fromkeys(calls, 0))
        group = {name: contender(name, {"slow": 0.01, "fast": 0.001}[name]) for name in order}
        times, _, repeats = round_timer.alternating_passes([group], 2, fill=0.25)
        assert repeats == [250]
        assert times["slow"]["wall"] == pytest.approx([0.01, 0.01]) and times["fast"]["wall"] == pytest.approx([0.001] * 2)
        # pass 0: the first contender's untimed call and one timed call (25 calls of slow or 250 of fast fill 0.25 s);
        # the second's untimed call and that many calls; then 250 calls each in each of the 2 passes
        assert calls[order[0]] == 1 + 1 + 2 * 250
        assert calls[order[1]] == 1 + {"slow": 25, "fast": 250}[order[0]] + 2 * 250


def test_alternating_passes_refuses_bad_arguments(round_timer) -> None:
    with pytest.raises(ValueError, match="passes must be at least 1"):
        round_timer.alternating_passes([{"a": lambda: None}], 0)
    with pytest.raises(ValueError, match="distinct names"):
        round_timer.alternating_passes([{"a": lambda: None}, {"a": lambda: None}], 1)
    with pytest.raises(ValueError, match="at least one contender"):
        round_timer.alternating_passes([], 1)
    for fill in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match="fill must be"):
            round_timer.alternating_passes([{"a": lambda: None}], 1, fill=fill)


def test_median_interval_is_the_sign_tests(round_timer) -> None:
    r = round_timer.median_interval([7.0, 1.0, 5.0, 3.0, 2.0, 6.0, 4.0])
    # 7 values: [x(2), x(6)] covers 87.5 % only, [x(1), x(7)] 1 - 2/128
    assert (r["median"], r["low"], r["high"]) == (4.0, 1.0, 7.0) and r["coverage"] == pytest.approx(1 - 2 / 128)
    assert r["resolved"]
    r = round_timer.median_interval([float(v) for v in range(1, 11)])   # 10 values: [x(2), x(9)], 1 - 2 * 11/1024
    assert (r["low"], r["high"]) == (2.0, 9.0) and r["coverage"] == pytest.approx(1 - 22 / 1024)
    assert not round_timer.median_interval([-1.0, 2.0, 3.0, 4.0, 5.0, 6.0])["resolved"]   # the interval holds 0
    assert not round_timer.median_interval([0.0, 2.0, 3.0, 4.0, 5.0, 6.0])["resolved"]   # ... at its end too
    few = round_timer.median_interval([1.0, 2.0, 3.0, 4.0, 5.0])   # 5 values: 1 - 2/32 < 95 %
    assert few["low"] is None and few["coverage"] is None and not few["resolved"]
    assert round_timer.interval_text(few) == "3000.000ms [too few passes] unresolved"
    assert round_timer.interval_text(r, scale=1.0, unit="s") == "5.500s [2.000, 9.000]"


@pytest.fixture
def bench_ablation(monkeypatch: pytest.MonkeyPatch):
    return _script("bench_ablation", monkeypatch)


def test_bench_ablation_times_every_contender_on_one_thread(bench_ablation) -> None:
    from threadpoolctl import threadpool_limits

    bench_ablation.contenders(8, 1)   # the BLAS libraries that the runs load, loaded before the limit
    with threadpool_limits(1):
        result = bench_ablation.worker(8, 2, 1, fill=0.0)
    assert list(result["times"]) == list(bench_ablation.CONTENDERS)
    assert all(len(t["wall"]) == len(t["cpu"]) == 1 for t in result["times"].values())
    assert result["repeats"] == dict.fromkeys(bench_ablation.CONTENDERS, 1)


def test_bench_ablation_knocks_out_each_part_and_only_it(bench_ablation, monkeypatch: pytest.MonkeyPatch) -> None:
    # the pools' limits, the job's checks and both reply checks, counted run by run (the spies in place before the
    # contenders are made: a knock-out puts back what it found)
    from topofl import api, threads
    from topofl.federation import runner
    from topofl.job import Job

    counts = {"pools": 0, "job checks": 0, "update checks": 0, "evaluation checks": 0}

    def spy(name: str, real):
        def counted(*args: object, **kwargs: object):
            counts[name] += 1
            return real(*args, **kwargs)
        return counted

    monkeypatch.setattr(threads, "_threadpool_limits", spy("pools", threads._threadpool_limits))
    monkeypatch.setattr(Job, "__post_init__", spy("job checks", Job.__post_init__))
    monkeypatch.setattr(runner, "screen_updates", spy("update checks", runner.screen_updates))
    monkeypatch.setattr(runner, "_screen_evaluations", spy("evaluation checks", runner._screen_evaluations))
    spies = bench_ablation._parts()
    calls = bench_ablation.contenders(8, 2)
    seen = {}
    for name in bench_ablation.CONTENDERS[:-1]:
        counts.update(dict.fromkeys(counts, 0))
        calls[name]()
        seen[name] = tuple(counts.values())
    assert seen == {"topofl as shipped": (1, 1, 2, 2), "no thread policy": (0, 1, 2, 2), "no job checks": (1, 0, 2, 2),
                    "neither of the two": (0, 0, 2, 2), "no reply checks": (1, 1, 0, 0),
                    "none of the three": (0, 0, 0, 0)}
    assert bench_ablation._parts() == spies and api.Job is Job


def test_bench_ablation_refuses_a_knockout_that_changes_the_run(bench_ablation, monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from topofl import threads

    class Run:
        def __init__(self, last: float, rounds: str = "rounds", field: str = "") -> None:
            self.server_params, self.rounds = np.array([0.0, last]), rounds
            self.records, self.failures, self.server_logs = [], [], []
            if field:
                setattr(self, field, ["one more"])

    def fake(changed: str):
        def contenders(n_clients: int, rounds: int) -> dict[str, object]:
            runs = {name: (lambda: Run(0.0)) for name in bench_ablation.CONTENDERS}
            runs["hand loop"] = lambda: np.zeros(2)
            runs["no reply checks"] = {"model": lambda: Run(1e-300), "rounds": lambda: Run(0.0, "other rounds"),
                                       "records": lambda: Run(0.0, field="records"),
                                       "failures": lambda: Run(0.0, field="failures"),
                                       "server_logs": lambda: Run(0.0, field="server_logs"),
                                       "nothing": lambda: Run(0.0)}[changed]
            return runs
        return contenders

    monkeypatch.setattr(threads, "thread_info", lambda: {"blas": [{"api": "openblas", "num_threads": 1}]})
    for changed in ("model", "rounds", "records", "failures", "server_logs"):
        monkeypatch.setattr(bench_ablation, "contenders", fake(changed))
        with pytest.raises(RuntimeError, match="'no reply checks' changed the run"):
            bench_ablation.worker(8, 1, 1, fill=0.0)
    monkeypatch.setattr(bench_ablation, "contenders", fake("nothing"))
    assert bench_ablation.worker(8, 1, 1, fill=0.0)["hand_gap"] == 0.0


@pytest.mark.parametrize("when", ["before", "after"])
def test_bench_ablation_refuses_pools_above_one_thread(bench_ablation, monkeypatch: pytest.MonkeyPatch,
                                                       when: str) -> None:
    from topofl import threads

    reads = []

    def thread_info() -> dict[str, list[dict[str, object]]]:
        reads.append(1)
        n = 2 if (when == "before") == (len(reads) == 1) else 1
        return {"blas": [{"api": "openblas", "num_threads": 1}, {"api": "openblas", "num_threads": n}]}

    monkeypatch.setattr(threads, "thread_info", thread_info)
    with pytest.raises(RuntimeError, match=f"one thread {when} timing"):
        bench_ablation.worker(8, 1, 1, fill=0.0)


def test_bench_ablation_report_pairs_each_knockout_with_the_shipped_run(bench_ablation,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    names = bench_ablation.CONTENDERS
    # the shipped run's passes differ; each knock-out runs 0.1 ms less than it in the same pass (0.5 ms less in the
    # third, which sorting would move): only pairing pass with pass gives 0.1 ms [0.1, 0.5], and only shipped minus
    # knock-out its sign
    shipped = [4.0e-3, 4.6e-3, 3.8e-3, 4.4e-3, 4.2e-3, 3.6e-3, 4.8e-3]
    walls = {name: [w - (0.5e-3 if p == 2 else 0.1e-3) for p, w in enumerate(shipped)] for name in names}
    walls["topofl as shipped"] = shipped
    walls["hand loop"] = [3.0e-3 + 1e-6 * p for p in range(7)]
    # CPU seconds: the wall's in the knock-outs and the shipped run, half the wall's in the hand loop
    cpus = {name: list(w) for name, w in walls.items()}
    cpus["hand loop"] = [w / 2 for w in walls["hand loop"]]
    result = {"clients": 8, "rounds": 3, "passes": 7, "hand_gap": 0.0, "repeats": dict.fromkeys(names, 60),
              "times": {name: {"wall": walls[name], "cpu": cpus[name]} for name in names}}
    bench_ablation.report(result)
    lines = capsys.readouterr().out.splitlines()
    # medians 4.2 ms (shipped), 4.1 ms (each knock-out), 3.003 ms (the hand loop)
    assert "topofl as shipped         60   4.200ms 1.399x    2.797x" in lines   # no saving of its own
    for name in names[1:-1]:   # 7 passes: the interval is the min and the max
        assert f"{name:<18}        60   4.100ms 1.365x    2.731x  0.100ms [0.100, 0.500]" in lines
    assert "hand loop                 60   3.003ms 1.000x    1.000x" in lines


def test_bench_ablation_puts_the_library_back_when_a_run_fails(bench_ablation, monkeypatch: pytest.MonkeyPatch) -> None:
    import topofl

    real = bench_ablation._parts()
    calls = bench_ablation.contenders(8, 1)

    def fails(*args: object, **kwargs: object) -> None:
        assert bench_ablation._parts() != real   # inside the knock-out's run
        raise RuntimeError("a run that fails")

    monkeypatch.setattr(topofl, "simulate", fails)
    for name in bench_ablation.KNOCKOUTS:
        with pytest.raises(RuntimeError, match="a run that fails"):
            calls[name]()
        assert bench_ablation._parts() == real, name


def test_bench_ablation_library_check_sees_a_knockout_left_in_place(bench_ablation) -> None:
    from topofl import api

    real = bench_ablation._parts()
    try:
        with pytest.raises(RuntimeError, match="left in place"), bench_ablation._library_intact():
            api.Job = object
    finally:
        bench_ablation._put(real)


def test_bench_ablation_quick_runs_two_passes(bench_ablation, monkeypatch: pytest.MonkeyPatch) -> None:
    given = []
    monkeypatch.setattr(bench_ablation, "run_worker", lambda script, args: given.append(args))
    monkeypatch.setattr(bench_ablation, "report", lambda result: None)
    bench_ablation.main(["--quick"])
    assert given == [["--worker", "--clients=8", "--rounds=3", "--passes=2"]]


@pytest.mark.parametrize("option", [("--clients", "1"), ("--clients", "10001"), ("--rounds", "0"),
                                    ("--rounds", "100001"), ("--passes", "0"), ("--passes", "1001")])
def test_bench_ablation_refuses_bad_options_before_running(bench_ablation, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str],
                                                           option: tuple[str, str]) -> None:
    def ran(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"the benchmark ran with {args}")

    monkeypatch.setattr(bench_ablation, "run_worker", ran)
    with pytest.raises(SystemExit) as exit_:
        bench_ablation.main([f"{option[0]}={option[1]}"])
    assert exit_.value.code == 2
    assert f"{option[0]} must be from" in capsys.readouterr().err


def test_bench_scale_loop_worker_times_a_round_of_each_length(bench_scale, round_timer, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np

    seen = {}

    def alternating_passes(groups, passes, fill=0.25):
        seen["groups"] = [list(g) for g in groups]
        # every contender's run of r rounds takes r seconds: the worker must report 1 s a round
        times = {k: {"wall": [float(k.split("@")[1])] * passes, "cpu": [float(k.split("@")[1])] * passes}
                 for g in groups for k in g}
        return times, {k: np.zeros(21) for g in groups for k in g}, [5, 9]

    monkeypatch.setattr(round_timer, "alternating_passes", alternating_passes)
    monkeypatch.setattr(bench_scale, "alternating_passes", alternating_passes)
    bench_scale.loop_worker(8, [15, 3], 2)
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert seen["groups"] == [["topofl@15", "hand@15", "hand-scipy@15"], ["topofl@3", "hand@3", "hand-scipy@3"]]
    assert all(t == {"wall": [1.0, 1.0], "cpu": [1.0, 1.0]} for t in out["times"].values())
    assert out["repeats"] == {"15": 5, "3": 9} and out["gaps"] == {"15": 0.0, "3": 0.0}
