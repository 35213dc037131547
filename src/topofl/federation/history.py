"""What a run produces: tidy per-(round, client) records, per-round summaries, server logs."""
from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ROUND_FIELDS = ("round", "client", "auc", "accuracy", "loss", "bytes_up", "bytes_down", "floats_up", "floats_down", "mse", "r2")


def nanmean(values: Iterable[float]) -> float:
    """Mean ignoring NaN; NaN (not a warning) when nothing is left."""
    v = np.asarray(list(values), dtype=float)
    v = v[~np.isnan(v)]
    return float(v.mean()) if v.size else float("nan")


def nanstd(values: Iterable[float]) -> float:
    """Population standard deviation ignoring NaN; NaN (not a warning) when nothing is left."""
    v = np.asarray(list(values), dtype=float)
    v = v[~np.isnan(v)]
    return float(v.std()) if v.size else float("nan")


def regression_summary(rows: Iterable[dict[str, Any]]) -> dict[str, float]:
    """``mse``, ``rmse`` and ``r2`` of a round: means over the clients' rows that carry them
    (regression tasks); an empty dict for classification, whose summaries keep NaN.
    """
    rows = [r for r in rows if "mse" in r]
    if not rows:
        return {}
    mse = [float(r["mse"]) for r in rows]
    return {"mse": nanmean(mse), "rmse": nanmean(np.sqrt(np.maximum(mse, 0.0))), "r2": nanmean(float(r.get("r2", float("nan"))) for r in rows)}


@dataclass
class RoundSummary:
    """Metrics of one round. ``auc``/``accuracy`` are means over clients of each client's score
    with the model it would use; ``pooled_*`` are computed on all test predictions together.
    Regression: ``mse``, ``rmse`` (each client's √MSE) and ``r2`` are means over clients (NaN
    for classification), and ``auc``/``accuracy`` are NaN.
    """

    round: int
    auc: float
    auc_std: float
    accuracy: float
    accuracy_std: float
    loss: float
    pooled_auc: float
    pooled_accuracy: float
    n_clients_auc: int
    bytes_up: int
    bytes_down: int
    mse: float = float("nan")
    rmse: float = float("nan")
    r2: float = float("nan")

    def as_dict(self) -> dict[str, float]:
        return dict(self.__dict__)


@dataclass
class History:
    """Result of :func:`topofl.simulate`: ``records`` (a dict per round and client), ``rounds``
    (a :class:`RoundSummary` per round), ``server_logs``, ``client_metrics`` (last reported) and
    ``failures`` (clients that failed or sent an invalid payload, with the reason).
    """

    method: str
    seed: int
    records: list[dict[str, Any]] = field(default_factory=list)
    rounds: list[RoundSummary] = field(default_factory=list)
    server_logs: list[dict[str, Any]] = field(default_factory=list)
    client_metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    failures: list[Any] = field(default_factory=list)  # topofl.federation.pool.Failure, per round
    out_dir: str | None = None  # where a runtime wrote the run's files, if it did
    model: Any = None  # the model object every client trained (topofl.models)
    server_params: np.ndarray | None = None  # the server's model after the run (None: it keeps none)
    client_models: dict[int, np.ndarray] = field(default_factory=dict)  # each client's final model, the one it would use
    client_feature_states: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)  # raw features → model input

    def predict(self, X: np.ndarray, client: int | None = None) -> np.ndarray:
        """Scores of ``X`` under client ``client``'s final model (``None``: the server's model):
        P(y = 1), class probabilities, or predicted values, as :meth:`Model.predict_scores`.
        """
        from topofl.models.io import predict_with

        return predict_with(self.model, self.server_params, self.client_models, self.client_feature_states, X, client)

    @property
    def final(self) -> dict[str, float]:
        """Metrics after the last round (see :class:`RoundSummary`)."""
        if not self.rounds:
            raise ValueError("the history has no rounds")
        return self.rounds[-1].as_dict()

    def curve(self, metric: str = "auc") -> np.ndarray:
        """One metric over rounds."""
        return np.array([getattr(r, metric) for r in self.rounds], dtype=float)

    def convergence_round(self, metric: str = "auc", fraction: float = 0.95) -> int:
        """First round whose ``metric`` reaches ``fraction`` × its final value (paper Table 1)."""
        c = self.curve(metric)
        if np.isnan(c[-1]):
            return -1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hits = np.nonzero(c >= fraction * c[-1])[0]
        return int(self.rounds[hits[0]].round)
