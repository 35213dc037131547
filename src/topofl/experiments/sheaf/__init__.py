"""The Sheaf-FMTL paper's experiments (Ben Issaid, Vepakomma, Bennis, TMLR 2025), offline data."""
from __future__ import annotations

from topofl.experiments.sheaf import centralised, digits, hetero, init, mnist, school, topology

EXPERIMENTS = (digits.EXPERIMENT, hetero.EXPERIMENT, topology.EXPERIMENT, init.EXPERIMENT, centralised.EXPERIMENT,
               mnist.EXPERIMENT,
               school.EXPERIMENT)

__all__ = ["EXPERIMENTS"]
