"""Distances between persistence diagrams and between descriptors.

:func:`wasserstein` (exact by default), :func:`bottleneck`, :func:`descriptor_distance` (paper §3.3) and
their pairwise forms. See docs/internals.md#topofl.tda.distances for the exact solver and Hera.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Sequence

import numpy as np

from topofl._validation import check_range

log = logging.getLogger(__name__)
_clock = time.perf_counter  # the progress reports' clock


def _as_dgm(d: np.ndarray, field: str) -> np.ndarray:
    arr = np.asarray(d, dtype=np.float64).reshape(-1, 2) if np.size(d) else np.empty((0, 2))
    if not np.isfinite(arr).all():
        raise ValueError(f"{field} must hold finite (birth, death) pairs; use the canonical diagrams")
    return arr


def _check_orders(p: float, internal_p: float) -> None:
    check_range("p", p, 1.0)
    if not (internal_p == np.inf or (isinstance(internal_p, (int, float)) and internal_p >= 1.0)):
        raise ValueError(f"internal_p must be >= 1 or inf; got {internal_p!r}")


#: total points (both diagrams) from which :func:`wasserstein_exact`'s ``solver="auto"`` takes POT's network
#: simplex: measured (``benchmarks/bench_wasserstein.py``) slower than SciPy's assignment at 80 + 80 points
#: (pTopoFL's linear subsample), 1.2–1.5x faster at 200 + 200 (deep models) and 2.3–2.6x at 1,000 + 1,000
POT_MIN_POINTS = 200
#: the largest order p for which ``solver="auto"`` takes POT: its network simplex loses precision as the costs
#: (distance / largest)^p spread over many orders of magnitude — measured ≤ 2e-15 relative to the assignment up to
#: p = 4, 5e-10 at p = 6, 4 % at p = 60
POT_MAX_ORDER = 4.0
WASSERSTEIN_SOLVERS = ("auto", "assignment", "pot")


def wasserstein_exact(d1: np.ndarray, d2: np.ndarray, p: float = 2.0, internal_p: float = np.inf,
                      solver: str = "auto") -> float:
    """Exact p-Wasserstein distance between two diagrams of finite pairs.

    Parameters
    ----------
    d1, d2 : ndarray of shape (m, 2) and (n, 2)
        Finite (birth, death) pairs; empty diagrams are allowed.
    p : float
        Order of the distance, ``>= 1`` and finite.
    internal_p : float
        Ground metric on the plane, the L_internal_p norm (``inf``: the usual L∞).
    solver : {"auto", "assignment", "pot"}
        ``"assignment"``: SciPy's ``linear_sum_assignment`` on the square reduction below (the
        solver of earlier releases, bit for bit). ``"pot"``: gudhi's optimal-transport formulation
        (``gudhi.wasserstein``: the diagonal as one point of the other diagram's total mass), solved
        by POT's exact network simplex — the same optimum, equal to within rounding (≤ 2e-15
        relative in ``benchmarks/bench_wasserstein.py`` up to p = 4; less precise for larger p, see
        :data:`POT_MAX_ORDER`); it needs every pair to die after it is born. ``"auto"``: POT from
        :data:`POT_MIN_POINTS` points in all and p ≤ :data:`POT_MAX_ORDER`, where it is faster and as
        precise; the assignment otherwise, and for diagrams with a pair below the diagonal.

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
    if solver not in WASSERSTEIN_SOLVERS:
        raise ValueError(f"solver must be one of {', '.join(WASSERSTEIN_SOLVERS)}; got {solver!r}")
    a, b = _as_dgm(d1, "d1"), _as_dgm(d2, "d2")
    m, n = len(a), len(b)
    if m + n == 0:
        return 0.0
    below = bool(np.any(a[:, 1] < a[:, 0]) or np.any(b[:, 1] < b[:, 0]))
    if solver == "pot" and below:
        raise ValueError("solver='pot' needs pairs with death >= birth (gudhi's distance to the diagonal is "
                         "signed); use solver='assignment'")
    diag_scale = 1.0 if internal_p == np.inf else 2.0 ** (1.0 / internal_p)
    da = np.abs(a[:, 1] - a[:, 0]) / 2.0 * diag_scale
    db = np.abs(b[:, 1] - b[:, 0]) / 2.0 * diag_scale
    diff = np.abs(a[:, None, :] - b[None, :, :])
    cross = diff.max(axis=2) if internal_p == np.inf else np.linalg.norm(diff, ord=internal_p, axis=2)
    scale = max(float(da.max(initial=0.0)), float(db.max(initial=0.0)), float(cross.max(initial=0.0)))
    if scale == 0.0:
        return 0.0
    if solver == "pot" or (solver == "auto" and m + n >= POT_MIN_POINTS and p <= POT_MAX_ORDER and not below):
        return _wasserstein_pot(a, b, p, internal_p, scale)
    cost = np.zeros((m + n, n + m))
    cost[:m, :n] = (cross / scale) ** p
    cost[:m, n:] = ((da / scale) ** p)[:, None]
    cost[m:, :n] = ((db / scale) ** p)[None, :]
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(cost)
    return scale * float(math.fsum(cost[rows, cols].tolist()) ** (1.0 / p))


def _wasserstein_pot(a: np.ndarray, b: np.ndarray, p: float, internal_p: float, scale: float) -> float:
    """W_p by gudhi's optimal-transport formulation and POT's exact solver. The diagrams are first moved along
    the diagonal so that their smallest coordinate is 0, then divided by ``scale``, the largest distance the
    matching can use (as :func:`wasserstein_exact` divides its costs): W_p is unchanged by the move and
    homogeneous of degree 1, so small distances between large coordinates keep their precision and a large p
    neither overflows nor underflows.
    """
    from gudhi.wasserstein import wasserstein_distance

    shift = min(float(a.min(initial=np.inf)), float(b.min(initial=np.inf)))
    return scale * float(wasserstein_distance((a - shift) / scale, (b - shift) / scale, order=p,
                                              internal_p=internal_p))


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
        0 (default): the exact distance (:func:`wasserstein_exact`, on its fastest solver). Above 0:
        gudhi's Hera auction with ``delta = rel_error``, whose value lies in ``[W, (1 + rel_error) W]``; faster on
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
    if V.shape[0] == 0:
        return np.zeros((0, 0))
    (_, D), = euclidean_row_blocks(V, V.shape[0] ** 2)  # one block: the whole matrix
    return D


#: numbers (rows × K) of one block of :func:`euclidean_row_blocks` (8 MB of float64; two such temporaries): up
#: to 1,024 clients the whole matrix is one block, the product :func:`pairwise_euclidean` computes
EUCLIDEAN_BLOCK = 1 << 20


def euclidean_row_blocks(V: np.ndarray, max_numbers: int = EUCLIDEAN_BLOCK) -> Iterator[tuple[int, np.ndarray]]:
    """The rows of :func:`pairwise_euclidean` (V), a block at a time: ``(start, D[start:stop])``.

    Each block holds at most ``max_numbers`` distances (at least one row), so the K × K matrix is never
    held: O(max_numbers + K) memory instead of O(K²). The arithmetic is the full matrix's, row by
    row: ‖v_i‖² + ‖v_j‖² − 2 v_i·v_j, clipped at 0, exact zeros on the diagonal, square root. When the
    whole matrix fits in one block (K² ≤ ``max_numbers``) it is the same product, hence the same bits
    as :func:`pairwise_euclidean`; a block of fewer rows multiplies with a general product, whose last
    bits may differ (a few ulps) from the symmetric full product.
    """
    V = np.asarray(V, dtype=np.float64)
    K = V.shape[0]
    sq = (V**2).sum(axis=1)
    rows = max(1, max_numbers // max(K, 1))
    for start in range(0, K, rows):
        stop = min(start + rows, K)
        # the full matrix's expression, maximum(sq_i + sq_j - (2.0 V) Vᵀ, 0), in two buffers
        G = (2.0 * V[start:stop]) @ V.T
        D2 = np.add(sq[start:stop, None], sq[None, :])
        D2 -= G
        del G
        np.maximum(D2, 0.0, out=D2)
        D2[np.arange(stop - start), np.arange(start, stop)] = 0.0
        yield start, np.sqrt(D2, out=D2)


def condensed_euclidean(V: np.ndarray, max_numbers: int = EUCLIDEAN_BLOCK) -> np.ndarray:
    """The upper triangle of :func:`pairwise_euclidean` (V) in row-major order (SciPy's condensed form,
    ``D[np.triu_indices(K, 1)]``), K(K − 1)/2 numbers, built from :func:`euclidean_row_blocks` without
    the K × K matrix (at K = 10,000: 400 MB instead of 800 MB and its temporaries).
    """
    K = np.asarray(V).shape[0]
    out = np.empty(K * (K - 1) // 2)
    for start, block in euclidean_row_blocks(V, max_numbers):
        for r in range(block.shape[0]):
            i = start + r
            offset = i * K - i * (i + 1) // 2  # entries of the rows above i
            out[offset : offset + K - i - 1] = block[r, i + 1 :]
    return out


def pairwise_descriptor_distances(phi: np.ndarray) -> np.ndarray:
    """(K, K) matrix of descriptor distances between the rows of ``phi``."""
    return pairwise_euclidean(normalise_rows(phi))


def condensed_descriptor_distances(phi: np.ndarray) -> np.ndarray:
    """:func:`pairwise_descriptor_distances` in condensed form (:func:`condensed_euclidean`), without the
    K × K matrix: the input of pTopoFL's clustering (§3.3 Step 1).
    """
    return condensed_euclidean(normalise_rows(phi))


#: seconds after which :func:`pairwise_diagram_distances` reports its progress (and its estimate of the rest)
PROGRESS_AFTER_S = 30.0


def pairwise_diagram_distances(
    dgms: Sequence[Sequence[np.ndarray]],
    metric: str = "wasserstein",
    p: float = 2.0,
    rel_error: float = 0.0,
) -> np.ndarray:
    """(K, K) distances between clients' diagrams, summed over homological dimensions.

    ``dgms[k]`` is client k's list ``[D0, D1, ...]``; ``metric`` is "wasserstein" (order ``p``,
    exact unless ``rel_error > 0``: see :func:`wasserstein`) or "bottleneck". The K(K − 1)/2 pairs
    cost about 1.6 ms each on pTopoFL's diagrams of 80 points (13 min at 1,000 clients, about a day
    at 10,000; ``benchmarks/bench_wasserstein.py``): a computation that runs longer than
    :data:`PROGRESS_AFTER_S` logs its progress and the time it expects to take, every
    :data:`PROGRESS_AFTER_S` seconds (the first report as a warning, the next ones at INFO).
    """
    fn = {"wasserstein": lambda a, b: wasserstein(a, b, p, rel_error=rel_error), "bottleneck": bottleneck}.get(metric)
    if fn is None:
        raise ValueError(f"metric must be one of wasserstein, bottleneck; got {metric!r}")
    K = len(dgms)
    D = np.zeros((K, K))
    pairs, done, reported = K * (K - 1) // 2, 0, False
    start = last = _clock()
    for i in range(K):
        for j in range(i + 1, K):
            D[i, j] = D[j, i] = sum(fn(a, b) for a, b in zip(dgms[i], dgms[j], strict=False))
        done += K - i - 1
        now = _clock()
        if now - last >= PROGRESS_AFTER_S and done < pairs:
            last = now
            left = (now - start) / done * (pairs - done)
            log.log(logging.WARNING if not reported else logging.INFO,
                    "%s distances of %d clients: %d of %d pairs in %.0f s, about %.0f s left (the 'l2' descriptor "
                    "distance takes well under a second)", metric, K, done, pairs, now - start, left)
            reported = True
    return D
