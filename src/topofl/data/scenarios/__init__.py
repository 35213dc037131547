"""Seeded synthetic scenarios of the pTopoFL paper, by name."""
from __future__ import annotations

from typing import Any, Callable

from topofl.data.federation import Federation
from topofl.data.scenarios.benchmark import BenchmarkConfig, make_benchmark
from topofl.data.scenarios.continual import ContinualConfig, make_continual
from topofl.data.scenarios.healthcare import HealthcareConfig, make_healthcare

SCENARIOS: dict[str, tuple[Callable[..., Federation], type]] = {
    "healthcare": (make_healthcare, HealthcareConfig),
    "benchmark": (make_benchmark, BenchmarkConfig),
    "continual": (make_continual, ContinualConfig),
}


def make_scenario(name: str, seed: int = 0, **params: Any) -> Federation:
    """A seeded scenario federation by name; ``params`` override the scenario's defaults."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; available: {', '.join(SCENARIOS)}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer; got {seed!r}")
    return SCENARIOS[name][0](seed, **params)


__all__ = ["SCENARIOS", "make_scenario", "HealthcareConfig", "BenchmarkConfig", "ContinualConfig"]
