"""Seconds of each round of a topofl run, from its ``on_round`` callback (shared by the benchmarks)."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
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

    ``groups`` holds the contenders (name → a call without arguments); a pass calls every contender of every group,
    one group after the other, in an order that turns from pass to pass (no group always follows the same one), each
    contender ``repeats`` times in a row. Pass 0 warms every contender up (a first call, untimed) and sets each group's
    ``repeats``: contender by contender, raised to as many calls as would fill about ``fill`` seconds at the pace of
    that contender's next calls (at least 1). Then ``passes`` passes are timed.

    Returns each contender's seconds per call in each timed pass (``{name: {"wall": [...], "cpu": [...]}}``, the
    passes aligned across names: pair them), what each contender's last call returned, and each group's repeats.
    """
    if passes < 1:
        raise ValueError(f"passes must be at least 1; got {passes}")
    names = [name for group in groups for name in group]
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
                wall, cpu = time.perf_counter(), time.process_time()
                for _ in range(repeats[g]):
                    last[name] = call()
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                if p:
                    times[name]["wall"].append(wall / repeats[g])
                    times[name]["cpu"].append(cpu / repeats[g])
                else:
                    repeats[g] = max(repeats[g], math.ceil(fill / max(wall, 1e-6)))
    return times, last, repeats
