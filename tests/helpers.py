"""Helpers shared by the tests (importable as ``helpers``: pyproject puts tests/ on the path)."""
from __future__ import annotations

import numpy as np


def blob_client(rng: np.random.Generator, n: int, d: int = 5, shift: float = 0.0, w: np.ndarray | None = None):
    """(X_train, y_train, X_test, y_test) of a linearly separable-ish binary problem."""
    X = rng.standard_normal((n, d)) + shift
    w = np.ones(d) if w is None else w
    y = (X @ w + rng.normal(0, 0.5, n) > shift * w.sum()).astype(float)
    k = n * 3 // 4
    return X[:k], y[:k], X[k:], y[k:]


def make_mlp():
    """A user's own two-layer PyTorch MLP for 20 tabular features, 2 logits (importable by name:
    ``helpers:make_mlp``, as a Flower run names a user's model)."""
    import torch

    return torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
