"""Trained models on raw rows: their scores (:func:`score_rows`) and ``topofl predict`` on a CSV file
(:func:`predict_table`).

Each row goes to the model of its site (the site column, matched to the site names the models carry),
or every row to one client's model (``client=``), or to the server's model; the federation's
preprocessing is applied to the raw values. With a label column, the scores per site are computed as
the run computed them, so a site's held-out rows give the scores the run reported.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from topofl.models.io import ModelSet

__all__ = ["TablePredictions", "predict_table", "score_rows"]


def score_rows(models: ModelSet, X: Any, y: Any, client: Any = None, *, preprocessed: bool = False) -> dict[str, float]:
    """The metrics a run reports, of raw rows ``X`` with labels ``y`` (as the data named them) under
    client ``client``'s model (an id or a site name; ``None``: the server's): ``accuracy`` and ``auc``
    (``mse`` and ``r2`` for regression), computed as the run computed them
    (:func:`topofl.metrics.auc_score`) — on a client's held-out rows, the scores it reported.

    ``models``: a :class:`~topofl.models.io.TrainedModels` (:func:`topofl.load_models`) or a run's
    :meth:`~topofl.federation.history.Result.model_set`.
    """
    from topofl.metrics import auc_score, regression_scores

    Z, cid = models.inputs(X, client, preprocessed=preprocessed)
    model, params = models.model_of(cid), models.params_of(cid)
    prep = models.preprocessing
    labels = np.asarray(y, dtype=np.float64).ravel() if prep is None or preprocessed else prep.class_ids(y)
    if labels.shape != (Z.shape[0],):
        raise ValueError(f"{labels.size} label(s) for {Z.shape[0]} row(s)")
    scores = model.predict_scores(params, Z)
    if model.task == "regression":
        return regression_scores(labels, scores)
    pred = np.asarray(model.predict(params, Z))
    return {"accuracy": float(np.mean(pred == labels)), "auc": auc_score(model.task, labels, scores)}


@dataclass
class TablePredictions:
    """Predictions of a CSV file's rows: one dict per row (``line``, ``site``, ``client``, the scores
    and the predicted label) and, with labels, one dict of scores per client (``site``, ``client``,
    ``rows`` and ``accuracy``/``auc`` or ``mse``/``r2``); ``ignored``: columns the models do not read.
    """

    rows: list[dict[str, Any]]
    scores: list[dict[str, Any]]
    ignored: list[str]
    score_columns: list[str]

    def to_csv(self) -> str:
        """The rows as CSV text (a header, then one line per row)."""
        buf = io.StringIO()
        fields = list(self.rows[0]) if self.rows else ["line"]
        writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        for r in self.rows:
            writer.writerow({k: (f"{v:.17g}" if isinstance(v, float) else v) for k, v in r.items()})
        return buf.getvalue()


def _groups(models: ModelSet, sites: list[str] | None, client: Any, n: int, name: str,
            site_column: str | None) -> dict[int | None, np.ndarray]:
    """Row indices by the client whose model predicts them (``None``: the server's)."""
    if client is not None:
        return {models.client_id(_client_arg(models, client)): np.arange(n)}
    if sites is None:
        return {None: np.arange(n)}
    if models.preprocessing is None or not models.preprocessing.sites:
        raise ValueError(f"{name} has a site column {site_column!r} but these models carry no site names; "
                         "pass --client K (a client id) to predict every row with one client's model")
    out: dict[int | None, list[int]] = {}
    for i, s in enumerate(sites):
        out.setdefault(models.client_id(s), []).append(i)
    return {k: np.asarray(v) for k, v in out.items()}


def _client_arg(models: ModelSet, client: Any) -> Any:
    """``client`` as given on a command line: a site name when the models have a site of that name, else
    digits are a client id.
    """
    if isinstance(client, str) and client.strip().isdigit():
        sites = models.preprocessing.sites if models.preprocessing is not None else ()
        return client if client in sites else int(client)
    return client


def predict_table(models: ModelSet, path: str | Path, *, site_column: str | None = "site",
                  label_column: str | None = None, client: Any = None) -> TablePredictions:
    """Predict the rows of the CSV file ``path`` with ``models`` (a :class:`~topofl.models.io.TrainedModels`
    or a run's :meth:`~topofl.federation.history.Result.model_set`).

    Parameters
    ----------
    site_column : str or None
        The column naming each row's site (used when the file has it): a row goes to its site's model.
    label_column : str or None
        The label column (default: the one the models were trained on, else ``y``, when the file has it):
        with it, the scores per client are computed.
    client : int or str, optional
        Predict every row with this client's model (an id or a site name), whatever its site.

    Raises
    ------
    ValueError
        Naming the file, line and column: a model column missing from the header, a cell that is not a
        number (a missing one where the models impute nothing), a site the models do not know.
    """
    from topofl.data.loaders.tables import read_prediction_rows

    path = Path(path)
    prep = models.preprocessing
    if label_column is None:
        label_column = prep.label_name if prep is not None and prep.label_name else "y"
    features = list(prep.feature_names) if prep is not None else None
    data = read_prediction_rows(path, features, site_column, label_column,
                                allow_missing=prep is not None and prep.impute is not None)
    groups = _groups(models, data.sites, client, len(data.lines), path.name, site_column)
    rows: list[dict[str, Any]] = [{} for _ in data.lines]
    scores: list[dict[str, Any]] = []
    columns: list[str] = []
    for cid, idx in sorted(groups.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
        where = "the server's model" if cid is None else f"client {cid}"
        try:
            s = models.predict(data.X[idx], cid)
            labels = models.predict_labels(data.X[idx], cid)
        except ValueError as exc:
            hint = " (pass --client K or give the file a site column)" if cid is None else ""
            raise ValueError(f"{path.name}, rows of {where}: {exc}{hint}") from None
        columns = _score_columns(s, prep)
        site = prep.site(cid) if prep is not None and cid is not None else ""
        for j, i in enumerate(idx):
            values = np.atleast_1d(s[j])
            rows[i] = {"line": data.lines[i], "site": data.sites[i] if data.sites is not None else site,
                       "client": "" if cid is None else cid,
                       **{c: float(v) for c, v in zip(columns, values, strict=True)},
                       "prediction": _label(labels[j])}
        if data.labels is not None:
            try:
                metrics = score_rows(models, data.X[idx], data.labels[idx], cid)
            except ValueError as exc:
                raise ValueError(f"{path.name}, column {label_column!r}: {exc}") from None
            scores.append({"site": site, "client": "" if cid is None else cid, "rows": int(idx.size), **metrics})
    return TablePredictions(rows, scores, data.ignored, columns)


def _score_columns(scores: np.ndarray, prep: Any) -> list[str]:
    if scores.ndim == 1:
        if prep is not None and prep.task == "regression":
            return ["value"]
        positive = prep.classes[1] if prep is not None and prep.classes is not None else 1.0
        return [f"p_{positive:g}"]
    classes = prep.classes if prep is not None and prep.classes is not None else range(scores.shape[1])
    return [f"p_{c:g}" for c in classes]


def _label(value: Any) -> Any:
    v = float(value)
    return int(v) if v.is_integer() else v
