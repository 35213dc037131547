"""Per-sample TDA features for topology-augmented local training (paper §3.2).

Each client appends four columns to its feature matrix:

``centroid_distance``  ‖x − c‖₂ / s: the l2 distance of the sample to the client's topological
                       centroid c (the mean of its training points), divided by the client's
                       characteristic scale s (the median centroid distance of its training
                       points), so the column is dimensionless whatever the descriptor scaling.
``h0_entropy``,        the client's H0 and H1 persistence entropies, divided by log of the number
``h1_entropy``         of pairs (so in [0, 1]); the same for every sample of the client.
``betti0_median``      the H0 Betti number at the median filtration scale (the middle of the
                       descriptor's threshold grid), as a fraction of the subsampled points.

The paper names the four statistics but not their scaling; the scalings above keep every column
O(1) so that one SGD step size serves raw and augmented features. The client-level columns act
as a client-specific offset that a shared linear model can use.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topofl.tda.descriptor import betti_curve, persistence_entropy, thresholds_for

FEATURE_NAMES = ("centroid_distance", "h0_entropy", "h1_entropy", "betti0_median")
N_FEATURES = len(FEATURE_NAMES)


@dataclass(frozen=True)
class TopoContext:
    """What a client needs to augment any of its samples: centroid, scale, client statistics."""

    centroid: np.ndarray
    scale: float
    client_stats: np.ndarray  # (3,) h0_entropy, h1_entropy, betti0_median (already scaled)

    @classmethod
    def from_data(cls, X: np.ndarray, dgms: list[np.ndarray], n_points: int) -> TopoContext:
        """Build the context from training points and the diagrams of their subsample."""
        d0, d1 = dgms[0], dgms[1] if len(dgms) > 1 else np.empty((0, 2))
        centroid = X.mean(axis=0)
        scale = float(np.median(np.linalg.norm(X - centroid, axis=1)))
        t = thresholds_for(d0, 21)
        b0_mid = betti_curve(d0, t[10:11])[0] / max(n_points, 1)

        def norm_entropy(d: np.ndarray) -> float:
            return persistence_entropy(d[:, 1] - d[:, 0]) / np.log(d.shape[0]) if d.shape[0] > 1 else 0.0

        stats = np.array([norm_entropy(d0), norm_entropy(d1), b0_mid])
        return cls(centroid=centroid, scale=scale if scale > 0 else 1.0, client_stats=stats)

    def transform(self, X: np.ndarray) -> np.ndarray:
        """(n, 4) TDA features of the samples X (vectorised)."""
        dist = np.linalg.norm(X - self.centroid, axis=1, keepdims=True) / self.scale
        return np.hstack([dist, np.broadcast_to(self.client_stats, (X.shape[0], 3))])

    def augment(self, X: np.ndarray) -> np.ndarray:
        """``[X, transform(X)]``: the feature matrix used by topology-augmented training."""
        return np.hstack([X, self.transform(X)])
