"""Decentralised federated (multi-task) learning on a graph: Sheaf-FMTL, dFedU, D-PSGD, Local."""
from topofl.decentralised.algorithms import REGISTRY, NodeSpec, Peer, PeerAlgorithm, PeerNode, build
from topofl.decentralised.graphs import make_graph
from topofl.decentralised.runner import DecentralisedHistory, run_decentralised

__all__ = ["REGISTRY", "DecentralisedHistory", "NodeSpec", "Peer", "PeerAlgorithm", "PeerNode", "build", "make_graph", "run_decentralised"]
