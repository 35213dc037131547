"""Per-sample TDA features for topology-augmented local training (paper §3.2).

:class:`TopoContext` appends four columns to a client's features (``centroid_distance``,
``h0_entropy``, ``h1_entropy``, ``betti0_median``); :func:`topological_sample_weights` is §3.2 as
sample weights. See docs/internals.md#topofl.tda.features for the scalings.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topofl.tda.descriptor import _amplitude, betti_curve, persistence_entropy, thresholds_for

FEATURE_NAMES = ("centroid_distance", "h0_entropy", "h1_entropy", "betti0_median")
N_FEATURES = len(FEATURE_NAMES)
#: constants of the paper-era sample weighting: floor of the H0 amplitude, and the range the
#: mean-one weights are clipped to
SAMPLE_WEIGHT_MIN_SCALE = 0.1
SAMPLE_WEIGHT_CLIP = (0.2, 5.0)


def topological_sample_weights(points: np.ndarray, dgm0: np.ndarray) -> np.ndarray:
    """Per-sample weights of the local loss: §3.2 as the authors' paper-era code implements it.

    Parameters
    ----------
    points : ndarray of shape (n, d)
        The client's training points in the space (and scaling) its diagrams were computed in.
    dgm0 : ndarray of shape (m, 2)
        The client's H0 diagram (finite pairs).

    Returns
    -------
    ndarray of shape (n,)
        w_i = exp(−‖x_i − x̄‖₂ / s), s = max(A_0, 0.1) with A_0 = (Σ pers²)^{1/2} the H0
        amplitude of Eq. 5 (the "characteristic scale" of the client's components), divided by
        their mean and clipped to [0.2, 5]: points far from the client's centroid, relative to
        its topological scale, weigh less. The weights have mean 1 before clipping, so the
        weighted mean loss keeps the scale of the unweighted one.
    """
    P = np.asarray(points, dtype=np.float64)
    if P.ndim != 2 or P.shape[0] == 0:
        raise ValueError(f"points must be a non-empty (n, d) array; got shape {P.shape}")
    d0 = np.asarray(dgm0, dtype=np.float64).reshape(-1, 2)
    scale = max(_amplitude(d0[:, 1] - d0[:, 0]), SAMPLE_WEIGHT_MIN_SCALE)
    dist = np.linalg.norm(P - P.mean(axis=0), axis=1)
    w = np.exp(-(dist - dist.min()) / scale)  # the shift cancels in w / mean(w) and keeps a weight of 1
    clipped: np.ndarray = np.clip(w / w.mean(), *SAMPLE_WEIGHT_CLIP)
    return clipped


@dataclass(frozen=True)
class TopoContext:
    """What a client needs to augment any of its samples (paper §3.2): centroid, scale, client statistics."""

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
