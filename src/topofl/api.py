"""The Python API: :func:`simulate`."""
from __future__ import annotations

from typing import Any

from topofl.algorithms.base import Algorithm
from topofl.algorithms.registry import build
from topofl.data.federation import Federation
from topofl.federation.history import History
from topofl.federation.runner import OnRound, run_federation


def simulate(
    federation: Federation,
    method: str | Algorithm,
    rounds: int = 15,
    seed: int = 0,
    *,
    client_fraction: float = 1.0,
    progress: bool = False,
    on_round: OnRound | None = None,
    **hyperparameters: Any,
) -> History:
    """Run a method on a federation in process.

    Parameters
    ----------
    federation : Federation
        From :meth:`Federation.from_arrays` or :func:`topofl.data.make_scenario`.
    method : str or Algorithm
        A registered name (``topofl.algorithms.available()``) or a configured algorithm object.
    rounds, seed, client_fraction, progress, on_round
        See :func:`topofl.federation.run_federation`.
    **hyperparameters
        The method's hyper-parameters (e.g. ``lr=0.05, n_clusters=2``); unknown names or
        out-of-range values raise ``ValueError``.

    Returns
    -------
    History
        ``history.final`` holds ``auc`` and ``accuracy`` (means over clients of each client's
        score with the model it would use), their spreads, and ``pooled_auc``/``pooled_accuracy``.
    """
    if not isinstance(federation, Federation):
        raise ValueError(f"federation must be a topofl Federation; got {type(federation).__name__}")
    if isinstance(method, Algorithm):
        if hyperparameters:
            raise ValueError("pass hyper-parameters either in the Algorithm's config or as keywords, not both")
        algorithm = method
    else:
        algorithm = build(method, hyperparameters)
    return run_federation(federation, algorithm, rounds, seed, client_fraction=client_fraction, on_round=on_round, progress=progress)
