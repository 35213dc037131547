"""UCI Human Activity Recognition (HAR) with smartphones: one client per subject.

The ``UCI HAR Dataset`` directory holds ``train/X_train.txt`` (rows of 561 whitespace-separated
features), ``train/y_train.txt`` (activity 1..6 per row), ``train/subject_train.txt`` (subject
1..30 per row) and the same three files under ``test/``. The official split is *by subject*
(21 subjects in ``train``, 9 in ``test``), so every subject's rows are pooled and the
Sheaf-FMTL protocol re-splits them per client.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Literal

import numpy as np

from topofl._validation import check_finite
from topofl.data.loaders.base import LoadedData
from topofl.data.loaders.protocol import build_clients, check_protocol_args, check_seed

#: Activity names of labels 0..5 (file labels 1..6).
HAR_ACTIVITIES = ("WALKING", "WALKING_UPSTAIRS", "WALKING_DOWNSTAIRS", "SITTING", "STANDING", "LAYING")

_LAYOUT = (
    "the UCI HAR Dataset layout: <root>/train/{X,y,subject}_train.txt and <root>/test/{X,y,subject}_test.txt"
)


def _read_text(path: Path, ndmin: Literal[1, 2]) -> np.ndarray:
    if not path.is_file():
        raise ValueError(f"HAR: file not found: {path}; expected {_LAYOUT}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy warns (UserWarning) on an empty file; checked below
            arr = np.loadtxt(path, dtype=np.float64, ndmin=ndmin)
    except ValueError as exc:
        raise ValueError(f"{path}: not a whitespace-separated numeric text file ({exc})") from None
    if arr.shape[0] == 0:
        raise ValueError(f"{path}: the file holds no rows")
    if ndmin == 1 and arr.ndim != 1:
        raise ValueError(f"{path}: expected one value per line; got {arr.shape[1]} columns")
    check_finite(arr, str(path))
    return arr


def _read_part(root: Path, part: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    px, py, ps = (root / part / f"{stem}_{part}.txt" for stem in ("X", "y", "subject"))
    X = _read_text(px, 2)
    y = _read_text(py, 1)
    s = _read_text(ps, 1)
    for path, arr in ((py, y), (ps, s)):
        if arr.shape[0] != X.shape[0]:
            raise ValueError(f"{path}: has {arr.shape[0]} rows but {px} has {X.shape[0]}")
    bad = np.flatnonzero(~np.isin(y, np.arange(1, 7)))
    if bad.size:
        raise ValueError(f"{py}: line {bad[0] + 1} holds label {y[bad[0]]!r}; activities must be integers 1..6")
    bad = np.flatnonzero((s != np.round(s)) | (s < 1))
    if bad.size:
        raise ValueError(f"{ps}: line {bad[0] + 1} holds subject {s[bad[0]]!r}; subjects must be positive integers")
    return X, y.astype(np.int64) - 1, s.astype(np.int64)


def load_har(
    root: str | Path,
    protocol: bool = True,
    seed: int = 0,
    *,
    test_fraction: float = 0.25,
    keep: float = 0.2,
) -> LoadedData:
    """UCI HAR: 30 subjects (clients), 561 features, 6 activities (multiclass).

    Rows of ``train/`` and ``test/`` are pooled per subject (in file order: train rows first),
    then the protocol splits every subject's rows. Clients are ordered by subject id. Labels
    1..6 become 0..5 (see ``HAR_ACTIVITIES``); features are used as distributed (already scaled
    to [-1, 1]).

    Parameters
    ----------
    root : str or Path
        The ``UCI HAR Dataset`` directory, or a directory that contains it.
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

    Returns
    -------
    LoadedData
        ``task="multiclass"``, ``n_classes=6``; ``meta`` has ``subject``, ``partition``
        (``"train"``, ``"test"`` or ``"both"``: where the subject's rows came from), ``n_rows``,
        ``n_train_full`` and ``reduced``.

    Raises
    ------
    ValueError
        A missing file (the message names the path and the expected layout), an unparsable
        file, row counts that differ between ``X``, ``y`` and ``subject`` files, feature
        counts that differ between ``train`` and ``test``, labels outside 1..6, invalid subject
        ids, or non-finite values.
    """
    seed = check_seed(seed)
    check_protocol_args(protocol, test_fraction, keep)
    root = Path(root)
    if not (root / "train").is_dir() and (root / "UCI HAR Dataset").is_dir():
        root = root / "UCI HAR Dataset"
    if not root.is_dir():
        raise ValueError(f"HAR: directory not found: {root}; expected {_LAYOUT}")
    Xa, ya, sa = _read_part(root, "train")
    Xb, yb, sb = _read_part(root, "test")
    if Xa.shape[1] != Xb.shape[1]:
        raise ValueError(
            f"{root / 'test' / 'X_test.txt'}: has {Xb.shape[1]} features but "
            f"{root / 'train' / 'X_train.txt'} has {Xa.shape[1]}"
        )
    X = np.vstack([Xa, Xb])
    y = np.concatenate([ya, yb])
    s = np.concatenate([sa, sb])
    from_train = np.concatenate([np.ones(len(sa), bool), np.zeros(len(sb), bool)])
    parts = []
    for subject in np.unique(s):
        rows = np.flatnonzero(s == subject)
        where = from_train[rows]
        partition = "train" if where.all() else "test" if not where.any() else "both"
        parts.append((X[rows], y[rows], {"subject": int(subject), "partition": partition, "n_rows": int(rows.size)}))
    clients, record = build_clients(parts, seed=seed, protocol=protocol, test_fraction=test_fraction, keep=keep,
                                    what="HAR")
    info = {
        "source": {
            "dataset": "UCI HAR Dataset (Anguita et al. 2013)",
            "root": str(root),
            "files": [str(root / p / f"{stem}_{p}.txt") for p in ("train", "test") for stem in ("X", "y", "subject")],
        },
        "protocol": record,
        "label_map": {str(i + 1): i for i in range(6)},
        "classes": list(HAR_ACTIVITIES),
        "n_features": int(X.shape[1]),
        "subjects": [c.meta["subject"] for c in clients],
    }
    return LoadedData(clients, task="multiclass", n_classes=6, name="har", info=info)
