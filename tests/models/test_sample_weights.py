"""Per-sample weights of the local loss (the hook behind pTopoFL's topo_features="sample_weight"):
the weighted mean loss (1/n) Σ w_i ℓ_i of every model and the SGD loops that train on it."""
from __future__ import annotations

import numpy as np
import pytest

from topofl.federation.local import sgd
from topofl.models.linear import BinaryLogistic, LeastSquares, SoftmaxRegression

RNG = np.random.default_rng(5)
X = RNG.standard_normal((6, 3))
LABELS = {"binary": (RNG.random(6) > 0.5).astype(float), "multiclass": RNG.integers(0, 3, 6).astype(float),
          "regression": RNG.standard_normal(6)}
MODELS = {"binary": BinaryLogistic(3, l2=0.0), "multiclass": SoftmaxRegression(3, l2=0.0, n_classes=3), "regression": LeastSquares(3, l2=0.0)}


@pytest.mark.parametrize("task", sorted(MODELS))
def test_linear_weighted_loss_is_the_loss_of_repeated_rows(task):
    model, y = MODELS[task], LABELS[task]
    theta = RNG.standard_normal(model.n_params)
    loss, grad = model.loss_grad(theta, X, y)
    wl, wg = model.loss_grad(theta, X, y, sample_weight=np.ones(6))
    assert wl == loss and np.array_equal(wg, grad)  # weights of one change nothing, bit for bit
    counts = np.array([2, 1, 0, 3, 1, 1])  # integer weights = rows repeated, with the mean over 6 rows
    rep = np.repeat(np.arange(6), counts)
    rl, rg = model.loss_grad(theta, X[rep], y[rep])
    wl, wg = model.loss_grad(theta, X, y, sample_weight=counts.astype(float))
    assert wl == pytest.approx(rl * len(rep) / 6, rel=1e-12)
    np.testing.assert_allclose(wg, rg * len(rep) / 6, rtol=1e-12)
    np.testing.assert_allclose(model.grad(theta, X, y, sample_weight=counts.astype(float)), wg)
    with pytest.raises(ValueError, match="sample_weight must have shape"):
        model.loss_grad(theta, X, y, sample_weight=np.ones(5))


def test_sgd_with_unit_weights_is_plain_sgd_and_weights_change_it():
    model, y = MODELS["binary"], LABELS["binary"]
    kw = {"epochs": 3, "lr": 0.5, "batch_size": 4}
    plain = sgd(model, model.init(), X, y, rng=np.random.default_rng(0), **kw)
    ones = sgd(model, model.init(), X, y, rng=np.random.default_rng(0), sample_weight=np.ones(6), **kw)
    np.testing.assert_array_equal(ones, plain)
    w = np.array([5.0, 0.2, 1.0, 1.0, 0.2, 5.0])
    assert not np.allclose(sgd(model, model.init(), X, y, rng=np.random.default_rng(0), sample_weight=w, **kw), plain)
    with pytest.raises(ValueError, match="sample_weight must have shape"):
        sgd(model, model.init(), X, y, rng=np.random.default_rng(0), sample_weight=np.ones(4), **kw)


def test_torch_weighted_loss_and_native_loop_match_the_formula():
    pytest.importorskip("torch")
    from topofl.models.torch_models import small_cnn

    model = small_cnn((1, 12, 12), 3, l2=0.0, dtype="float64")
    rng = np.random.default_rng(2)
    Xi, yi = rng.standard_normal((7, 144)), rng.integers(0, 3, 7).astype(float)
    w = rng.uniform(0.2, 3.0, 7)
    theta = model.init(rng)
    loss, grad = model.loss_grad(theta, Xi, yi, sample_weight=w)
    per = [model.loss_grad(theta, Xi[i : i + 1], yi[i : i + 1]) for i in range(7)]  # one-sample means = ℓ_i, ∇ℓ_i
    assert loss == pytest.approx(sum(wi * li for wi, (li, _) in zip(w, per, strict=True)) / 7, rel=1e-10)
    np.testing.assert_allclose(grad, sum(wi * gi for wi, (_, gi) in zip(w, per, strict=True)) / 7, rtol=1e-9, atol=1e-12)
    kw = {"epochs": 2, "lr": 0.1, "batch_size": 3, "sample_weight": w}
    native = sgd(model, theta, Xi, yi, rng=np.random.default_rng(0), **kw)
    # a callable extra gradient is not an AffineGrad: the NumPy loop runs instead, through model.grad
    loop = sgd(model, theta, Xi, yi, rng=np.random.default_rng(0), extra_grad=lambda t: np.zeros_like(t), **kw)
    np.testing.assert_allclose(native, loop, rtol=1e-9, atol=1e-12)
    assert not np.allclose(native, sgd(model, theta, Xi, yi, rng=np.random.default_rng(0), epochs=2, lr=0.1, batch_size=3))
