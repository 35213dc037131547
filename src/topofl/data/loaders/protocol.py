"""The data protocol of Sheaf-FMTL (Ben Issaid et al., TMLR 2025, Appendix F), seeded.

:func:`split_client` splits one client's rows 75/25 into train and test; :func:`reduce_half` keeps 20 %
of the training rows of a random half of the clients; :func:`stream` derives the independent generators.
See docs/internals.md#topofl.data.loaders.protocol.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from topofl._validation import check_int, check_range
from topofl.data.federation import ClientData

#: Stream tags used with :func:`stream` (fixed so results do not depend on call order).
ASSIGN, SPLIT, REDUCE, GENERATE = 1, 2, 3, 4

MIN_TRAIN = 3  # a Federation needs >= 3 training rows per client
MIN_TEST = 1


def check_seed(seed: Any) -> int:
    """Return ``seed`` as an int, or raise ``ValueError`` unless it is a non-negative integer."""
    check_int("seed", seed, 0)
    return int(seed)


def stream(seed: int, *tags: int) -> np.random.Generator:
    """An independent generator for purpose ``tags`` (e.g. ``SPLIT, k``) under ``seed``."""
    return np.random.default_rng([int(seed), *map(int, tags)])


def _n_test(n: int, test_fraction: float) -> int:
    """Test rows for ``n`` rows: ``round(test_fraction * n)`` clipped to ``[1, n - 3]``."""
    return int(min(n - MIN_TRAIN, max(MIN_TEST, np.floor(test_fraction * n + 0.5))))


def split_client(
    X: np.ndarray,
    y: np.ndarray,
    rng: np.random.Generator,
    test_fraction: float = 0.25,
    *,
    field: str = "client",
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Random train/test split of one client's rows (75/25 by default; Sheaf-FMTL Appendix F, step 1).

    Parameters
    ----------
    X : ndarray of shape (n, d)
        The client's features.
    y : ndarray of shape (n,)
        The client's labels or targets.
    rng : numpy.random.Generator
        Source of the random permutation; the same generator state gives the same split.
    test_fraction : float, default 0.25
        Fraction of rows put in the test set. The test size is ``round(test_fraction * n)``
        (halves rounded up), clipped so that at least 1 test row and 3 training rows remain.
    field : str, default "client"
        Name used in error messages, e.g. ``"vehicle client 4"``.

    Returns
    -------
    X_train, y_train, X_test, y_test : ndarray
        Rows keep their original relative order within each part.

    Raises
    ------
    ValueError
        If ``X`` and ``y`` disagree in length, ``test_fraction`` is outside ``(0, 1)``, or the
        client has fewer than 4 rows (3 training + 1 test are required).
    """
    check_range("test_fraction", test_fraction, 0.0, 1.0, low_open=True, high_open=True)
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator; got {type(rng).__name__}")
    X = np.asarray(X)
    y = np.asarray(y)
    if X.ndim != 2:
        raise ValueError(f"{field} X must be 2-D (n_rows, n_features); got shape {X.shape}")
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(f"{field} y has shape {y.shape} but X has {X.shape[0]} rows; expected ({X.shape[0]},)")
    n = X.shape[0]
    if n < MIN_TRAIN + MIN_TEST:
        raise ValueError(
            f"{field} has {n} rows; at least {MIN_TRAIN + MIN_TEST} are needed for a train/test split"
        )
    perm = rng.permutation(n)
    n_test = _n_test(n, test_fraction)
    te, tr = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    return X[tr], y[tr], X[te], y[te]


def reduce_half(
    clients: Sequence[ClientData],
    rng: np.random.Generator,
    keep: float = 0.2,
) -> list[ClientData]:
    """Reduce the training data of a random half of the clients to a fraction ``keep`` (Appendix F, step 2).

    ``len(clients) // 2`` clients are chosen without replacement; each keeps a random
    ``round(keep * n_train)`` of its training rows (at least 3, in their original order) and all
    its test rows. Every returned client's ``meta`` gets ``reduced`` (bool), ``n_train_full``
    (training rows before the reduction) and keeps its other entries.

    Parameters
    ----------
    clients : sequence of ClientData
        Clients after the train/test split.
    rng : numpy.random.Generator
        Source of the choice of clients and of the rows kept.
    keep : float, default 0.2
        Fraction of training rows kept by a reduced client (the paper's "reduced by 80 %").

    Returns
    -------
    list of ClientData
        New client objects, in the input order, with the same ``client_id``.
    """
    check_range("keep", keep, 0.0, 1.0, low_open=True)
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy.random.Generator; got {type(rng).__name__}")
    n_clients = len(clients)
    chosen = set(rng.choice(n_clients, size=n_clients // 2, replace=False).tolist()) if n_clients > 1 else set()
    out = []
    for i, c in enumerate(clients):
        n = c.n_train
        meta = {**dict(c.meta), "n_train_full": n, "reduced": i in chosen}
        if i in chosen:
            m = int(min(n, max(MIN_TRAIN, np.floor(keep * n + 0.5))))
            rows = np.sort(rng.choice(n, size=m, replace=False))
            c = ClientData(c.X_train[rows], c.y_train[rows], c.X_test, c.y_test, client_id=c.client_id, meta=meta)
        else:
            c = ClientData(c.X_train, c.y_train, c.X_test, c.y_test, client_id=c.client_id, meta=meta)
        out.append(c)
    return out


def check_protocol_args(protocol: Any, test_fraction: float, keep: float) -> None:
    """Validate the protocol arguments shared by every loader."""
    if not isinstance(protocol, (bool, np.bool_)):
        raise ValueError(f"protocol must be True or False; got {protocol!r}")
    check_range("test_fraction", test_fraction, 0.0, 1.0, low_open=True, high_open=True)
    check_range("keep", keep, 0.0, 1.0, low_open=True)


def build_clients(
    parts: Sequence[tuple[np.ndarray, np.ndarray, Mapping[str, Any]]],
    *,
    seed: int,
    protocol: bool,
    test_fraction: float,
    keep: float,
    what: str,
) -> tuple[list[ClientData], dict[str, Any]]:
    """Split every client's ``(X, y, meta)`` and, under the protocol, reduce half of them.

    Client ``k`` is split with ``stream(seed, SPLIT, k)``, the reduction uses
    ``stream(seed, REDUCE)``. Features and labels become float64 arrays.

    Returns the clients and the ``info["protocol"]`` record.
    """
    clients = []
    for k, (X, y, meta) in enumerate(parts):
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        Xtr, ytr, Xte, yte = split_client(X, y, stream(seed, SPLIT, k), test_fraction, field=f"{what} client {k}")
        clients.append(ClientData(Xtr, ytr, Xte, yte, client_id=k, meta=dict(meta)))
    if protocol:
        clients = reduce_half(clients, stream(seed, REDUCE), keep)
    else:
        clients = [
            ClientData(c.X_train, c.y_train, c.X_test, c.y_test, client_id=c.client_id,
                       meta={**dict(c.meta), "n_train_full": c.n_train, "reduced": False})
            for c in clients
        ]
    record = {
        "name": "Sheaf-FMTL Appendix F" if protocol else "train/test split only",
        "applied": bool(protocol),
        "test_fraction": float(test_fraction),
        "keep": float(keep) if protocol else 1.0,
        "reduced_clients": [c.client_id for c in clients if c.meta["reduced"]],
        "seed": int(seed),
    }
    return clients, record
