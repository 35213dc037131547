"""What a federation did to its rows before any model saw them: :class:`Preprocessing`.

A :class:`~topofl.data.federation.Federation` records the preprocessing it fitted on its clients'
training rows — missing-value imputation (a loader's), feature standardisation (``standardise=``),
the label mapping (``classes=`` or {−1, +1}), the feature names and the site name of every client
id — and a run's :class:`~topofl.federation.history.Result` and its saved models
(:func:`topofl.save_models`) carry it, so that ``predict`` on raw rows applies exactly what the
evaluated rows went through. Everything here is validated where it is built, also when it is read
back from a file (:meth:`Preprocessing.from_manifest`).
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from topofl._validation import as_real
from topofl.limits import MAX_CLASSES

__all__ = ["Preprocessing", "check_names", "default_feature_names"]

#: the standardisation modes a record can hold (as :data:`topofl.data.federation.STANDARDISATIONS`)
_MODES = ("none", "per_client", "federated")
_TASKS = ("binary", "multiclass", "regression")
#: longest feature, site or label name kept (a file is refused beyond it)
MAX_NAME = 200
#: most clients and features a record (and so a saved file) may describe
MAX_CLIENTS = 100_000
MAX_INPUTS = 10_000_000
#: characters no name may hold (terminal escapes, line breaks)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: the arrays a record keeps in a models file, by name
ARRAYS = ("mean", "scale", "impute")


def default_feature_names(n: int) -> tuple[str, ...]:
    """``x0, x1, ...``: the names of features given without names."""
    return tuple(f"x{j}" for j in range(n))


def check_names(value: Any, what: str, allow_empty: bool = False) -> tuple[str, ...]:
    """``value`` as a tuple of names; ``ValueError`` naming ``what`` and the name for a non-string, an empty
    name (unless ``allow_empty``), one over :data:`MAX_NAME` characters or one holding a control character.
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f"{what} must be a list of names; got {type(value).__name__}")
    out = tuple(value)
    for i, v in enumerate(out):
        if isinstance(v, str) and _CONTROL.search(v):
            raise ValueError(f"{what}[{i}] {v[:60]!r} holds a control character")
        if not isinstance(v, str) or (not v and not allow_empty) or len(v) > MAX_NAME:
            raise ValueError(f"{what} must hold non-empty one-line names of at most {MAX_NAME} characters; "
                             f"got {str(v)[:60]!r}")
    return out


def _indices(value: Any, what: str, n: int) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f"{what} must be a list of column indices; got {type(value).__name__}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= int(v) < n:
            raise ValueError(f"{what} must hold column indices in 0..{n - 1}; got {v!r}")
        out.append(int(v))
    if len(set(out)) != len(out):
        raise ValueError(f"{what} lists a column twice: {out}")
    return tuple(out)


def _matrix(value: Any, what: str, shape: tuple[int, int]) -> np.ndarray:
    arr = as_real(value, what)
    if arr.shape != shape:
        raise ValueError(f"{what} must have shape {shape}; got {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{what} holds a non-finite value")
    arr = arr.copy()
    arr.flags.writeable = False
    return arr


@dataclass(frozen=True, eq=False)
class Preprocessing:
    """The preprocessing a federation fitted on its training rows, applied by ``predict`` to raw rows.

    A raw row has :attr:`n_inputs` values, one per :attr:`feature_names` entry, in that order. It
    becomes client ``k``'s model input as the federation's rows did: a 0 in a :attr:`zero_is_missing`
    column counts as missing; a missing value (NaN) takes client ``k``'s :attr:`impute` value (none:
    missing values are refused); a 0/1 missing-value indicator is appended for every
    :attr:`indicators` column; then ``(x − mean[k]) / scale[k]``.

    Parameters
    ----------
    n_clients : int
        Clients the record describes (client ids 0..n_clients−1).
    feature_names : sequence of str
        The raw input columns, in order.
    sites : sequence of str
        The site name of every client id (``()``: unnamed clients).
    standardise : {"none", "per_client", "federated"}
        How :attr:`mean` and :attr:`scale` were fitted.
    mean, scale : array (n_clients, n_features), optional
        Per-client standardisation (rows identical for ``"federated"``); ``None`` with ``"none"``.
    impute : array (n_clients, n_inputs), optional
        Each client's fill value of every raw column (``None``: no imputation).
    zero_is_missing, indicators : sequence of int
        Raw columns where 0 means "not measured"; raw columns whose missing-value indicator is appended.
    task : {"binary", "multiclass", "regression"}
    classes : sequence of float, optional
        The label value of class ``i`` (``None`` for regression).
    label_name : str
        The label column's name ("" when unknown).
    rescaled : str
        How a data set's loader changed the rows before this record (e.g. "pixel values scaled by 1/255",
        "features and target z-scored per client"); non-empty: raw rows cannot be prepared here, and
        ``transform`` refuses them (pass rows changed the same way, with ``preprocessed=True``).
    """

    n_clients: int
    feature_names: tuple[str, ...]
    sites: tuple[str, ...] = ()
    standardise: str = "none"
    mean: np.ndarray | None = None
    scale: np.ndarray | None = None
    impute: np.ndarray | None = None
    zero_is_missing: tuple[int, ...] = ()
    indicators: tuple[int, ...] = ()
    task: str = "binary"
    classes: tuple[float, ...] | None = None
    label_name: str = ""
    rescaled: str = ""
    _site_index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:  # noqa: C901, PLR0912 (one check per field, each with its message)
        k = self.n_clients
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= int(k) <= MAX_CLIENTS:
            raise ValueError(f"n_clients must be an integer in [1, {MAX_CLIENTS}]; got {k!r}")
        object.__setattr__(self, "n_clients", int(k))
        names = check_names(self.feature_names, "feature_names")
        if not 1 <= len(names) <= MAX_INPUTS:
            raise ValueError(f"feature_names must name 1 to {MAX_INPUTS} columns; got {len(names)}")
        if len(set(names)) != len(names):
            raise ValueError("feature_names must be distinct")
        object.__setattr__(self, "feature_names", names)
        sites = check_names(self.sites, "sites")
        if sites and (len(sites) != k or len(set(sites)) != len(sites)):
            raise ValueError(f"sites must name each of the {k} clients once; got {len(sites)} name(s)")
        object.__setattr__(self, "sites", sites)
        object.__setattr__(self, "_site_index", {s: i for i, s in enumerate(sites)})
        d_in = len(names)
        object.__setattr__(self, "zero_is_missing", _indices(self.zero_is_missing, "zero_is_missing", d_in))
        object.__setattr__(self, "indicators", _indices(self.indicators, "indicators", d_in))
        if self.standardise not in _MODES:
            raise ValueError(f"standardise must be one of {', '.join(_MODES)}; got {self.standardise!r}")
        d = self.n_features
        if self.standardise == "none":
            if self.mean is not None or self.scale is not None:
                raise ValueError("standardise='none' takes no mean or scale")
        else:
            if self.mean is None or self.scale is None:
                raise ValueError(f"standardise={self.standardise!r} needs mean and scale")
            object.__setattr__(self, "mean", _matrix(self.mean, "mean", (k, d)))
            object.__setattr__(self, "scale", _matrix(self.scale, "scale", (k, d)))
            if not (self.scale > 0).all():
                raise ValueError("scale must be positive")
            if self.standardise == "federated" and not (self.mean == self.mean[0]).all():
                raise ValueError("standardise='federated' shares one mean and scale: every client's row must match")
        if self.impute is not None:
            object.__setattr__(self, "impute", _matrix(self.impute, "impute", (k, d_in)))
        elif self.indicators or self.zero_is_missing:
            raise ValueError("indicators and zero_is_missing go with imputation (impute=...)")
        if self.task not in _TASKS:
            raise ValueError(f"task must be one of {', '.join(_TASKS)}; got {self.task!r}")
        if self.task == "regression":
            if self.classes is not None:
                raise ValueError("a regression task has no classes")
        elif self.classes is not None:
            cls = as_real(list(self.classes) if isinstance(self.classes, (list, tuple)) else self.classes, "classes")
            if (cls.ndim != 1 or not 2 <= cls.size <= MAX_CLASSES or not np.isfinite(cls).all()
                    or np.unique(cls).size != cls.size or (self.task == "binary" and cls.size != 2)):
                raise ValueError(f"classes must list 2 to {MAX_CLASSES} distinct finite label values "
                                 f"(2 for a binary task); got {self.classes!r}")
            object.__setattr__(self, "classes", tuple(float(v) for v in cls))
        for what in ("label_name", "rescaled"):
            value = getattr(self, what)
            if not isinstance(value, str) or len(value) > MAX_NAME or _CONTROL.search(value):
                raise ValueError(f"{what} must be a text of at most {MAX_NAME} characters without control "
                                 f"characters; got {str(value)[:60]!r}")

    # ---- shapes --------------------------------------------------------------------------
    @property
    def n_inputs(self) -> int:
        """Values a raw row holds."""
        return len(self.feature_names)

    @property
    def n_features(self) -> int:
        """Values a model input row holds: the raw ones and the missing-value indicators."""
        return self.n_inputs + len(self.indicators)

    @property
    def model_feature_names(self) -> tuple[str, ...]:
        """The names of the model's input columns (indicators as ``NAME_missing``)."""
        return self.feature_names + tuple(f"{self.feature_names[j]}_missing" for j in self.indicators)

    @property
    def identity(self) -> bool:
        """Whether raw rows are the model's input as they are."""
        return self.standardise == "none" and self.impute is None and not self.rescaled

    # ---- clients -------------------------------------------------------------------------
    def client_index(self, client: Any) -> int:
        """Client id ``client`` (an int) or the id of the site named ``client``; ``ValueError`` otherwise."""
        if isinstance(client, str):
            if client in self._site_index:
                return self._site_index[client]
            known = (f"sites: {', '.join(self.sites[:12])}" + (" ..." if len(self.sites) > 12 else "")
                     if self.sites else "these clients have no site names; pass a client id")
            raise ValueError(f"no site named {client!r}; {known}")
        if isinstance(client, bool) or not isinstance(client, (int, np.integer)):
            raise ValueError(f"client must be a client id (int) or a site name; got {client!r}")
        if not 0 <= int(client) < self.n_clients:
            raise ValueError(f"client must be a client id in 0..{self.n_clients - 1}; got {client}")
        return int(client)

    def site(self, client: int) -> str:
        """Client ``client``'s site name ("" when the clients have none)."""
        return self.sites[client] if self.sites else ""

    # ---- rows ----------------------------------------------------------------------------
    def check_rows(self, X: Any, allow_missing: bool = True) -> np.ndarray:
        """``X`` as float64 raw rows (a single row may be 1-D); ``ValueError`` naming the columns
        for a wrong column count, for ±inf, or for NaN where nothing imputes it.
        """
        arr = as_real(X, "rows")
        if arr.ndim == 1:
            arr = arr.reshape(1, -1)
        if arr.ndim != 2:
            raise ValueError(f"rows must be a 2-D array (n_rows, {self.n_inputs}); got shape {arr.shape}")
        if arr.shape[1] != self.n_inputs:
            shown = ", ".join(self.feature_names[:12]) + (" ..." if self.n_inputs > 12 else "")
            raise ValueError(f"rows have {arr.shape[1]} columns; the model takes {self.n_inputs} ({shown})")
        if np.isinf(arr).any():
            at = tuple(int(i) for i in np.argwhere(np.isinf(arr))[0])
            raise ValueError(f"rows hold an infinite value at row {at[0]}, column {self.feature_names[at[1]]!r}")
        if np.isnan(arr).any() and (self.impute is None or not allow_missing):
            at = tuple(int(i) for i in np.argwhere(np.isnan(arr))[0])
            raise ValueError(f"rows hold a missing value (NaN) at row {at[0]}, column {self.feature_names[at[1]]!r}; "
                             "this model's federation imputed nothing: fill or drop it")
        return arr

    def impute_rows(self, X: np.ndarray, client: int) -> np.ndarray:
        """Raw rows of client ``client`` with missing values filled and indicators appended (unchanged
        without imputation); ``X`` is not modified.
        """
        if self.impute is None:
            return X
        X = self.mark_missing(X)
        miss = np.isnan(X)
        filled = np.where(miss, self.impute[client][None, :], X)
        if not self.indicators:
            return filled
        return np.hstack([filled, miss[:, list(self.indicators)].astype(np.float64)])

    def mark_missing(self, X: np.ndarray) -> np.ndarray:
        """Raw rows with a 0 in a :attr:`zero_is_missing` column as NaN (``X`` itself when there is none)."""
        if not self.zero_is_missing:
            return X
        X = X.copy()
        for j in self.zero_is_missing:
            X[X[:, j] == 0, j] = np.nan
        return X

    def standardise_rows(self, X: np.ndarray, client: int) -> np.ndarray:
        """Imputed rows of client ``client`` standardised with its mean and scale."""
        if self.mean is None or self.scale is None:
            return X
        with np.errstate(over="ignore", invalid="ignore"):
            return (X - self.mean[client]) / self.scale[client]

    def transform(self, X: Any, client: Any = None) -> np.ndarray:
        """Raw rows → client ``client``'s model input (its id or site name; ``None``: rows for the
        server's model, possible when every client shares one preprocessing or ``X`` needs no
        per-client part).
        """
        if self.rescaled:
            raise ValueError(f"these rows were rescaled by the data's loader ({self.rescaled}) before the federation "
                             "saw them, which this record cannot repeat: pass rows rescaled the same way, with "
                             "preprocessed=True")
        if client is None:
            return self._transform_shared(X)
        k = self.client_index(client)
        return self.standardise_rows(self.impute_rows(self.check_rows(X), k), k)

    def _transform_shared(self, X: Any) -> np.ndarray:
        if self.mean is not None and self.scale is not None and not (
                (self.mean == self.mean[0]).all() and (self.scale == self.scale[0]).all()):
            raise ValueError(f"each client standardises with its own statistics (standardise={self.standardise!r}); "
                             "pass client=k (an id or a site name)")
        arr = self.mark_missing(self.check_rows(X))  # a 0 that means "not measured" is missing too
        if self.impute is not None and np.isnan(arr).any() and not (self.impute == self.impute[0]).all():
            raise ValueError("these rows have missing values, which each client imputes with its own values; "
                             "pass client=k (an id or a site name)")
        return self.standardise_rows(self.impute_rows(arr, 0), 0)

    def labels(self, class_ids: np.ndarray) -> np.ndarray:
        """Class ids → the label values they stand for (unchanged without :attr:`classes`)."""
        ids = np.asarray(class_ids)
        if self.classes is None:
            return ids.astype(np.float64)
        return np.asarray(self.classes, dtype=np.float64)[ids.astype(np.int64)]

    def class_ids(self, labels: Any) -> np.ndarray:
        """Label values → class ids (unchanged without :attr:`classes`); ``ValueError`` naming a label
        that is not one of the classes.
        """
        y = as_real(labels, "labels").ravel()
        if self.classes is None:
            return y
        cls = np.asarray(self.classes, dtype=np.float64)
        known = np.isin(y, cls)
        if not known.all():
            raise ValueError(f"label {y[~known][0]:g} is not one of the model's classes "
                             f"{{{', '.join(f'{c:g}' for c in cls)}}}; labels are the data's own "
                             "(a federation's class ids are preprocessing.labels(class_ids))")
        order = np.argsort(cls)
        return order[np.searchsorted(cls[order], y)].astype(np.float64)

    # ---- files ---------------------------------------------------------------------------
    def to_manifest(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The record as JSON-able values and float64 arrays (:data:`ARRAYS`), for a models file."""
        meta = {"n_clients": self.n_clients, "feature_names": list(self.feature_names), "sites": list(self.sites),
                "standardise": self.standardise, "zero_is_missing": list(self.zero_is_missing),
                "indicators": list(self.indicators), "task": self.task,
                "classes": None if self.classes is None else list(self.classes), "label_name": self.label_name,
                **({"rescaled": self.rescaled} if self.rescaled else {})}
        arrays = {name: np.asarray(getattr(self, name), dtype=np.float64) for name in ARRAYS
                  if getattr(self, name) is not None}
        return meta, arrays

    @classmethod
    def from_manifest(cls, meta: Any, arrays: Mapping[str, np.ndarray]) -> Preprocessing:
        """A record read back from a models file, validated as any other; ``ValueError`` for
        unknown or missing entries and for values of the wrong type or shape.
        """
        keys = {"n_clients", "feature_names", "sites", "standardise", "zero_is_missing", "indicators", "task",
                "classes", "label_name"}
        if not isinstance(meta, dict) or set(meta) - {"rescaled"} != keys:
            found = sorted(meta) if isinstance(meta, dict) else type(meta).__name__
            raise ValueError(f"the preprocessing record must have the entries {sorted(keys)} (and optionally "
                             f"rescaled); got {found}")
        unknown = set(arrays) - set(ARRAYS)
        if unknown:
            raise ValueError(f"unknown preprocessing arrays {sorted(unknown)}")
        for name in ("feature_names", "sites", "zero_is_missing", "indicators"):
            if not isinstance(meta[name], list):
                raise ValueError(f"preprocessing {name} must be a list")
        if meta["classes"] is not None and not (isinstance(meta["classes"], list) and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in meta["classes"])):
            raise ValueError("preprocessing classes must be a list of numbers or null")
        for name in ("standardise", "task", "label_name", "rescaled"):
            if not isinstance(meta.get(name, ""), str):
                raise ValueError(f"preprocessing {name} must be a string")
        return cls(meta["n_clients"], tuple(meta["feature_names"]), tuple(meta["sites"]), meta["standardise"],
                   arrays.get("mean"), arrays.get("scale"), arrays.get("impute"), tuple(meta["zero_is_missing"]),
                   tuple(meta["indicators"]), meta["task"],
                   None if meta["classes"] is None else tuple(meta["classes"]), meta["label_name"],
                   meta.get("rescaled", ""))

    def describe(self) -> str:
        """One line for people: clients and sites, columns, standardisation, imputation, classes."""
        sites = f" ({', '.join(self.sites[:6])}{' ...' if len(self.sites) > 6 else ''})" if self.sites else ""
        parts = [f"{self.n_clients} client(s){sites}", f"{self.n_inputs} input column(s)",
                 f"standardise={self.standardise}"]
        if self.rescaled:
            parts.append(f"rows rescaled by the loader: {self.rescaled}")
        if self.impute is not None:
            parts.append(f"imputation with {len(self.indicators)} missing-value indicator(s)")
        if self.classes is not None:
            parts.append("classes " + ", ".join(f"{c:g}" for c in self.classes[:6])
                         + (" ..." if len(self.classes) > 6 else ""))
        return "; ".join(parts)

    def __repr__(self) -> str:
        return f"Preprocessing({self.describe()})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Preprocessing):
            return NotImplemented
        a, b = self.to_manifest(), other.to_manifest()
        return a[0] == b[0] and a[1].keys() == b[1].keys() and all(
            np.array_equal(a[1][k], b[1][k]) for k in a[1])

    __hash__ = None  # type: ignore[assignment]


def rescaled_record(n_clients: int, n_features: int, how: str) -> Preprocessing:
    """The record of rows a loader rescaled (``how``) before any federation saw them: raw rows are refused
    (``predict`` takes rows rescaled the same way, with ``preprocessed=True``).
    """
    return Preprocessing(n_clients, default_feature_names(n_features), rescaled=how)


def safe_name(text: str) -> str:
    """A name as a file or column may carry it: printable, one line."""
    return re.sub(r"[\x00-\x1f\x7f]", "?", str(text))[:MAX_NAME]
