"""The server-based methods (pTopoFL and the federated baselines), one module each. They
implement :class:`topofl.federation.algorithm.Algorithm`; :mod:`topofl.methods` registers them.
"""
from topofl.algorithms.base import Algorithm, AlgorithmConfig, ClientContext

__all__ = ["Algorithm", "AlgorithmConfig", "ClientContext"]
