"""The pTopoFL paper's experiments: its tables and figures, its own protocol, controls, real and deep-model data."""
from __future__ import annotations

from topofl.experiments.ptopofl import (
    ablation,
    comparison,
    continual,
    controls,
    deep,
    diagrams,
    heart_disease,
    paper_protocol,
    privacy,
    ptopofl_options,
    robustness,
)

EXPERIMENTS = (comparison.EXPERIMENT, paper_protocol.EXPERIMENT, controls.EXPERIMENT, heart_disease.EXPERIMENT,
               robustness.EXPERIMENT,
               continual.EXPERIMENT, privacy.EXPERIMENT, ablation.EXPERIMENT, ptopofl_options.EXPERIMENT,
               diagrams.EXPERIMENT,
               deep.EXPERIMENT)

__all__ = ["EXPERIMENTS"]
