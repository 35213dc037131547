"""Federated algorithms and their registry."""
from topofl.algorithms.base import Algorithm, AlgorithmConfig, ClientContext
from topofl.algorithms.registry import REGISTRY, available, build, get

__all__ = ["Algorithm", "AlgorithmConfig", "ClientContext", "REGISTRY", "available", "build", "get"]
