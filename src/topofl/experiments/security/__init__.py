"""The security experiments: attacks and defences, privacy attacks, differential privacy."""
from __future__ import annotations

from topofl.experiments.security import attacks, privacy_attacks, privacy_dp

EXPERIMENTS = (attacks.EXPERIMENT, privacy_attacks.EXPERIMENT, privacy_dp.EXPERIMENT)

__all__ = ["EXPERIMENTS"]
