"""Linear models on flat parameter vectors (topofl.models.linear)."""
from __future__ import annotations

import numpy as np
import pytest

from topofl.federation.local import sgd
from topofl.models import BinaryLogistic, LeastSquares, LinearModel, SoftmaxRegression, make_model


def _data(task: str, n: int = 40, d: int = 4, n_classes: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    if task == "binary":
        y = (X @ rng.standard_normal(d) + rng.normal(0, 0.5, n) > 0).astype(float)
    elif task == "multiclass":
        y = rng.integers(0, n_classes, n).astype(float)
    else:
        y = X @ rng.standard_normal(d) + 0.7 + rng.normal(0, 0.1, n)
    return X, y


def _models(d: int = 4, l2: float = 0.3):
    return [
        ("binary", BinaryLogistic(d, l2)),
        ("multiclass", SoftmaxRegression(d, l2, n_classes=3)),
        ("regression", LeastSquares(d, l2)),
    ]


def _numerical_grad(model: LinearModel, theta, X, y, h: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(theta)
    for i in range(theta.size):
        e = np.zeros_like(theta)
        e[i] = h
        g[i] = (model.loss(theta + e, X, y) - model.loss(theta - e, X, y)) / (2 * h)
    return g


@pytest.mark.parametrize("task, model", _models(), ids=lambda v: v if isinstance(v, str) else "")
def test_gradient_matches_central_differences(task, model):
    X, y = _data(task)
    theta = model.init(np.random.default_rng(1), scale=0.5)
    theta[-model.n_outputs :] = np.random.default_rng(2).normal(0, 0.5, model.n_outputs)  # non-zero intercepts
    loss, grad = model.loss_grad(theta, X, y)
    assert np.isfinite(loss)
    np.testing.assert_allclose(grad, _numerical_grad(model, theta, X, y), rtol=1e-5, atol=1e-8)
    # loss / grad are the two halves of loss_grad
    assert model.loss(theta, X, y) == loss
    np.testing.assert_array_equal(model.grad(theta, X, y), grad)


def test_n_params_and_init():
    assert BinaryLogistic(4).n_params == 5
    assert LeastSquares(4).n_params == 5
    assert SoftmaxRegression(4, n_classes=3).n_params == 15  # (4 + 1) * 3
    m = SoftmaxRegression(4, n_classes=3)
    np.testing.assert_array_equal(m.init(), np.zeros(15))
    th = m.init(np.random.default_rng(0), scale=0.1)
    assert th.shape == (15,)
    assert np.all(th[:12] != 0) and np.all(th[12:] == 0)  # weights random, intercepts zero


def test_logistic_loss_at_zero_is_log_2():
    # sigma(0) = 1/2 for every sample: -log(1/2) = log 2 whatever the labels; no penalty at theta = 0
    model = BinaryLogistic(3, l2=0.0)
    X, y = _data("binary", d=3)
    assert model.loss(np.zeros(4), X, y) == pytest.approx(np.log(2.0), abs=1e-12)
    assert BinaryLogistic(3, l2=5.0).loss(np.zeros(4), X, y) == pytest.approx(np.log(2.0), abs=1e-12)


def test_logistic_hand_values():
    model = BinaryLogistic(1, l2=2.0)
    theta = np.array([1.0, 0.0])  # w = 1, b = 0
    X = np.array([[0.0], [np.log(3.0)]])
    y = np.array([1.0, 1.0])
    # sigma(0) = 1/2, sigma(ln 3) = 3/4: loss = (ln 2 + ln(4/3)) / 2 + 2/2 * 1^2
    expected = 0.5 * (np.log(2.0) + np.log(4.0 / 3.0)) + 1.0
    assert model.loss(theta, X, y) == pytest.approx(expected, abs=1e-12)
    # grad w = mean((p - y) x) + l2 w = (0 + (-1/4) ln 3) / 2 + 2; grad b = mean(p - y) = (-1/2 - 1/4)/2
    np.testing.assert_allclose(model.grad(theta, X, y), [-np.log(3.0) / 8 + 2.0, -0.375], atol=1e-12)
    np.testing.assert_allclose(model.predict_scores(theta, X), [0.5, 0.75])
    np.testing.assert_array_equal(model.predict(theta, X), [1.0, 1.0])  # 0.5 counts as class 1


def test_softmax_loss_at_zero_is_log_c_and_layout():
    model = SoftmaxRegression(2, l2=0.0, n_classes=4)
    X, y = _data("multiclass", d=2, n_classes=4)
    assert model.loss(np.zeros(12), X, y) == pytest.approx(np.log(4.0), abs=1e-12)
    # theta = [W row-major (d x C), b (C)]
    model3 = SoftmaxRegression(2, l2=0.0, n_classes=3)
    W = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    b = np.array([0.0, 0.0, 5.0])
    theta = np.concatenate([W.ravel(), b])
    Xq = np.array([[10.0, 0.0], [0.0, 10.0], [1.0, 1.0]])
    # logits: (10, 0, 5), (0, 10, 5), (1, 1, 5)
    np.testing.assert_array_equal(model3.predict(theta, Xq), [0.0, 1.0, 2.0])
    P = model3.predict_scores(theta, Xq)
    assert P.shape == (3, 3)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    e = np.exp([1.0, 1.0, 5.0])
    np.testing.assert_allclose(P[2], e / e.sum())


def test_least_squares_hand_value():
    model = LeastSquares(2, l2=1.0)
    theta = np.array([1.0, 2.0, 0.5])  # w = (1, 2), b = 0.5
    X = np.array([[1.0, 0.0], [0.0, 1.0]])
    y = np.array([1.0, 3.0])
    # predictions 1.5, 2.5; residuals 0.5, -0.5: 0.5 * (0.25 + 0.25) / 2 + 1/2 * (1 + 4) = 0.125 + 2.5
    assert model.loss(theta, X, y) == pytest.approx(2.625, abs=1e-12)
    # grad w = X^T r / 2 + w = (0.25, -0.25) + (1, 2); grad b = mean r = 0
    np.testing.assert_allclose(model.grad(theta, X, y), [1.25, 1.75, 0.0], atol=1e-12)
    np.testing.assert_allclose(model.predict(theta, X), [1.5, 2.5])


def test_least_squares_gradient_vanishes_at_ridge_closed_form():
    X, y = _data("regression", n=60, d=4)
    l2 = 0.5
    model = LeastSquares(4, l2)
    n = X.shape[0]
    # intercept unpenalised: centre, solve (Xc^T Xc / n + l2 I) w = Xc^T yc / n, b = ybar - xbar . w
    xbar, ybar = X.mean(axis=0), y.mean()
    Xc, yc = X - xbar, y - ybar
    w = np.linalg.solve(Xc.T @ Xc / n + l2 * np.eye(4), Xc.T @ yc / n)
    theta = np.concatenate([w, [ybar - xbar @ w]])
    np.testing.assert_allclose(model.grad(theta, X, y), np.zeros(5), atol=1e-12)
    # and moving away increases the (strictly convex) loss
    assert model.loss(theta + 0.01, X, y) > model.loss(theta, X, y)


def test_least_squares_without_penalty_matches_lstsq_via_sgd():
    X, y = _data("regression", n=60, d=3, seed=3)
    model = LeastSquares(3, l2=0.0)
    ref, *_ = np.linalg.lstsq(np.c_[X, np.ones(len(y))], y, rcond=None)
    # full-batch gradient descent (batch = n, so the permutation does not matter)
    theta = sgd(model, model.init(), X, y, epochs=3000, lr=0.1, batch_size=len(y), rng=np.random.default_rng(0))
    np.testing.assert_allclose(theta, ref, atol=1e-8)
    np.testing.assert_allclose(model.grad(ref, X, y), 0.0, atol=1e-12)


@pytest.mark.parametrize("task, model", _models(), ids=lambda v: v if isinstance(v, str) else "")
def test_prediction_shapes(task, model):
    X, _ = _data(task, n=11)
    theta = model.init(np.random.default_rng(0), scale=1.0)
    pred = model.predict(theta, X)
    assert pred.shape == (11,)
    scores = model.predict_scores(theta, X)
    assert scores.shape == ((11, 3) if task == "multiclass" else (11,))
    if task == "binary":
        assert set(np.unique(pred)) <= {0.0, 1.0}
        assert np.all((scores > 0) & (scores < 1))
    if task == "multiclass":
        assert set(np.unique(pred)) <= {0.0, 1.0, 2.0}


@pytest.mark.parametrize("task, model", _models(), ids=lambda v: v if isinstance(v, str) else "")
def test_wrong_theta_shape_raises(task, model):
    X, y = _data(task)
    bad = np.zeros(model.n_params + 1)
    with pytest.raises(ValueError, match=rf"theta must have shape \({model.n_params},\)"):
        model.loss(bad, X, y)
    with pytest.raises(ValueError, match="theta must have shape"):
        model.predict(np.zeros((1, model.n_params)), X)


def test_make_model():
    m = make_model("binary", 5, l2=0.2)
    assert isinstance(m, BinaryLogistic) and m.n_features == 5 and m.l2 == 0.2 and m.task == "binary"
    m = make_model("multiclass", 5, n_classes=4)
    assert isinstance(m, SoftmaxRegression) and m.n_classes == 4 and m.n_params == 24
    assert m.task == "multiclass"
    m = make_model("regression", 2)
    assert isinstance(m, LeastSquares) and m.n_params == 3 and m.task == "regression"
    with pytest.raises(ValueError, match="task must be one of binary, multiclass, regression; got 'ranking'"):
        make_model("ranking", 3)


def test_invalid_hyperparameters_raise_naming_field():
    with pytest.raises(ValueError, match=r"^l2 must be in \[0.0, inf\); got -0.1"):
        BinaryLogistic(3, l2=-0.1)
    with pytest.raises(ValueError, match="^l2 "):
        make_model("regression", 3, l2=-1.0)
    with pytest.raises(ValueError, match="^l2 must be finite"):
        LeastSquares(3, l2=float("nan"))
    with pytest.raises(ValueError, match="^n_features "):
        LeastSquares(0)
    with pytest.raises(ValueError, match="^n_classes "):
        SoftmaxRegression(3, n_classes=1)
