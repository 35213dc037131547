"""Pure maths of Sheaf-FMTL (Ben Issaid, Vepakomma, Bennis, TMLR 2025): edge spaces, the model
step (Eq. 27), the map step's residual (Eq. 28), the projection carried over a map step, and the
analytic cost accounting (Table 3). The node state that calls these lives in
:mod:`topofl.decentralised.sheaf.algorithm`.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

FLOAT = 8  # bytes per stored float64


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


def budget_refusal(start: float, per_iteration: float, rounds: int, budget: float, float64: bool = True) -> str | None:
    """Why a run cannot finish within the maps' memory budget, or None if it can.

    Compact maps grow by exactly ``per_iteration`` bytes per map step (Eq. 28 is rank one: one row
    of U and of V per node), so after ``rounds`` iterations they hold ``start + rounds·per_iteration``
    bytes; the message names that number and the iteration at which the run would stop (and, for
    ``float64`` factors, that float32 ones would halve the growth).
    """
    need = start + rounds * per_iteration
    if need <= budget:
        return None
    stop = int((budget - start) // per_iteration) + 1 if per_iteration > 0 else 1
    return (f"compact restriction maps would grow to {need / 1e9:.4g} GB over {rounds} iterations "
            f"({start / 1e9:.3g} GB at the start, +{per_iteration / 1e6:.4g} MB per iteration), "
            f"above memory_budget={budget:.4g} bytes: the run would stop at iteration "
            f"{stop}. Set memory_budget >= {need:.4g} (bytes), or run fewer rounds, "
            + ("map_precision='float32' (half the growth) " if float64 else "")
            + "or on_budget='recompress' (approximate)")


def model_step(theta: np.ndarray, grad: np.ndarray, coupling: np.ndarray, lr: float, lam: float) -> np.ndarray:
    """Eq. 27: θ_i − α (∇f_i(θ_i; ξ) + λ Σ_j P_ijᵀ (P_ij θ_i − P_ji θ_j)), with ``coupling`` the sum."""
    return theta - lr * (grad + lam * coupling)


def map_residual(proj_new: np.ndarray, received: np.ndarray, eta: float, lam: float) -> np.ndarray:
    """The left factor of Eq. 28's rank-one map update, ηλ (P_ij θ_i^{k+1} − P_ji θ_j^{k+1})."""
    residual: np.ndarray = eta * lam * (proj_new - received)
    return residual


def carried_projection(proj: np.ndarray, residual: np.ndarray, scale: float) -> np.ndarray:
    """P^{k+1} x = P^k x − u (vᵀx) after Eq. 28's rank-one step P^{k+1} = P^k − u vᵀ.

    With u = ηλ r_ij (:func:`map_residual`) and v = x = θ_i^{k+1}, ``scale`` = ‖θ_i^{k+1}‖² and
    this is P_ij^{k+1} θ_i^{k+1}: what the next iteration's first exchange would send. Node i
    uses it to skip that projection; neighbour j, which knows P_ij^k θ_i^{k+1} (received),
    P_ji^k θ_j^{k+1} (its own, hence r_ij) and, given one more number, ‖θ_i^{k+1}‖², rebuilds it
    without the first exchange (``exchange="compact"``).
    """
    out: np.ndarray = proj - residual * scale
    return out


def node_flops(
    gradient_flops: float, d_i: int, sizes: Sequence[int], compact: bool, rank: int, projections: int = 2,
    map_update: bool = True, rebuilt: bool = False,
) -> float:
    """Analytic FLOPs of one node in one iteration: gradients plus what the map work computed.

    Parameters
    ----------
    gradient_flops : float
        The mini-batch gradients' FLOPs.
    d_i : int
        Node i's model size.
    sizes : sequence of int
        Its edge spaces d_ij, d_e = Σ_j d_ij.
    compact : bool
        Compact maps P = P⁰ − UᵀV (sparse P⁰, rank r) instead of dense ones.
    rank : int
        r, the compact maps' rank (0 for dense maps).
    projections : int
        Projections P_i θ computed this iteration: 2 when both exchanges' projections are computed
        (the first iteration), 1 when the first is the one carried over the last map step
        (:func:`carried_projection`; every later iteration).
    map_update : bool
        Whether the map step (Eq. 28) ran (it is skipped for η = 0).
    rebuilt : bool
        Whether the node rebuilt its neighbours' projections from the second exchange
        (``exchange="compact"``).

    Returns
    -------
    float
        Dense maps: 2·d_e·d_i per projection, for the back-projection of Eq. 27 and for the
        rank-one update, plus the vector work of the map step (residual 2·d_e; carried projection
        2·d_i + 2·d_e) and 4·d_e to rebuild received projections. Compact maps: 2·d_i·|N(i)| +
        2·r·(d_e + d_i) per product with P (projections and back-projection); the update only
        appends a row to U and V. The paper's Table 3 gives O(d_i·d_ij) per edge.
    """
    d_e = sum(sizes)
    product = 2 * d_i * len(sizes) + 2 * rank * (d_e + d_i) if compact else 2 * d_e * d_i
    flops = gradient_flops + (projections + 1) * product + 4 * d_e * rebuilt
    if map_update:
        flops += (0 if compact else 2 * d_e * d_i) + 2 * d_e + 2 * d_i + 2 * d_e
    return flops
