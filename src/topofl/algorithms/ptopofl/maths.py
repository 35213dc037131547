"""Pure functions of pTopoFL's server (paper §3.3–3.5). Hand-checked in tests/algorithms."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from topofl._validation import check_choice
from topofl.tda.distances import euclidean_row_blocks, normalise_rows

#: up to this many clients, SciPy's average linkage (the one scikit-learn's AgglomerativeClustering calls, so
#: the clusters of every earlier release); above, fastcluster's, in place (SciPy copies the condensed matrix:
#: 400 MB more at 10,000 clients). Both are exact average linkage (Müllner's NN-chain); they can break exact
#: ties in the merge heights differently.
SCIPY_LINKAGE_MAX_CLIENTS = 4096


def cluster_clients(D: np.ndarray, n_clusters: int) -> np.ndarray:
    """Hierarchical agglomerative clustering, average linkage, on a precomputed (K, K) distance matrix.

    Paper §3.3 Step 1 / Algorithm 1: :func:`cluster_condensed` on the matrix's upper triangle.
    """
    K = D.shape[0]
    return cluster_condensed(np.asarray(D, dtype=np.float64)[np.triu_indices(K, 1)], K, n_clusters)


def cluster_condensed(distances: np.ndarray, K: int, n_clusters: int) -> np.ndarray:
    """Average-linkage clusters of K points from their condensed distances (§3.3 Step 1, Algorithm 1).

    Parameters
    ----------
    distances : ndarray of shape (K(K − 1)/2,)
        The upper triangle of the distance matrix in row-major order (SciPy's condensed form);
        above :data:`SCIPY_LINKAGE_MAX_CLIENTS` points it is overwritten (the linkage runs in place).
    K : int
        Number of points.
    n_clusters : int
        Number of clusters, in [1, K].

    Returns
    -------
    ndarray of shape (K,)
        Labels numbered in order of first appearance: the partition after the first K − n_clusters
        merges of the dendrogram — what scikit-learn's ``AgglomerativeClustering(metric="precomputed",
        linkage="average")`` returns (it cuts SciPy's linkage the same way), renumbered so that the
        result does not depend on any library's internal numbering.
    """
    if not 1 <= n_clusters <= K:
        raise ValueError(f"n_clusters must be in [1, {K}] (the number of clients with descriptors); got {n_clusters}")
    if distances.shape != (K * (K - 1) // 2,):
        raise ValueError(f"distances must be condensed, of shape ({K * (K - 1) // 2},); got {distances.shape}")
    if n_clusters == 1:
        return np.zeros(K, dtype=int)
    if n_clusters == K:
        return np.arange(K)
    if K <= SCIPY_LINKAGE_MAX_CLIENTS:
        from scipy.cluster.hierarchy import linkage

        Z = linkage(distances, method="average")
    else:
        Z = _linkage_in_place(np.ascontiguousarray(distances, dtype=np.float64), K)
    return _first_merges(Z, K, K - n_clusters)


def _linkage_in_place(distances: np.ndarray, K: int) -> np.ndarray:
    """Fastcluster's average linkage (Müllner 2013, "fastcluster", J. Stat. Softw. 53(9)) run on ``distances``
    in place: its C routine directly, since ``fastcluster.linkage`` (1.3.0) copies its input even with
    ``preserve_input=False`` (its first line is ``array(X, subok=True)``). Falls back to that copy if the
    routine is not where fastcluster 1.x keeps it.
    """
    import fastcluster

    routine = _fastcluster_routine()
    if routine is None:
        return np.asarray(fastcluster.linkage(distances, method="average", preserve_input=False))
    Z = np.empty((K - 1, 4))
    routine(K, distances, Z)
    return Z


def _fastcluster_routine() -> Callable[[int, np.ndarray, np.ndarray], None] | None:
    """Fastcluster's C average linkage ``(K, condensed, Z)``, writing Z and overwriting the condensed input;
    ``None`` if this fastcluster does not expose it.
    """
    import fastcluster

    wrap = getattr(fastcluster, "linkage_wrap", None)
    method = getattr(fastcluster, "mthidx", {}).get("average")
    if wrap is None or method is None:
        return None
    return lambda K, distances, Z: wrap(K, distances, Z, method)


def _first_merges(Z: np.ndarray, K: int, merges: int) -> np.ndarray:
    """Labels, in order of first appearance, of the K leaves after the first ``merges`` rows of the linkage
    matrix ``Z`` (row i joins the clusters ``Z[i, 0]`` and ``Z[i, 1]`` into cluster K + i).
    """
    from scipy.cluster.hierarchy import DisjointSet

    sets = DisjointSet(range(K + merges))
    for i in range(merges):
        sets.merge(int(Z[i, 0]), K + i)
        sets.merge(int(Z[i, 1]), K + i)
    first: dict[int, int] = {}
    return np.array([first.setdefault(sets[i], len(first)) for i in range(K)])


def reassign(phi: Mapping[int, np.ndarray], labels: dict[int, int], drifted: list[int]) -> list[int]:
    """§3.5's re-assignment of drifted clients, in turn: each joins the cluster whose centroid of the *other*
    clients' normalised descriptors is nearest (its own cluster's centroid taken without it; when it is alone,
    every centroid), the centroids counting the moves before it; written into ``labels``. Returns the clients
    that changed cluster.

    The centroids come from :func:`cluster_sums`, kept as clients move: O(K + |drifted| · M) instead of a pass
    over every client per drifted one (which made a round O(K²) after a data change). A centroid without the
    client is its cluster's sum less its descriptor: equal to the mean of the others to rounding (last bits).
    """
    sums = cluster_sums(phi, labels)
    moved = []
    for cid in drifted:
        x = normalise_rows(phi[cid])[0]
        own = labels[cid]
        cents = {}
        for j, (total, count) in sums.items():
            if j != own and count > 0:
                cents[j] = total / count
            elif j == own and count > 1:
                cents[j] = (total - x) / (count - 1)
        if not cents:
            cents = {j: total / count for j, (total, count) in sums.items() if count > 0}
        new = nearest_cluster(x, cents)
        if new != own:
            labels[cid] = new
            sums[own] = (sums[own][0] - x, sums[own][1] - 1)
            sums[new] = (sums[new][0] + x, sums[new][1] + 1)
            moved.append(cid)
    return moved


def anomaly_scores(phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """δ_k = mean distance to the other clients' descriptors (Eq. 8) and its z-score.

    z_k = (δ_k − mean δ) / std δ, with the population standard deviation; when all δ_k are equal
    (std 0) every z_k is 0. Needs at least 2 clients; with fewer, δ and z are zeros. The distances
    are summed a block of rows at a time (:func:`~topofl.tda.distances.euclidean_row_blocks`): O(K)
    memory, O(K² · m) time — :class:`PTopoFL` computes them again only when a descriptor changes.
    """
    K = phi.shape[0]
    if K < 2:
        return np.zeros(K), np.zeros(K)
    sums = np.empty(K)
    for start, block in euclidean_row_blocks(phi):
        sums[start : start + block.shape[0]] = block.sum(axis=1)
    delta = sums / (K - 1)
    sd = delta.std()
    z = (delta - delta.mean()) / sd if sd > 1e-12 * max(1.0, abs(delta.mean())) else np.zeros(K)
    return delta, z


def trust_from_z(z: np.ndarray, tau: float, gate: str = "all") -> tuple[np.ndarray, np.ndarray]:
    """Trust weights t_k = exp(−max(z_k − 1, 0)) and the flags z_k > τ (paper §3.4).

    ``gate="all"`` applies the formula to every client, as written in §3.4 (clients with
    z ≤ 1 keep t = 1); ``gate="flagged"`` down-weights only clients flagged by z > τ.
    """
    check_choice("gate", gate, ("all", "flagged"))
    flagged = z > tau
    t = np.exp(-np.maximum(z - 1.0, 0.0))
    if gate == "flagged":
        t = np.where(flagged, t, 1.0)
    return t, flagged


def intra_cluster_weights(n: np.ndarray, phi_hat: np.ndarray, centroid: np.ndarray, trust: np.ndarray) -> np.ndarray:
    """w_k ∝ n_k · exp(−‖φ̂_k − φ̂_C‖) · t_k, normalised to sum to 1 (Eq. 6)."""
    w = np.asarray(n, float) * np.exp(-np.linalg.norm(phi_hat - centroid, axis=1)) * np.asarray(trust, float)
    total = w.sum()
    if total <= 0 or not np.isfinite(total):
        raise ValueError(f"intra-cluster weights have no positive mass: n={list(n)}, trust={list(trust)}")
    shares: np.ndarray = w / total
    return shares


def wasserstein_weights(distances: np.ndarray, temperature: float) -> np.ndarray:
    """α_k = exp(−λ W_k) / Σ_j exp(−λ W_j): the Wasserstein-exponential weights of Eq. 12.

    Parameters
    ----------
    distances : ndarray of shape (K,)
        W_k = W_p(PD_k, PD̄), each client's diagram distance to the barycentre of its group
        (:func:`topofl.tda.barycentre.distances_to_barycentre`); finite and non-negative.
    temperature : float
        λ > 0: 0 would give uniform weights, large λ all the weight to the client nearest PD̄.

    Returns
    -------
    ndarray of shape (K,)
        Weights summing to 1. As Eq. 12 writes them (and §1, Theorems 3.5 and 3.9), neither the
        sample sizes n_k nor the trust t_k enter; computed as a softmax shifted by min_k W_k,
        which leaves them unchanged and cannot overflow.
    """
    W = np.asarray(distances, dtype=np.float64)
    if W.ndim != 1 or W.size == 0 or not np.all(np.isfinite(W)) or np.any(W < 0):
        raise ValueError(f"distances must be a non-empty vector of finite non-negative numbers; got {W.tolist()}")
    if not (np.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be a finite number > 0; got {temperature!r}")
    e = np.exp(-temperature * (W - W.min()))
    alpha: np.ndarray = e / e.sum()
    return alpha


def consensus(cluster_models: Mapping[int, np.ndarray], sizes: Mapping[int, int]) -> np.ndarray:
    """θ̄ = Σ_j |C_j|/K θ_Cj over the clusters of ``cluster_models`` (Eq. 7), K their total size; a cluster that
    lost every member (|C_j| = 0) weighs nothing.
    """
    K = float(sum(sizes.get(j, 0) for j in cluster_models))
    if K <= 0:
        raise ValueError(f"the consensus needs at least one non-empty cluster; sizes={dict(sizes)}")
    theta_bar: np.ndarray = sum((sizes.get(j, 0) / K) * theta for j, theta in cluster_models.items())  # type: ignore[assignment]
    return theta_bar


def blend(cluster_models: Mapping[int, np.ndarray], sizes: Mapping[int, int], beta: float) -> dict[int, np.ndarray]:
    """θ*_C = (1 − β) θ_C + β θ̄ with θ̄ the :func:`consensus` (Eq. 7)."""
    theta_bar = consensus(cluster_models, sizes)
    return {j: (1.0 - beta) * theta + beta * theta_bar for j, theta in cluster_models.items()}


def drift(history: np.ndarray) -> float:
    """Δ_k = (1/R) Σ_r ‖φ_k^(r) − φ_k^(1)‖₂ over a (R, m) history of one client (Eq. 9)."""
    history = np.atleast_2d(history)
    return float(np.linalg.norm(history - history[0], axis=1).mean())


def nearest_cluster(phi_hat: np.ndarray, centroids: Mapping[int, np.ndarray]) -> int:
    """The cluster whose centroid (in normalised-descriptor space) is closest to ``phi_hat``."""
    ids = list(centroids)
    d = [np.linalg.norm(phi_hat - centroids[j]) for j in ids]
    return ids[int(np.argmin(d))]


def cluster_centroids(phi: Mapping[int, np.ndarray], labels: Mapping[int, int]) -> dict[int, np.ndarray]:
    """Centroid φ̂_C of the l2-normalised descriptors of each cluster's members (Eq. 6)."""
    return {j: total / count for j, (total, count) in cluster_sums(phi, labels).items()}


def cluster_sums(phi: Mapping[int, np.ndarray], labels: Mapping[int, int]) -> dict[int, tuple[np.ndarray, int]]:
    """Each cluster's sum of its members' l2-normalised descriptors and its number of members (those with a
    descriptor), clusters in order of first appearance in ``labels``. The sum is taken member after member in
    the order of ``labels``, as ``numpy.mean(..., axis=0)`` takes it: ``total / count`` is that mean, bit for
    bit, and a member added later (:func:`assign_in_turn`) extends it as if it had been listed last.
    """
    out: dict[int, tuple[np.ndarray, int]] = {}
    for cid, lab in labels.items():
        if cid in phi:
            x = normalise_rows(phi[cid])[0]
            total, count = out.get(lab, (None, 0))
            out[lab] = (x if total is None else total + x, count + 1)
    return out


def assign_in_turn(phi: Mapping[int, np.ndarray], labels: dict[int, int], new: list[int]) -> None:
    """§3.5's assignment of clients without a cluster: each client of ``new``, in turn, joins the cluster whose
    centroid of normalised descriptors is nearest (:func:`nearest_cluster`), the centroids counting the clients
    assigned before it; written into ``labels``. The centroids' sums are kept as clients join
    (:func:`cluster_sums`): O(K + |new| · M) rather than a pass over every client for each new one.
    """
    sums = cluster_sums(phi, labels)
    for cid in new:
        x = normalise_rows(phi[cid])[0]
        j = nearest_cluster(x, {k: total / count for k, (total, count) in sums.items()})
        labels[cid] = j
        total, count = sums[j]
        sums[j] = (total + x, count + 1)


def small_groups(sizes: Mapping[int, int], centroids: Mapping[int, np.ndarray], min_group: int,
                 policy: str) -> tuple[dict[int, list[int]], dict[str, Any]]:
    """Secure aggregation's groups of clusters (:meth:`PTopoFL.secure_plan`): each cluster with ``sizes[j]``
    participants alone, except those below ``min_group``. ``policy="merge"``: the smallest such group
    (ties: lowest id) joins the group holding the cluster of nearest centroid, until none is small or
    one group is left; ``"exclude"``: small clusters are left out. A group's id is its lowest cluster id.
    Returns the groups and the round log's ``secure_merged`` (group → clusters, for merged groups) or
    ``secure_excluded`` (clusters) entry.
    """
    groups = {j: [j] for j in sorted(sizes)}

    def size(g: int) -> int:
        return sum(sizes[j] for j in groups[g])

    if policy == "exclude":
        out = [j for j in sorted(groups) if size(j) < min_group]
        return {g: js for g, js in groups.items() if g not in out}, ({"secure_excluded": out} if out else {})
    while len(groups) > 1:
        small = [g for g in groups if size(g) < min_group]
        if not small:
            break
        g = min(small, key=lambda x: (size(x), x))

        def gap(h: int, g: int = g) -> tuple[float, int]:
            return min(float(np.linalg.norm(centroids[a] - centroids[b])) for a in groups[g] for b in groups[h]), h

        h = min((x for x in groups if x != g), key=gap)
        keep, gone = min(g, h), max(g, h)
        groups[keep] = sorted(groups[keep] + groups.pop(gone))
    merged = {g: js for g, js in groups.items() if len(js) > 1}
    return groups, ({"secure_merged": merged} if merged else {})
