"""Evaluation metrics for one client or a pooled set of predictions.

Binary tasks: ROC AUC of P(y=1) and accuracy at 0.5. Multiclass: macro one-vs-rest AUC and
accuracy. Regression: MSE and R² (``mse``, ``r2``; ``auc``/``accuracy`` are NaN, and ``loss`` is
the model's data loss, half the MSE for least squares). AUC is undefined when the test labels
hold a single class; it is then NaN and excluded from means over clients (``nanmean``), and the
number of clients that had an AUC is reported alongside.
"""
from __future__ import annotations

import numpy as np

from topofl.models.base import Model


def average_ranks(a: np.ndarray) -> np.ndarray:
    """Ranks 1..n down each column of ``a``, ties sharing their average rank, and a column that holds a
    NaN all NaN: ``scipy.stats.rankdata(a, axis=0)``, to the bit (every rank is an integer or a half),
    without importing ``scipy.stats`` (~0.3 s, paid by every Flower ClientApp process that evaluates).
    """
    x = np.moveaxis(np.asarray(a), 0, -1)  # ranks along the last axis, one row per column of ``a``
    order = np.argsort(x, axis=-1)
    ordered = np.take_along_axis(x, order, axis=-1)
    first = np.ones(ordered.shape, dtype=bool)  # the first entry of each run of equal values (never across rows)
    first[..., 1:] = ordered[..., :-1] != ordered[..., 1:]
    starts = np.flatnonzero(first)
    counts = np.diff(starts, append=ordered.size)
    ordinal = np.broadcast_to(np.arange(1, x.shape[-1] + 1), x.shape)[first]
    ranks = np.empty(x.shape, dtype=np.float64)
    np.put_along_axis(ranks, order, np.repeat(ordinal + (counts - 1) / 2, counts).reshape(x.shape), axis=-1)
    ranks[np.isnan(x).any(axis=-1)] = np.nan
    return np.moveaxis(ranks, -1, 0)


def _auc_columns(pos: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Binary ROC AUC of each column of ``scores`` for the boolean labels ``pos`` (one column each):
    the Mann–Whitney statistic with average ranks for ties — what ``roc_auc_score`` computes,
    vectorised over columns (the evaluation hot path: every client, every round).
    """
    ranks = average_ranks(scores)
    n_pos = pos.sum(axis=0).astype(float)
    n_neg = pos.shape[0] - n_pos
    return ((ranks * pos).sum(axis=0) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def _binary_auc(pos: np.ndarray, scores: np.ndarray) -> float:
    """:func:`_auc_columns` of one column, to the bit, without the rank array: the sum of the positives' average
    ranks (every rank is an integer or a half, so the sum is exact in any order) — with no tied scores the ranks of
    the sorted positions 1..n, else each run of tied scores' average rank times its positives — then the same
    arithmetic. NaN when a score is NaN (a column holding a NaN has NaN ranks).
    """
    if (not isinstance(scores, np.ndarray) or not isinstance(pos, np.ndarray) or scores.ndim != 1
            or pos.shape != scores.shape or scores.size == 0):  # not one column: the general path (its errors)
        return float(_auc_columns(pos[:, None], scores[:, None])[0])
    n = scores.shape[0]
    order = scores.argsort()
    ordered = scores[order]
    if ordered[-1] != ordered[-1]:  # NaNs sort last
        return float("nan")
    distinct = ordered[1:] != ordered[:-1]
    hits = pos[order]
    count = _count(hits)
    if _AND(distinct, axis=None):  # no ties: the positives' sorted positions plus one
        rank_sum = float(int(np.add.reduce(hits.nonzero()[0], axis=None)) + count)
    else:
        starts = np.flatnonzero(np.concatenate(([True], distinct)))  # each run of ties
        ends = np.append(starts[1:], n)
        run_pos = np.add.reduceat(hits.astype(np.float64), starts)
        rank_sum = float(run_pos @ ((starts + 1 + ends) / 2))  # a run's average rank, times its positives
    n_pos = np.float64(count)
    n_neg = n - n_pos
    return float((rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


_AND = np.logical_and.reduce


def _count(flags: np.ndarray) -> int:
    """``np.count_nonzero(flags)`` of a boolean array, without its Python layers: the sum of its ones (exact)."""
    return int(np.add.reduce(flags, axis=None, dtype=np.intp))


def _one_class(y: np.ndarray) -> bool:
    """``np.unique(y).size < 2`` (NaNs count as one value, as there): every entry equal to the first, or all NaN."""
    if not isinstance(y, np.ndarray) or y.dtype.kind not in "biuf":
        return bool(np.unique(y).size < 2)
    if y.size == 0:
        return True
    first = y.flat[0]
    return bool(_AND(y == first, axis=None)) or bool(first != first and np.isnan(y).all())


def auc_score(task: str, y: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC; multiclass: the macro mean of one-vs-rest AUCs over the classes present in ``y``
    (each from the model's probability of that class). NaN when only one class is present.
    """
    if task == "regression" or _one_class(y):
        return float("nan")
    if task == "binary":
        return _binary_auc(y == 1, scores)
    present = np.unique(y).astype(int)
    pos = y[:, None] == present[None, :]
    return float(_auc_columns(pos, scores[:, present]).mean())


def regression_scores(y: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """Mean squared error and coefficient of determination of predictions ``pred`` of ``y``.

    ``r2 = 1 − Σ(y − ŷ)² / Σ(y − ȳ)²`` (NaN when ``y`` is constant, where it is undefined). The
    root mean squared error is ``√mse``; tables derive it rather than carrying a third number.
    """
    y = np.asarray(y, dtype=float).ravel()
    r = np.asarray(pred, dtype=float).ravel() - y
    sse = float(r @ r)
    sst = float(np.sum((y - y.mean()) ** 2)) if y.size else 0.0
    return {"mse": sse / y.size if y.size else float("nan"), "r2": 1.0 - sse / sst if sst > 0 else float("nan")}


def classification_scores(task: str, y: np.ndarray, scores: np.ndarray, pred: np.ndarray) -> dict[str, float]:
    """``auc`` (:func:`auc_score`) and ``accuracy`` of a classifier's ``scores`` and predicted class ids ``pred``
    against class ids ``y``.
    """
    return {"auc": auc_score(task, y, scores), "accuracy": _share(pred == y)}


def _share(hits: np.ndarray) -> float:
    """``float(np.mean(hits))`` of booleans, to the bit: the count of hits (exact) over the number of entries."""
    if not isinstance(hits, np.ndarray) or hits.dtype != np.bool_ or hits.size == 0:
        return float(np.mean(hits))
    return float(_count(hits) / hits.size)


def evaluate(model: Model, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[dict[str, float], np.ndarray]:
    """Metrics of parameters ``theta`` on (X, y), and the scores (for pooled metrics).

    A model that can give its data loss, scores and predictions from one forward pass
    (``outputs``, the PyTorch models; ``evaluation_outputs``, the NumPy linear models) is asked once
    instead of three times.
    """
    outputs = getattr(model, "outputs", None) or getattr(model, "evaluation_outputs", None)
    if outputs is not None:
        loss, scores, pred = outputs(theta, X, y)
        if model.task == "regression":
            return {"auc": float("nan"), "accuracy": float("nan"), "loss": loss, **regression_scores(y, scores)}, scores
        return {**classification_scores(model.task, y, scores, pred), "loss": loss}, scores
    scores = model.predict_scores(theta, X)
    loss = model.loss(theta, X, y) - model._penalty(theta)
    if model.task == "regression":
        return {"auc": float("nan"), "accuracy": float("nan"), "loss": loss, **regression_scores(y, scores)}, scores
    return {**classification_scores(model.task, y, scores, model.predict(theta, X)), "loss": loss}, scores


def evaluate_clients(model: Model, theta: np.ndarray,
                     splits: list[tuple[np.ndarray, np.ndarray]]) -> list[tuple[dict[str, float], np.ndarray]]:
    """``[evaluate(model, theta, X, y) for X, y in splits]`` — a round's evaluations in process, every client with the
    same ``theta`` — to the bit: for a model that gives the splits' outputs joined
    (:meth:`~topofl.models.linear.BinaryLogistic.joined_evaluation_outputs`), the element-wise steps of the loss, the
    scores, the predictions, the hits and the positives are taken once over all the splits and each split's metrics
    from its own part of them (its loss its own sum, its AUC and accuracy :func:`auc_score`'s and :func:`_share`'s
    steps on its part); each split's scores are a view of the round's. Otherwise, or for one split, one call each.
    """
    # the model's own class's method (an object that hands lookups to an inner model keeps its own evaluation); a
    # model with its own ``outputs`` is asked for them, as evaluate asks
    joined = (getattr(type(model), "joined_evaluation_outputs", None)
              if len(splits) > 1 and getattr(model, "outputs", None) is None and model.task == "binary" else None)
    out = joined(model, theta, [X for X, _ in splits], [y for _, y in splits]) if joined is not None else None
    if out is None:
        return [evaluate(model, theta, X, y) for X, y in splits]
    labels = out.labels
    hits, positive = out.pred == labels, labels == 1
    # _one_class of each split's finite labels (the joined outputs are only given for finite ones): its least equal to
    # its greatest
    starts = [start for start, _ in out.bounds]
    one_class = (np.minimum.reduceat(labels, starts) == np.maximum.reduceat(labels, starts)).tolist()
    results = []
    for (start, stop), loss, single in zip(out.bounds, out.losses, one_class, strict=True):
        scores = out.scores[start:stop]
        # classification_scores' auc (auc_score: one class, else _binary_auc of the positives) and accuracy (_share)
        auc = float("nan") if single else _binary_auc(positive[start:stop], scores)
        results.append(({"auc": auc, "accuracy": float(_count(hits[start:stop]) / (stop - start)), "loss": loss},
                        scores))
    return results


def pooled(model: Model, y: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """Pooled AUC and accuracy over all clients' test predictions concatenated."""
    return pooled_scores(model.task, y, scores)


def pooled_scores(task: str, y: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """Pooled AUC and accuracy (MSE and R² for regression) of concatenated test labels and scores."""
    if task == "regression":
        pooled_r = regression_scores(y, scores)
        return {"pooled_auc": float("nan"), "pooled_accuracy": float("nan"), "pooled_mse": pooled_r["mse"],
                "pooled_r2": pooled_r["r2"]}
    pred = (scores >= 0.5).astype(float) if task == "binary" else np.argmax(scores, axis=1).astype(float)
    return {"pooled_auc": auc_score(task, y, scores), "pooled_accuracy": _share(pred == y)}
