"""Name → algorithm class. Adding an algorithm touches its module, its test and one line here."""
from __future__ import annotations

from typing import Any, Mapping

from topofl.algorithms.base import Algorithm
from topofl.algorithms.ditto import Ditto
from topofl.algorithms.fedavg import FedAvg
from topofl.algorithms.fedprox import FedProx
from topofl.algorithms.ifca import IFCA
from topofl.algorithms.local_only import LocalOnly
from topofl.algorithms.perfedavg import PerFedAvg
from topofl.algorithms.pfedme import PFedMe
from topofl.algorithms.ptopofl import PTopoFL
from topofl.algorithms.scaffold import Scaffold

REGISTRY: dict[str, type[Algorithm]] = {
    cls.name: cls for cls in (PTopoFL, FedAvg, FedProx, Scaffold, PFedMe, Ditto, PerFedAvg, IFCA, LocalOnly)
}


def available() -> list[str]:
    """Registered method names."""
    return list(REGISTRY)


def get(name: str) -> type[Algorithm]:
    """The class registered under ``name``; ``ValueError`` listing the known names otherwise."""
    key = name.strip().lower()
    if key not in REGISTRY:
        raise ValueError(f"unknown method {name!r}; available: {', '.join(REGISTRY)}")
    return REGISTRY[key]


def build(name: str, hyperparameters: Mapping[str, Any] | None = None) -> Algorithm:
    """Instantiate ``name`` with a validated config built from ``hyperparameters``."""
    cls = get(name)
    return cls(cls.Config.from_dict(dict(hyperparameters or {})))
