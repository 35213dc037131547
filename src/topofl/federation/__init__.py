"""The server-based runtime: the contract of a method, messages, reply checks, local training,
the round loop and histories. Nothing here imports a method: methods implement this contract.
"""
from topofl.federation.algorithm import Algorithm, AlgorithmConfig, ClientContext
from topofl.federation.history import History, RoundSummary
from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.federation.runner import run_federation, run_rounds

__all__ = [
    "Algorithm", "AlgorithmConfig", "ClientContext", "ClientUpdate", "History", "RoundSummary", "ServerMessage",
    "run_federation", "run_rounds",
]
