"""The linear models' loss-free gradient, gradient-free loss and in-place gradient buffer (issue 25) give the
bits of the code they replaced: ``grad`` was ``loss_grad(...)[1]`` and ``loss`` ``loss_grad(...)[0]``, the
gradient was a concatenation, and local SGD made a new gradient array every step. The old code is kept here,
verbatim, as the reference."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import topofl
from linear_cases import linear_model, random_labels
from topofl.federation.local import AffineGrad, sgd
from topofl.models.linear import BinaryLogistic, LinearModel, SoftmaxRegression, _special, _weigh
from topofl.models.optimizers import LocalOptimizer, OptimizerSpec, epoch_batches


# ---- the code before issue 25, verbatim ---------------------------------------------------------
def _old_pack_grad(self, X, dlogits, theta):
    n = X.shape[0]
    gW = X.T @ dlogits / n
    gb = dlogits.mean(axis=0)
    g = np.concatenate([gW.ravel(), gb])
    g[: self.n_features * self.n_outputs] += self.l2 * theta[: self.n_features * self.n_outputs]
    return g


def _old_loss_grad(model, theta, X, y, sample_weight=None):
    if isinstance(model, BinaryLogistic):
        sp = _special()
        z = model._logits(theta, X)[:, 0]
        per_sample = y * sp.log_expit(z) + (1.0 - y) * sp.log_expit(-z)
        loss = -float(np.mean(_weigh(per_sample, sample_weight))) + model._penalty(theta)
        return loss, _old_pack_grad(model, X, _weigh((sp.expit(z) - y)[:, None], sample_weight), theta)
    if isinstance(model, SoftmaxRegression):
        Z = model._logits(theta, X)
        idx = y.astype(np.int64)
        lse = _special().logsumexp(Z, axis=1)
        loss = float(np.mean(_weigh(lse - Z[np.arange(len(idx)), idx], sample_weight))) + model._penalty(theta)
        P = np.exp(Z - lse[:, None])
        P[np.arange(len(idx)), idx] -= 1.0
        return loss, _old_pack_grad(model, X, _weigh(P, sample_weight), theta)
    r = model._logits(theta, X)[:, 0] - y
    return (0.5 * float(r @ _weigh(r, sample_weight)) / len(r) + model._penalty(theta),
            _old_pack_grad(model, X, _weigh(r[:, None], sample_weight), theta))


def _old_grad(self, theta, X, y, sample_weight=None):
    return _old_loss_grad(self, theta, X, y, sample_weight)[1]


def _old_loss(self, theta, X, y):
    return _old_loss_grad(self, theta, X, y)[0]


def _old_sgd(model, theta, X, y, *, epochs, lr, batch_size, rng, extra_grad=None, sample_weight=None,
             local_steps=0, optimizer=None):
    optimizer = optimizer if optimizer is not None else LocalOptimizer(OptimizerSpec("sgd", lr))
    theta = np.array(theta, dtype=np.float64, copy=True)
    n = X.shape[0]
    bs = max(1, min(batch_size, n))
    with np.errstate(over="ignore", invalid="ignore"):
        for batches in epoch_batches(n, bs, epochs, local_steps, rng):
            for idx in batches:
                g = (_old_grad(model, theta, X[idx], y[idx]) if sample_weight is None
                     else _old_grad(model, theta, X[idx], y[idx], sample_weight=sample_weight[idx]))
                if extra_grad is not None:
                    g = g + extra_grad(theta)
                optimizer.step(theta, g)
    return theta


# ---- gradients ------------------------------------------------------------------------------------
_model, _labels = linear_model, random_labels


@settings(max_examples=150, deadline=None)
@given(task=st.sampled_from(["binary", "multiclass", "regression"]), n=st.integers(1, 40), d=st.integers(1, 12),
       n_classes=st.integers(2, 5), l2=st.sampled_from([0.0, 1e-3, 0.7]), weighted=st.booleans(),
       scale=st.sampled_from([0.0, 1.0, 30.0]), seed=st.integers(0, 2**32 - 1))
def test_the_loss_free_gradient_and_the_gradient_free_loss_are_the_old_ones_bit_for_bit(task, n, d, n_classes, l2, weighted, scale, seed):
    rng = np.random.default_rng(seed)
    model = _model(task, d, l2, n_classes)
    X = rng.standard_normal((n, d)) * (1 + scale)
    if seed % 3 == 0:  # ties and exact zeros in the inputs
        X = np.round(X)
    y = _labels(task, rng, n, n_classes)
    theta = rng.standard_normal(model.n_params) * scale
    w = rng.random(n) * 2 if weighted else None
    old_loss, old = _old_loss_grad(model, theta, X, y, w)
    assert np.array_equal(model.grad(theta, X, y, w), old)
    new_loss, new = model.loss_grad(theta, X, y, w)
    assert np.array_equal(new, old) and new_loss == old_loss
    buffer = np.full(model.n_params, np.nan)
    assert model.grad_into(buffer, theta, X, y, w) is buffer and np.array_equal(buffer, old)
    assert model.loss(theta, X, y) == _old_loss_grad(model, theta, X, y)[0]  # the loss without the gradient


def test_grad_into_refuses_a_buffer_of_the_wrong_shape_or_dtype():
    model = BinaryLogistic(3)
    X, y = np.zeros((2, 3)), np.zeros(2)
    with pytest.raises(ValueError, match="float64 vector of shape"):
        model.grad_into(np.empty(3), model.init(), X, y)
    with pytest.raises(ValueError, match="float64 vector of shape"):
        model.grad_into(np.empty(4, dtype=np.float32), model.init(), X, y)


# ---- local training ------------------------------------------------------------------------------
@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
@pytest.mark.parametrize("optimizer", ["sgd", "sgd-momentum", "adam"])
@pytest.mark.parametrize("extra", ["none", "prox", "offset", "both"])
def test_local_sgd_iterates_are_the_old_ones_bit_for_bit(task, optimizer, extra):
    rng = np.random.default_rng(abs(hash((task, optimizer, extra))) % 2**32)
    d = 6
    model = _model(task, d, 1e-3)
    for trial in range(6):
        n = int(rng.integers(1, 90))
        X, y = rng.standard_normal((n, d)), _labels(task, rng, n)
        theta0 = rng.standard_normal(model.n_params) * 0.3
        center = rng.standard_normal(model.n_params)
        offset = rng.standard_normal(model.n_params) * 0.1
        term = {"none": None, "prox": AffineGrad(0.1, center), "offset": AffineGrad(offset=offset),
                "both": AffineGrad(0.05, center, offset)}[extra]
        w = rng.random(n) * 2 if trial % 2 else None
        kw = dict(epochs=int(rng.integers(1, 4)), lr=0.05, batch_size=int(rng.choice([1, 7, 32, n + 5])),
                  extra_grad=term, sample_weight=w, local_steps=int(rng.choice([0, 0, 5])))
        spec = OptimizerSpec(optimizer, 0.05)
        old_opt, new_opt = LocalOptimizer(spec), LocalOptimizer(spec)
        old = _old_sgd(model, theta0, X, y, rng=np.random.default_rng(trial), optimizer=old_opt, **kw)
        new = sgd(model, theta0, X, y, rng=np.random.default_rng(trial), optimizer=new_opt, **kw)
        assert np.array_equal(new, old), (trial, kw)
        old_state, new_state = old_opt.state(), new_opt.state()
        assert old_state.keys() == new_state.keys() and old_state.get("t") == new_state.get("t")
        for k, v in old_state.get("buffers", {}).items():
            assert np.array_equal(new_state["buffers"][k], v)


# ---- whole runs ----------------------------------------------------------------------------------
def _old_code(monkeypatch):
    """The linear models as they were: ``grad`` and ``loss`` through ``loss_grad``, a concatenated gradient, and
    no ``grad_into`` (local SGD then makes a new gradient array every step, as it did)."""
    monkeypatch.setattr(LinearModel, "_pack_grad", _old_pack_grad)
    monkeypatch.setattr(LinearModel, "grad", _old_grad)
    monkeypatch.setattr(LinearModel, "loss", _old_loss)
    monkeypatch.delattr(LinearModel, "grad_into")
    monkeypatch.delattr(LinearModel, "batch_gradient")  # issue 25's later kernels, built on the new code
    monkeypatch.delattr(LinearModel, "evaluation_outputs")


def _final(history):
    return [history.server_params, *(history.client_models[k] for k in sorted(history.client_models))]


@pytest.mark.parametrize("method, scenario, options", [
    ("fedavg", "healthcare", {}),
    ("fedprox", "healthcare", {"optimizer": "sgd-momentum"}),
    ("scaffold", "healthcare", {}),
    ("ditto", "healthcare", {"optimizer": "adam"}),
    ("pfedme", "healthcare", {}),
    ("perfedavg", "healthcare", {}),
    ("ptopofl", "healthcare", {"topo_features": "sample_weight"}),
    ("fedavg", "digits", {}),
])
def test_runs_are_the_old_runs_bit_for_bit(method, scenario, options, monkeypatch):
    kw = {"n_clients": 6, "n_min": 60, "n_max": 120} if scenario == "healthcare" else {}
    fed = topofl.make_scenario(scenario, 0, **kw)
    new = topofl.simulate(fed, method, rounds=2, seed=3, **options)
    with monkeypatch.context() as m:
        _old_code(m)
        old = topofl.simulate(fed, method, rounds=2, seed=3, **options)
    for a, b in zip(_final(new), _final(old), strict=True):
        assert np.array_equal(a, b)
    for key in ("auc", "accuracy", "loss"):
        assert np.array_equal([getattr(r, key) for r in new.rounds], [getattr(r, key) for r in old.rounds], equal_nan=True)
        assert np.array_equal([r[key] for r in new.records], [r[key] for r in old.records], equal_nan=True)
