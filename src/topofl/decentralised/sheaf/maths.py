"""Pure maths of Sheaf-FMTL (Ben Issaid, Vepakomma, Bennis, TMLR 2025): edge spaces, the model
step (Eq. 27), the map step's residual (Eq. 28) and the analytic cost accounting. The node state
that calls these lives in :mod:`topofl.decentralised.sheaf.algorithm`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from topofl.decentralised.sheaf.maps import FLOAT


def edge_dim(gamma: float, d_i: int, d_j: int, i: int, j: int) -> int:
    """d_ij = ⌊γ·min(d_i, d_j)⌋ (paper §4.1); refuses an empty edge space."""
    d = int(np.floor(gamma * min(d_i, d_j) + 1e-9))
    if d < 1:
        raise ValueError(f"edge ({i}, {j}) gets d_ij = floor({gamma} * min({d_i}, {d_j})) = 0; raise gamma")
    return d


def edge_sizes(gamma: float, dims: Mapping[int, int], neighbours: Mapping[int, Sequence[int]]) -> dict[int, list[int]]:
    """d_ij for every node i and each of its neighbours j (neighbour order), via :func:`edge_dim`."""
    return {i: [edge_dim(gamma, dims[i], dims[j], i, j) for j in neighbours[i]] for i in neighbours}


def dense_map_bytes(sizes: Mapping[int, Sequence[int]], dims: Mapping[int, int]) -> int:
    """Storage of all dense restriction maps, Σ_i Σ_j d_ij · d_i floats of FLOAT bytes."""
    return int(sum(sum(sizes[i]) * dims[i] * FLOAT for i in sizes))


def model_step(theta: np.ndarray, grad: np.ndarray, coupling: np.ndarray, lr: float, lam: float) -> np.ndarray:
    """Eq. 27: θ_i − α (∇f_i(θ_i; ξ) + λ Σ_j P_ijᵀ (P_ij θ_i − P_ji θ_j)), with ``coupling`` the sum."""
    return theta - lr * (grad + lam * coupling)


def map_residual(proj_new: np.ndarray, received: np.ndarray, eta: float, lam: float) -> np.ndarray:
    """The left factor of Eq. 28's rank-one map update, ηλ (P_ij θ_i^{k+1} − P_ji θ_j^{k+1})."""
    residual: np.ndarray = eta * lam * (proj_new - received)
    return residual


def node_flops(gradient_flops: float, d_i: int, sizes: Sequence[int], compact: bool, rank: int) -> float:
    """Analytic FLOPs of one node in one iteration: gradients plus the map work.

    Dense maps: two projections, one back-projection and one rank-one update, 8·Σ_j d_ij·d_i.
    Compact maps (P = P⁰ − UᵀV, rank r): 3·(2·d_i·|N(i)| + 2·r·(Σ d_ij + d_i)) + 2·Σ d_ij.
    """
    d_e = sum(sizes)
    if compact:
        return gradient_flops + 3 * (2 * d_i * len(sizes) + 2 * rank * (d_e + d_i)) + 2 * d_e
    return gradient_flops + 8 * d_e * d_i
