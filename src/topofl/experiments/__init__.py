"""Experiments: plans of jobs, runners that write tidy results as they go, tables, figures, the report."""
from topofl.experiments.compare import plan_compare, run_compare

__all__ = ["plan_compare", "run_compare"]
