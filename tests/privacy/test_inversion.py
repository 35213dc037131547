"""Reconstruction attacks (topofl.privacy.inversion): closed form, DLG/iDLG, descriptor inversion."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import approx_fprime

from topofl.federation.local import sgd
from topofl.models.linear import BinaryLogistic
from topofl.privacy.inversion import (
    _matching_loss,
    chamfer_distance,
    cloud_statistics,
    descriptor_scale_ratio,
    dlg,
    infer_label_count,
    invert_single_gradient,
    logistic_update,
    match_updates,
    nearest_descriptor,
    predict_statistics,
    reconstruction_error,
    relative_chamfer,
    rescale_cloud,
    update_to_gradient,
)
from topofl.tda.descriptor import descriptor


# ---------------------------------------------------------------- one example, closed form
@pytest.mark.parametrize("l2", [0.0, 1e-3, 0.5])
@pytest.mark.parametrize("label", [0.0, 1.0])
def test_one_example_is_recovered_exactly_from_its_gradient(l2, label):
    rng = np.random.default_rng(int(10 * l2) + int(label))
    d = 7
    model = BinaryLogistic(d, l2)  # the library's own gradient, not the attack's
    for _ in range(5):
        x = rng.normal(0.0, 2.0, d)
        theta = rng.normal(0.0, 1.0, d + 1)
        g = model.grad(theta, x[None, :], np.array([label]))
        x_hat, y_hat = invert_single_gradient(g, theta, l2)
        assert np.max(np.abs(x_hat - x)) < 1e-10 * max(1.0, np.max(np.abs(x)))
        assert y_hat == label


def test_one_example_is_recovered_from_a_one_step_sgd_update():
    rng = np.random.default_rng(3)
    d, lr, l2 = 5, 0.1, 1e-3
    model = BinaryLogistic(d, l2)
    x, y = rng.normal(size=(1, d)), np.array([1.0])
    theta = rng.normal(size=d + 1)
    after = sgd(model, theta, x, y, epochs=1, lr=lr, batch_size=1, rng=np.random.default_rng(0))  # what the client sends
    x_hat, y_hat = invert_single_gradient(update_to_gradient(after - theta, lr), theta, l2)
    assert np.max(np.abs(x_hat - x[0])) < 1e-10 and y_hat == 1.0


def test_zero_bias_gradient_is_refused():
    with pytest.raises(ValueError, match="bias entry is 0"):
        invert_single_gradient(np.array([1.0, 2.0, 0.0]), np.zeros(3))
    with pytest.raises(ValueError, match="theta must have shape"):
        invert_single_gradient(np.array([1.0, 2.0, 0.5]), np.zeros(4))


def test_label_count_is_exact_at_zero_weights():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(37, 4)), (rng.random(37) < 0.3).astype(float)
    for b in (0.0, -1.3):
        theta = np.r_[np.zeros(4), b]
        g = BinaryLogistic(4, 1e-3).grad(theta, X, y)
        assert infer_label_count(g, theta, 37) == pytest.approx(y.sum(), abs=1e-10)


# ---------------------------------------------------------------- forward model and gradient
def test_logistic_update_is_gradient_descent_with_the_models_gradient():
    rng = np.random.default_rng(1)
    d, l2, lr = 4, 0.01, 0.3
    model = BinaryLogistic(d, l2)
    X, y, theta = rng.normal(size=(6, d)), rng.integers(0, 2, 6).astype(float), rng.normal(size=d + 1)
    assert np.allclose(logistic_update(theta, X, y, lr=lr, l2=l2), -lr * model.grad(theta, X, y), atol=1e-15)
    th = theta.copy()
    for _ in range(3):
        th = th - lr * model.grad(th, X, y)
    assert np.allclose(logistic_update(theta, X, y, lr=lr, steps=3, l2=l2), th - theta, atol=1e-14)


@pytest.mark.parametrize("steps", [1, 3])
@pytest.mark.parametrize("soft", [True, False])
def test_matching_loss_gradient_agrees_with_finite_differences(steps, soft):
    # A private function on purpose: the update-matching objective Σ_t ‖û_t − u_t‖² (û_t = `logistic_update`,
    # the published DLG/iDLG objective) has a hand-derived reverse-mode gradient. The public path,
    # `match_updates`, only shows a wrong gradient as a slower or failed L-BFGS reconstruction; finite
    # differences check the formula itself.
    rng = np.random.default_rng(steps)
    d, B, T, lr, l2 = 3, 2, 4, 0.4, 0.05
    X, y = rng.normal(size=(B, d)), np.array([1.0, 0.0])
    thetas = rng.normal(size=(T, d + 1))
    U = np.vstack([logistic_update(t, X, y, lr=lr, steps=steps, l2=l2) for t in thetas])
    labels = None if soft else np.array([0.3, 0.9])
    z = rng.normal(size=B * d + (B if soft else 0))
    f = lambda v: _matching_loss(v, U, thetas, B, lr, steps, l2, labels)[0]
    g = _matching_loss(z, U, thetas, B, lr, steps, l2, labels)[1]
    num = approx_fprime(z, f, 1e-7)
    assert np.max(np.abs(g - num)) < 1e-6 * max(1.0, np.max(np.abs(num)))


# ---------------------------------------------------------------- batches: DLG and iDLG
def _batch_problem(seed, d=4, B=2, T=3):
    rng = np.random.default_rng(seed)
    X, y = rng.normal(size=(B, d)), np.array([0.0, 1.0] * (B // 2))
    thetas = rng.normal(size=(T, d + 1))
    G = np.vstack([BinaryLogistic(d, 0.01).grad(t, X, y) for t in thetas])
    return X, y, thetas, G


@pytest.mark.parametrize("seed", [0, 1, 2, 4])
def test_dlg_recovers_a_batch_of_two_from_three_gradients(seed):
    # measured over these seeds: relative error <= 6e-8 (soft labels); asserted with a wide margin
    X, y, thetas, G = _batch_problem(seed)
    rec = dlg(G, thetas, 2, l2=0.01, seed=0)
    err = reconstruction_error(X, rec.X, y, rec.labels)
    assert err.relative_error < 1e-5 and err.mean_cosine > 1 - 1e-8 and err.label_accuracy == 1.0
    assert rec.loss < 1e-12


@pytest.mark.parametrize("seed", range(6))
def test_idlg_with_the_label_count_recovers_a_batch_of_two(seed):
    # measured over 20 seeds: relative error <= 9e-8 with the labels fixed by their count
    X, y, thetas, G = _batch_problem(seed)
    rec = dlg(G, thetas, 2, l2=0.01, labels=np.array([1.0, 0.0]), seed=0)  # rows are exchangeable: the order is arbitrary
    assert reconstruction_error(X, rec.X).relative_error < 1e-5


def test_one_gradient_does_not_identify_a_batch_of_two():
    # d + 1 = 5 numbers for 2·4 inputs: the match is perfect yet the batch is another one (measured >= 0.58 over 20 seeds)
    X, y, thetas, G = _batch_problem(0)
    rec = dlg(G[:1], thetas[:1], 2, l2=0.01, seed=0)
    assert rec.loss < 1e-12
    assert reconstruction_error(X, rec.X).relative_error > 0.1


@pytest.mark.parametrize("seed", [0, 1, 5])
def test_unrolled_attack_recovers_a_batch_from_two_step_updates(seed):
    # measured: relative error <= 5e-8 on these seeds
    X, y, thetas, _ = _batch_problem(seed)
    U = np.vstack([logistic_update(t, X, y, lr=0.5, steps=2, l2=0.01) for t in thetas])
    rec = match_updates(U, thetas, 2, lr=0.5, steps=2, l2=0.01, seed=0)
    assert reconstruction_error(X, rec.X).relative_error < 1e-5


def test_match_updates_starts_from_init_and_validates():
    X, y, thetas, G = _batch_problem(0)
    rec = dlg(G, thetas, 2, l2=0.01, labels=np.array([0.0, 1.0]), init=X, n_restarts=1, max_iter=5)
    assert reconstruction_error(X, rec.X).relative_error < 1e-6  # the truth is a stationary point
    with pytest.raises(ValueError, match="init must have shape"):
        dlg(G, thetas, 2, init=X[:1])
    with pytest.raises(ValueError, match="updates and thetas must have the same shape"):
        match_updates(G, thetas[:2], 2, lr=1.0)
    with pytest.raises(ValueError, match="batch_size"):
        dlg(G, thetas, 0)
    with pytest.raises(ValueError, match="all zero"):
        dlg(np.zeros_like(G), thetas, 2)
    with pytest.raises(ValueError, match="labels must lie in"):
        dlg(G, thetas, 2, labels=np.array([2.0, 0.0]))


def test_reconstruction_error_ignores_row_order():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(5, 3)), np.array([0, 1, 1, 0, 1.0])
    perm = np.array([3, 0, 4, 1, 2])
    err = reconstruction_error(X, X[perm], y, y[perm])
    assert err.relative_error == 0.0 and err.mean_cosine == pytest.approx(1.0) and err.label_accuracy == 1.0
    assert [perm[j] for j in err.assignment] == list(range(5))
    assert reconstruction_error(X, np.zeros_like(X)).relative_error == pytest.approx(1.0)
    with pytest.raises(ValueError, match="X_hat must have the shape"):
        reconstruction_error(X, X[:2])


# ---------------------------------------------------------------- descriptor channel
def test_chamfer_distance_by_hand():
    A = np.array([[0.0, 0.0], [2.0, 0.0]])
    B = np.array([[0.0, 1.0]])
    # A→B: 1 and √5; B→A: 1
    assert chamfer_distance(A, B) == pytest.approx(0.5 * ((1 + np.sqrt(5)) / 2 + 1.0))
    assert chamfer_distance(A, A[::-1]) == 0.0
    with pytest.raises(ValueError, match="dimension"):
        chamfer_distance(A, np.zeros((2, 3)))


def test_cloud_statistics_by_hand():
    X = np.array([[-1.0, 0.0], [1.0, 0.0], [0.0, -2.0], [0.0, 2.0]])  # variances 0.5 and 2
    s = cloud_statistics(X)
    assert s == pytest.approx({"n": 4.0, "rms_radius": np.sqrt(2.5), "pc1_fraction": 0.8})
    assert relative_chamfer(X, X) == 0.0


def test_nearest_descriptor_returns_the_true_cloud_when_it_is_in_the_pool():
    rng = np.random.default_rng(0)
    clouds = [rng.normal(0.0, s, (60, 3)) * np.array([1.0, a, 1.0]) for s, a in zip((0.5, 1, 1.5, 2, 1, 1), (1, 1, 1, 1, 3, 0.2), strict=True)]
    pool = np.vstack([descriptor(c, seed=k) for k, c in enumerate(clouds)])
    for k, c in enumerate(clouds):
        i = nearest_descriptor(descriptor(c, seed=k), pool)
        assert i == k and chamfer_distance(clouds[i], c) == 0.0


def test_nearest_descriptor_validates():
    with pytest.raises(ValueError, match="phi must have shape"):
        nearest_descriptor(np.zeros(3), np.zeros((4, 5)))
    with pytest.raises(ValueError, match="scale must be positive"):
        nearest_descriptor(np.zeros(2), np.ones((3, 2)), scale=np.array([1.0, 0.0]))


def test_descriptor_scale_ratio_recovers_a_rescaling():
    X = np.random.default_rng(1).normal(size=(50, 4))
    phi = descriptor(X, seed=0)
    phi3 = descriptor(3.0 * X, seed=0)
    assert descriptor_scale_ratio(phi3, phi) == pytest.approx(3.0, rel=1e-6)  # the PH library works in float32: 3e-8 measured
    Y = rescale_cloud(X, 3.0)
    assert np.allclose(Y.mean(axis=0), X.mean(axis=0)) and cloud_statistics(Y)["rms_radius"] == pytest.approx(3 * cloud_statistics(X)["rms_radius"])


def test_predict_statistics_learns_a_log_linear_relation():
    rng = np.random.default_rng(0)
    P = rng.normal(size=(200, 6))
    S = np.exp(np.c_[P @ np.array([0.5, -0.2, 0, 0, 0, 0.1]), 0.3 * P[:, 1]])
    Q = rng.normal(size=(20, 6))
    truth = np.exp(np.c_[Q @ np.array([0.5, -0.2, 0, 0, 0, 0.1]), 0.3 * Q[:, 1]])
    assert np.max(np.abs(predict_statistics(P, S, Q) / truth - 1)) < 0.01
    with pytest.raises(ValueError, match="positive"):
        predict_statistics(P, -S, Q)
