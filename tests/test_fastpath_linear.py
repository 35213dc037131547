"""The fast paths of issue 25 (linear local training, evaluation, AUC, evaluation checks, client generators made on
first use) give the bits and the rejections of the code they replaced. That code is kept here, verbatim, as the
reference: local SGD, the metrics, the evaluation and array checks and the eager client context, as they were
before; whole runs of every server method (every local optimiser, extra terms, sample weights, step budgets,
softmax and least-squares models) are compared with runs on the old code byte for byte, and the checks' verdicts on
hostile replies reason for reason."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import topofl
import topofl.federation.algorithm as algorithm_module
import topofl.federation.pool as pool_module
import topofl.federation.runner as runner_module
import topofl.federation.validation as validation_module
import topofl.metrics as metrics_module
from linear_cases import linear_model, random_labels
from topofl.data.federation import Federation
from topofl.federation.algorithm import ClientContext
from topofl.federation.local import AffineGrad, ensure_finite, sgd
from topofl.federation.pool import ClientEvaluation, client_rng
from topofl.federation.validation import (
    EVALUATION_METRICS,
    REGRESSION_METRICS,
    ArraySpec,
    ClientInfo,
    _num,
    _short,
    as_number,
    evaluation_problem,
)
from topofl.metrics import auc_score, evaluate, pooled_scores, regression_scores
from topofl.models.linear import BinaryLogistic, LeastSquares, LinearModel, SoftmaxRegression
from topofl.models.optimizers import LocalOptimizer, OptimizerSpec, epoch_batches

#: what issue 25's fast paths added to the linear models (removed for the runs on the old code)
NEW_MODEL_METHODS = ("batch_gradient", "epoch_gradient", "epoch_sgd", "_kernel_arrays", "_check_theta",
                     "evaluation_outputs", "joined_evaluation_outputs")


# ---- the code before the fast paths, verbatim -------------------------------------------------------
def _old_sgd(model, theta, X, y, *, epochs, lr, batch_size, rng, extra_grad=None, sample_weight=None,
             local_steps=0, optimizer=None):
    optimizer = optimizer if optimizer is not None else LocalOptimizer(OptimizerSpec("sgd", lr))
    native = getattr(model, "sgd", None)
    weighted = {} if sample_weight is None else {"sample_weight": np.asarray(sample_weight, dtype=np.float64)}
    if native is not None and (extra_grad is None or isinstance(extra_grad, AffineGrad)):
        return native(theta, X, y, epochs=epochs, batch_size=batch_size, rng=rng, extra=extra_grad,
                      local_steps=local_steps, optimizer=optimizer, **weighted)
    if sample_weight is not None and weighted["sample_weight"].shape != (X.shape[0],):
        raise ValueError(f"sample_weight must have shape ({X.shape[0]},); got {weighted['sample_weight'].shape}")
    theta = np.array(theta, dtype=np.float64, copy=True)
    n = X.shape[0]
    bs = max(1, min(batch_size, n))
    gradient, own = _old_gradient_step(model, theta, weighted.get("sample_weight"))
    with np.errstate(over="ignore", invalid="ignore"):  # divergence is reported below, by name
        for epoch, batches in enumerate(epoch_batches(n, bs, epochs, local_steps, rng)):
            for idx in batches:
                g = gradient(idx, X[idx], y[idx])
                if extra_grad is not None:  # into the buffer (the same sum as g + extra, in its place)
                    g = np.add(g, extra_grad(theta), out=g) if own else g + extra_grad(theta)
                optimizer.step(theta, g)
            budget = {"local_steps": local_steps} if local_steps > 0 else {"epochs": epochs}
            ensure_finite(f"local {optimizer.spec.name} (pass {epoch + 1})", theta, lr=lr, **budget, batch_size=bs)
    return theta


def _old_gradient_step(model, theta, sample_weight):
    into = getattr(model, "grad_into", None)
    if into is not None:
        buffer = np.empty(theta.size)
        if sample_weight is None:
            return (lambda idx, Xb, yb: into(buffer, theta, Xb, yb)), True
        return (lambda idx, Xb, yb: into(buffer, theta, Xb, yb, sample_weight[idx])), True
    if sample_weight is None:
        return (lambda idx, Xb, yb: model.grad(theta, Xb, yb)), False
    return (lambda idx, Xb, yb: model.grad(theta, Xb, yb, sample_weight=sample_weight[idx])), False


def _old_average_ranks(a):
    x = np.moveaxis(np.asarray(a), 0, -1)  # ranks along the last axis, one row per column of ``a``
    order = np.argsort(x, axis=-1)
    ordered = np.take_along_axis(x, order, axis=-1)
    first = np.ones(ordered.shape, dtype=bool)  # the first entry of each run of equal values (never across rows)
    first[..., 1:] = ordered[..., :-1] != ordered[..., 1:]
    starts = np.flatnonzero(first)
    counts = np.diff(starts, append=ordered.size)
    ordinal = np.broadcast_to(np.arange(1, x.shape[-1] + 1), x.shape)[first]
    ranks = np.empty(x.shape, dtype=np.float64)
    np.put_along_axis(ranks, order, np.repeat(ordinal + (counts - 1) / 2, counts).reshape(x.shape), axis=-1)
    ranks[np.isnan(x).any(axis=-1)] = np.nan
    return np.moveaxis(ranks, -1, 0)


def _old_auc_columns(pos, scores):
    ranks = _old_average_ranks(scores)
    n_pos = pos.sum(axis=0).astype(float)
    n_neg = pos.shape[0] - n_pos
    return ((ranks * pos).sum(axis=0) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def _old_auc_score(task, y, scores):
    if task == "regression" or np.unique(y).size < 2:
        return float("nan")
    if task == "binary":
        return float(_old_auc_columns((y == 1)[:, None], scores[:, None])[0])
    present = np.unique(y).astype(int)
    pos = y[:, None] == present[None, :]
    return float(_old_auc_columns(pos, scores[:, present]).mean())


def _old_classification_scores(task, y, scores, pred):
    return {"auc": _old_auc_score(task, y, scores), "accuracy": float(np.mean(pred == y))}


def _old_evaluate(model, theta, X, y):
    outputs = getattr(model, "outputs", None)
    if outputs is not None:
        loss, scores, pred = outputs(theta, X, y)
        if model.task == "regression":
            return {"auc": float("nan"), "accuracy": float("nan"), "loss": loss, **regression_scores(y, scores)}, scores
        return {**_old_classification_scores(model.task, y, scores, pred), "loss": loss}, scores
    scores = model.predict_scores(theta, X)
    loss = model.loss(theta, X, y) - model._penalty(theta)
    if model.task == "regression":
        return {"auc": float("nan"), "accuracy": float("nan"), "loss": loss, **regression_scores(y, scores)}, scores
    return {**_old_classification_scores(model.task, y, scores, model.predict(theta, X)), "loss": loss}, scores


def _old_client_context(data, state, model, rnd, seed):
    return ClientContext(data, state, model, client_rng(seed, rnd, data.client_id), rnd, seed)


def _old_evaluate_client(algorithm, ctx, message):
    theta = algorithm.client_params(ctx, message)
    return _old_evaluate(ctx.model, theta, algorithm.client_features(ctx, ctx.data.X_test), ctx.data.y_test)


def _old_pool_evaluate(self, rnd, messages):
    data = {c.client_id: c for c in self.federation.at_round(rnd)}
    out = []
    for cid in sorted(messages):
        ctx = _old_client_context(data[cid], self.states[cid], self.model, rnd, self.seed)
        metrics, scores = _old_evaluate_client(self.algorithm, ctx, messages[cid])
        out.append(ClientEvaluation(cid, metrics, ctx.data.y_test, scores))
    return out, []


def _old_array_problem(self, name, value):
    if type(value) is not np.ndarray:  # a subclass could override isfinite, dot, norm, ...
        return f"{name} must be a plain numpy array; got {type(value).__name__}"
    if value.dtype.name not in self.dtypes or value.dtype.byteorder not in "=|":
        return f"{name} must be {' or '.join(self.dtypes)}; got {value.dtype}"
    if value.ndim != len(self.shape) or any(s is not None and s != v
                                            for s, v in zip(self.shape, value.shape, strict=True)):
        want = ("(" + ", ".join("n" if s is None else str(s) for s in self.shape)
                + ("," if len(self.shape) == 1 else "") + ")")
        return f"{name} must have shape {want}; got {value.shape}"
    if value.size == 0:
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        squares = float(np.dot(value.ravel(), value.ravel()))
    if not math.isfinite(squares):   # a NaN or infinity makes the sum non-finite too: one pass when all is well
        bad = ~np.isfinite(value)
        if bad.any():
            return f"{name} holds {int(bad.sum())} non-finite value(s)"
        return (f"{name}: its sum of squares overflows {value.dtype} "
                f"(largest |value| {float(np.abs(value).max()):.3g})")
    if math.isfinite(self.low) or math.isfinite(self.high):
        lo, hi = float(value.min()), float(value.max())
        if lo < self.low or hi > self.high:
            return f"{name} must be in [{_num(self.low)}, {_num(self.high)}]; got values in [{lo:.6g}, {hi:.6g}]"
    if self.integer and not np.array_equal(value, np.round(value)):
        return f"{name} must hold integers; got {float(value[value != np.round(value)][0]):.6g}"
    return None


def _old_evaluation_problem(evaluation, info, task, n_classes):
    m = getattr(evaluation, "metrics", None)
    if not isinstance(m, Mapping):
        return f"metrics must be a mapping; got {type(m).__name__}"
    expected = EVALUATION_METRICS + (REGRESSION_METRICS if task == "regression" else ())
    values = _old_metric_values(m, expected)
    if isinstance(values, str):
        return values
    auc = values["auc"]
    problem = _old_metric_range_problem(values, task)
    if problem:
        return problem
    y, scores = getattr(evaluation, "y_true", None), getattr(evaluation, "scores", None)
    reason = _old_pooled_problem(y, scores, info.n_test, task, n_classes)
    if reason is None and y is not None and task != "regression" and math.isnan(auc) != (np.unique(y).size < 2):
        reason = f"auc={auc!r} but the pooled labels hold {np.unique(y).size} class(es)"
    return reason


def _old_metric_values(m, expected):
    missing = [k for k in expected if k not in m]
    if missing:
        return f"missing metric(s) {', '.join(missing)}"
    extra = [k for k in m if k not in expected]
    if extra:
        return f"unexpected metric {extra[0]!r}"
    values = {}
    for k in expected:
        x = as_number(m[k])
        if x is None:
            return f"{k} must be a number; got {_short(m[k])}"
        values[k] = x
    return values


def _old_metric_range_problem(values, task):
    auc, acc, loss = values["auc"], values["accuracy"], values["loss"]
    if not (math.isfinite(loss) and loss >= 0):
        return f"loss must be finite and >= 0; got {loss!r}"
    if task == "regression":
        if not (math.isnan(auc) and math.isnan(acc)):
            return f"a regression client reports no auc or accuracy (NaN); got auc={auc!r}, accuracy={acc!r}"
        if not (math.isfinite(values["mse"]) and values["mse"] >= 0):
            return f"mse must be finite and >= 0; got {values['mse']!r}"
        if not (math.isnan(values["r2"]) or values["r2"] <= 1.0):
            return f"r2 must be <= 1 (or NaN for a constant test target); got {values['r2']!r}"
    else:
        if not 0.0 <= acc <= 1.0:
            return f"accuracy must be in [0, 1]; got {acc!r}"
        if not (math.isnan(auc) or 0.0 <= auc <= 1.0):
            return f"auc must be in [0, 1] (or NaN for a single-class test split); got {auc!r}"
    return None


def _old_pooled_problem(y, scores, n, task, n_classes):
    if y is None and scores is None:
        return None
    if y is None or scores is None:
        return "pooled predictions need both y_true and scores"
    c = max(n_classes, 2)
    y_spec = ArraySpec((n,), low=0, high=c - 1, integer=True) if task != "regression" else ArraySpec((n,))
    reason = _old_array_problem(y_spec, "y_true", y)
    if reason:
        return reason.replace("must be in", "must hold class labels in") if "must be in" in reason else reason
    if task == "multiclass":
        s_spec = ArraySpec((n, c), low=0.0, high=1.0)
    elif task == "binary":
        s_spec = ArraySpec((n,), low=0.0, high=1.0)
    else:
        s_spec = ArraySpec((n,))
    return _old_array_problem(s_spec, "scores", scores)


def _old_code(m: pytest.MonkeyPatch) -> None:
    """Every run from here on goes through the code before the fast paths."""
    for name in NEW_MODEL_METHODS:
        for cls in (LinearModel, BinaryLogistic, SoftmaxRegression, LeastSquares):
            if name in cls.__dict__:
                m.delattr(cls, name)
    m.setattr(algorithm_module, "sgd", _old_sgd)
    m.setattr(pool_module, "client_context", _old_client_context)
    m.setattr(pool_module.InProcessPool, "evaluate", _old_pool_evaluate)
    m.setattr(metrics_module, "auc_score", _old_auc_score)
    m.setattr(runner_module, "_evaluation_problem",
              lambda ev, info, task, n_classes, values_checked: _old_evaluation_problem(ev, info, task, n_classes))
    m.setattr(runner_module, "pooled_values_sound", lambda *args: False)
    m.setattr(runner_module, "sound_round_pooled", lambda *args: None)
    m.setattr(validation_module, "_models_alone", lambda *args: None)
    m.setattr(ArraySpec, "problem", _old_array_problem)


# ---- helpers ------------------------------------------------------------------------------------------
_model, _labels = linear_model, random_labels


def _same(a: Any, b: Any) -> bool:
    """Equal to the byte and of the same type (floats by their bits: NaN equals NaN of the same bits, 0.0 differs
    from -0.0; a NumPy float differs from a Python float)."""
    if isinstance(a, Mapping):
        return isinstance(b, Mapping) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, z) for x, z in zip(a, b, strict=True))
    if isinstance(a, (float, np.floating, np.ndarray)):
        x, z = np.asarray(a), np.asarray(b)
        return (type(a) is type(b) and x.dtype == z.dtype and x.shape == z.shape
                and x.tobytes() == z.tobytes())
    return bool(a == b) and type(a) is type(b)


# ---- local training -------------------------------------------------------------------------------------
@settings(max_examples=120, deadline=None)
@given(task=st.sampled_from(["binary", "multiclass", "regression"]), optimizer=st.sampled_from(["sgd", "sgd-momentum", "adam"]),
       extra=st.sampled_from(["none", "prox", "offset", "both", "closure"]), weighted=st.booleans(),
       n=st.integers(1, 90), d=st.integers(1, 9), epochs=st.integers(1, 3), batch=st.sampled_from([1, 7, 32, 200]),
       local_steps=st.sampled_from([0, 0, 5]), l2=st.sampled_from([0.0, 1e-3, 0.5]), seed=st.integers(0, 2**32 - 1))
def test_local_training_is_the_old_bit_for_bit(task, optimizer, extra, weighted, n, d, epochs, batch, local_steps,
                                                l2, seed):
    rng = np.random.default_rng(seed)
    model = _model(task, d, l2)
    X, y = rng.standard_normal((n, d)), _labels(task, rng, n)
    theta0 = rng.standard_normal(model.n_params) * 0.3
    center, offset = rng.standard_normal(model.n_params), rng.standard_normal(model.n_params) * 0.1
    term = {"none": None, "prox": AffineGrad(0.1, center), "offset": AffineGrad(offset=offset),
            "both": AffineGrad(0.05, center, offset), "closure": lambda t: 0.1 * (t - center)}[extra]
    w = rng.random(n) * 2 if weighted else None
    kw = dict(epochs=epochs, lr=0.05, batch_size=batch, extra_grad=term, sample_weight=w, local_steps=local_steps)
    # the previous round's optimiser state carried in (sgd-momentum and adam continue from it)
    state = LocalOptimizer(OptimizerSpec(optimizer, 0.05)).state()
    old_opt, new_opt = (LocalOptimizer(OptimizerSpec(optimizer, 0.05), state=state) for _ in range(2))
    old = _old_sgd(model, theta0, X, y, rng=np.random.default_rng(seed % 7), optimizer=old_opt, **kw)
    new = sgd(model, theta0, X, y, rng=np.random.default_rng(seed % 7), optimizer=new_opt, **kw)
    assert _same(new, old)
    assert _same(new_opt.state(), old_opt.state())


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_local_training_diverges_with_the_old_message(task):
    model = _model(task, 3, 1e-3)
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((20, 3)) * 1e150, _labels(task, rng, 20)
    messages = []
    for train in (_old_sgd, sgd):
        with pytest.raises(FloatingPointError) as err:
            train(model, model.init(), X, y, epochs=2, lr=1e300, batch_size=8, rng=np.random.default_rng(1))
        messages.append(str(err.value))
    assert messages[0] == messages[1]


# ---- a user's subclass keeps the general path for what it changes ---------------------------------------------
@dataclass(frozen=True)
class _Strict(BinaryLogistic):
    """A subclass that changes its predictions."""

    def predict(self, theta, X):
        return (self.predict_scores(theta, X) >= 0.9).astype(np.float64)


@dataclass(frozen=True)
class _Shifted(BinaryLogistic):
    """A subclass that changes its logits (so its gradient and every output)."""

    def _logits(self, theta, X):
        return super()._logits(theta, X) + 0.25


@pytest.mark.parametrize("cls", [_Strict, _Shifted])
def test_a_subclass_that_changes_a_step_gets_the_old_results(cls):
    rng = np.random.default_rng(2)
    model = cls(4)
    X, y = rng.standard_normal((37, 4)), (rng.random(37) > 0.5).astype(float)
    theta = rng.standard_normal(model.n_params)
    assert _same(evaluate(model, theta, X, y), _old_evaluate(model, theta, X, y))
    kw = dict(epochs=2, lr=0.1, batch_size=8)
    assert _same(sgd(model, theta, X, y, rng=np.random.default_rng(1), **kw),
                 _old_sgd(model, theta, X, y, rng=np.random.default_rng(1), **kw))


# ---- evaluation -------------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(task=st.sampled_from(["binary", "multiclass", "regression"]), n=st.integers(1, 60), d=st.integers(1, 6),
       n_classes=st.integers(2, 5), scale=st.sampled_from([0.0, 1.0, 40.0, 1e3]), rounded=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_evaluation_is_the_old_bit_for_bit(task, n, d, n_classes, scale, rounded, seed):
    rng = np.random.default_rng(seed)
    model = _model(task, d, 1e-3, n_classes)
    X = rng.standard_normal((n, d))
    if rounded:  # ties in the scores
        X = np.round(X)
    y = _labels(task, rng, n, n_classes)
    theta = rng.standard_normal(model.n_params) * scale
    assert _same(evaluate(model, theta, X, y), _old_evaluate(model, theta, X, y))


@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, 50), kind=st.sampled_from(["binary", "multiclass"]), ties=st.integers(1, 6),
       nan=st.booleans(), labels=st.sampled_from(["01", "one", "odd", "nan"]), seed=st.integers(0, 2**32 - 1))
def test_auc_is_the_old_bit_for_bit(n, kind, ties, nan, labels, seed):
    rng = np.random.default_rng(seed)
    c = 2 if kind == "binary" else 4
    y = {"01": rng.integers(0, c, n), "one": np.full(n, 1), "odd": rng.choice([0, 1, 2, -0.0], n),
         "nan": rng.choice([0.0, 1.0, np.nan], n)}[labels].astype(float)
    scores = np.round(rng.random((n, c)) * ties) / ties if ties < 6 else rng.random((n, c))  # 6: no ties
    if nan and n:
        scores[rng.integers(0, n), rng.integers(0, c)] = np.nan
    s = scores[:, 1] if kind == "binary" else scores
    if kind == "multiclass" and labels in ("odd", "nan"):
        return  # class ids index the score columns: labels are class ids there
    with np.errstate(divide="ignore", invalid="ignore"):  # labels with no positive: 0 / 0, as before
        assert _same(auc_score(kind, y, s), _old_auc_score(kind, y, s))
        if kind == "binary" and n:
            pred = (s >= 0.5).astype(float)
            assert _same(pooled_scores(kind, y, s), {"pooled_auc": _old_auc_score(kind, y, s),
                                                     "pooled_accuracy": float(np.mean(pred == y))})


# ---- evaluation checks ------------------------------------------------------------------------------------
class _Fake:
    def __init__(self, metrics, y_true=None, scores=None):
        self.metrics, self.y_true, self.scores = metrics, y_true, scores


class _Sub(np.ndarray):
    pass


def _hostile_arrays(rng: np.random.Generator, shape: tuple[int, ...]) -> list[Any]:
    good = rng.random(shape)
    n = shape[0]
    out: list[Any] = [good, np.round(good * 3), good.astype(np.float32), good.astype(">f8"), good.astype(np.int64),
                      good.view(_Sub), good.tolist(), good.reshape(-1)[:-1] if good.size else good,
                      np.concatenate([good, good]), good[..., None], np.empty((0,) + shape[1:]), None, "text",
                      good * 1e200, -good, good + 1.5, np.round(good * 3) + 0.5, good.astype(np.float16),
                      np.full(shape, np.nan), np.full(shape, np.inf), np.full(shape, 1e300), good.T]
    if n:
        for bad in (np.nan, np.inf, -np.inf, 2.0, -1.0, 0.5, 1e308):
            v = good.copy()
            v.reshape(-1)[rng.integers(0, v.size)] = bad
            out.append(v)
    return out


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_evaluation_checks_refuse_what_they_refused_with_the_same_reasons(task):
    rng = np.random.default_rng(len(task))
    n, c = 9, 3 if task == "multiclass" else 2
    info = ClientInfo(4, 20, n)
    y_ok = rng.integers(0, c, n).astype(float) if task != "regression" else rng.standard_normal(n)
    s_shape = (n, c) if task == "multiclass" else (n,)
    base = {"auc": 0.7, "accuracy": 0.5, "loss": 0.3} if task != "regression" else {
        "auc": float("nan"), "accuracy": float("nan"), "loss": 0.3, "mse": 0.6, "r2": 0.1}
    metric_cases = [base, {**base, "auc": float("nan")}, {**base, "auc": 1.5}, {**base, "loss": -1.0},
                    {**base, "accuracy": True}, {**base, "extra": 1.0}, {k: v for k, v in base.items() if k != "loss"},
                    {**base, "loss": 10**400}, {**base, "loss": "x"}, {**base, "accuracy": float("nan")},
                    {**base, "mse": -1.0}, {**base, "r2": 2.0}, {**base, "auc": 0.5, "accuracy": 2.0}, "not a mapping"]
    ys = [y_ok, np.zeros(n), np.ones(n), y_ok + 0.5, y_ok + c, -y_ok - 1, *_hostile_arrays(rng, (n,))]
    ss = _hostile_arrays(rng, s_shape)
    seen = set()
    for metrics in metric_cases:
        for y in ys:
            for s in ss:
                for ev in (_Fake(metrics, y, s), _Fake(metrics), _Fake(metrics, y), _Fake(metrics, None, s)):
                    want = _old_evaluation_problem(ev, info, task, c if task != "regression" else 0)
                    got = evaluation_problem(ev, info, task, c if task != "regression" else 0)
                    assert got == want, (metrics, y, s)
                    seen.add(want)
    assert None in seen and len(seen) > 15  # sound replies and many different refusals were compared


@settings(max_examples=300, deadline=None)
@given(shape=st.sampled_from([(5,), (None,), (3, 2), (None, 2)]), low=st.sampled_from([-math.inf, 0.0, -1.0]),
       high=st.sampled_from([math.inf, 1.0, 2.0]), integer=st.booleans(),
       dtypes=st.sampled_from([("float64",), ("float64", "float32"), ("float32",)]), seed=st.integers(0, 2**32 - 1))
def test_array_checks_give_the_old_verdicts(shape, low, high, integer, dtypes, seed):
    rng = np.random.default_rng(seed)
    spec = ArraySpec(shape, low=low, high=high, integer=integer, dtypes=dtypes)
    concrete = tuple(s if s is not None else int(rng.integers(0, 6)) for s in shape)
    for value in _hostile_arrays(rng, concrete):
        assert spec.problem("x", value) == _old_array_problem(spec, "x", value)


# ---- whole runs -------------------------------------------------------------------------------------------
def _regression_federation() -> Federation:
    rng = np.random.default_rng(11)
    beta = rng.standard_normal(5)
    arrays = []
    for k in range(5):
        X = rng.standard_normal((40 + 9 * k, 5))
        Xt = rng.standard_normal((15 + k, 5))
        arrays.append((X, X @ beta + rng.standard_normal(X.shape[0]) * 0.3, Xt, Xt @ beta))
    return Federation.from_arrays(arrays, task="regression")


def _federation(scenario: str) -> Federation:
    if scenario == "regression":
        return _regression_federation()
    kw = {"n_clients": 6, "n_min": 60, "n_max": 120} if scenario == "healthcare" else {}
    return topofl.make_scenario(scenario, 0, **kw)


def _run_bytes(result: Any) -> list[Any]:
    final = [result.server_params, *(result.client_models[k] for k in sorted(result.client_models))]
    rounds = [r.as_dict() for r in result.rounds]
    failures = [f.as_dict() for f in result.failures]
    return [final, result.records, rounds, failures, result.server_logs]


RUNS = [
    ("fedavg", "healthcare", {}),
    ("fedavg", "healthcare", {"local_steps": 5, "batch_size": 16}),
    ("fedavg", "healthcare", {"client_fraction": 0.5}),
    ("fedavg", "healthcare", {"attack": "sign_flip:fraction=0.34,scale=3"}),
    ("fedavg", "healthcare", {"dp_noise_multiplier": 0.5, "dp_clip": 1.0}),
    ("fedprox", "healthcare", {"optimizer": "sgd-momentum"}),
    ("scaffold", "healthcare", {}),
    ("ditto", "healthcare", {"optimizer": "adam", "optimizer_state": "keep"}),
    ("pfedme", "healthcare", {}),
    ("perfedavg", "healthcare", {}),
    ("ifca", "healthcare", {}),
    ("local", "healthcare", {"optimizer": "sgd-momentum"}),
    ("ptopofl", "healthcare", {"topo_features": "sample_weight"}),
    ("ptopofl", "healthcare", {}),
    ("fedavg", "digits", {}),
    ("fedprox", "digits", {"optimizer": "adam"}),
    ("fedavg", "regression", {}),
    ("ditto", "regression", {"local_steps": 3}),
]


@pytest.mark.parametrize("method, scenario, options", RUNS)
def test_runs_are_the_old_runs_byte_for_byte(method, scenario, options, monkeypatch):
    fed = _federation(scenario)
    opts = dict(options)
    fraction = opts.pop("client_fraction", 1.0)
    new = topofl.simulate(fed, method, rounds=3, seed=5, client_fraction=fraction, **opts)
    with monkeypatch.context() as m:
        _old_code(m)
        old = topofl.simulate(fed, method, rounds=3, seed=5, client_fraction=fraction, **opts)
    assert _same(_run_bytes(new), _run_bytes(old))


def test_the_fast_array_checks_leave_longdouble_and_parametric_dtypes_to_the_full_checks():
    """Review of issue 25: a longdouble's sum of squares overflowing is still refused (its largest value is no
    Python float), and a parametric dtype (a fresh descriptor each time, whose id can be reused) never enters
    the set of descriptors recognised by identity — a big-endian float64 stays refused."""
    from topofl.federation.validation import _own_dtypes

    spec = ArraySpec((3,), low=0.0, dtypes=("float64", "float128"))
    assert spec.problem("x", np.array([1e200, 1e200, 1.0], dtype=np.longdouble)) == (
        "x: its sum of squares overflows float128 (largest |value| 1e+200)")
    assert _own_dtypes(("float64", "datetime64[ns]", "U3")) == frozenset({id(np.dtype("float64"))})
    spec = ArraySpec((3,), dtypes=("float64", "datetime64[ns]"))
    for _ in range(50):  # descriptors made and freed: none may pass for a float64 one
        np.dtype("datetime64[ns]")
        assert spec.problem("x", np.ones(3, dtype=">f8")) == "x must be float64 or datetime64[ns]; got >f8"


# ---- review of issue 25: what a user overrides is what runs ---------------------------------------------------
@dataclass(frozen=True)
class _ClippedGrad(BinaryLogistic):
    """Overrides the contract's ``grad`` (clips it)."""

    def grad(self, theta, X, y, sample_weight=None):
        return np.clip(super().grad(theta, X, y, sample_weight), -0.01, 0.01)


@dataclass(frozen=True)
class _DoubledLossGrad(BinaryLogistic):
    """Overrides only ``loss_grad``, the model contract's method (docs/architecture.md)."""

    def loss_grad(self, theta, X, y, sample_weight=None):
        loss, g = super().loss_grad(theta, X, y, sample_weight)
        return 2.0 * loss, 2.0 * g


@dataclass(frozen=True)
class _ThinKernel(BinaryLogistic):
    """Changes its logits and wraps the kernel without changing it: the kernel must not inline the old logits."""

    def _logits(self, theta, X):
        return super()._logits(theta, X) + 0.5

    def batch_gradient(self, theta, X, y, sample_weight=None):
        return super().batch_gradient(theta, X, y, sample_weight)


def _by_hand(model, theta, X, y, lr, epochs, batch_size, seed):
    """Plain SGD calling the model's own ``grad`` on topofl's batches."""
    from topofl.models.optimizers import epoch_batches

    theta = theta.copy()
    for batches in epoch_batches(X.shape[0], batch_size, epochs, 0, np.random.default_rng(seed)):
        for idx in batches:
            theta -= lr * model.grad(theta, X[idx], y[idx])
    return theta


@pytest.mark.parametrize("cls", [_ClippedGrad, _DoubledLossGrad, _ThinKernel])
def test_a_subclass_override_of_the_contract_is_what_trains(cls):
    rng = np.random.default_rng(4)
    model = cls(3)
    X, y = rng.standard_normal((29, 3)), (rng.random(29) > 0.5).astype(float)
    theta = rng.standard_normal(model.n_params)
    got = sgd(model, theta, X, y, epochs=2, lr=0.5, batch_size=8, rng=np.random.default_rng(7))
    np.testing.assert_allclose(got, _by_hand(model, theta, X, y, 0.5, 2, 8, 7), rtol=1e-12, atol=1e-15)
    kernel = model.batch_gradient(theta, X, y)
    idx = np.arange(10)
    np.testing.assert_allclose(kernel(idx), model.grad(theta, X[idx], y[idx]), rtol=1e-12, atol=1e-15)
    if cls is _DoubledLossGrad:
        assert model.loss(theta, X, y) == model.loss_grad(theta, X, y)[0] == 2.0 * BinaryLogistic(3).loss(theta, X, y)
        np.testing.assert_array_equal(model.grad(theta, X, y), 2.0 * BinaryLogistic(3).grad(theta, X, y))


def test_an_optimiser_subclass_step_is_called():
    from topofl.models.optimizers import LocalOptimizer, OptimizerSpec

    calls = []

    class Counting(LocalOptimizer):
        def step(self, theta, g):
            calls.append(1)
            super().step(theta, g)

    rng = np.random.default_rng(5)
    model = BinaryLogistic(3)
    X, y = rng.standard_normal((20, 3)), (rng.random(20) > 0.5).astype(float)
    plain = sgd(model, model.init(), X, y, epochs=1, lr=0.1, batch_size=8, rng=np.random.default_rng(1))
    counted = sgd(model, model.init(), X, y, epochs=1, lr=0.1, batch_size=8, rng=np.random.default_rng(1),
                  optimizer=Counting(OptimizerSpec("sgd", 0.1)))
    assert len(calls) == 3 and np.array_equal(plain, counted)
