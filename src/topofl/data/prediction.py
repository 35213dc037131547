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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from topofl.models.io import ModelSet

__all__ = ["TablePredictions", "predict_table", "score_rows"]


def score_rows(models: ModelSet, X: Any, y: Any, client: Any = None, *, preprocessed: bool = False) -> dict[str, float]:
    """The metrics a run reports, of rows ``X`` with labels ``y`` under client ``client``'s model.

    Parameters
    ----------
    models : ModelSet
        A :class:`~topofl.models.io.TrainedModels` (:func:`topofl.load_models`) or a run's
        :meth:`~topofl.federation.history.Result.model_set`.
    X : array (n_rows, n_inputs)
        Raw rows (``preprocessed=True``: rows as the federation holds them, e.g. ``federation[k].X_test``).
    y : array (n_rows,)
        Labels as the data named them (the preprocessing's ``classes``), with or without ``preprocessed``;
        the federation's class ids are ``preprocessing.labels(federation[k].y_test)`` in these terms.
    client : int or str, optional
        A client id or a site name; ``None``: the server's model.

    Returns
    -------
    dict
        ``accuracy`` and ``auc`` (``mse`` and ``r2`` for regression), computed as the run computed them
        (:func:`topofl.metrics.classification_scores`): on a client's held-out rows, the scores it reported.

    Raises
    ------
    ValueError
        For a label that is not one of the model's classes, or a label count other than the row count.
    """
    from topofl.metrics import classification_scores, regression_scores

    Z, cid = models.inputs(X, client, preprocessed=preprocessed)
    model, params = models.model_of(cid), models.params_of(cid)
    prep = models.preprocessing
    labels = np.asarray(y, dtype=np.float64).ravel() if prep is None else prep.class_ids(y)
    if labels.shape != (Z.shape[0],):
        raise ValueError(f"{labels.size} label(s) for {Z.shape[0]} row(s)")
    scores = model.predict_scores(params, Z)
    if model.task == "regression":
        return regression_scores(labels, scores)
    return classification_scores(model.task, labels, scores, np.asarray(model.predict(params, Z)))


@dataclass
class TablePredictions:
    """Predictions of a CSV file's rows: one dict per row (``line``, ``site``, ``client``, the scores
    and the predicted label) and, with labels, one dict of scores per client (``site``, ``client``,
    ``rows`` and ``accuracy``/``auc`` or ``mse``/``r2``); ``ignored``: columns the models do not read;
    ``features``: the columns read as the models' inputs, in their order.
    """

    rows: list[dict[str, Any]]
    scores: list[dict[str, Any]]
    ignored: list[str]
    score_columns: list[str]
    features: list[str] = field(default_factory=list)

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


def predict_table(models: ModelSet, path: str | Path, *, site_column: str | None = "site",  # noqa: PLR0913
                  label_column: str | None = None, client: Any = None,
                  site_required: bool = False) -> TablePredictions:
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
    site_required : bool
        Refuse a file without ``site_column`` (it was named explicitly) rather than predict without sites.

    Returns
    -------
    TablePredictions
        The rows' predictions; its ``features`` are the columns read as the models' inputs, in their order
        (models without preprocessing, format 1: every column but the site and label ones, in file order).

    Raises
    ------
    ValueError
        Naming the file, line and column: a model column missing from the header, a cell that is not a
        number (a missing one where the models impute nothing), a site the models do not know; for models
        without preprocessing, a column count other than the models' inputs.
    """
    from topofl.data.loaders.tables import read_prediction_rows

    path = Path(path)
    prep = models.preprocessing
    if label_column is None:
        label_column = prep.label_name if prep is not None and prep.label_name else "y"
    features = list(prep.feature_names) if prep is not None else None
    data = read_prediction_rows(path, features, site_column, label_column,
                                allow_missing=prep is not None and prep.impute is not None)
    if site_required and site_column is not None and data.sites is None:
        raise ValueError(f"{path.name} has no column {site_column!r} (--site-column); its columns: "
                         f"{', '.join([*data.features, *data.ignored][:12])}")
    groups = _groups(models, data.sites, client, len(data.lines), path.name, site_column)
    if prep is None:
        _check_unnamed_columns(models, data.features, groups, path.name, label_column if data.labels is not None
                               else None)
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
    return TablePredictions(rows, scores, data.ignored, columns, data.features)


def _check_unnamed_columns(models: ModelSet, features: list[str], groups: dict[int | None, np.ndarray], name: str,
                           label: str | None) -> None:
    """Models without preprocessing (format 1) name no columns: every column but the site and label ones is
    an input, in file order; refuse a count other than the models take.
    """
    for cid in groups:
        want = models.raw_inputs(cid)
        if want is not None and want != len(features):
            shown = ", ".join(features[:12]) + (" ..." if len(features) > 12 else "")
            raise ValueError(f"{name}: these models name no columns (a format-1 file), so every column but the "
                             f"site and label ones is an input: {len(features)} columns ({shown}); the models "
                             f"take {want}; label column: {label or 'none'} (name it with --label-column), "
                             "drop the other columns")


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
