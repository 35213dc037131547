"""topofl — topological federated learning: pTopoFL, Sheaf-FMTL and their baselines."""
from topofl._validation import TrainingWarning
from topofl.api import simulate, simulate_decentralised
from topofl.data import Federation, make_scenario

__version__ = "0.1.0"
__all__ = ["Federation", "TrainingWarning", "make_scenario", "simulate", "simulate_decentralised", "__version__"]
