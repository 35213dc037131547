"""topofl — topological federated learning: pTopoFL, Sheaf-FMTL and their baselines."""
from topofl._validation import TrainingWarning
from topofl._version import __version__
from topofl.api import simulate, simulate_decentralised
from topofl.data import Federation, make_scenario
from topofl.models.io import load_models, save_models

__all__ = ["Federation", "TrainingWarning", "load_models", "make_scenario", "save_models", "simulate", "simulate_decentralised", "__version__"]
