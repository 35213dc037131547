"""Reconstruction attacks on the two channels a pTopoFL client transmits (empirical side of §3.6).

Model channel (binary logistic regression): :func:`invert_single_gradient`, :func:`dlg`,
:func:`match_updates`, :func:`infer_label_count`. Descriptor channel: :func:`nearest_descriptor`,
:func:`descriptor_scale_ratio`, :func:`predict_statistics`; errors by :func:`relative_chamfer`.
See docs/internals.md#topofl.privacy.inversion for the formulas and what each attack can recover.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment, minimize
from scipy.spatial import cKDTree
from scipy.spatial.distance import cdist
from scipy.special import expit
from threadpoolctl import threadpool_limits

from topofl._validation import as_points, as_real, check_finite, check_int, check_range
from topofl.tda.descriptor import LAYOUT

#: statistics of a point cloud that :func:`cloud_statistics` reports
CLOUD_STATISTICS = ("n", "rms_radius", "pc1_fraction")


# ================================ model channel ===============================================
def _as_vector(v: Any, field: str, size: int | None = None) -> np.ndarray:
    arr = as_real(v, field)
    if arr.ndim != 1 or (size is not None and arr.shape[0] != size):
        want = f"({size},)" if size is not None else "(n,)"
        raise ValueError(f"{field} must have shape {want}; got {arr.shape}")
    check_finite(arr, field)
    return arr


def _as_stack(v: Any, field: str) -> np.ndarray:
    """One vector or a (T, p) stack of vectors as a (T, p) array."""
    arr = as_real(v, field)
    arr = arr[None, :] if arr.ndim == 1 else arr
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] < 2:
        raise ValueError(f"{field} must be a vector of length d + 1 >= 2 or a (T, d + 1) stack of them; "
                         f"got shape {np.shape(v)}")
    check_finite(arr, field)
    return arr


def logistic_update(theta: np.ndarray, X: np.ndarray, y: np.ndarray, *, lr: float, steps: int = 1,
                    l2: float = 0.0) -> np.ndarray:
    """Update ``θ_K − θ_0`` after ``steps`` full-batch gradient steps of size ``lr`` on ``(X, y)``.

    The forward model of :func:`match_updates`: ``θ_{k+1} = θ_k − lr·∇L(θ_k)`` with ``∇L`` the
    mean log-loss gradient of :class:`topofl.models.linear.BinaryLogistic` (L2 on ``w`` only).
    With ``steps = 1`` the update is ``−lr·∇L(θ_0)``, so a one-step client reveals its gradient.

    Parameters
    ----------
    theta : array of shape (d + 1,)
        Starting parameters ``[w, b]``.
    X : array of shape (B, d)
        The batch.
    y : array of shape (B,)
        Labels in [0, 1] (soft labels allowed).
    lr : float
        Step size (> 0).
    steps : int
        Number of full-batch steps (>= 1).
    l2 : float
        Strength of the penalty ``l2/2·||w||²`` (>= 0).

    Returns
    -------
    ndarray of shape (d + 1,)
    """
    X = as_points(X, "X")
    theta = _as_vector(theta, "theta", X.shape[1] + 1)
    y = _as_vector(y, "y", X.shape[0])
    check_range("lr", lr, 0.0, low_open=True)
    check_int("steps", steps, 1)
    check_range("l2", l2, 0.0)
    d, B = X.shape[1], X.shape[0]
    th = theta.copy()
    for _ in range(steps):
        r = expit(X @ th[:d] + th[d]) - y
        g = np.concatenate([X.T @ r / B + l2 * th[:d], [r.mean()]])
        th = th - lr * g
    return th - theta


def invert_single_gradient(gradient: np.ndarray, theta: np.ndarray, l2: float = 0.0) -> tuple[np.ndarray, float]:
    """The example behind a one-example logistic-regression gradient, in closed form.

    For one example, ``∇_b = σ(w·x + b) − y`` and ``∇_w = ∇_b·x + l2·w``, so
    ``x = (∇_w − l2·w) / ∇_b`` exactly, and since ``σ ∈ (0, 1)`` the label is 1 iff ``∇_b < 0``
    (the sign rule of iDLG, Zhao et al. 2020). A client that takes one SGD step of size ``lr``
    sends ``θ − lr·∇``, so ``∇ = −update / lr`` (:func:`update_to_gradient`).

    Parameters
    ----------
    gradient : array of shape (d + 1,)
        ``[∇_w, ∇_b]`` of the mean loss (one example: the loss itself), L2 term included.
    theta : array of shape (d + 1,)
        Parameters the gradient was computed at (the server broadcast them).
    l2 : float
        The client's L2 strength (its penalty ``l2·w`` is subtracted).

    Returns
    -------
    (x, label)
        The input, shape (d,), and its label (0.0 or 1.0).
    """
    g = _as_vector(gradient, "gradient")
    if g.shape[0] < 2:
        raise ValueError(f"gradient must have length d + 1 >= 2; got {g.shape[0]}")
    theta = _as_vector(theta, "theta", g.shape[0])
    check_range("l2", l2, 0.0)
    gb = float(g[-1])
    if gb == 0.0:
        raise ValueError("gradient's bias entry is 0: σ(w·x + b) = y is impossible for a finite logit, "
                         "so this is not a one-example gradient")
    x = (g[:-1] - l2 * theta[:-1]) / gb
    return x, 1.0 if gb < 0 else 0.0


def update_to_gradient(update: np.ndarray, lr: float, steps: int = 1) -> np.ndarray:
    """The gradient an attacker reads off a model update: ``−update / (lr·steps)``.

    Exact for one full-batch step (``update = −lr·∇``); for several local steps it is the mean
    gradient along the client's path, which the naive attacker takes for the gradient at the
    broadcast parameters.
    """
    u = as_real(update, "update")
    check_finite(u, "update")
    check_range("lr", lr, 0.0, low_open=True)
    check_int("steps", steps, 1)
    return -u / (lr * steps)


def infer_label_count(gradient: np.ndarray, theta: np.ndarray, batch_size: int) -> float:
    """Number of positive labels in a batch, from its logistic gradient's bias entry.

    ``∇_b = (1/B) Σ σ(z_i) − ȳ``; when ``w = 0`` (FedAvg's first broadcast) every ``σ(z_i)`` is
    ``σ(b)``, so ``B·(σ(b) − ∇_b)`` is the number of positives exactly. At other parameters the
    mean prediction is unknown and ``σ(b)`` stands in for it (an estimate). Not rounded.
    """
    g = _as_vector(gradient, "gradient")
    theta = _as_vector(theta, "theta", g.shape[0])
    check_int("batch_size", batch_size, 1)
    return float(batch_size * (expit(theta[-1]) - g[-1]))


@dataclass(frozen=True)
class Reconstruction:
    """Result of :func:`match_updates`: the dummy batch that best matched the observations.

    ``loss`` is the matching loss ``Σ_t ||û_t − u_t||² / Σ_t ||u_t||²`` of the best restart (the
    attacker sees it; it does not need the truth), ``labels`` are soft labels in [0, 1];
    ``n_restarts`` starts were run and the objective was evaluated ``n_evaluations`` times.
    """

    X: np.ndarray
    labels: np.ndarray
    loss: float
    n_restarts: int
    n_evaluations: int


def _matching_loss(
    z: np.ndarray, updates: np.ndarray, thetas: np.ndarray, B: int, lr: float, steps: int, l2: float,
    labels: np.ndarray | None,
) -> tuple[float, np.ndarray]:
    """Loss ``Σ_t ||û_t − u_t||²`` (unnormalised) and its gradient in ``z = [X.ravel(), v]``.

    Vectorised over the T observations: ``W`` holds the T weight vectors as rows. Reverse mode
    through the steps: with ``a = ∂L/∂θ_{k+1}``, step ``k`` adds ``−lr·(∂G/∂X)ᵀa`` to the input
    gradient and sets ``a ← a − lr·H_k a`` (``H_k`` the Hessian of the mean loss at ``θ_k``).
    """
    d = thetas.shape[1] - 1
    X = z[: B * d].reshape(B, d)
    yh = expit(z[B * d:]) if labels is None else labels
    th = thetas.copy()
    cache = []
    for _ in range(steps):
        W, b = th[:, :d], th[:, d]
        s = expit(X @ W.T + b)  # (B, T)
        r = s - yh[:, None]
        G = np.concatenate([(X.T @ r).T / B + l2 * W, r.mean(axis=0)[:, None]], axis=1)
        cache.append((W, s, r))
        th = th - lr * G
    e = (th - thetas) - updates
    loss = float((e * e).sum())
    a = 2.0 * e
    gX = np.zeros_like(X)
    gy = np.zeros(B)
    for W, s, r in reversed(cache):
        sq = s * (1.0 - s) * (X @ a[:, :d].T + a[:, d])  # s'_i · (a_w·x_i + a_b), (B, T)
        gX -= lr / B * (r @ a[:, :d] + sq @ W)
        gy += lr / B * (X @ a[:, :d].T + a[:, d]).sum(axis=1)
        Ha = np.concatenate([(X.T @ sq).T / B + l2 * a[:, :d], sq.sum(axis=0)[:, None] / B], axis=1)
        a = a - lr * Ha
    if labels is None:
        return loss, np.concatenate([gX.ravel(), gy * yh * (1.0 - yh)])
    return loss, gX.ravel()


def match_updates(  # noqa: PLR0913 (the attack's user-facing keyword options)
    updates: np.ndarray,
    thetas: np.ndarray,
    batch_size: int,
    *,
    lr: float,
    steps: int = 1,
    l2: float = 0.0,
    labels: np.ndarray | None = None,
    n_restarts: int = 4,
    max_iter: int = 3000,
    init_scale: float = 1.0,
    seed: int = 0,
    tol: float = 1e-12,
    init: np.ndarray | None = None,
) -> Reconstruction:
    """Reconstruct a batch from model updates by matching them (DLG on updates; Zhu et al. 2019).

    For a client that trains locally before sending, this is the unrolled attack of Geiping et al. 2020.

    The attacker knows the parameters it broadcast (``thetas``), the client's local rule
    (``steps`` full-batch gradient steps of size ``lr`` with L2 strength ``l2``: see
    :func:`logistic_update`) and the batch size, and minimises
    ``Σ_t ||logistic_update(θ_t, X̂, ŷ) − u_t||² / Σ_t ||u_t||²`` over dummy inputs ``X̂`` and
    soft labels ``ŷ = σ(v)`` (or over ``X̂`` alone when ``labels`` are given, e.g. inferred as in
    iDLG) with L-BFGS and an analytic gradient, keeping the best of ``n_restarts`` random starts
    ``X̂ ~ N(0, init_scale²)``.

    Parameters
    ----------
    updates : array of shape (T, d + 1) or (d + 1,)
        Observed updates ``θ_after − θ_t``, one per observation (round).
    thetas : array of the same shape
        The parameters each update started from.
    batch_size : int
        Rows of the client's batch (B >= 1).
    lr, steps, l2
        The client's local rule, as in :func:`logistic_update`.
    labels : array of shape (B,), optional
        Known labels in [0, 1]; otherwise they are optimised.
    n_restarts, max_iter, init_scale, seed
        Random starts, L-BFGS iterations per start, scale and seed of the starts.
    tol : float
        Stop restarting once a start matches to this loss (the attacker sees the loss: a
        match this close is taken as found).
    init : array of shape (B, d), optional
        Inputs of the first start (e.g. a cheaper attack's reconstruction); the others are random.

    Returns
    -------
    Reconstruction
    """
    U = _as_stack(updates, "updates")
    T = _as_stack(thetas, "thetas")
    if U.shape != T.shape:
        raise ValueError(f"updates and thetas must have the same shape; got {U.shape} and {T.shape}")
    check_int("batch_size", batch_size, 1)
    check_range("lr", lr, 0.0, low_open=True)
    check_int("steps", steps, 1)
    check_range("l2", l2, 0.0)
    check_int("n_restarts", n_restarts, 1)
    check_int("max_iter", max_iter, 1)
    check_range("init_scale", init_scale, 0.0, low_open=True)
    check_range("tol", tol, 0.0)
    norm = float((U * U).sum())
    if norm == 0.0:
        raise ValueError("updates are all zero: there is nothing to match")
    y_fixed = None
    if labels is not None:
        y_fixed = _as_vector(labels, "labels", batch_size)
        if np.any((y_fixed < 0) | (y_fixed > 1)):
            raise ValueError(f"labels must lie in [0, 1]; got values in [{y_fixed.min():.3g}, {y_fixed.max():.3g}]")
    B, d = batch_size, U.shape[1] - 1
    start = None if init is None else as_points(init, "init")
    if start is not None and start.shape != (B, d):
        raise ValueError(f"init must have shape ({B}, {d}); got {start.shape}")
    rng = np.random.default_rng(seed)

    def fun(z: np.ndarray) -> tuple[float, np.ndarray]:
        loss, grad = _matching_loss(z, U, T, B, lr, steps, l2, y_fixed)
        return loss / norm, grad / norm

    best, evaluations, restarts = None, 0, 0
    # the matrices are small: BLAS threads only add overhead (20x slower measured on 2 busy cores)
    with threadpool_limits(limits=1):
        while restarts < n_restarts and (best is None or best.fun > tol):
            z0 = rng.normal(0.0, init_scale, B * d)
            if start is not None and restarts == 0:
                z0 = start.ravel().copy()
            if y_fixed is None:
                z0 = np.concatenate([z0, rng.normal(0.0, 1.0, B)])
            with np.errstate(over="ignore"):
                res = minimize(fun, z0, jac=True, method="L-BFGS-B",
                               options={"maxiter": max_iter, "ftol": 1e-16, "gtol": 1e-12})
            restarts, evaluations = restarts + 1, evaluations + int(res.nfev)
            if best is None or res.fun < best.fun:
                best = res
    assert best is not None
    X_hat = best.x[: B * d].reshape(B, d)
    y_hat = expit(best.x[B * d:]) if y_fixed is None else y_fixed.copy()
    return Reconstruction(X_hat, y_hat, float(best.fun), restarts, evaluations)


def dlg(gradients: np.ndarray, thetas: np.ndarray, batch_size: int, *, l2: float = 0.0,
        **options: Any) -> Reconstruction:
    """DLG (Zhu et al. 2019) on logistic-regression gradients: :func:`match_updates` with one step.

    A gradient ``g`` is the update ``−g`` of one step of size 1, so matching updates matches
    gradients. ``options`` are those of :func:`match_updates` (``labels``, ``n_restarts``, …).
    """
    G = _as_stack(gradients, "gradients")
    return match_updates(-G, thetas, batch_size, lr=1.0, steps=1, l2=l2, **options)


@dataclass(frozen=True)
class ReconstructionError:
    """Errors of a reconstructed batch after the best matching of its rows to the true ones.

    ``relative_error`` = ``||X̂_π − X||_F / ||X||_F`` (0: exact; 1: as far as guessing zeros),
    ``mean_cosine`` the mean cosine similarity of matched rows, ``label_accuracy`` the share of
    matched rows whose rounded soft label is right (NaN without labels), ``assignment[i]`` the
    reconstructed row matched to true row ``i``.
    """

    relative_error: float
    mean_cosine: float
    label_accuracy: float
    assignment: tuple[int, ...]


def reconstruction_error(
    X_true: np.ndarray, X_hat: np.ndarray, y_true: np.ndarray | None = None, y_hat: np.ndarray | None = None,
) -> ReconstructionError:
    """Relative L2 error and cosine similarity after matching rows (Hungarian algorithm).

    The order of a batch is not identifiable from its gradient, so rows are matched by
    :func:`scipy.optimize.linear_sum_assignment` on squared distances before errors are taken.
    """
    X_true = as_points(X_true, "X_true")
    X_hat = as_points(X_hat, "X_hat")
    if X_hat.shape != X_true.shape:
        raise ValueError(f"X_hat must have the shape of X_true {X_true.shape}; got {X_hat.shape}")
    total = float(np.linalg.norm(X_true))
    if total == 0.0:
        raise ValueError("X_true is all zeros: a relative error is undefined")
    rows, cols = linear_sum_assignment(cdist(X_true, X_hat, "sqeuclidean"))
    matched = X_hat[cols]
    rel = float(np.linalg.norm(matched - X_true)) / total
    norms = np.linalg.norm(X_true, axis=1) * np.linalg.norm(matched, axis=1)
    cos = np.where(norms > 0, np.einsum("ij,ij->i", X_true, matched) / np.where(norms > 0, norms, 1.0), 0.0)
    acc = float("nan")
    if y_true is not None and y_hat is not None:
        yt = _as_vector(y_true, "y_true", X_true.shape[0])
        yh = _as_vector(y_hat, "y_hat", X_true.shape[0])
        acc = float(np.mean(np.round(yh[cols]) == yt))
    return ReconstructionError(rel, float(cos.mean()), acc, tuple(int(c) for c in cols[np.argsort(rows)]))


# ================================ descriptor channel ==========================================
def chamfer_distance(A: np.ndarray, B: np.ndarray) -> float:
    """Symmetric Chamfer distance: the mean of the two mean nearest-neighbour distances.

    ``½·(mean_{a∈A} min_{b∈B} ||a − b|| + mean_{b∈B} min_{a∈A} ||a − b||)``; 0 iff the clouds
    hold the same points (as sets). Clouds may differ in size, not in dimension.
    """
    A = as_points(A, "A")
    B = as_points(B, "B")
    if A.shape[1] != B.shape[1]:
        raise ValueError(f"B must have the dimension of A ({A.shape[1]}); got {B.shape[1]}")
    da, _ = cKDTree(B).query(A)
    db, _ = cKDTree(A).query(B)
    return 0.5 * (float(np.mean(da)) + float(np.mean(db)))


def cloud_statistics(X: np.ndarray) -> dict[str, float]:
    """Summary statistics an attacker may want from a client's cloud.

    ``n`` (number of rows), ``rms_radius`` (root mean squared distance to the centroid: the
    scale) and ``pc1_fraction`` (share of the total variance along the first principal axis: the
    shape of the spread; 1/d for isotropic data, 1 for points on a line).
    """
    X = as_points(X, "X", min_points=2)
    C = X - X.mean(axis=0)
    ev = np.linalg.eigvalsh(C.T @ C / X.shape[0])
    total = float(ev.sum())
    return {"n": float(X.shape[0]), "rms_radius": float(np.sqrt(max(total, 0.0))),
            "pc1_fraction": float(ev[-1] / total) if total > 0 else 1.0}


def relative_chamfer(true: np.ndarray, reconstructed: np.ndarray) -> float:
    """Chamfer distance between the clouds divided by the true cloud's RMS radius (scale-free)."""
    radius = cloud_statistics(true)["rms_radius"]
    if radius == 0.0:
        raise ValueError("true cloud has zero spread: a relative error is undefined")
    return chamfer_distance(true, reconstructed) / radius


def _pool_matrix(pool: np.ndarray, phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    P = as_real(pool, "pool")
    if P.ndim != 2 or P.shape[0] == 0:
        raise ValueError(f"pool must be a non-empty (K, m) matrix of descriptors; got shape {P.shape}")
    check_finite(P, "pool")
    v = _as_vector(phi, "phi", P.shape[1])
    return P, v


def nearest_descriptor(phi: np.ndarray, pool: np.ndarray, scale: np.ndarray | None = None) -> int:
    """Index of the pool descriptor nearest to ``phi`` (the nearest-neighbour inversion attack).

    The attacker holds candidate clouds and their descriptors (``pool``, shape (K, m)) and
    returns the candidate whose descriptor is closest in Euclidean distance after dividing each
    coordinate by ``scale`` (default: the pool's standard deviation, 1 where it is 0, so that
    counts, entropies and amplitudes weigh alike). A candidate with an identical descriptor —
    e.g. the true cloud itself — is at distance 0 and is returned (the first such one).
    """
    P, v = _pool_matrix(pool, phi)
    if scale is None:
        sd = P.std(axis=0)
        s = np.where(sd > 0, sd, 1.0)
    else:
        s = _as_vector(scale, "scale", P.shape[1])
        if np.any(s <= 0):
            raise ValueError("scale must be positive in every coordinate")
    dist = np.sqrt((((P - v) / s) ** 2).sum(axis=1))
    return int(np.argmin(dist))


def descriptor_scale_ratio(phi_target: np.ndarray, phi_source: np.ndarray) -> float:
    """Factor ``s`` such that ``s·X_source`` has the target's H0 amplitude (Eq. 5's A_0).

    Scaling a cloud by ``s`` scales every persistence by ``s`` (Rips filtrations are metric), so
    ``A_0`` scales by ``s`` while entropies and Betti curves (on rescaled thresholds) do not
    change; the ratio of amplitudes is the attacker's estimate of the relative scale. 1.0 when the
    source's amplitude is 0.
    """
    t = _as_vector(phi_target, "phi_target", len(LAYOUT))
    s = _as_vector(phi_source, "phi_source", len(LAYOUT))
    i = LAYOUT.index("h0_amplitude")
    return float(t[i] / s[i]) if s[i] > 0 else 1.0


def rescale_cloud(X: np.ndarray, factor: float) -> np.ndarray:
    """``X`` scaled by ``factor`` about its centroid (the centroid is kept: φ cannot see it)."""
    X = as_points(X, "X")
    check_range("factor", factor, 0.0, low_open=True)
    c = X.mean(axis=0)
    out: np.ndarray = c + factor * (X - c)
    return out


def predict_statistics(
    pool_phi: np.ndarray, pool_stats: np.ndarray, phi: np.ndarray,
    alphas: Sequence[float] = tuple(np.logspace(-3, 3, 13)),
) -> np.ndarray:
    """Predict positive cloud statistics from descriptors by ridge regression over a public pool.

    Fits ``log(statistic)`` on standardised descriptors of the pool (scikit-learn's
    ``RidgeCV``, ``alpha`` by efficient leave-one-out among ``alphas``) and predicts for the
    target descriptors ``phi``; the log makes errors relative.

    Parameters
    ----------
    pool_phi : array of shape (K, m)
    pool_stats : array of shape (K, s)
        Positive statistics of the pool clouds (e.g. from :func:`cloud_statistics`).
    phi : array of shape (M, m)
        Descriptors of the clouds under attack.

    Returns
    -------
    ndarray of shape (M, s)
    """
    from sklearn.linear_model import RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    P = as_real(pool_phi, "pool_phi")
    S = as_real(pool_stats, "pool_stats")
    Q = as_real(phi, "phi")
    if (P.ndim != 2 or S.ndim != 2 or Q.ndim != 2 or S.shape[0] != P.shape[0] or Q.shape[1] != P.shape[1]
            or P.shape[0] < 3):
        raise ValueError("pool_phi (K, m) with K >= 3, pool_stats (K, s) and phi (M, m) must agree; "
                         f"got {P.shape}, {S.shape}, {Q.shape}")
    for name, arr in (("pool_phi", P), ("pool_stats", S), ("phi", Q)):
        check_finite(arr, name)
    if np.any(S <= 0):
        raise ValueError("pool_stats must be positive (they are regressed on a log scale)")
    model = make_pipeline(StandardScaler(), RidgeCV(alphas=np.asarray(alphas, dtype=float)))
    model.fit(P, np.log(S))
    out: np.ndarray = np.exp(model.predict(Q)).reshape(Q.shape[0], S.shape[1])
    return out
