"""The security experiments: attacks and defences, privacy attacks, differential privacy, secure aggregation."""
from __future__ import annotations

from topofl.experiments.security import attacks, privacy_attacks, privacy_dp, secure_aggregation

EXPERIMENTS = (attacks.EXPERIMENT, privacy_attacks.EXPERIMENT, privacy_dp.EXPERIMENT, secure_aggregation.EXPERIMENT)

__all__ = ["EXPERIMENTS"]
