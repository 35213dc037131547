"""Wasserstein barycentres (Fréchet means) of persistence diagrams, and distances to them.

PD̄ of pTopoFL's Eq. 12 (Theorem 3.2): :func:`frechet_mean` (Turner et al. 2014, Algorithm 1, through
GUDHI), :func:`diagram_barycentre` per homological dimension, :func:`distances_to_barycentre`.
See docs/internals.md#topofl.tda.barycentre for the algorithm, its caveats and its cost.
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
    """The barycentre PD̄ of clients' diagrams (Eq. 12, Theorem 3.2): the :func:`frechet_mean` of each dimension.

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
        raise ValueError("every client must send the same homological dimensions; "
                         f"got {sorted(dims)} diagrams per client")
    return [frechet_mean([d[j] for d in client_dgms]) for j in range(dims.pop())]


def distances_to_barycentre(
    client_dgms: Sequence[Sequence[np.ndarray]], barycentre: Sequence[np.ndarray], p: float = 2.0,
    rel_error: float = 0.0,
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
