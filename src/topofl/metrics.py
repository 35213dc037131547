"""Evaluation metrics for one client or a pooled set of predictions.

Binary tasks: ROC AUC of P(y=1) and accuracy at 0.5. Multiclass: macro one-vs-rest AUC and
accuracy. Regression: MSE (``auc``/``accuracy`` are NaN). AUC is undefined when the test labels
hold a single class; it is then NaN and excluded from means over clients (``nanmean``), and the
number of clients that had an AUC is reported alongside.
"""
from __future__ import annotations

import numpy as np
from sklearn.metrics import roc_auc_score

from topofl.models.linear import LinearModel


def auc_score(task: str, y: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC (macro one-vs-rest for multiclass); NaN when only one class is present."""
    if task == "regression" or np.unique(y).size < 2:
        return float("nan")
    if task == "binary":
        return float(roc_auc_score(y, scores))
    present = np.unique(y).astype(int)
    if present.size < scores.shape[1]:  # restrict to classes present in y, renormalised
        sub = scores[:, present]
        return float(roc_auc_score(y, sub / sub.sum(axis=1, keepdims=True), multi_class="ovr", labels=present))
    return float(roc_auc_score(y, scores, multi_class="ovr"))


def evaluate(model: LinearModel, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[dict[str, float], np.ndarray]:
    """Metrics of parameters ``theta`` on (X, y), and the scores (for pooled metrics)."""
    scores = model.predict_scores(theta, X)
    loss = model.loss(theta, X, y) - model._penalty(theta)
    if model.task == "regression":
        return {"auc": float("nan"), "accuracy": float("nan"), "loss": loss}, scores
    pred = model.predict(theta, X)
    return {"auc": auc_score(model.task, y, scores), "accuracy": float(np.mean(pred == y)), "loss": loss}, scores


def pooled(model: LinearModel, y: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """Pooled AUC and accuracy over all clients' test predictions concatenated."""
    if model.task == "regression":
        return {"pooled_auc": float("nan"), "pooled_accuracy": float("nan"), "pooled_mse": float(np.mean((scores - y) ** 2))}
    pred = (scores >= 0.5).astype(float) if model.task == "binary" else np.argmax(scores, axis=1).astype(float)
    return {"pooled_auc": auc_score(model.task, y, scores), "pooled_accuracy": float(np.mean(pred == y))}
