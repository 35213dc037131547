"""Sheaf-FMTL: decentralised multi-task learning on a cellular sheaf (node state, maths, maps)."""
from topofl.decentralised.sheaf.algorithm import SheafConfig, SheafFMTL, SheafNode
from topofl.decentralised.sheaf.maths import edge_dim

__all__ = ["SheafConfig", "SheafFMTL", "SheafNode", "edge_dim"]
