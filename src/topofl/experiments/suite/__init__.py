"""The pTopoFL paper's experiments, by name (``topofl experiment NAME``)."""
from __future__ import annotations

from topofl.experiments.suite import (
    ablation,
    attacks,
    comparison,
    continual,
    controls,
    deep,
    diagrams,
    heart_disease,
    paper_protocol,
    privacy,
    privacy_attacks,
    privacy_dp,
    ptopofl_options,
    robustness,
    sheaf,
    sheaf_mnist,
    sheaf_school,
)
from topofl.experiments.suite.base import Experiment, Manifest

EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (comparison.EXPERIMENT, robustness.EXPERIMENT, continual.EXPERIMENT, privacy.EXPERIMENT, ablation.EXPERIMENT, attacks.EXPERIMENT,
              privacy_attacks.EXPERIMENT, diagrams.EXPERIMENT, heart_disease.EXPERIMENT, controls.EXPERIMENT, deep.EXPERIMENT, *sheaf.EXPERIMENTS,
              sheaf_mnist.EXPERIMENT, sheaf_school.EXPERIMENT, privacy_dp.EXPERIMENT, paper_protocol.EXPERIMENT, ptopofl_options.EXPERIMENT)
}

__all__ = ["EXPERIMENTS", "Experiment", "Manifest"]
