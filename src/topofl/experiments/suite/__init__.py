"""The pTopoFL paper's experiments, by name (``topofl experiment NAME``)."""
from __future__ import annotations

from topofl.experiments.suite import ablation, comparison, continual, diagrams, privacy, robustness, sheaf
from topofl.experiments.suite.base import Experiment, Manifest

EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (comparison.EXPERIMENT, robustness.EXPERIMENT, continual.EXPERIMENT, privacy.EXPERIMENT, ablation.EXPERIMENT,
              diagrams.EXPERIMENT, *sheaf.EXPERIMENTS)
}

__all__ = ["EXPERIMENTS", "Experiment", "Manifest"]
