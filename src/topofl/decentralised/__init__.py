"""Decentralised federated (multi-task) learning on a graph: Sheaf-FMTL, dFedU, D-PSGD, Local."""
from topofl.decentralised.algorithms import REGISTRY, build
from topofl.decentralised.graphs import make_graph
from topofl.decentralised.runner import DecentralisedHistory, run_decentralised

__all__ = ["REGISTRY", "DecentralisedHistory", "build", "make_graph", "run_decentralised"]
