"""Writers of small data files in the real on-disk formats, for the loader tests.

Every writer tags each row with a unique integer id stored in its first feature(s), so a test can
map a loaded row back to the row written and check features and labels exactly.
"""
from __future__ import annotations

import gzip
import pickle
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import scipy.io


def cell_array(mats: Sequence[np.ndarray], column: bool = False) -> np.ndarray:
    """A MATLAB cell array ((1, K), or (K, 1) with ``column``) holding ``mats``."""
    cells = np.empty((len(mats), 1) if column else (1, len(mats)), dtype=object)
    for k, m in enumerate(mats):
        cells.flat[k] = m
    return cells


def mat_clients(sizes: Sequence[int], n_features: int, labels: str, seed: int = 0):
    """Per-client (X_k, Y_k): X_k[:, 0] is a global row id; labels "pm1", "01" or "scores"."""
    rng = np.random.default_rng(seed)
    Xs, Ys, start = [], [], 0
    for n in sizes:
        X = rng.standard_normal((n, n_features))
        X[:, 0] = np.arange(start, start + n)
        start += n
        if labels == "pm1":
            Y = rng.choice([-1.0, 1.0], size=(n, 1))
        elif labels == "01":
            Y = rng.choice([0.0, 1.0], size=(n, 1))
        else:
            Y = rng.normal(20.0, 10.0, size=(n, 1))
        Xs.append(X)
        Ys.append(Y)
    return Xs, Ys


def write_mat(path: Path, Xs, Ys, column: bool = False, **extra) -> Path:
    """A .mat file with cell arrays ``X`` and ``Y`` (the MTL benchmark layout)."""
    scipy.io.savemat(str(path), {"X": cell_array(Xs, column), "Y": cell_array(Ys, column), **extra})
    return path


def write_har(root: Path, train: dict[int, int], test: dict[int, int], n_features: int = 561, seed: int = 0):
    """A ``UCI HAR Dataset`` tree; ``train``/``test`` map subject → rows. Returns (X, y, subject) per part.

    ``X[:, 0]`` holds a global row id scaled by 1e-3 (ids stay exact in the text format).
    """
    rng = np.random.default_rng(seed)
    written, start = {}, 0
    for part, subjects in (("train", train), ("test", test)):
        (root / part).mkdir(parents=True, exist_ok=True)
        s = np.concatenate([np.full(n, subj) for subj, n in subjects.items()]).astype(int)
        X = rng.uniform(-1, 1, size=(s.size, n_features))
        X[:, 0] = np.arange(start, start + s.size) * 1e-3
        start += s.size
        y = rng.integers(1, 7, size=s.size)
        np.savetxt(root / part / f"X_{part}.txt", X, fmt="%.7e")
        np.savetxt(root / part / f"y_{part}.txt", y, fmt="%d")
        np.savetxt(root / part / f"subject_{part}.txt", s, fmt="%d")
        written[part] = (X, y, s)
    return written


def idx_bytes(arr: np.ndarray, magic: int) -> bytes:
    """IDX encoding of a uint8 array: big-endian magic, big-endian dims, row-major data."""
    arr = np.ascontiguousarray(arr, dtype=np.uint8)
    head = np.array([magic, *arr.shape], dtype=">u4").tobytes()
    return head + arr.tobytes()


def write_mnist(root: Path, n_train: int, n_test: int = 0, gz: bool = False, seed: int = 0):
    """MNIST IDX files (magic 2051 images, 2049 labels). Image ``i`` has ``i`` in its first two pixels."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    n = n_train + n_test
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    images[:, 0, 0], images[:, 0, 1] = np.arange(n) // 256, np.arange(n) % 256
    labels = rng.integers(0, 10, size=n).astype(np.uint8)
    parts = [("train", slice(0, n_train))] + ([("t10k", slice(n_train, n))] if n_test else [])
    for prefix, sl in parts:
        for stem, data, magic in (("images-idx3-ubyte", images[sl], 2051), ("labels-idx1-ubyte", labels[sl], 2049)):
            raw = idx_bytes(data, magic)
            path = root / f"{prefix}-{stem}{'.gz' if gz else ''}"
            path.write_bytes(gzip.compress(raw) if gz else raw)
    return images, labels


def write_cifar(root: Path, per_class: int, test: bool = True, seed: int = 0):
    """CIFAR-10 python batches: ``data_batch_1..5`` (+ ``test_batch``), ``per_class`` images per class each.

    Row ``i`` (over all batches, in file order) has ``i // 256`` and ``i % 256`` as its first two bytes.
    """
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + (["test_batch"] if test else [])
    rows, labels, start = [], [], 0
    for name in names:
        y = rng.permutation(np.repeat(np.arange(10), per_class))
        data = rng.integers(0, 256, size=(y.size, 3072), dtype=np.uint8)
        ids = np.arange(start, start + y.size)
        data[:, 0], data[:, 1] = ids // 256, ids % 256
        start += y.size
        batch = {b"batch_label": name.encode(), b"labels": y.tolist(), b"data": data,
                 b"filenames": [f"img{i}.png".encode() for i in ids]}
        with open(root / name, "wb") as fh:
            pickle.dump(batch, fh, protocol=2)
        rows.append(data)
        labels.append(y)
    return np.concatenate(rows), np.concatenate(labels)


def row_ids_cifar(X: np.ndarray) -> np.ndarray:
    """Row ids of loaded CIFAR rows (features scaled by 1/255)."""
    b = np.round(X[:, :2] * 255).astype(int)
    return b[:, 0] * 256 + b[:, 1]
