"""FEMNIST in LEAF's JSON format (Caldas et al. 2018): one client per writer.

:func:`load_femnist` reads LEAF's ``train/*.json`` and ``test/*.json`` from ``root`` (nothing is
downloaded), keeps LEAF's per-writer train/test split and, by default, inverts images to bright strokes
on black. See docs/internals.md#topofl.data.loaders.femnist for the file format and the inversion rule.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from topofl._validation import check_int
from topofl.data.federation import ClientData
from topofl.data.loaders.base import LoadedData

N_CLASSES = 62
N_PIXELS = 28 * 28


def _read_split(directory: Path) -> dict[str, dict[str, Any]]:
    """Every writer's ``{"x", "y"}`` in the JSON files of one split directory."""
    files = sorted(directory.glob("*.json"))
    if not files:
        raise ValueError(f"FEMNIST: no LEAF JSON files in {directory}")
    users: dict[str, dict[str, Any]] = {}
    for f in files:
        try:
            doc = json.loads(f.read_text())
            data = doc["user_data"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{f}: not a LEAF JSON file (need 'users' and 'user_data'; "
                             f"{type(exc).__name__}: {exc})") from None
        for user in doc.get("users", list(data)):
            if user not in data:
                raise ValueError(f"{f}: user {user!r} is listed in 'users' but has no 'user_data'")
            if user in users:
                raise ValueError(f"{f}: user {user!r} appears in more than one file of {directory.name}/")
            users[user] = data[user]
    return users


def _arrays(where: str, record: dict[str, Any], invert: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        X = np.asarray(record["x"], dtype=np.float64)
        y = np.asarray(record["y"], dtype=np.float64)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"FEMNIST {where}: needs numeric 'x' and 'y' ({type(exc).__name__}: {exc})") from None
    if X.ndim != 2 or X.shape[1] != N_PIXELS or y.shape != (X.shape[0],):
        raise ValueError(f"FEMNIST {where}: 'x' must be n rows of {N_PIXELS} pixels and 'y' n labels; "
                         f"got {X.shape} and {y.shape}")
    if not np.isfinite(X).all() or X.min() < 0 or X.max() > 1:
        raise ValueError(f"FEMNIST {where}: pixels must be finite values in [0, 1]")
    if np.any(y != np.round(y)) or y.min() < 0 or y.max() >= N_CLASSES:
        raise ValueError(f"FEMNIST {where}: labels must be class ids 0..{N_CLASSES - 1}")
    if invert == "always" or (invert == "auto" and X.size and X.mean() > 0.5):
        X = 1.0 - X
    return X, y


def load_femnist(root: str | Path, *, n_writers: int | None = None, seed: int = 0, invert: str = "auto") -> LoadedData:
    """Writers of LEAF FEMNIST as clients: ``n_writers`` of them (a seeded choice; all by default),
    each with LEAF's own train/test split; 62 classes (digits, upper- and lower-case letters).
    """
    root = Path(root)
    if invert not in ("auto", "always", "never"):
        raise ValueError(f"invert must be auto, always or never; got {invert!r}")
    for part in ("train", "test"):
        if not (root / part).is_dir():
            raise ValueError(f"FEMNIST: {root / part} is not a directory; root must hold LEAF's train/ and test/")
    train, test = _read_split(root / "train"), _read_split(root / "test")
    writers = sorted(set(train) & set(test))
    if not writers:
        raise ValueError(f"FEMNIST: no writer has both train and test data under {root}")
    if n_writers is not None:
        check_int("n_writers", n_writers, 1, len(writers))
        pick = np.random.default_rng(np.random.SeedSequence([int(seed), 0xFE]))
        writers = sorted(pick.choice(writers, size=n_writers, replace=False).tolist())
    clients = []
    for k, w in enumerate(writers):
        Xtr, ytr = _arrays(f"train/{w}", train[w], invert)
        Xte, yte = _arrays(f"test/{w}", test[w], invert)
        clients.append(ClientData(Xtr, ytr, Xte, yte, client_id=k, meta={"writer": w}))
    info = {"source": str(root), "writers": len(writers), "split": "LEAF's per-writer train/test", "invert": invert}
    return LoadedData(clients, task="multiclass", n_classes=N_CLASSES, name="femnist", info=info)
