"""In-process federation runtime: messages, local training, the round loop, histories."""
from topofl.federation.history import History, RoundSummary
from topofl.federation.messages import ClientUpdate, ServerMessage


def __getattr__(name: str):
    # The runner depends on the algorithms, which depend on this package's messages: import lazily.
    if name == "run_federation":
        from topofl.federation.runner import run_federation

        return run_federation
    raise AttributeError(name)


__all__ = ["ClientUpdate", "History", "RoundSummary", "ServerMessage", "run_federation"]
