"""Decentralised federated (multi-task) learning on a graph, no server: the peer protocol
(:mod:`~topofl.decentralised.protocol`), one module per method — Sheaf-FMTL
(:mod:`~topofl.decentralised.sheaf`), dFedU, D-PSGD, Local — graphs, the transport and the
round loop (:mod:`~topofl.decentralised.runner`). Methods are looked up in :mod:`topofl.methods`.
"""
from topofl.decentralised.graphs import make_graph
from topofl.decentralised.protocol import NodeSpec, Peer, PeerAlgorithm, PeerConfig, PeerNode
from topofl.decentralised.runner import run_decentralised

__all__ = ["NodeSpec", "Peer", "PeerAlgorithm", "PeerConfig", "PeerNode", "make_graph", "run_decentralised"]
