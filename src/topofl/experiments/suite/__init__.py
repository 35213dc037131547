"""The pTopoFL paper's experiments, by name (``topofl experiment NAME``)."""
from __future__ import annotations

from topofl.experiments.suite import (
    ablation,
    comparison,
    continual,
    controls,
    deep,
    diagrams,
    heart_disease,
    privacy,
    robustness,
    sheaf,
    sheaf_mnist,
    sheaf_school,
)
from topofl.experiments.suite.base import Experiment, Manifest

EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (comparison.EXPERIMENT, robustness.EXPERIMENT, continual.EXPERIMENT, privacy.EXPERIMENT, ablation.EXPERIMENT,
              diagrams.EXPERIMENT, heart_disease.EXPERIMENT, controls.EXPERIMENT, deep.EXPERIMENT, *sheaf.EXPERIMENTS,
              sheaf_mnist.EXPERIMENT, sheaf_school.EXPERIMENT)
}

__all__ = ["EXPERIMENTS", "Experiment", "Manifest"]
