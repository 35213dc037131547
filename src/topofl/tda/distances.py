"""Distances between persistence diagrams and between descriptors.

Diagram distances use gudhi's compiled Hera implementations (exact, not greedy matchings):
p-Wasserstein and bottleneck, each point allowed to match the diagonal. The descriptor distance is
the L2 distance between l2-normalised descriptors used by pTopoFL's clustering (paper §3.3,
Step 1: "pairwise Euclidean distance matrix on l2-normalised feature vectors").
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from topofl._validation import check_range


def _as_dgm(d: np.ndarray, field: str) -> np.ndarray:
    arr = np.asarray(d, dtype=np.float64).reshape(-1, 2) if np.size(d) else np.empty((0, 2))
    if not np.isfinite(arr).all():
        raise ValueError(f"{field} must hold finite (birth, death) pairs; use the canonical diagrams")
    return arr


def wasserstein(d1: np.ndarray, d2: np.ndarray, p: float = 2.0, internal_p: float = np.inf) -> float:
    """Exact p-Wasserstein distance between two diagrams of finite pairs (gudhi / Hera).

    ``internal_p`` is the ground metric on the plane (inf: the usual L-infinity).
    """
    check_range("p", p, 1.0)
    from gudhi.hera import wasserstein_distance

    return float(wasserstein_distance(_as_dgm(d1, "d1"), _as_dgm(d2, "d2"), order=p, internal_p=internal_p))


def bottleneck(d1: np.ndarray, d2: np.ndarray) -> float:
    """Exact bottleneck distance between two diagrams of finite pairs (gudhi)."""
    from gudhi import bottleneck_distance

    return float(bottleneck_distance(_as_dgm(d1, "d1"), _as_dgm(d2, "d2")))


def normalise_rows(phi: np.ndarray) -> np.ndarray:
    """Rows divided by their l2 norm (φ̂ = φ/‖φ‖₂, paper §3.3); all-zero rows stay zero."""
    phi = np.atleast_2d(np.asarray(phi, dtype=np.float64))
    norms = np.linalg.norm(phi, axis=1, keepdims=True)
    unit: np.ndarray = np.divide(phi, norms, out=np.zeros_like(phi), where=norms > 0)
    return unit


def descriptor_distance(a: np.ndarray, b: np.ndarray) -> float:
    """‖φ̂_a − φ̂_b‖₂ between l2-normalised descriptors (paper §3.3, Step 1)."""
    na, nb = normalise_rows(np.stack([a, b]))
    return float(np.linalg.norm(na - nb))


def pairwise_euclidean(V: np.ndarray) -> np.ndarray:
    """(K, K) Euclidean distances between the rows of V (vectorised, exact zeros on the diagonal)."""
    V = np.asarray(V, dtype=np.float64)
    sq = (V**2).sum(axis=1)
    D2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * V @ V.T, 0.0)
    np.fill_diagonal(D2, 0.0)
    D: np.ndarray = np.sqrt(D2)
    return D


def pairwise_descriptor_distances(phi: np.ndarray) -> np.ndarray:
    """(K, K) matrix of descriptor distances between the rows of ``phi``."""
    return pairwise_euclidean(normalise_rows(phi))


def pairwise_diagram_distances(
    dgms: Sequence[Sequence[np.ndarray]],
    metric: str = "wasserstein",
    p: float = 2.0,
) -> np.ndarray:
    """(K, K) distances between clients' diagrams, summed over homological dimensions.

    ``dgms[k]`` is client k's list ``[D0, D1, ...]``; ``metric`` is "wasserstein" or "bottleneck".
    """
    fn = {"wasserstein": lambda a, b: wasserstein(a, b, p), "bottleneck": bottleneck}.get(metric)
    if fn is None:
        raise ValueError(f"metric must be one of wasserstein, bottleneck; got {metric!r}")
    K = len(dgms)
    D = np.zeros((K, K))
    for i in range(K):
        for j in range(i + 1, K):
            D[i, j] = D[j, i] = sum(fn(a, b) for a, b in zip(dgms[i], dgms[j], strict=False))
    return D
