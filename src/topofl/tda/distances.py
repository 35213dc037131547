"""Distances between persistence diagrams and between descriptors.

:func:`wasserstein` (exact by default), :func:`bottleneck`, :func:`descriptor_distance` (paper §3.3) and
their pairwise forms. See docs/internals.md#topofl.tda.distances for the exact solver and Hera.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from topofl._validation import check_range


def _as_dgm(d: np.ndarray, field: str) -> np.ndarray:
    arr = np.asarray(d, dtype=np.float64).reshape(-1, 2) if np.size(d) else np.empty((0, 2))
    if not np.isfinite(arr).all():
        raise ValueError(f"{field} must hold finite (birth, death) pairs; use the canonical diagrams")
    return arr


def _check_orders(p: float, internal_p: float) -> None:
    check_range("p", p, 1.0)
    if not (internal_p == np.inf or (isinstance(internal_p, (int, float)) and internal_p >= 1.0)):
        raise ValueError(f"internal_p must be >= 1 or inf; got {internal_p!r}")


def wasserstein_exact(d1: np.ndarray, d2: np.ndarray, p: float = 2.0, internal_p: float = np.inf) -> float:
    """Exact p-Wasserstein distance between two diagrams of finite pairs, as an assignment problem.

    Parameters
    ----------
    d1, d2 : ndarray of shape (m, 2) and (n, 2)
        Finite (birth, death) pairs; empty diagrams are allowed.
    p : float
        Order of the distance, ``>= 1`` and finite.
    internal_p : float
        Ground metric on the plane, the L_internal_p norm (``inf``: the usual L∞).

    Returns
    -------
    float
        ``W_p = (min_matching Σ cost^p)^(1/p)``, a point of either diagram matched to a point of
        the other or to its orthogonal projection on the diagonal, at distance
        ``|death − birth| / 2 · 2^(1/internal_p)``.

    Notes
    -----
    The standard reduction: the (m + n) × (m + n) cost matrix holds d1-to-d2 costs, a d1 point to
    any of m diagonal slots at its diagonal cost, any of n diagonal slots to a d2 point at that
    point's diagonal cost, and zero between diagonal slots; every perfect matching of it is a
    partial matching of the diagrams at the same cost and conversely, so the optimal assignment
    (scipy's ``linear_sum_assignment``, exact up to floating-point sums) gives W_p. Distances are
    divided by the largest one before raising to the power p, so large p neither overflows nor
    underflows.
    """
    _check_orders(p, internal_p)
    a, b = _as_dgm(d1, "d1"), _as_dgm(d2, "d2")
    m, n = len(a), len(b)
    if m + n == 0:
        return 0.0
    diag_scale = 1.0 if internal_p == np.inf else 2.0 ** (1.0 / internal_p)
    da = np.abs(a[:, 1] - a[:, 0]) / 2.0 * diag_scale
    db = np.abs(b[:, 1] - b[:, 0]) / 2.0 * diag_scale
    diff = np.abs(a[:, None, :] - b[None, :, :])
    cross = diff.max(axis=2) if internal_p == np.inf else np.linalg.norm(diff, ord=internal_p, axis=2)
    scale = max(float(da.max(initial=0.0)), float(db.max(initial=0.0)), float(cross.max(initial=0.0)))
    if scale == 0.0:
        return 0.0
    cost = np.zeros((m + n, n + m))
    cost[:m, :n] = (cross / scale) ** p
    cost[:m, n:] = ((da / scale) ** p)[:, None]
    cost[m:, :n] = ((db / scale) ** p)[None, :]
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(cost)
    return scale * float(math.fsum(cost[rows, cols].tolist()) ** (1.0 / p))


def wasserstein(
    d1: np.ndarray, d2: np.ndarray, p: float = 2.0, internal_p: float = np.inf, rel_error: float = 0.0
) -> float:
    """p-Wasserstein distance between two diagrams of finite pairs: exact, or Hera's approximation.

    Parameters
    ----------
    d1, d2 : ndarray of shape (m, 2) and (n, 2)
        Finite (birth, death) pairs; empty diagrams are allowed.
    p : float
        Order of the distance, ``>= 1`` and finite.
    internal_p : float
        Ground metric on the plane (``inf``: the usual L∞).
    rel_error : float
        0 (default): the exact distance (:func:`wasserstein_exact`). Above 0: gudhi's Hera auction
        with ``delta = rel_error``, whose value lies in ``[W, (1 + rel_error) W]``; faster on
        diagrams of about a thousand points or more, 1.5–7x slower than the exact solver on
        pTopoFL's (≤ 200 points; ``benchmarks/bench_wasserstein.py``). Hera does not terminate on
        pairs of persistence near the smallest normal float (~1e-308); the exact solver has no
        such limit.

    Returns
    -------
    float
        The distance.
    """
    check_range("rel_error", rel_error, 0.0)
    if rel_error == 0.0:
        return wasserstein_exact(d1, d2, p, internal_p)
    _check_orders(p, internal_p)
    from gudhi.hera import wasserstein_distance

    # Points on the diagonal cost nothing, and Hera (gudhi 3.13) crashes or loops on them: drop them.
    a, b = (d[d[:, 1] != d[:, 0]] for d in (_as_dgm(d1, "d1"), _as_dgm(d2, "d2")))
    return float(wasserstein_distance(a, b, order=p, internal_p=internal_p, delta=rel_error))


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
    rel_error: float = 0.0,
) -> np.ndarray:
    """(K, K) distances between clients' diagrams, summed over homological dimensions.

    ``dgms[k]`` is client k's list ``[D0, D1, ...]``; ``metric`` is "wasserstein" (order ``p``,
    exact unless ``rel_error > 0``: see :func:`wasserstein`) or "bottleneck".
    """
    fn = {"wasserstein": lambda a, b: wasserstein(a, b, p, rel_error=rel_error), "bottleneck": bottleneck}.get(metric)
    if fn is None:
        raise ValueError(f"metric must be one of wasserstein, bottleneck; got {metric!r}")
    K = len(dgms)
    D = np.zeros((K, K))
    for i in range(K):
        for j in range(i + 1, K):
            D[i, j] = D[j, i] = sum(fn(a, b) for a, b in zip(dgms[i], dgms[j], strict=False))
    return D
