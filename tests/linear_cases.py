"""Linear models and labels for the before/after tests of the linear fast paths (issue 25): one place for
``tests/models/test_linear_gradient_path.py`` and ``tests/test_fastpath_linear.py``."""
from __future__ import annotations

import numpy as np

from topofl.models.linear import BinaryLogistic, LeastSquares, LinearModel, SoftmaxRegression


def linear_model(task: str, d: int, l2: float, n_classes: int = 3) -> LinearModel:
    """The task's NumPy linear model on ``d`` features."""
    return {"binary": lambda: BinaryLogistic(d, l2), "regression": lambda: LeastSquares(d, l2),
            "multiclass": lambda: SoftmaxRegression(d, l2, n_classes=n_classes)}[task]()


def random_labels(task: str, rng: np.random.Generator, n: int, n_classes: int = 3) -> np.ndarray:
    """``n`` labels of the task: 0/1, class ids, or real targets."""
    if task == "binary":
        return (rng.random(n) > 0.5).astype(float)
    if task == "multiclass":
        return rng.integers(0, n_classes, n).astype(float)
    return rng.standard_normal(n) * 3
