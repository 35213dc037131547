"""What a run produces (:class:`Result`, both families): per-(round, client) records, per-round summaries, logs."""
from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ROUND_FIELDS = ("round", "client", "auc", "accuracy", "loss", "bytes_up", "bytes_down", "floats_up", "floats_down",
                "mse", "r2")


def _without_nan(values: Iterable[float]) -> np.ndarray:
    v = np.asarray(list(values), dtype=float)
    finite: np.ndarray = v[~np.isnan(v)]
    return finite


def nanmean(values: Iterable[float]) -> float:
    """Mean ignoring NaN; NaN (not a warning) when nothing is left."""
    v = _without_nan(values)
    # ``v.mean()``'s own steps without its Python layers (every round's summary): the sum, then the division
    return float(np.add.reduce(v) / v.size) if v.size else float("nan")


def nanstd(values: Iterable[float]) -> float:
    """Population standard deviation ignoring NaN; NaN (not a warning) when nothing is left."""
    return _std(_without_nan(values))


def nanmean_std(values: Iterable[float]) -> tuple[float, float]:
    """``(nanmean(values), nanstd(values))`` from one reading of the values, with their bits and warnings."""
    v = _without_nan(values)
    return (float(np.add.reduce(v) / v.size) if v.size else float("nan")), _std(v)


def nanmean_std_columns(*columns: Iterable[float]) -> list[tuple[float, float]]:
    """``[nanmean_std(c) for c in columns]``, to the bit: the columns in one matrix, each row reduced as
    :func:`nanmean_std` reduces its vector (a row of a C-ordered matrix is summed as a vector is), when they are
    Python floats, of one length, not empty, and every value is finite and small enough (|x| <= 1e100) that no sum
    or square can
    overflow, with underflow ignored — then no value is left out and no warning can arise; otherwise column by
    column.
    """
    lists = [list(c) for c in columns]
    # (plain floats only: nothing to convert, so no conversion can warn or fail; and only where underflow is ignored,
    # numpy's default: elsewhere its warnings would name other operations)
    plain = (bool(lists) and len({len(c) for c in lists}) == 1 and np.geterr()["under"] == "ignore"
             and all(type(x) is float for c in lists for x in c))
    A = np.array(lists) if plain else None
    if A is None or A.ndim != 2 or not A.shape[1] or not float(np.maximum.reduce(np.abs(A), axis=None)) <= 1e100:
        return [nanmean_std(c) for c in lists]
    n = A.shape[1]
    sums = np.add.reduce(A, axis=1, keepdims=True)
    means = sums[:, 0] / n
    x = np.subtract(A, np.true_divide(sums, n))
    np.square(x, out=x)
    spreads = np.sqrt(np.add.reduce(x, axis=1) / n)
    return [(float(m), float(s)) for m, s in zip(means, spreads, strict=True)]


def _std(v: np.ndarray) -> float:
    """``float(v.std())`` of a float64 vector, to the bit and with its warnings' words (numpy's _var, ddof 0: the
    mean as an array, the deviations squared in place, their mean, its root); NaN when empty.
    """
    if not v.size:
        return float("nan")
    x = np.subtract(v, np.true_divide(np.add.reduce(v, keepdims=True), v.size))
    np.square(x, out=x)
    return float(np.sqrt(np.add.reduce(x) / v.size))


def regression_summary(rows: Iterable[dict[str, Any]]) -> dict[str, float]:
    """``mse``, ``rmse`` and ``r2`` of a round: means over the clients' rows that carry them
    (regression tasks); an empty dict for classification, whose summaries keep NaN.
    """
    rows = [r for r in rows if "mse" in r]
    if not rows:
        return {}
    mse = [float(r["mse"]) for r in rows]
    return {"mse": nanmean(mse), "rmse": nanmean(np.sqrt(np.maximum(mse, 0.0))),
            "r2": nanmean(float(r.get("r2", float("nan"))) for r in rows)}


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

    def __getitem__(self, key: str) -> Any:
        """``summary["accuracy"]``, as a peer run's rounds were read when they were dicts."""
        try:
            return getattr(self, key)
        except AttributeError:
            raise KeyError(key) from None


#: the columns of a round summary (:class:`RoundSummary`), as ``curves.csv`` files hold them
ROUND_SUMMARY_FIELDS = tuple(RoundSummary.__dataclass_fields__)
#: a peer run's per-client record, as the experiment runner's files hold it
PEER_RECORD_FIELDS = ("round", "client", "accuracy", "loss", "dim", "mse", "r2")
#: a peer run's per-iteration row (:attr:`Result.iterations`), as the experiment runner's files hold it; no
#: wall-clock column, so that results stay identical however often a run is resumed (timings go to the done-record)
ITERATION_FIELDS = ("round", "accuracy", "accuracy_std", "loss", "bits", "cumulative_bits", "cumulative_flops",
                    "map_storage_bytes", "mse", "rmse", "r2")


@dataclass
class Result:
    """What a run produced, for both families (:func:`topofl.run`, :func:`topofl.simulate`,
    :func:`topofl.simulate_decentralised`, the Flower runtimes).

    ``records`` holds a dict per round and client, ``rounds`` a :class:`RoundSummary` per
    evaluated round, ``logs`` the server's (or the peer algorithm's) per-round log,
    ``client_metrics`` the last reported, ``failures`` the clients that failed or sent an invalid
    payload, with the reason. Family-specific extras: ``server_params`` (server family: the
    server's model), ``iterations`` (peer family: every iteration's bits, FLOPs, storage and
    seconds; evaluated ones with their metrics) and ``models`` (peer family: each client's model
    object, whose sizes may differ).
    """

    method: str
    seed: int
    family: str = "server"
    records: list[dict[str, Any]] = field(default_factory=list)
    rounds: list[RoundSummary] = field(default_factory=list)
    logs: list[dict[str, Any]] = field(default_factory=list)
    client_metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    failures: list[Any] = field(default_factory=list)  # topofl.federation.pool.Failure, per round
    out_dir: str | None = None  # where a runtime wrote the run's files, if it did
    model: Any = None  # the model every client trained (topofl.models); peers: None when sizes differ
    server_params: np.ndarray | None = None  # the server's model after the run (None: it keeps none)
    # each client's final model, the one it would use
    client_models: dict[int, np.ndarray] = field(default_factory=dict)
    client_feature_states: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)  # raw features → model input
    iterations: list[dict[str, Any]] = field(default_factory=list)  # peer family: one row per iteration
    models: dict[int, Any] = field(default_factory=dict)  # peer family: each client's model object
    graph: Any = None  # peer family: the communication graph (networkx)
    # what the federation did to its rows (topofl.models.preprocessing.Preprocessing): predict applies it to raw rows
    preprocessing: Any = None

    @property
    def server_logs(self) -> list[dict[str, Any]]:
        """The per-round logs (:attr:`logs`): the server's, or the peer algorithm's."""
        return self.logs

    def round_records(self, k: int) -> list[dict[str, Any]]:
        """The per-client records of round ``k``, in order; the latest round's without a scan of the
        whole run (records are appended round by round), so a per-round callback stays O(clients).
        """
        if not self.records or self.records[-1]["round"] != k:
            return [r for r in self.records if r["round"] == k]
        first = len(self.records)
        while first > 0 and self.records[first - 1]["round"] == k:
            first -= 1
        return self.records[first:]

    def predict(self, X: Any, client: Any = None, *, preprocessed: bool = False) -> np.ndarray:
        """Scores of raw rows ``X`` under client ``client``'s final model (a client id or, where the
        federation named them, a site name; ``None``: the server's model): P(y = 1), class
        probabilities, or predicted values, as :meth:`Model.predict_scores`.

        Raw rows go through the federation's :attr:`preprocessing` first (imputation,
        standardisation: what the evaluated rows went through), so they score as the run reported;
        ``preprocessed=True`` takes rows already preprocessed (e.g. ``federation[k].X_test``).
        ``ValueError`` for rows with the wrong number of columns, naming them.
        """
        scores: np.ndarray = self.model_set().predict(X, client, preprocessed=preprocessed)
        return scores

    def predict_labels(self, X: Any, client: Any = None, *, preprocessed: bool = False) -> np.ndarray:
        """Predicted labels of raw rows ``X`` as the data named them (see :meth:`predict`); with
        ``preprocessed=True`` too, which is about the rows only.
        """
        labels: np.ndarray = self.model_set().predict_labels(X, client, preprocessed=preprocessed)
        return labels

    def score(self, X: Any, y: Any, client: Any = None, *, preprocessed: bool = False) -> dict[str, float]:
        """``accuracy`` and ``auc`` (``mse``, ``r2`` for regression) of raw rows ``X`` with labels ``y``
        (as the data named them) under client ``client``'s model: on a client's held-out rows, the
        scores the run reported for it. ``preprocessed=True`` is about the rows only: the labels are
        still the data's own, not the federation's class ids (see :func:`topofl.data.prediction.score_rows`).
        """
        from topofl.data.prediction import score_rows

        return score_rows(self.model_set(), X, y, client, preprocessed=preprocessed)

    def module(self, client: Any = None) -> Any:
        """Client ``client``'s trained network as a ``torch.nn.Module`` (``None``: the server's); a
        user's own module comes back as its own class. ``ValueError`` for a NumPy model.
        """
        return self.model_set().module(client)

    def state_dict(self, client: Any = None) -> dict[str, Any]:
        """Client ``client``'s trained network's ``state_dict()`` (``None``: the server's)."""
        state: dict[str, Any] = self.model_set().state_dict(client)
        return state

    def model_set(self) -> Any:
        """The trained models with their preprocessing (:class:`topofl.models.io.ModelSet`)."""
        from topofl.models.io import model_set

        return model_set(self)

    def keep_final_client_metrics(self) -> None:
        """Every client's metrics of its last evaluated round (``auc``, ``accuracy``, ``loss``; ``mse``,
        ``r2`` for regression) in :attr:`client_metrics`, beside what its updates reported (e.g.
        pTopoFL's privacy accounting); the runtimes call it when a run ends.
        """
        keys = ("auc", "accuracy", "loss", "mse", "r2")
        last: dict[int, dict[str, Any]] = {}
        for r in self.records:
            cid = r.get("client")
            if cid is not None and (cid not in last or r["round"] >= last[cid]["round"]):
                last[int(cid)] = r
        for cid, r in sorted(last.items()):
            final = {k: float(r[k]) for k in keys if k in r and r[k] is not None}
            self.client_metrics[cid] = {**self.client_metrics.get(cid, {}), **final, "round": int(r["round"])}

    @property
    def final(self) -> dict[str, Any]:
        """Metrics after the last round (see :class:`RoundSummary`); peers add the last iteration's
        bits, FLOPs and storage.
        """
        if not self.rounds:
            raise ValueError("the result has no rounds")
        if self.family == "peer" and self.iterations:
            return {**self.rounds[-1].as_dict(), **self.iterations[-1]}
        return self.rounds[-1].as_dict()

    def curve(self, metric: str | None = None) -> np.ndarray:
        """One metric over the evaluated rounds (default: ``auc`` for a server run, ``accuracy`` for a
        peer run); a peer run's per-iteration values (``bits``, ``cumulative_flops``, ...) over its iterations.
        """
        metric = metric or ("accuracy" if self.family == "peer" else "auc")
        if metric not in RoundSummary.__dataclass_fields__ and self.iterations:
            return np.array([r[metric] for r in self.iterations], dtype=float)
        return np.array([getattr(r, metric) for r in self.rounds], dtype=float)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle, also a ``History`` pickled by topofl before one result type served both families
        (a Flower checkpoint taken then resumes): its ``server_logs`` are the ``logs``.
        """
        if "server_logs" in state and "logs" not in state:
            state = {**state, "logs": state["server_logs"]}
            del state["server_logs"]
        defaults: dict[str, Any] = {"family": "server", "iterations": [], "models": {}, "graph": None,
                                    "preprocessing": None}
        self.__dict__.update({**defaults, **state})

    def convergence_round(self, metric: str = "auc", fraction: float = 0.95) -> int:
        """First round whose ``metric`` reaches ``fraction`` × its final value (paper Table 1)."""
        c = self.curve(metric)
        if np.isnan(c[-1]):
            return -1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hits = np.nonzero(c >= fraction * c[-1])[0]
        return int(self.rounds[hits[0]].round)


#: the name :func:`topofl.simulate` returned before server and peer runs shared one result type
History = Result
