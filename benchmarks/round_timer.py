"""Seconds of each round of a topofl run, from its ``on_round`` callback (shared by the benchmarks)."""
from __future__ import annotations

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
