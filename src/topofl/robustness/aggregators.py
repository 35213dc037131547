"""Robust aggregation rules: pure functions over the updates of a round.

Mean, coordinate-wise median and trimmed mean, Krum, Multi-Krum, Bulyan, norm clipping and the guarded
mean; :func:`robust_aggregate` dispatches by name and reports which updates entered the result
(:class:`AggregateResult`), :func:`auto_f` the f a rule tolerates at the round's n.
See docs/internals.md#topofl.robustness.aggregators for the rules, their papers and the differences
from Flower's implementations.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from topofl._validation import as_real, check_choice, check_finite, check_int, check_range

__all__ = [
    "AGGREGATORS",
    "AUTO",
    "AggregateResult",
    "auto_f",
    "cap_shares",
    "bulyan",
    "coordinate_median",
    "guarded_mean",
    "krum",
    "krum_scores",
    "multi_krum",
    "norm_clip",
    "required_updates",
    "robust_aggregate",
    "trimmed_mean",
    "weighted_mean",
]

#: the rules :func:`robust_aggregate` knows, by name; ``"mean"`` is FedAvg's weighted average
AGGREGATORS = ("mean", "median", "trimmed_mean", "krum", "multi_krum", "bulyan", "norm_clip", "guarded_mean")
#: ``f`` value meaning "derived from the round's number of updates" (:func:`auto_f`)
AUTO = -1
#: the fewest updates whose coordinate-wise median change the guarded mean trusts as a direction (one hostile of three)
GUARD_MIN_GROUP = 3


@dataclass(frozen=True)
class AggregateResult:
    """The aggregate of a round and the indices (rows of ``updates``) whose update entered it.

    Attributes
    ----------
    vector : numpy.ndarray of shape (d,)
        The aggregate.
    selected : tuple of int
        Ascending indices of the updates that entered ``vector``; the others were excluded.
    """

    vector: np.ndarray
    selected: tuple[int, ...]
    #: rows the guarded mean's direction check flagged (and left out); empty for the other rules
    flagged: tuple[int, ...] = ()
    #: rows whose change the guarded mean scaled down
    clipped: tuple[int, ...] = ()
    #: the guarded mean's cosine of each row's change with the median change (NaN where not checked)
    cosines: tuple[float, ...] = ()


# ---- input checks -------------------------------------------------------------------------
def _updates(updates: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
    """``updates`` as a finite float64 array of shape (n, d), n >= 1, d >= 1."""
    U = as_real(np.vstack(updates) if isinstance(updates, (list, tuple)) else updates, "updates")
    if U.ndim != 2 or U.shape[0] < 1 or U.shape[1] < 1:
        raise ValueError("updates must be an array of shape (n_clients, n_params) with n_clients, n_params >= 1; "
                         f"got shape {U.shape}")
    check_finite(U, "updates")
    return U


def _shares(weights: np.ndarray | Sequence[float], n: int) -> np.ndarray:
    """``weights`` normalised to sum to 1, after checking they are n finite non-negative numbers."""
    w = as_real(weights, "weights")
    if w.shape != (n,):
        raise ValueError(f"weights must have shape ({n},), one per update; got shape {w.shape}")
    check_finite(w, "weights")
    total = float(w.sum())
    if (w < 0).any() or not total > 0 or not math.isfinite(total):
        raise ValueError(f"weights must be non-negative with a positive finite sum; got {w.tolist()}")
    shares: np.ndarray = w / total
    return shares


def cap_shares(weights: np.ndarray, max_share: float = 1.0) -> np.ndarray:
    """Normalised weights in which no share exceeds ``max_share`` (the server's ``max_client_weight``).

    Water-filling: shares above the cap are set to it and the excess is re-distributed over the
    others in proportion to their weights, until none exceeds it. When the cap cannot hold
    (``max_share · K < 1``) every client gets 1/K, the closest feasible split. With
    ``max_share = 1`` this is ``w / Σ w``.
    """
    w = np.asarray(weights, dtype=np.float64)
    check_range("max_share", max_share, 0.0, 1.0, low_open=True)
    total = np.add.reduce(w, axis=None)   # w.sum()'s reduction, without its layers (every round)
    if w.ndim != 1 or w.size == 0 or not math.isfinite(total) or total <= 0 or np.minimum.reduce(w) < 0:
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


def auto_f(name: str, n: int) -> int:
    """The number of Byzantine updates rule ``name`` tolerates at most among ``n`` (``f = AUTO``).

    Krum and Multi-Krum: ⌊(n − 3)/2⌋ (Blanchard et al. 2017, Prop. 1: n > 2f + 2); Bulyan:
    ⌊(n − 3)/4⌋ (El Mhamdi et al. 2018, §4: n ≥ 4f + 3); 0 for the other rules. Never below 0.
    """
    check_choice("aggregator", name, AGGREGATORS)
    check_int("n", n, 0)
    if name in ("krum", "multi_krum"):
        return max((n - 3) // 2, 0)
    if name == "bulyan":
        return max((n - 3) // 4, 0)
    return 0


def _reference(reference: np.ndarray, U: np.ndarray) -> np.ndarray:
    """The model(s) the server sent, checked: finite, of shape (d,) (one for every client) or (n, d)."""
    R = as_real(reference, "reference")
    if R.shape not in (U.shape[1:], U.shape):
        raise ValueError(f"reference must have shape ({U.shape[1]},) or {U.shape}; got shape {R.shape}")
    check_finite(R, "reference")
    return R


def _check_f(f: int, n: int, need: int, rule: str, condition: str) -> None:
    check_int("f", f, 0)
    if n < need:
        raise ValueError(f"{rule} with f={f} needs n >= {condition} = {need} updates; got n={n}")


def required_updates(name: str, f: int) -> int:
    """The fewest updates rule ``name`` accepts when it must tolerate ``f`` Byzantine clients.

    Krum and Multi-Krum need n >= 2f + 3 (Blanchard et al. 2017, Prop. 1: n > 2f + 2), Bulyan
    n >= 4f + 3 (El Mhamdi et al. 2018, §4); the other rules need one update.

    Parameters
    ----------
    name : str
        One of :data:`AGGREGATORS`.
    f : int
        Number of Byzantine clients tolerated (>= 0).

    Returns
    -------
    int
        The smallest acceptable number of updates.
    """
    check_choice("aggregator", name, AGGREGATORS)
    check_int("f", f, AUTO)
    if f == AUTO:  # f follows n: the rule's smallest n (f = 0)
        f = 0
    return {"krum": 2 * f + 3, "multi_krum": 2 * f + 3, "bulyan": 4 * f + 3}.get(name, 1)


# ---- the rules ----------------------------------------------------------------------------
def weighted_mean(updates: np.ndarray | Sequence[np.ndarray], weights: np.ndarray | Sequence[float]) -> np.ndarray:
    """FedAvg's aggregate Σ_k s_k u_k with s = w / Σ w (McMahan et al. 2017, Alg. 1).

    Parameters
    ----------
    updates : array_like of shape (n, d)
        One row per client.
    weights : array_like of shape (n,)
        Non-negative weights with a positive sum (need not be normalised).

    Returns
    -------
    numpy.ndarray of shape (d,)
        The weighted mean; bit for bit ``topofl.algorithms.base.weighted_average`` with no cap.
    """
    U = _updates(updates)
    out: np.ndarray = _shares(weights, U.shape[0]) @ U
    return out


def coordinate_median(updates: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
    """The coordinate-wise median (Yin et al. 2018, Definition 1); unweighted by definition.

    For an even number of updates each coordinate is the mean of its two middle values.

    Parameters
    ----------
    updates : array_like of shape (n, d)
        One row per client.

    Returns
    -------
    numpy.ndarray of shape (d,)
        The median of each coordinate over the n updates.
    """
    out: np.ndarray = np.median(_updates(updates), axis=0)
    return out


def trimmed_mean(updates: np.ndarray | Sequence[np.ndarray], beta: float) -> np.ndarray:
    """The coordinate-wise β-trimmed mean (Yin et al. 2018, Definition 2); unweighted by definition.

    In each coordinate the k = ⌊β·n⌋ largest and k smallest values are removed and the other
    n − 2k averaged (Yin et al. write 1/((1 − 2β) n) Σ, assuming β·n is an integer). ⌊·⌋ is taken
    with 1e-9 of slack, so that a β·n that rounding puts just under an integer counts as it.

    Parameters
    ----------
    updates : array_like of shape (n, d)
        One row per client.
    beta : float
        Fraction cut from each end, in [0, 0.5).

    Returns
    -------
    numpy.ndarray of shape (d,)
        The trimmed mean of each coordinate.
    """
    U = _updates(updates)
    check_range("beta", beta, 0.0, 0.5, high_open=True)
    n = U.shape[0]
    k = min(int(math.floor(beta * n + 1e-9)), (n - 1) // 2)
    out: np.ndarray = np.sort(U, axis=0)[k : n - k].mean(axis=0)
    return out


def _squared_distances(U: np.ndarray) -> np.ndarray:
    """‖u_i − u_j‖² for every pair, from the differences (no cancellation for nearby large vectors)."""
    D = np.empty((U.shape[0], U.shape[0]))
    for i in range(U.shape[0]):
        diff = U - U[i]
        D[i] = np.einsum("ij,ij->i", diff, diff)
    return D


def _scores(D: np.ndarray, neighbours: int) -> np.ndarray:
    """Krum's score of each row: the sum of its ``neighbours`` smallest distances to the others."""
    n = D.shape[0]
    others = D[~np.eye(n, dtype=bool)].reshape(n, n - 1)
    k = min(neighbours, n - 1)
    if k <= 0:
        return np.zeros(n)
    out: np.ndarray = np.partition(others, k - 1, axis=1)[:, :k].sum(axis=1)
    return out


def _krum_scores(U: np.ndarray, f: int, rule: str) -> np.ndarray:
    n = U.shape[0]
    _check_f(f, n, 2 * f + 3, rule, "2f + 3")
    return _scores(_squared_distances(U), n - f - 2)


def krum_scores(updates: np.ndarray | Sequence[np.ndarray], f: int) -> np.ndarray:
    """Krum's score s(i) = Σ_{i→j} ‖u_i − u_j‖² of every update (Blanchard et al. 2017, §4).

    i → j means that u_j is one of the n − f − 2 updates closest to u_i (u_i itself excluded).

    Parameters
    ----------
    updates : array_like of shape (n, d)
        One row per client; n >= 2f + 3.
    f : int
        Number of Byzantine clients tolerated (>= 0).

    Returns
    -------
    numpy.ndarray of shape (n,)
        The scores; the lower, the more central the update.
    """
    return _krum_scores(_updates(updates), f, "krum")


def krum(updates: np.ndarray | Sequence[np.ndarray], f: int) -> AggregateResult:
    """Krum (Blanchard et al. 2017, §4): the update of least score (:func:`krum_scores`).

    Unweighted by definition. Ties go to the lowest index.

    Parameters
    ----------
    updates : array_like of shape (n, d)
        One row per client; n >= 2f + 3 (their Prop. 1: n > 2f + 2).
    f : int
        Number of Byzantine clients tolerated (>= 0).

    Returns
    -------
    AggregateResult
        The chosen update and its index.
    """
    U = _updates(updates)
    i = int(np.argmin(krum_scores(U, f)))
    return AggregateResult(U[i].copy(), (i,))


def multi_krum(
    updates: np.ndarray | Sequence[np.ndarray], weights: np.ndarray | Sequence[float], f: int, m: int
) -> AggregateResult:
    """Multi-Krum (Blanchard et al. 2017, §5): the mean of the m updates of least Krum score.

    The paper averages the m selected updates with equal weights; here each keeps its weight,
    renormalised over the selection (equal weights give the paper's rule; Flower's ``MultiKrum``
    weights by example counts the same way). m = 1 is Krum, m = n the weighted mean.

    Parameters
    ----------
    updates : array_like of shape (n, d)
        One row per client; n >= 2f + 3.
    weights : array_like of shape (n,)
        Non-negative weights (e.g. example counts).
    f : int
        Number of Byzantine clients tolerated (>= 0).
    m : int
        Number of updates averaged, in [1, n]. Ties in score go to the lower index.

    Returns
    -------
    AggregateResult
        The mean of the selected updates and their indices.
    """
    U = _updates(updates)
    n = U.shape[0]
    check_int("m", m, 1, n)
    s = _shares(weights, n)
    chosen = np.sort(np.argsort(_krum_scores(U, f, "multi_krum"), kind="stable")[:m])
    sel = s[chosen]
    if not sel.sum() > 0:
        raise ValueError(f"the updates Multi-Krum selected ({chosen.tolist()}) all have weight 0")
    out: np.ndarray = (sel / sel.sum()) @ U[chosen]
    return AggregateResult(out, tuple(int(i) for i in chosen))


def bulyan(updates: np.ndarray | Sequence[np.ndarray], f: int) -> AggregateResult:
    """Bulyan over Krum (El Mhamdi et al. 2018, §4); unweighted by definition.

    1. Selection (El Mhamdi et al., Alg. 1): Krum is applied to the updates not yet selected, and
       its choice moved to the selection, until θ = n − 2f are selected. At each step Krum's
       neighbour count is that of the remaining set R, |R| − f − 2, clamped to at least 1.
    2. Aggregation: in each coordinate, the mean of the β = θ − 2f selected values closest to
       the selection's median in that coordinate.

    Parameters
    ----------
    updates : array_like of shape (n, d)
        One row per client; n >= 4f + 3.
    f : int
        Number of Byzantine clients tolerated (>= 0).

    Returns
    -------
    AggregateResult
        The aggregate and the θ indices selected in step 1.
    """
    U = _updates(updates)
    n = U.shape[0]
    _check_f(f, n, 4 * f + 3, "bulyan", "4f + 3")
    theta, beta = n - 2 * f, n - 4 * f
    D = _squared_distances(U)
    remaining, chosen = list(range(n)), []
    for _ in range(theta):
        sub = D[np.ix_(remaining, remaining)]
        pick = remaining[int(np.argmin(_scores(sub, max(1, len(remaining) - f - 2))))]
        chosen.append(pick)
        remaining.remove(pick)
    S = U[sorted(chosen)]
    med = np.median(S, axis=0)
    closest = np.argsort(np.abs(S - med), axis=0, kind="stable")[:beta]
    out: np.ndarray = np.take_along_axis(S, closest, axis=0).mean(axis=0)
    return AggregateResult(out, tuple(sorted(chosen)))


def norm_clip(
    updates: np.ndarray | Sequence[np.ndarray], weights: np.ndarray | Sequence[float], clip_norm: float,
    reference: np.ndarray,
) -> np.ndarray:
    """Norm thresholding (Sun et al. 2019, §4): Σ_k s_k (r_k + Δ_k / max(1, ‖Δ_k‖ / M)), Δ_k = u_k − r_k.

    Each client's change Δ_k from the model it was sent, r_k, is scaled down to norm at most
    M = ``clip_norm``, and the clipped models are averaged with shares s = w / Σ w. With one
    reference r for every client this is r + Σ_k s_k clip(Δ_k), Sun et al.'s update.

    Parameters
    ----------
    updates : array_like of shape (n, d)
        The clients' models.
    weights : array_like of shape (n,)
        Non-negative weights (e.g. example counts).
    clip_norm : float
        The bound M (> 0).
    reference : array_like of shape (d,) or (n, d)
        The model the server sent (to every client, or one row per client).

    Returns
    -------
    numpy.ndarray of shape (d,)
        The weighted mean of the clipped models.
    """
    U = _updates(updates)
    s = _shares(weights, U.shape[0])
    check_range("clip_norm", clip_norm, 0.0, low_open=True)
    R = _reference(reference, U)
    delta = U - R
    norms = np.sqrt(np.einsum("ij,ij->i", delta, delta))
    scale = np.minimum(1.0, clip_norm / np.where(norms > 0, norms, 1.0))
    out: np.ndarray = s @ (R + delta * scale[:, None])
    return out


def guarded_mean(
    updates: np.ndarray | Sequence[np.ndarray],
    weights: np.ndarray | Sequence[float],
    reference: np.ndarray,
    *,
    min_cosine: float = 0.0,
    clip_multiplier: float = 2.0,
    direction: np.ndarray | None = None,
    norm_scale: float | None = None,
    history: np.ndarray | None = None,
    max_norm_ratio: float = math.inf,
    max_share: float = 1.0,
) -> AggregateResult:
    """The guarded mean: a direction check, norm clipping at a multiple of the median norm, the mean.

    With Δ_k = u_k − r_k each client's change from the model it was sent:

    1. **Direction check** (the update-space detector): with m the coordinate-wise median of the
       Δ_k (Yin et al. 2018, Def. 1 — robust while fewer than half the changes are hostile),
       client k is *flagged* when cos(Δ_k, m) < ``min_cosine`` and left out. A sign-flipping
       client (Li et al. 2019; Δ_k ≈ −s·Δ_honest) has cosine ≈ −1 with the honest majority's
       median; an honest client of a non-IID federation is rarely opposed to it (measured by
       the attacks experiment: its false flags and clean cost).
    2. **Norm clipping** (Sun et al. 2019, §4 "norm thresholding") with an adaptive bound: every
       kept Δ_k is scaled down to norm ≤ M = ``clip_multiplier`` · median_j ‖Δ_j‖ (the median
       over all n, so fewer than half the clients cannot raise it), so no kept client — a model
       replacement (Bagdasaryan et al. 2020) or a liar about its size — moves the aggregate
       further than an ordinary client could.
    3. **Mean**: Σ_k s_k (r_k + clip(Δ_k)) over the kept clients, shares s = w / Σ w renormalised
       over them (FedAvg's weights).

    ``direction`` and ``norm_scale``, the median change and median norm of a larger set, replace
    the updates' own when given: pTopoFL checks each cluster against the whole round, because
    hostile clients that are a minority of the round can be half of a small cluster, whose own
    median they would then decide (measured: two sign-flippers in a cluster of four got the two
    honest members flagged). Without them, fewer than :data:`GUARD_MIN_GROUP` updates skip the
    direction check (two updates' median is their mean, which one hostile change decides). If every
    update is flagged, none is left out (the check cannot tell the majority) and only clipping applies.

    Parameters
    ----------
    updates : array_like of shape (n, d)
        The clients' models.
    weights : array_like of shape (n,)
        Non-negative weights (e.g. example counts).
    reference : array_like of shape (d,) or (n, d)
        The model the server sent (to every client, or one row per client).
    min_cosine : float
        Flag threshold in [−1, 1): a change whose cosine with the median change is below it is
        left out (0: opposed to the majority's direction).
    clip_multiplier : float
        c > 0 of the bound M = c · median norm.
    direction : array_like of shape (d,), optional
        The median change to check directions against (default: the updates' own, when n >= :data:`GUARD_MIN_GROUP`).
    norm_scale : float, optional
        The median norm that ``clip_multiplier`` and ``max_norm_ratio`` multiply (default: the updates' own).
    max_norm_ratio : float
        A change longer than this × the median norm is flagged and left out (default: never).
    max_share : float
        The largest share one kept client may have (:func:`cap_shares` over the kept clients, so
        that leaving clients out never lifts a capped client above the cap).
    history : array_like of shape (n, 2), optional
        Each client's earlier cosines, as (sum, count): the check then compares the client's mean
        cosine over this and its earlier rounds with ``min_cosine`` — a reputation, so that a
        client that was opposed to the majority in the early rounds, where honest changes agree,
        is not let back in near a fixed point of the mean, where honest changes are small and
        scattered and one round's cosine says little. It is a lifetime mean: a client honest for
        many rounds that then turns is judged on that average at first, and only the norm flag and
        the clipping bound it until its mean falls (a ×1 sign flip, whose changes look like an
        honest site's, is flagged in the early rounds only).

    Returns
    -------
    AggregateResult
        The aggregate; ``selected`` the kept rows, ``flagged`` the rows left out by the direction
        check, ``clipped`` the kept rows scaled down.
    """
    U = _updates(updates)
    n = U.shape[0]
    s = _shares(weights, n)
    check_range("min_cosine", min_cosine, -1.0, 1.0, high_open=True)
    check_range("clip_multiplier", clip_multiplier, 0.0, low_open=True)
    R = _reference(reference, U)
    delta = U - R
    norms = np.sqrt(np.einsum("ij,ij->i", delta, delta))
    own = n >= GUARD_MIN_GROUP
    med: np.ndarray | None
    if direction is not None:
        med = as_real(direction, "direction")
        if med.shape != U.shape[1:]:
            raise ValueError(f"direction must have shape ({U.shape[1]},); got shape {med.shape}")
    else:
        med = np.median(delta, axis=0) if own else None
    scale = float(norm_scale) if norm_scale is not None else float(np.median(norms))
    flagged = np.zeros(n, dtype=bool)
    cosines = np.full(n, np.nan)
    if med is not None:
        med_norm = float(np.linalg.norm(med))
        if med_norm > 0:
            cos = (delta @ med) / (np.where(norms > 0, norms, 1.0) * med_norm)
            cosines = np.where(norms > 0, cos, np.nan)
            score = cos
            if history is not None:
                H = as_real(history, "history")
                if H.shape != (n, 2):
                    raise ValueError(f"history must have shape ({n}, 2), (sum, count) per update; got shape {H.shape}")
                score = (cos + H[:, 0]) / (1.0 + H[:, 1])
            flagged = (score < min_cosine) & (norms > 0)
    if math.isfinite(max_norm_ratio):  # a zero median norm (most clients sent no change) flags every non-zero change
        flagged |= norms > max_norm_ratio * scale
    if flagged.all():  # the check cannot tell the majority: nobody is left out
        flagged[:] = False
    keep = ~flagged
    bound = clip_multiplier * scale  # 0 when most clients sent no change: every kept change is clipped to nothing
    factor = np.minimum(1.0, bound / np.where(norms > 0, norms, 1.0))
    clipped = keep & (factor < 1.0)
    sk = np.zeros(n)
    kept_w = s[keep]
    # zero-weight kept: equal shares
    sk[keep] = cap_shares(kept_w if kept_w.sum() > 0 else np.ones(kept_w.size), max_share)
    rows = R if R.ndim == 2 else np.broadcast_to(R, U.shape)
    out: np.ndarray = sk @ (rows + delta * factor[:, None])
    idx = np.arange(n)
    return AggregateResult(out, tuple(int(i) for i in idx[keep]), tuple(int(i) for i in idx[flagged]),
                           tuple(int(i) for i in idx[clipped]), tuple(float(c) for c in cosines))


def robust_aggregate(  # noqa: PLR0913 (one keyword option per rule parameter: the public entry point of every rule)
    name: str,
    vectors: np.ndarray | Sequence[np.ndarray],
    weights: np.ndarray | Sequence[float],
    *,
    reference: np.ndarray | None = None,
    f: int = 1,
    trim_fraction: float = 0.25,
    clip_norm: float = 1.0,
    m: int = 0,
    min_cosine: float = 0.0,
    clip_multiplier: float = 2.0,
    direction: np.ndarray | None = None,
    norm_scale: float | None = None,
    history: np.ndarray | None = None,
    max_norm_ratio: float = math.inf,
    max_share: float = 1.0,
) -> AggregateResult:
    """Aggregate a round's updates with rule ``name`` (see docs/internals.md#topofl.robustness.aggregators).

    Parameters
    ----------
    name : str
        One of :data:`AGGREGATORS`.
    vectors : array_like of shape (n, d)
        One row per client (its model; :func:`norm_clip` needs models and ``reference``).
    weights : array_like of shape (n,)
        Non-negative weights with a positive sum; used by ``mean``, ``multi_krum``, ``norm_clip``.
    reference : array_like of shape (d,) or (n, d), optional
        The model(s) the server sent; required by ``norm_clip``.
    f : int
        Byzantine clients tolerated by ``krum``, ``multi_krum`` and ``bulyan``; :data:`AUTO`: the
        most the rule tolerates at this n (:func:`auto_f`).
    trim_fraction : float
        β of ``trimmed_mean``.
    clip_norm : float
        M of ``norm_clip``.
    m : int
        Updates averaged by ``multi_krum``; 0 means n − f (Blanchard et al.'s choice in §5).
    min_cosine, clip_multiplier, direction, norm_scale, history, max_norm_ratio, max_share
        The parameters of ``guarded_mean`` (:func:`guarded_mean`).

    Returns
    -------
    AggregateResult
        The aggregate and the indices of the updates that entered it.
    """
    check_choice("aggregator", name, AGGREGATORS)
    U = _updates(vectors)
    n = U.shape[0]
    everyone = tuple(range(n))
    if name == "mean":
        return AggregateResult(weighted_mean(U, weights), everyone)
    _shares(weights, n)  # the weights are checked even by the rules that ignore them
    if f == AUTO:
        f = auto_f(name, n)
    if name == "median":
        return AggregateResult(coordinate_median(U), everyone)
    if name == "trimmed_mean":
        return AggregateResult(trimmed_mean(U, trim_fraction), everyone)
    if name == "krum":
        return krum(U, f)
    if name == "multi_krum":
        check_int("m", m, 0)
        return multi_krum(U, weights, f, m if m > 0 else n - f)
    if name == "bulyan":
        return bulyan(U, f)
    if reference is None:
        raise ValueError(f"{name} needs reference, the model the server sent")
    if name == "guarded_mean":
        return guarded_mean(U, weights, reference, min_cosine=min_cosine, clip_multiplier=clip_multiplier,
                            direction=direction, norm_scale=norm_scale, history=history,
                            max_norm_ratio=max_norm_ratio, max_share=max_share)
    return AggregateResult(norm_clip(U, weights, clip_norm, reference), everyone)
