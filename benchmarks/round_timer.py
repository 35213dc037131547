"""Timing helpers shared by the benchmarks: the seconds of each round of a topofl run (from its ``on_round``
callback), contenders timed in turns in one process, the median of paired differences with its interval, and a
worker process with one BLAS thread.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any


def timed_rounds(simulate: Callable[..., Any], *args: Any, **kwargs: Any) -> list[float]:
    """Run ``simulate(*args, on_round=..., **kwargs)`` (``topofl.simulate``) and return the seconds of
    each round: from the call to round 1's end, then between consecutive round ends.
    """
    return timed_run(simulate, *args, **kwargs)[0]


def timed_run(simulate: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[list[float], Any]:
    """:func:`timed_rounds`'s seconds of each round, and what ``simulate`` returned."""
    stamps: list[float] = []
    last = [time.perf_counter()]

    def tick(history: Any, summary: Any) -> None:
        now = time.perf_counter()
        stamps.append(now - last[0])
        last[0] = now

    result = simulate(*args, on_round=tick, **kwargs)
    return stamps, result



def alternating_passes(groups: list[dict[str, Callable[[], Any]]], passes: int, fill: float = 0.25,
                       ) -> tuple[dict[str, dict[str, list[float]]], dict[str, Any], list[int]]:
    """Time contenders that take turns in one process: the wall and CPU seconds of one call of each, pass by pass.

    Parameters
    ----------
    groups : list of dict
        The contenders, name → a call without arguments, in groups. A pass calls every contender of every group, one
        group after the other, in an order that turns from pass to pass (no group always follows the same one), each
        contender ``repeats`` times in a row (its group's number).
    passes : int
        The passes timed (>= 1), after pass 0. Pass 0 warms every contender up: a first call, untimed (imports and
        caches), then calls that set the group's ``repeats``: the most that any of its contenders needs, at the pace
        of those calls, to fill about ``fill`` seconds (at least 1).
    fill : float
        Seconds a contender's calls of one pass should last, about.

    Returns
    -------
    times : dict
        ``{name: {"wall": [...], "cpu": [...]}}``: seconds per call in each timed pass, the passes aligned across
        names (pair them).
    last : dict
        What each contender's last call returned.
    repeats : list of int
        Each group's calls per pass.
    """
    if passes < 1:
        raise ValueError(f"passes must be at least 1; got {passes}")
    if not 0 <= fill < math.inf:
        raise ValueError(f"fill must be a finite number of seconds >= 0; got {fill}")
    names = [name for group in groups for name in group]
    if not names:
        raise ValueError("there must be at least one contender")
    if len(set(names)) != len(names):
        raise ValueError(f"contenders must have distinct names; got {names}")
    times: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in names}
    last: dict[str, Any] = {}
    repeats = [1] * len(groups)
    for p in range(passes + 1):
        turn = p % len(groups)
        for g in [*range(turn, len(groups)), *range(turn)]:
            for name, call in groups[g].items():
                if not p:   # a first call pays for what is done once (imports, caches): not the pace of the others
                    call()
                calls = repeats[g]
                wall, cpu = time.perf_counter(), time.process_time()
                for _ in range(calls):
                    last[name] = call()
                wall, cpu = (time.perf_counter() - wall) / calls, (time.process_time() - cpu) / calls
                if p:
                    times[name]["wall"].append(wall)
                    times[name]["cpu"].append(cpu)
                else:
                    repeats[g] = max(repeats[g], math.ceil(fill / max(wall, 1e-6)))   # a clock that reads 0: 1 µs
    return times, last, repeats


def passes_text(n: int) -> str:
    """``"1 alternating pass"``, ``"7 alternating passes"``: how the benchmarks name their timed passes."""
    return f"{n} alternating pass{'' if n == 1 else 'es'}"


def median_interval(differences: Sequence[float], level: float = 0.95) -> dict[str, Any]:
    """The median of paired differences (one a pass) and its distribution-free confidence interval.

    The interval is the order statistics ``x(k)`` and ``x(n + 1 − k)`` of the ``n`` sorted differences, with the
    largest ``k`` whose coverage ``1 − 2 P(B <= k − 1)``, ``B ~ Binomial(n, 1/2)``, is at least ``level`` (the sign
    test's interval: no assumption on how the differences are distributed, only that the passes are independent).

    Returns
    -------
    dict
        ``"median"``; ``"low"`` and ``"high"`` (``None`` when ``n`` is too small for any interval at ``level``: under
        6 differences at 95 %), ``"coverage"`` (the interval's own, ``None`` without one) and ``"resolved"``: the
        interval excludes 0.
    """
    if not differences:
        raise ValueError("there must be at least one difference")
    x = sorted(differences)
    n = len(x)
    low = high = coverage = None
    below = 0.0   # P(B <= k - 1)
    for k in range(1, (n + 1) // 2 + 1):
        below += math.comb(n, k - 1) / 2**n
        if 1 - 2 * below < level:
            break
        low, high, coverage = x[k - 1], x[n - k], 1 - 2 * below
    return {"median": statistics.median(x), "low": low, "high": high, "coverage": coverage,
            "resolved": low is not None and high is not None and not low <= 0 <= high}


def run_worker(script: str, args: list[str]) -> dict[str, Any]:
    """Run ``script`` with ``args`` in a fresh process whose BLAS and OpenMP pools start with one thread
    (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and ``MKL_NUM_THREADS`` set to 1); what it printed last, as JSON.

    Raises
    ------
    RuntimeError
        The process failed (the end of its standard error is in the message).
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, check=False, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def interval_text(r: dict[str, Any], scale: float = 1e3, unit: str = "ms") -> str:
    """:func:`median_interval`'s result as printed: ``"0.199ms [0.179, 0.221]"``, its values times ``scale``, with
    ``" unresolved"`` after an interval that includes 0 or in place of one that too few passes cannot give.
    """
    text = f"{r['median'] * scale:.3f}{unit} "
    text += "[too few passes]" if r["low"] is None else f"[{r['low'] * scale:.3f}, {r['high'] * scale:.3f}]"
    return text + ("" if r["resolved"] else " unresolved")
