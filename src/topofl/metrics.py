"""Evaluation metrics for one client or a pooled set of predictions.

Binary tasks: ROC AUC of P(y=1) and accuracy at 0.5. Multiclass: macro one-vs-rest AUC and
accuracy. Regression: MSE (``auc``/``accuracy`` are NaN). AUC is undefined when the test labels
hold a single class; it is then NaN and excluded from means over clients (``nanmean``), and the
number of clients that had an AUC is reported alongside.
"""
from __future__ import annotations

import numpy as np
from scipy.stats import rankdata

from topofl.models.base import Model


def _auc_columns(pos: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Binary ROC AUC of each column of ``scores`` for the boolean labels ``pos`` (one column each):
    the Mann–Whitney statistic with average ranks for ties — what ``roc_auc_score`` computes,
    vectorised over columns (the evaluation hot path: every client, every round).
    """
    ranks = rankdata(scores, axis=0)
    n_pos = pos.sum(axis=0).astype(float)
    n_neg = pos.shape[0] - n_pos
    return ((ranks * pos).sum(axis=0) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def auc_score(task: str, y: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC; multiclass: the macro mean of one-vs-rest AUCs over the classes present in ``y``
    (each from the model's probability of that class). NaN when only one class is present.
    """
    if task == "regression" or np.unique(y).size < 2:
        return float("nan")
    if task == "binary":
        return float(_auc_columns((y == 1)[:, None], scores[:, None])[0])
    present = np.unique(y).astype(int)
    pos = y[:, None] == present[None, :]
    return float(_auc_columns(pos, scores[:, present]).mean())


def evaluate(model: Model, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[dict[str, float], np.ndarray]:
    """Metrics of parameters ``theta`` on (X, y), and the scores (for pooled metrics).

    A model that can give its data loss, scores and predictions from one forward pass
    (``outputs``, the PyTorch models) is asked once instead of three times.
    """
    outputs = getattr(model, "outputs", None)
    if outputs is not None:
        loss, scores, pred = outputs(theta, X, y)
        return {"auc": auc_score(model.task, y, scores), "accuracy": float(np.mean(pred == y)), "loss": loss}, scores
    scores = model.predict_scores(theta, X)
    loss = model.loss(theta, X, y) - model._penalty(theta)
    if model.task == "regression":
        return {"auc": float("nan"), "accuracy": float("nan"), "loss": loss}, scores
    pred = model.predict(theta, X)
    return {"auc": auc_score(model.task, y, scores), "accuracy": float(np.mean(pred == y)), "loss": loss}, scores


def pooled(model: Model, y: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """Pooled AUC and accuracy over all clients' test predictions concatenated."""
    return pooled_scores(model.task, y, scores)


def pooled_scores(task: str, y: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """Pooled AUC and accuracy (MSE for regression) of concatenated test labels and scores."""
    if task == "regression":
        return {"pooled_auc": float("nan"), "pooled_accuracy": float("nan"), "pooled_mse": float(np.mean((scores - y) ** 2))}
    pred = (scores >= 0.5).astype(float) if task == "binary" else np.argmax(scores, axis=1).astype(float)
    return {"pooled_auc": auc_score(task, y, scores), "pooled_accuracy": float(np.mean(pred == y))}
