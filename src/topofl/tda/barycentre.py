"""Wasserstein barycentres (Fréchet means) of persistence diagrams, and distances to them.

pTopoFL's Wasserstein-exponential weights (paper §1 and Eq. 12, the weights of Theorems 3.5 and
3.9) need PD̄, a barycentre of the clients' diagrams: Theorem 3.2 proves that the Fréchet mean
PD̄ ∈ argmin_D Σ_k λ_k W_p^p(D, PD_k) exists but does not say how it is computed ("in practice
we compute an approximate barycenter in the finite-dimensional descriptor space", which is Eq. 6's
centroid of normalised descriptors, not a diagram).

Here PD̄ is the Fréchet mean of the diagrams for p = 2 with uniform λ_k = 1/K, computed for each
homological dimension by the algorithm of Turner, Mileyko, Mukherjee and Harer (2014), "Fréchet
means for distributions of persistence diagrams", Discrete & Computational Geometry 52(1),
44–70, Algorithm 1: match the estimate optimally (W2, Euclidean ground metric) to every diagram,
move each of its points to the mean of the points matched to it (a match to the diagonal counting
as the point's projection onto it), add a point for every diagram point matched to the diagonal,
and repeat until the matchings stop changing. It stops at a local minimum of the Fréchet energy
(the energy is not convex). The implementation is GUDHI's
(:func:`gudhi.wasserstein.barycenter.lagrangian_barycenter`, T. Lacombe, MIT licence), whose
optimal matchings use POT (Flamary et al. 2021, JMLR 22(78)); its starting point, a random diagram
by default, is fixed here to the first diagram given, so that a run is reproducible (pTopoFL
passes its clients in id order). POT is imported on the first barycentre only: its import takes
2–4 s on a 2-core machine (it loads torch when torch is installed), paid once per process.

The distance of each diagram to the barycentre is then the exact p-Wasserstein distance of
:func:`topofl.tda.distances.wasserstein` (L∞ ground metric, as pTopoFL's diagram clustering),
summed over homological dimensions as :func:`~topofl.tda.distances.pairwise_diagram_distances`
does. The barycentre is Turner's W2 mean whatever ``p``: it is the Fréchet mean with an algorithm
of its own in the literature; for p ≠ 2 it is an approximation of the W_p one.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from topofl.tda.distances import _as_dgm, wasserstein


def frechet_mean(dgms: Sequence[np.ndarray]) -> np.ndarray:
    """Fréchet mean under W2 of diagrams of one homological dimension (Turner et al. 2014).

    Parameters
    ----------
    dgms : sequence of ndarray of shape (n_k, 2)
        Finite (birth, death) pairs, one array per diagram; empty diagrams are allowed.

    Returns
    -------
    ndarray of shape (m, 2)
        A local minimiser of Σ_k W2²(D, dgms[k]) / K (Theorem 3.2 with uniform weights), found by
        GUDHI's ``lagrangian_barycenter`` started from ``dgms[0]``; empty when every diagram is.
    """
    if len(dgms) == 0:
        raise ValueError("frechet_mean needs at least one diagram")
    arrays = [_as_dgm(d, f"dgms[{i}]") for i, d in enumerate(dgms)]
    if all(a.shape[0] == 0 for a in arrays):
        return np.empty((0, 2))
    if len(arrays) == 1:
        single: np.ndarray = arrays[0].copy()
        return single
    try:
        from gudhi.wasserstein.barycenter import lagrangian_barycenter
    except ModuleNotFoundError as exc:  # gudhi.wasserstein needs POT, a dependency of topofl
        raise ModuleNotFoundError(f"diagram barycentres need POT (pip install pot): {exc}") from exc

    mean = lagrangian_barycenter(arrays, init=0)
    return np.asarray(mean, dtype=np.float64).reshape(-1, 2)


def diagram_barycentre(client_dgms: Sequence[Sequence[np.ndarray]]) -> list[np.ndarray]:
    """The barycentre PD̄ of clients' diagrams: the :func:`frechet_mean` of each homological dimension.

    Parameters
    ----------
    client_dgms : sequence of sequences of ndarray
        ``client_dgms[k]`` is client k's list ``[D0, D1, ...]``; every client has the same number
        of dimensions.

    Returns
    -------
    list of ndarray
        ``[D̄0, D̄1, ...]``.
    """
    if len(client_dgms) == 0:
        raise ValueError("diagram_barycentre needs the diagrams of at least one client")
    dims = {len(d) for d in client_dgms}
    if len(dims) != 1:
        raise ValueError(f"every client must send the same homological dimensions; got {sorted(dims)} diagrams per client")
    return [frechet_mean([d[j] for d in client_dgms]) for j in range(dims.pop())]


def distances_to_barycentre(
    client_dgms: Sequence[Sequence[np.ndarray]], barycentre: Sequence[np.ndarray], p: float = 2.0, rel_error: float = 0.0
) -> np.ndarray:
    """W_p(PD_k, PD̄) for every client k, summed over homological dimensions (the distances of Eq. 12).

    Parameters
    ----------
    client_dgms : sequence of sequences of ndarray
        ``client_dgms[k]`` is client k's ``[D0, D1, ...]``.
    barycentre : sequence of ndarray
        ``[D̄0, D̄1, ...]`` (:func:`diagram_barycentre`).
    p, rel_error : float
        Order and accuracy of :func:`~topofl.tda.distances.wasserstein` (exact when ``rel_error`` is 0).

    Returns
    -------
    ndarray of shape (K,)
        Σ_j W_p(D_j of client k, D̄_j).
    """
    out = np.zeros(len(client_dgms))
    for k, dgms in enumerate(client_dgms):
        if len(dgms) != len(barycentre):
            raise ValueError(f"client {k} sends {len(dgms)} diagrams, the barycentre has {len(barycentre)} dimensions")
        out[k] = sum(wasserstein(a, b, p, rel_error=rel_error) for a, b in zip(dgms, barycentre, strict=True))
    return out
