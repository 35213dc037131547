"""topofl — topological federated learning: pTopoFL, Sheaf-FMTL and their baselines.

The names below are loaded on first use (module ``__getattr__``, PEP 562), so ``import topofl``
and ``topofl --help`` do not pay for SciPy, scikit-learn or the methods until they are needed.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from topofl._version import __version__

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from topofl._validation import TrainingWarning
    from topofl.api import run, simulate, simulate_decentralised
    from topofl.data import Federation, make_scenario
    from topofl.federation.history import Result
    from topofl.job import Job
    from topofl.models.io import load_models, save_models

#: public name -> the module that defines it (imported on first access)
_LAZY = {
    "TrainingWarning": "topofl._validation",
    "Job": "topofl.job",
    "Result": "topofl.federation.history",
    "run": "topofl.api",
    "simulate": "topofl.api",
    "simulate_decentralised": "topofl.api",
    "Federation": "topofl.data",
    "make_scenario": "topofl.data",
    "load_models": "topofl.models.io",
    "save_models": "topofl.models.io",
}

__all__ = ["Federation", "Job", "Result", "TrainingWarning", "load_models", "make_scenario", "run", "save_models",
           "simulate", "simulate_decentralised", "__version__"]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first access (``topofl.simulate``, ``from topofl import Federation``)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'topofl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
