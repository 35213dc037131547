"""Experiments: specs, runners that write tidy results as they go."""
from topofl.experiments.compare import CompareSpec, run_compare

__all__ = ["CompareSpec", "run_compare"]
