"""Loss-threshold membership inference (topofl.privacy.membership)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.metrics import roc_curve

from topofl.models.linear import BinaryLogistic
from topofl.privacy.membership import (
    advantage_at_threshold,
    example_losses,
    expected_null_advantage,
    loss_threshold_attack,
)


def _draw(rng, n, w):
    X = rng.normal(size=(n, w.size))
    return X, (rng.random(n) < 1.0 / (1.0 + np.exp(-X @ w))).astype(float)


def _fit(model, X, y):
    return minimize(lambda t: model.loss_grad(t, X, y), np.zeros(model.n_params), jac=True, method="L-BFGS-B").x


def test_example_losses_by_hand():
    assert example_losses(np.array([0.8, 0.8]), np.array([1.0, 0.0])) == pytest.approx([-np.log(0.8), -np.log(0.2)])
    P = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    assert example_losses(P, np.array([1, 2]), "multiclass") == pytest.approx([-np.log(0.2), -np.log(0.8)])
    assert example_losses(np.array([1.0, 3.0]), np.array([2.0, 3.0]), "regression") == pytest.approx([1.0, 0.0])
    assert np.isfinite(example_losses(np.array([1.0]), np.array([0.0]))).all()  # clipped, not infinite
    with pytest.raises(ValueError, match="0/1 labels"):
        example_losses(np.array([0.5]), np.array([2.0]))
    with pytest.raises(ValueError, match="task must be one of"):
        example_losses(np.array([0.5]), np.array([1.0]), "ranking")
    with pytest.raises(ValueError, match="scores must have shape"):
        example_losses(np.array([0.5, 0.5]), np.array([1.0]))


def test_best_advantage_is_the_roc_optimum_and_rates_match_the_threshold():
    rng = np.random.default_rng(0)
    m, n = rng.exponential(1.0, 300), rng.exponential(1.5, 200)
    r = loss_threshold_attack(m, n)
    fpr, tpr, _ = roc_curve(np.r_[np.ones(m.size), np.zeros(n.size)], -np.r_[m, n])
    assert r.advantage == pytest.approx(np.max(tpr - fpr), abs=1e-12)
    assert r.tpr - r.fpr == pytest.approx(r.advantage, abs=1e-12)
    assert advantage_at_threshold(m, n, r.threshold) == pytest.approx(r.advantage, abs=1e-12)
    assert r.n_members == 300 and r.n_nonmembers == 200


def test_advantage_at_threshold_by_hand():
    assert advantage_at_threshold(np.array([0.1, 0.2, 0.9]), np.array([0.3, 1.0]), 0.25) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="member_losses"):
        advantage_at_threshold(np.array([]), np.array([1.0]), 0.5)


def test_expected_null_advantage_matches_simulation():
    rng = np.random.default_rng(0)
    sims = [loss_threshold_attack(rng.normal(size=150), rng.normal(size=100)).advantage for _ in range(400)]
    # asymptotic formula vs Monte Carlo (measured: 0.0809 vs 0.0801)
    assert np.mean(sims) == pytest.approx(expected_null_advantage(150, 100), rel=0.15)


@pytest.mark.parametrize("seed", range(3))
def test_no_advantage_when_the_model_never_saw_the_members(seed):
    # members and non-members drawn alike; the model is fitted on other data (measured on these seeds: advantage <= 0.04,
    # |AUC - 0.5| <= 0.005, against 0.028 expected without signal)
    rng = np.random.default_rng(seed)
    w = rng.normal(size=5)
    model = BinaryLogistic(5, 1e-3)
    theta = _fit(model, *_draw(rng, 2000, w))
    (Xm, ym), (Xn, yn) = _draw(rng, 1000, w), _draw(rng, 1000, w)
    r = loss_threshold_attack(example_losses(model.predict_scores(theta, Xm), ym), example_losses(model.predict_scores(theta, Xn), yn))
    assert r.advantage < 0.08
    assert abs(r.auc - 0.5) < 0.03
    assert r.p_value > 0.01


@pytest.mark.parametrize("seed", range(3))
def test_clear_advantage_against_an_overfit_model(seed):
    # 40 members in 50 dimensions, almost no penalty: the model interpolates its members
    # (measured on these seeds: advantage >= 0.54, AUC >= 0.69, against 0.11 expected without signal)
    rng = np.random.default_rng(seed)
    w = 0.3 * rng.normal(size=50)
    model = BinaryLogistic(50, 1e-6)
    Xm, ym = _draw(rng, 40, w)
    Xn, yn = _draw(rng, 200, w)
    theta = _fit(model, Xm, ym)
    r = loss_threshold_attack(example_losses(model.predict_scores(theta, Xm), ym), example_losses(model.predict_scores(theta, Xn), yn))
    assert r.advantage > 0.4 and r.advantage > 3 * r.null_advantage
    assert r.auc > 0.6
    assert r.p_value < 1e-6
