"""A scikit-learn transformer mapping point clouds to pTopoFL descriptors."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

from topofl.tda.descriptor import DescriptorLayout, descriptors


# scikit-learn ships no type information (no py.typed), so mypy sees its base classes as Any
class TopologicalDescriptor(TransformerMixin, BaseEstimator):  # type: ignore[misc]
    """Transform a sequence of point clouds into a (K, 8 + 2L) matrix of descriptors (§3.1).

    Each input sample is a whole point cloud (array of shape (n_i, d)), e.g. one client's data or
    one patient's time series embedding, so it fits in a ``Pipeline`` before any estimator.

    Parameters
    ----------
    n_sub, n_thresholds, scale, seed
        As in :func:`topofl.tda.descriptor`.
    """

    def __init__(self, n_sub: int = 80, n_thresholds: int = 20, scale: str = "none", seed: int = 0):
        self.n_sub = n_sub
        self.n_thresholds = n_thresholds
        self.scale = scale
        self.seed = seed

    def fit(self, X: Sequence[np.ndarray], y: Any = None) -> TopologicalDescriptor:
        """Nothing to learn; records the output width."""
        self.n_features_out_ = len(DescriptorLayout(self.n_thresholds))
        return self

    def transform(self, X: Sequence[np.ndarray]) -> np.ndarray:
        """Descriptors of each point cloud in ``X``."""
        return descriptors(list(X), self.n_sub, self.n_thresholds, self.seed, self.scale)

    def get_feature_names_out(self, input_features: Sequence[str] | None = None) -> np.ndarray:
        return np.array(DescriptorLayout(self.n_thresholds).names, dtype=object)
