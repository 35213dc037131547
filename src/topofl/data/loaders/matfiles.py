"""Multi-task ``.mat`` data sets with one cell per client: Vehicle Sensor, School, GLEAM.

The files distributed with the multi-task / cross-silo federated-learning benchmarks (e.g. the
MTL benchmark used by Liu et al. 2022, the MOCHA data of Smith et al. 2017 and MALSAR's
``school.mat``) store two MATLAB cell arrays of shape ``(1, K)`` or ``(K, 1)``: ``X{k}`` is the
``n_k x d`` feature matrix of client ``k`` and ``Y{k}`` its ``n_k x 1`` labels or targets.
Only MATLAB v4-v7.2 files are readable (``scipy.io.loadmat``); a v7.3 (HDF5) file must be
re-saved with ``save(file, 'X', 'Y', '-v7')``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import scipy.io
import scipy.sparse

from topofl._validation import check_choice, check_finite
from topofl.data.federation import ClientData
from topofl.data.loaders.base import LoadedData
from topofl.data.loaders.protocol import build_clients, check_protocol_args, check_seed
from topofl.models.preprocessing import rescaled_record


def _cells(value: Any, path: Path, key: str) -> list[Any]:
    """The entries of a (1, K) / (K, 1) MATLAB cell array, or ``ValueError`` naming the variable."""
    arr = np.asarray(value)
    if arr.dtype != object or not (arr.ndim == 1 or (arr.ndim == 2 and 1 in arr.shape)):
        kind = "cell array" if arr.dtype == object else f"{arr.dtype} array"
        raise ValueError(
            f"{path}: variable {key!r} must be a (1, K) or (K, 1) cell array of per-client matrices; "
            f"got a {kind} of shape {arr.shape}"
        )
    return list(arr.ravel())


def _matrix(cell: Any, path: Path, field: str) -> np.ndarray:
    if scipy.sparse.issparse(cell):
        cell = cell.toarray()
    arr = np.asarray(cell)
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise ValueError(f"{path}: {field} must be a numeric matrix; got dtype {arr.dtype} with shape {arr.shape}")
    return arr


def read_mat_cells(
    path: str | Path,
    *,
    what: str,
    expected: str,
    x_key: str = "X",
    y_key: str = "Y",
) -> tuple[list[np.ndarray], list[np.ndarray], Path]:
    """Read per-client ``(X_k, y_k)`` pairs from the cell arrays ``x_key`` / ``y_key`` of a .mat file.

    Parameters
    ----------
    path : str or Path
        The ``.mat`` file.
    what : str
        Data-set name used in error messages.
    expected : str
        Description of the expected file, used when ``path`` does not exist.
    x_key, y_key : str
        Names of the feature and label cell arrays.

    Returns
    -------
    Xs : list of ndarray of shape (n_k, d), float64
    ys : list of ndarray of shape (n_k,), float64
    path : Path

    Raises
    ------
    ValueError
        Missing or unreadable file, missing variable, a variable that is not a cell vector,
        different numbers of X and Y cells, a non-2-D feature matrix, labels that are not a
        vector of ``n_k`` entries, non-finite values, or clients with different feature counts.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{what}: file not found: {path}; expected {expected}")
    mat = _load_mat(path, x_key, y_key)
    names = sorted(k for k in mat if not k.startswith("__"))
    for key in (x_key, y_key):
        if key not in mat:
            raise ValueError(f"{path}: variable {key!r} not found; the file holds {names or 'no variables'}")
    x_cells = _cells(mat[x_key], path, x_key)
    y_cells = _cells(mat[y_key], path, y_key)
    if len(x_cells) != len(y_cells):
        raise ValueError(
            f"{path}: {x_key!r} has {len(x_cells)} cells (clients) but {y_key!r} has {len(y_cells)}"
        )
    if not x_cells:
        raise ValueError(f"{path}: {x_key!r} is an empty cell array (no clients)")
    Xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    for k, (xc, yc) in enumerate(zip(x_cells, y_cells, strict=True)):
        fx, fy = f"{x_key} cell {k} (client {k})", f"{y_key} cell {k} (client {k})"
        X, y = _client_cells(xc, yc, path, fx, fy)
        if Xs and X.shape[1] != Xs[0].shape[1]:
            raise ValueError(
                f"{path}: {fx} has {X.shape[1]} features but {x_key} cell 0 has {Xs[0].shape[1]}"
            )
        Xs.append(X)
        ys.append(y)
    return Xs, ys, path


def _load_mat(path: Path, x_key: str, y_key: str) -> dict[str, Any]:
    """The variables of the .mat file ``path``; a ``ValueError`` for a v7.3 (HDF5) or an unreadable file."""
    try:
        return scipy.io.loadmat(str(path))
    except NotImplementedError:  # scipy's answer to a v7.3 (HDF5) file
        raise ValueError(
            f"{path}: a MATLAB v7.3 (HDF5) file, which scipy.io.loadmat cannot read; "
            f"re-save it in MATLAB with save(file, '{x_key}', '{y_key}', '-v7')"
        ) from None
    except Exception as exc:  # scipy raises ValueError / TypeError / OSError / MatReadError
        raise ValueError(f"{path}: not a readable .mat file ({type(exc).__name__}: {exc})") from None


def _client_cells(xc: Any, yc: Any, path: Path, fx: str, fy: str) -> tuple[np.ndarray, np.ndarray]:
    """One client's cells as a float64 (n_k, d) matrix and a float64 vector of n_k finite labels;
    a ``ValueError`` naming the cell (``fx``, ``fy``) otherwise.
    """
    X = _matrix(xc, path, fx)
    y = _matrix(yc, path, fy)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"{path}: {fx} must be a non-empty 2-D matrix (n_k x d); got shape {X.shape}")
    if y.ndim > 2 or (y.ndim == 2 and 1 not in y.shape):
        raise ValueError(f"{path}: {fy} must be a vector (n_k x 1); got shape {y.shape}")
    y = y.ravel()
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"{path}: {fx} has {X.shape[0]} rows but {fy} has {y.shape[0]} labels")
    X = X.astype(np.float64)
    y = y.astype(np.float64)
    check_finite(X, f"{path}: {fx}")
    check_finite(y, f"{path}: {fy}")
    return X, y


def _binary_labels(ys: list[np.ndarray], path: Path, y_key: str) -> tuple[list[np.ndarray], dict[str, int]]:
    """Map labels in {-1, +1} (or already {0, 1}) to {0, 1}; the choice is made over all clients."""
    values = np.unique(np.concatenate(ys))
    if np.all(np.isin(values, (-1.0, 1.0))):
        return [(y > 0).astype(np.float64) for y in ys], {"-1": 0, "1": 1}
    if np.all(np.isin(values, (0.0, 1.0))):
        return ys, {"0": 0, "1": 1}
    for k, y in enumerate(ys):
        extra = np.setdiff1d(np.unique(y), (-1.0, 0.0, 1.0))
        if extra.size:
            raise ValueError(
                f"{path}: {y_key} cell {k} (client {k}) holds label {float(extra[0])!r}; "
                "binary labels must be in {-1, +1} or {0, 1}"
            )
    raise ValueError(
        f"{path}: {y_key} mixes the label sets {{-1, +1}} and {{0, 1}} (values {values.tolist()}); "
        "binary labels must use one of them"
    )


def _load_binary(path, *, name, dataset, expected, protocol, seed, test_fraction, keep, x_key, y_key) -> LoadedData:
    seed = check_seed(seed)
    check_protocol_args(protocol, test_fraction, keep)
    Xs, ys, path = read_mat_cells(path, what=name, expected=expected, x_key=x_key, y_key=y_key)
    ys, label_map = _binary_labels(ys, path, y_key)
    parts = [(X, y, {"cell": k, "n_rows": int(X.shape[0])}) for k, (X, y) in enumerate(zip(Xs, ys, strict=True))]
    clients, record = build_clients(parts, seed=seed, protocol=protocol, test_fraction=test_fraction, keep=keep,
                                    what=name)
    info = {
        "source": {"dataset": dataset, "file": str(path), "format": f".mat cell arrays {x_key}, {y_key}"},
        "protocol": record,
        "label_map": label_map,
        "n_features": int(Xs[0].shape[1]),
    }
    return LoadedData(clients, task="binary", n_classes=2, name=name, info=info)


def load_vehicle(
    path: str | Path,
    protocol: bool = True,
    seed: int = 0,
    *,
    test_fraction: float = 0.25,
    keep: float = 0.2,
    x_key: str = "X",
    y_key: str = "Y",
) -> LoadedData:
    """Vehicle Sensor: 23 sensors (clients), 100 acoustic/seismic features, binary vehicle type.

    The ``.mat`` file of the MTL benchmark (``vehicle_sensor``) holds cell arrays ``X`` and ``Y``
    of shape (1, 23) or (23, 1); ``X{k}`` is ``n_k x 100``, ``Y{k}`` is ``n_k x 1`` with labels in
    {-1, +1}, mapped to {0, 1} (labels already in {0, 1} are kept).

    Parameters
    ----------
    path : str or Path
        The ``.mat`` file, e.g. ``vehicle_sensor.mat``.
    protocol : bool, default True
        Apply the Sheaf-FMTL protocol (Appendix F): seeded 75/25 train/test split of every
        client, then the training data of a seeded half of the clients reduced to 20 %.
        With ``False`` the clients are only split (a test set is needed); none is reduced.
    seed : int, default 0
        Seed of the split and of the reduction; the same seed gives identical clients.
    test_fraction : float, default 0.25
        Fraction of each client's rows held out for testing.
    keep : float, default 0.2
        Fraction of training rows kept by a reduced client.
    x_key, y_key : str, default "X", "Y"
        Names of the feature and label cell arrays in the file.

    Returns
    -------
    LoadedData
        ``task="binary"``, ``n_classes=2``, one client per cell; ``meta`` has ``cell``,
        ``n_rows``, ``n_train_full`` and ``reduced``.

    Raises
    ------
    ValueError
        Missing or unreadable file, missing ``X``/``Y``, different numbers of cells, shape
        mismatches, non-finite values, or labels outside {-1, +1} / {0, 1}; the message names the
        file and the cell.
    """
    return _load_binary(
        path, name="vehicle", dataset="Vehicle Sensor (MTL benchmark vehicle_sensor)",
        expected="the Vehicle Sensor .mat file (e.g. vehicle_sensor.mat) with cell arrays X and Y",
        protocol=protocol, seed=seed, test_fraction=test_fraction, keep=keep, x_key=x_key, y_key=y_key,
    )


def load_gleam(
    path: str | Path,
    protocol: bool = True,
    seed: int = 0,
    *,
    test_fraction: float = 0.25,
    keep: float = 0.2,
    x_key: str = "X",
    y_key: str = "Y",
) -> LoadedData:
    """GLEAM (Google Glass eating and motion): 38 wearers (clients), binary eating vs. other.

    The ``.mat`` file of the MTL benchmark holds cell arrays ``X`` and ``Y`` (one cell per wearer);
    labels in {-1, +1} are mapped to {0, 1}, labels in {0, 1} are kept.

    Parameters
    ----------
    path : str or Path
        The ``.mat`` file, e.g. ``gleam.mat``.
    protocol : bool, default True
        Apply the Sheaf-FMTL protocol (Appendix F): seeded 75/25 train/test split of every
        client, then the training data of a seeded half of the clients reduced to 20 %.
        With ``False`` the clients are only split (a test set is needed); none is reduced.
    seed : int, default 0
        Seed of the split and of the reduction; the same seed gives identical clients.
    test_fraction : float, default 0.25
        Fraction of each client's rows held out for testing.
    keep : float, default 0.2
        Fraction of training rows kept by a reduced client.
    x_key, y_key : str, default "X", "Y"
        Names of the feature and label cell arrays in the file.

    Returns
    -------
    LoadedData
        ``task="binary"``, ``n_classes=2``, one client per cell; ``meta`` has ``cell``,
        ``n_rows``, ``n_train_full`` and ``reduced``.

    Raises
    ------
    ValueError
        As :func:`load_vehicle`.
    """
    return _load_binary(
        path, name="gleam", dataset="GLEAM (MTL benchmark)",
        expected="the GLEAM .mat file (e.g. gleam.mat) with cell arrays X and Y",
        protocol=protocol, seed=seed, test_fraction=test_fraction, keep=keep, x_key=x_key, y_key=y_key,
    )


def load_school(
    path: str | Path,
    protocol: bool = True,
    seed: int = 0,
    *,
    test_fraction: float = 0.25,
    keep: float = 0.2,
    x_key: str = "X",
    y_key: str = "Y",
    standardise: str = "none",
) -> LoadedData:
    """School (Inner London Education Authority): 139 schools (clients), exam-score regression.

    The ``.mat`` file (MALSAR / MTL benchmark ``school.mat``) holds cell arrays ``X`` and ``Y``;
    ``X{k}`` is ``n_k x 28`` (student and school features), ``Y{k}`` the ``n_k`` exam scores,
    used unchanged as regression targets.

    Parameters
    ----------
    path : str or Path
        The ``.mat`` file, e.g. ``school.mat``.
    protocol : bool, default True
        Apply the Sheaf-FMTL protocol (Appendix F): seeded 75/25 train/test split of every
        client, then the training data of a seeded half of the clients reduced to 20 %.
        With ``False`` the clients are only split (a test set is needed); none is reduced.
    seed : int, default 0
        Seed of the split and of the reduction; the same seed gives identical clients.
    test_fraction : float, default 0.25
        Fraction of each client's rows held out for testing.
    keep : float, default 0.2
        Fraction of training rows kept by a reduced client.
    x_key, y_key : str, default "X", "Y"
        Names of the feature and label cell arrays in the file.
    standardise : {"none", "per_client"}, default "none"
        ``per_client``: each school z-scores, with the mean and standard deviation of its own
        training rows, its non-binary feature columns (binary and constant ones are left alone)
        and its targets (as stored, scores 1–70 and two integer columns up to 91 make every
        gradient method diverge at lr 0.1). ``meta["y_scale"]`` keeps the target's standard
        deviation, so an MSE in original units is ``y_scale² ×`` the standardised one.

    Returns
    -------
    LoadedData
        ``task="regression"``, ``n_classes=0``, one client per cell; ``meta`` has ``cell``,
        ``n_rows``, ``n_train_full``, ``reduced``, and with ``per_client`` ``y_mean``, ``y_scale``.

    Raises
    ------
    ValueError
        Missing or unreadable file, missing ``X``/``Y``, different numbers of cells, shape
        mismatches or non-finite values; the message names the file and the cell.
    """
    seed = check_seed(seed)
    check_protocol_args(protocol, test_fraction, keep)
    Xs, ys, path = read_mat_cells(
        path, what="school", expected="the School .mat file (e.g. school.mat) with cell arrays X and Y",
        x_key=x_key, y_key=y_key,
    )
    parts = [(X, y, {"cell": k, "n_rows": int(X.shape[0])}) for k, (X, y) in enumerate(zip(Xs, ys, strict=True))]
    clients, record = build_clients(parts, seed=seed, protocol=protocol, test_fraction=test_fraction, keep=keep,
                                    what="school")
    check_choice("standardise", standardise, ("none", "per_client"))
    if standardise == "per_client":
        clients = [standardise_regression_client(c) for c in clients]
    info = {
        "source": {"dataset": "School (MTL benchmark)", "file": str(path),
                   "format": f".mat cell arrays {x_key}, {y_key}"},
        "protocol": record,
        "n_features": int(Xs[0].shape[1]),
    }
    rescaled = (rescaled_record(len(clients), clients[0].n_features, "features and target z-scored with each "
                                "client's own training statistics") if standardise == "per_client" else None)
    return LoadedData(clients, task="regression", n_classes=0, name="school", info=info, preprocessing=rescaled)


def standardise_regression_client(c: ClientData) -> ClientData:
    """One regression client z-scored with its own training statistics: non-binary feature
    columns and the target (``meta`` gains ``y_mean`` and ``y_scale``; a constant target or
    column keeps scale 1).
    """
    X, Xt = c.X_train.copy(), c.X_test.copy()
    for j in range(X.shape[1]):
        col = X[:, j]
        if np.all(np.isin(col, (0.0, 1.0))):
            continue
        mu, sd = float(col.mean()), float(col.std())
        X[:, j], Xt[:, j] = (col - mu) / (sd or 1.0), (Xt[:, j] - mu) / (sd or 1.0)
    y_mean, y_scale = float(c.y_train.mean()), float(c.y_train.std()) or 1.0
    meta = {**dict(c.meta), "y_mean": y_mean, "y_scale": y_scale}
    return ClientData(X, (c.y_train - y_mean) / y_scale, Xt, (c.y_test - y_mean) / y_scale,
                      client_id=c.client_id, meta=meta)
