"""Helpers shared by the server-based methods of :mod:`topofl.algorithms`: the aggregation maths
(:func:`weighted_average`, :func:`cap_shares`) and the personal-model generator. The contract
they implement (:class:`Algorithm`, :class:`AlgorithmConfig`, :class:`ClientContext`) lives in
:mod:`topofl.federation.algorithm` and is re-exported here for the methods' convenience.
"""
from __future__ import annotations

import numpy as np

from topofl._validation import check_range
from topofl.config import hp
from topofl.federation.algorithm import Algorithm, AlgorithmConfig, ClientContext

__all__ = ["Algorithm", "AlgorithmConfig", "ClientContext", "cap_shares", "hp", "personal_rng", "weighted_average"]


def personal_rng(ctx: ClientContext) -> np.random.Generator:
    """The generator of a client's *personal-model* training in a round (shared by Local and Ditto,
    so that Ditto with λ = 0 reproduces local training exactly).
    """
    return np.random.default_rng(np.random.SeedSequence([ctx.seed, ctx.round, ctx.client_id, 0xD1770]))


def cap_shares(weights: np.ndarray, max_share: float = 1.0) -> np.ndarray:
    """Normalised weights in which no share exceeds ``max_share`` (the server's ``max_client_weight``).

    Water-filling: shares above the cap are set to it and the excess is re-distributed over the
    others in proportion to their weights, until none exceeds it. When the cap cannot hold
    (``max_share · K < 1``) every client gets 1/K, the closest feasible split. With
    ``max_share = 1`` this is ``w / Σ w``.
    """
    w = np.asarray(weights, dtype=np.float64)
    check_range("max_share", max_share, 0.0, 1.0, low_open=True)
    total = w.sum()
    if w.ndim != 1 or w.size == 0 or not np.isfinite(total) or total <= 0 or (w < 0).any():
        raise ValueError(f"aggregation weights must be non-negative with a positive finite sum; got {w.tolist()}")
    s: np.ndarray = w / total
    if max_share >= 1.0 or s.max() <= max_share:
        return s
    if max_share * w.size < 1.0:
        return np.full(w.size, 1.0 / w.size)
    capped = np.zeros(w.size, dtype=bool)
    while True:
        over = (s > max_share) & ~capped
        if not over.any():
            return s
        capped |= over
        s[capped] = max_share
        free = ~capped
        rest = 1.0 - max_share * capped.sum()
        mass = w[free].sum()
        s[free] = rest * (w[free] / mass if mass > 0 else np.full(free.sum(), 1.0 / free.sum()))


#: above this many numbers (clients × parameters), :func:`weighted_average` accumulates instead of stacking
_STACK_LIMIT = 1 << 24


def weighted_average(vectors: list[np.ndarray], weights: np.ndarray, max_share: float = 1.0) -> np.ndarray:
    """Σ_k s_k v_k with shares s = :func:`cap_shares` (weights, max_share) (weights need not be
    normalised; they must have a positive sum).
    """
    shares = cap_shares(weights, max_share)
    if len(vectors) * (vectors[0].size if vectors else 0) <= _STACK_LIMIT:
        out: np.ndarray = shares @ np.vstack(vectors)
        return out
    # deep models: accumulate in place instead of stacking K copies of a large vector (the sum's
    # rounding then differs from the stacked product's in the last bits)
    acc: np.ndarray = np.multiply(vectors[0], shares[0], dtype=np.float64)
    tmp = np.empty_like(acc)
    for s, v in zip(shares[1:], vectors[1:], strict=True):
        acc += np.multiply(v, s, out=tmp)
    return acc
