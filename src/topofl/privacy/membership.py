"""Membership inference by loss threshold (Yeom et al. 2018), on arrays of predictions.

:func:`loss_threshold_attack` gives the best-threshold advantage, its AUC and a KS test;
:func:`advantage_at_threshold` Yeom et al.'s own attack; :func:`expected_null_advantage` the upward
bias without signal. See docs/internals.md#topofl.privacy.membership.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import ks_2samp

from topofl._validation import as_real, check_choice, check_finite, check_int, check_range

TASKS = ("binary", "multiclass", "regression")


def example_losses(scores: np.ndarray, y: np.ndarray, task: str = "binary", eps: float = 1e-12) -> np.ndarray:
    """Per-example losses of a model's predictions: what the loss-threshold attack looks at.

    Parameters
    ----------
    scores : array
        ``P(y = 1)`` of shape (n,) for ``"binary"``; class probabilities (n, C) for
        ``"multiclass"``; predicted values (n,) for ``"regression"``.
    y : array of shape (n,)
        Labels (0/1, class indices) or targets.
    task : {"binary", "multiclass", "regression"}
    eps : float
        Probabilities are clipped to ``[eps, 1 − eps]`` so that a confident mistake costs
        ``−log eps``, not infinity.

    Returns
    -------
    ndarray of shape (n,)
        Log-loss (cross-entropy) or squared error of each example.
    """
    check_choice("task", task, TASKS)
    check_range("eps", eps, 0.0, 0.5, low_open=True, high_open=True)
    s = as_real(scores, "scores")
    t = as_real(y, "y")
    check_finite(s, "scores")
    check_finite(t, "y")
    if t.ndim != 1 or s.shape[0] != t.shape[0] or s.ndim != (2 if task == "multiclass" else 1):
        want = "(n, C)" if task == "multiclass" else "(n,)"
        raise ValueError(f"scores must have shape {want} and y shape (n,) with the same n; got {s.shape} and {t.shape}")
    if task == "regression":
        out: np.ndarray = (s - t) ** 2
        return out
    p = np.clip(s, eps, 1.0 - eps)
    if task == "binary":
        if np.any((t != 0) & (t != 1)):
            raise ValueError("y must hold 0/1 labels for task 'binary'")
        return np.asarray(-(t * np.log(p) + (1.0 - t) * np.log1p(-p)))
    idx = t.astype(np.int64)
    if np.any(idx != t) or np.any((idx < 0) | (idx >= s.shape[1])):
        raise ValueError(f"y must hold class indices in [0, {s.shape[1] - 1}] for task 'multiclass'")
    return np.asarray(-np.log(p[np.arange(t.shape[0]), idx]))


def _losses(v: np.ndarray, field: str) -> np.ndarray:
    arr = as_real(v, field)
    if arr.ndim != 1 or arr.shape[0] == 0:
        raise ValueError(f"{field} must be a non-empty 1-D array of losses; got shape {arr.shape}")
    check_finite(arr, field)
    return arr


@dataclass(frozen=True)
class MembershipResult:
    """Outcome of :func:`loss_threshold_attack`.

    ``advantage`` is the best ``TPR − FPR`` over thresholds (guess "member" when loss ≤
    ``threshold``), ``tpr``/``fpr`` its rates, ``p_value`` the one-sided KS test of "members' losses
    are not smaller", ``auc`` the probability that a random member's loss is below a random
    non-member's (ties count half), ``null_advantage`` the best advantage expected without any
    signal at these sample sizes (:func:`expected_null_advantage`).
    """

    advantage: float
    threshold: float
    tpr: float
    fpr: float
    auc: float
    p_value: float
    null_advantage: float
    n_members: int
    n_nonmembers: int


def advantage_at_threshold(member_losses: np.ndarray, nonmember_losses: np.ndarray, threshold: float) -> float:
    """``TPR − FPR`` of guessing "member" when the loss is at most ``threshold`` (Yeom et al. 2018).

    Yeom et al.'s attack sets ``threshold`` to the model's mean training loss.
    """
    m = _losses(member_losses, "member_losses")
    n = _losses(nonmember_losses, "nonmember_losses")
    check_range("threshold", threshold)
    return float(np.mean(m <= threshold) - np.mean(n <= threshold))


def expected_null_advantage(n_members: int, n_nonmembers: int) -> float:
    """Expected best-threshold advantage when members and non-members are exchangeable.

    The best advantage is the one-sided KS statistic ``D⁺``; for large samples
    ``√(m·n/(m + n))·D⁺`` tends to the supremum of a Brownian bridge, with
    ``P(sup > x) = exp(−2x²)`` and mean ``√(π/8)`` (Smirnov 1939). So
    ``E[D⁺] ≈ √(π/8)·√((m + n)/(m·n))`` — 0.13 for 100 members and 50 non-members.
    """
    check_int("n_members", n_members, 1)
    check_int("n_nonmembers", n_nonmembers, 1)
    return float(np.sqrt(np.pi / 8.0) * np.sqrt((n_members + n_nonmembers) / (n_members * n_nonmembers)))


def loss_threshold_attack(member_losses: np.ndarray, nonmember_losses: np.ndarray) -> MembershipResult:
    """The loss-threshold membership attack at its best threshold, with its AUC and a test.

    The advantage is ``TPR − FPR`` (Yeom et al. 2018, Definition 4); its best value over all thresholds
    is the one-sided two-sample KS statistic of the two loss distributions (:func:`scipy.stats.ks_2samp`).

    Parameters
    ----------
    member_losses : array of shape (m,)
        Per-example losses of the model on records it was trained on (:func:`example_losses`).
    nonmember_losses : array of shape (n,)
        Losses on records from the same population that it was not trained on.

    Returns
    -------
    MembershipResult
    """
    from sklearn.metrics import roc_auc_score

    m = _losses(member_losses, "member_losses")
    n = _losses(nonmember_losses, "nonmember_losses")
    ks = ks_2samp(m, n, alternative="greater")  # D+ = sup_τ (F_m(τ) − F_n(τ)) = best TPR − FPR
    adv = float(ks.statistic)
    tau = float(ks.statistic_location) if adv > 0 else float(min(m.min(), n.min())) - 1.0
    auc = float(roc_auc_score(np.r_[np.ones(m.size), np.zeros(n.size)], -np.r_[m, n]))
    return MembershipResult(
        advantage=adv, threshold=tau, tpr=float(np.mean(m <= tau)), fpr=float(np.mean(n <= tau)), auc=auc,
        p_value=float(ks.pvalue), null_advantage=expected_null_advantage(m.size, n.size), n_members=int(m.size),
        n_nonmembers=int(n.size),
    )
