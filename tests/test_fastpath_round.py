"""Issue 25's later fast paths of the round give what the step-by-step code gives: each pass's rows gathered once
for the linear kernel (:meth:`LinearModel.epoch_gradient`), one schema per array sent in the server's screening,
the pooled predictions' values judged in one pass, a payload's size and the round summary's means without their
layers. Each is compared with the path it goes around, bit for bit or reason for reason."""
from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import topofl.federation.runner as runner_module
from linear_cases import linear_model, random_labels
from topofl.federation.history import nanmean, nanmean_std, nanstd
from topofl.federation.local import sgd
from topofl.federation.messages import ClientUpdate, ServerMessage, _n_bytes, _n_floats
from topofl.federation.pool import ClientEvaluation
from topofl.federation.validation import (
    ArraySpec,
    ClientInfo,
    ReplySchema,
    _evaluation_problem,
    evaluation_problem,
    pooled_values_sound,
    screen_updates,
)
from topofl.methods import build_server
from topofl.models.linear import BinaryLogistic, LeastSquares, SoftmaxRegression
from topofl.models.optimizers import epoch_batches, epoch_orders


# ---- the linear kernel on a pass's gathered rows ----------------------------------------------------------------
@settings(max_examples=80, deadline=None)
@given(task=st.sampled_from(["binary", "multiclass", "regression"]), weighted=st.booleans(),
       n=st.integers(1, 70), d=st.integers(1, 6), batch=st.integers(1, 40), epochs=st.integers(1, 3),
       local_steps=st.sampled_from([0, 1, 5]), seed=st.integers(0, 2**32 - 1))
def test_a_pass_gathered_once_gives_every_batch_gradient_bit_for_bit(task, weighted, n, d, batch, epochs,
                                                                     local_steps, seed):
    """Views of a pass's gathered rows against a gather per batch, through the same kernel: the slicing, not the
    arithmetic (which tests/test_fastpath_linear.py compares with the code before issue 25, whole runs included)."""
    rng = np.random.default_rng(seed)
    model = linear_model(task, d, 1e-3)
    X = rng.standard_normal((n, d))
    y = random_labels(task, rng, n)
    w = rng.random(n) if weighted else None
    theta = rng.standard_normal(model.n_params)
    by_index = model.batch_gradient(theta, X, y, w)
    passes = model.epoch_gradient(theta, X, y, w)
    assert passes is not None
    begin, sliced = passes
    bs = max(1, min(batch, n))
    batches = list(epoch_batches(n, batch, epochs, local_steps, np.random.default_rng(seed)))
    orders = list(epoch_orders(n, batch, epochs, local_steps, np.random.default_rng(seed)))
    assert [len(b) for b in batches] == [take for _, take in orders]
    for order_take, pass_batches in zip(orders, batches, strict=True):
        order, take = order_take
        begin(order)
        for i, idx in enumerate(pass_batches):
            assert np.array_equal(order[i * bs:(i + 1) * bs], idx)
            want = by_index(idx).copy()
            got = sliced(i * bs, min((i + 1) * bs, n))
            assert got.tobytes() == want.tobytes()
        assert take == len(pass_batches)


def test_the_gathered_kernel_reads_theta_when_called():
    rng = np.random.default_rng(3)
    model, X = BinaryLogistic(4), rng.standard_normal((12, 4))
    y = (rng.random(12) < 0.5).astype(float)
    theta = np.zeros(5)
    begin, gradient = model.epoch_gradient(theta, X, y)
    begin(np.arange(12))
    first = gradient(0, 6).copy()
    theta += 0.5   # trained in place by the caller between steps
    assert gradient(0, 6).tobytes() == model.grad(theta, X[:6], y[:6]).tobytes()
    assert first.tobytes() == model.grad(np.zeros(5), X[:6], y[:6]).tobytes()


def test_a_longdouble_penalty_keeps_its_precision():
    rng = np.random.default_rng(4)
    model, X = BinaryLogistic(200, l2=np.longdouble(1e-3)), rng.standard_normal((40, 200))
    y, theta = (rng.random(40) < 0.5).astype(float), rng.standard_normal(201)
    begin, gradient = model.epoch_gradient(theta, X, y)
    begin(np.arange(40))
    want = model.grad(theta, X[:16], y[:16])
    assert gradient(0, 16).tobytes() == want.tobytes()
    assert model.batch_gradient(theta, X, y)(np.arange(16)).tobytes() == want.tobytes()


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_array_subclasses_keep_the_per_batch_arithmetic():
    rng = np.random.default_rng(5)
    model, X = BinaryLogistic(3), rng.standard_normal((12, 3))
    y = np.ma.masked_array((rng.random(12) < 0.5).astype(float), mask=[False] * 11 + [True])
    theta = rng.standard_normal(4)
    assert model.epoch_gradient(theta, X, y) is None
    assert model.epoch_gradient(theta, np.asmatrix(X), y.data) is None
    idx = np.arange(12)
    assert model.batch_gradient(theta, X, y)(idx).tobytes() == model.grad(theta, X[idx], y[idx]).tobytes()


def test_a_step_budget_gathers_only_the_rows_it_uses():
    """With ``local_steps`` below a pass, only the batches' rows are gathered: labels shorter than the rows (which
    the batches taken never reach) train as before, one batch's step, instead of failing on the whole pass."""
    rng = np.random.default_rng(6)
    X, y = rng.standard_normal((53, 3)), (rng.random(40) < 0.5).astype(float)
    model, theta = BinaryLogistic(3), np.zeros(4)
    for seed in range(50):
        (first,) = next(epoch_batches(53, 2, 1, 1, np.random.default_rng(seed)))
        if first.max() < 40:
            break
    got = sgd(model, theta, X, y, epochs=1, lr=0.1, batch_size=2, rng=np.random.default_rng(seed), local_steps=1)
    want = theta - 0.1 * model.grad(theta, X[first], y[first])
    assert got.tobytes() == want.tobytes()


def test_a_subclass_that_changes_a_step_gets_no_gathered_kernel():
    class Mine(BinaryLogistic):
        def _dlogits(self, Z, y, sample_weight):
            return super()._dlogits(Z, y, sample_weight) * 2.0

    assert Mine(3).epoch_gradient(np.zeros(4), np.ones((5, 3)), np.ones(5)) is None
    for cls in (BinaryLogistic, LeastSquares):
        assert cls(3).epoch_gradient(np.zeros(4), np.ones((5, 3)), np.ones(5)) is not None
    assert SoftmaxRegression(3, n_classes=3).epoch_gradient(np.zeros(12), np.ones((5, 3)), np.zeros(5)) is not None


# ---- the server's screening: one schema per array sent ---------------------------------------------------------
def _round(k: int, seed: int) -> tuple[Any, dict[int, ServerMessage], dict[int, ClientInfo], list[Any]]:
    rng = np.random.default_rng(seed)
    algorithm = build_server("fedavg", {})
    algorithm.setup(BinaryLogistic(6), list(range(k)), rng)
    sent = rng.standard_normal(7)
    messages = {cid: ServerMessage(sent) for cid in range(k)}
    messages[k - 1] = ServerMessage(sent * 2.0)   # another array: another schema
    infos = {cid: ClientInfo(cid, 30, 10) for cid in range(k)}
    replies: list[Any] = []
    for cid in range(k):
        params = messages[cid].params + rng.standard_normal(7) * rng.choice([0.01, 1.0, 100.0])
        kind = rng.integers(0, 14)
        if kind == 1:
            params[rng.integers(0, 7)] = rng.choice([np.nan, np.inf])
        elif kind == 2:
            params = params[:-1]
        elif kind == 3:
            params = params.astype(np.float32)
        elif kind == 9:
            params = params * 1e160   # finite, but its sum of squares overflows
        elif kind == 10:
            params = params.astype(">f8")
        elif kind == 11:
            params = params.astype(np.int64)
        replies.append(ClientUpdate(cid, params, 31 if kind == 4 else np.int64(30) if kind == 12 else 30,
                                    descriptor=np.zeros(3) if kind == 5 else None,
                                    metrics={"x": 1.0} if kind == 6 else {}, extras={"c": params} if kind == 7 else {}))
        if kind == 8:
            replies.append(replies[-1])   # a second reply
    replies += [ClientUpdate(k + 5, np.zeros(7), 30), "not a reply"]
    return algorithm, messages, infos, replies


@pytest.mark.parametrize("seed", range(6))
def test_one_schema_per_array_sent_gives_the_same_verdicts(seed):
    algorithm, messages, infos, replies = _round(40, seed)
    made = []
    params_spec = algorithm.params_spec

    def counted(n):
        made.append(n)
        return params_spec(n)

    algorithm.params_spec = counted   # called by the library's reply_schema, once per schema made
    valid, rejected = screen_updates(algorithm, replies, messages, infos)
    shared_calls = len(made)
    made.clear()
    algorithm.schema_per_params = lambda: False
    valid_each, rejected_each = screen_updates(algorithm, replies, messages, infos)
    assert rejected == rejected_each and len(rejected) > 5
    assert [(u.client_id, u.params.tobytes()) for u in valid] == [(u.client_id, u.params.tobytes()) for u in valid_each]
    assert shared_calls == 2 and len(made) > 30   # two arrays sent: two schemas, against one per reply


def test_a_schema_set_on_the_instance_is_asked_for_every_reply():
    algorithm, messages, infos, _ = _round(3, 0)
    reply_schema = algorithm.reply_schema

    def per_client(cid, message, info):   # client 0 may reply in float32, the others in float64 only
        schema = reply_schema(cid, message, info)
        return dataclasses.replace(schema, params=dataclasses.replace(schema.params, dtypes=("float64", "float32"))) \
            if cid == 0 else schema

    algorithm.reply_schema = per_client
    assert not algorithm.schema_per_params()
    replies = [ClientUpdate(cid, messages[cid].params.astype(np.float32), 30) for cid in range(3)]
    valid, rejected = screen_updates(algorithm, replies, messages, infos)
    assert [u.client_id for u in valid] == [0]
    assert [cid for cid, _ in rejected] == [1, 2] and all("float64" in r for _, r in rejected)


def test_the_checks_warnings_are_not_silenced():
    """Only the deviations run under ``np.errstate``: a method's own check that overflows warns as before (and is
    refused as malformed where warnings are errors, as in this suite)."""
    class Loud(type(build_server("fedavg", {}))):   # type: ignore[misc]
        def reply_problem(self, update, message, info):
            np.exp(update.params * 1e3)   # overflows for this reply's numbers
            return None

    base, messages, infos, _ = _round(3, 1)
    algorithm = Loud(base.config)
    algorithm.setup(BinaryLogistic(6), [0, 1, 2], np.random.default_rng(0))
    replies = [ClientUpdate(cid, messages[cid].params + 1.0, 30) for cid in range(3)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        valid, rejected = screen_updates(algorithm, replies, messages, infos)
    assert not valid and all(r.startswith("malformed reply (RuntimeWarning: overflow") for _, r in rejected)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        valid, rejected = screen_updates(algorithm, replies, messages, infos)
    assert len(valid) == 3 and any("overflow" in str(w.message) for w in caught)


class _Clipped(ArraySpec):
    def problem(self, name, value):
        return super().problem(name, value) or (f"{name} exceeds the clip 2" if np.abs(value).max() > 2 else None)


class _L1(ReplySchema):
    def deviation(self, params):
        return float(np.abs(params - self.centers[0]).sum()), float(np.abs(self.centers[0]).sum())


@pytest.mark.parametrize("custom", ["array spec", "schema", "range", "whole numbers"])
def test_a_schema_that_asks_more_of_a_model_gets_its_own_checks(custom):
    """The on-sight pass of a model alone is for the library's plain schema only: a subclass's checks and deviation,
    a range or whole numbers are judged as ever."""
    base = type(build_server("fedavg", {}))

    class Custom(base):   # type: ignore[misc, valid-type]
        def params_spec(self, n):
            spec = super().params_spec(n)
            if custom == "array spec":
                return _Clipped(spec.shape, dtypes=spec.dtypes)
            if custom == "range":
                return dataclasses.replace(spec, low=-2.0, high=2.0)
            if custom == "whole numbers":
                return dataclasses.replace(spec, integer=True)
            return spec

        if custom == "schema":
            def reply_schema(self, client_id, message, info):
                s = super().reply_schema(client_id, message, info)
                return _L1(s.params, centers=s.centers)

    algorithm = Custom(build_server("fedavg", {}).config)
    algorithm.setup(BinaryLogistic(2), [0, 1, 2, 3], np.random.default_rng(0))
    sent = np.array([1.0, 0.0, 0.0])
    messages = {cid: ServerMessage(sent) for cid in range(4)}
    infos = {cid: ClientInfo(cid, 30, 10) for cid in range(4)}
    replies = [ClientUpdate(0, np.array([3.0, 0.0, 0.0]), 30), ClientUpdate(1, np.array([1.5, 0.5, 0.0]), 30),
               ClientUpdate(2, np.array([1.0, 0.0, 0.0]), 30), ClientUpdate(3, np.array([40.0, 30.0, 20.0]), 30)]
    valid, rejected = screen_updates(algorithm, replies, messages, infos)
    reasons = dict(rejected)
    if custom == "array spec":
        assert reasons[0] == "params exceeds the clip 2" and 3 in reasons
    elif custom == "range":
        assert reasons[0].startswith("params must be in [-2, 2]")
    elif custom == "whole numbers":
        assert reasons[1].startswith("params must hold integers")
    else:   # L1 deviation of client 3: 89 > 10 x max(1, 1, median of the others' L1 deviations)
        assert reasons == {3: reasons[3]} and reasons[3].startswith("update norm 89 exceeds")


def test_an_underflow_to_report_is_reported_as_by_the_full_checks():
    algorithm, messages, infos, _ = _round(3, 2)
    replies = [ClientUpdate(cid, np.full(7, 5e-324), 30) for cid in range(3)]
    with np.errstate(under="raise"):
        got = screen_updates(algorithm, replies, messages, infos)
        algorithm.schema_per_params = lambda: False
        want = screen_updates(algorithm, replies, messages, infos)
    assert got[1] == want[1] and all("underflow" in r for _, r in got[1])


def test_a_method_that_declares_its_replies_gets_a_schema_per_reply():
    for name, shared in (("fedavg", True), ("fedprox", True), ("scaffold", False), ("ifca", False),
                         ("ptopofl", False)):
        assert build_server(name, {}).schema_per_params() is shared, name


# ---- evaluation checks: the pooled predictions' values in one pass ----------------------------------------------
def _evaluations(rng: np.random.Generator, k: int, task: str, c: int) -> list[Any]:
    out: list[Any] = []
    for cid in range(k):
        n = 10
        y = rng.integers(0, c, n).astype(float) if task != "regression" else rng.standard_normal(n)
        s = rng.random((n, c)) if task == "multiclass" else rng.random(n)
        kind = rng.integers(0, 16)
        if kind == 1:
            y = y + 0.5
        elif kind == 2:
            s = s + 1.0
        elif kind == 3:
            s = s.copy()
            s.flat[0] = np.nan
        elif kind == 4:
            y = y[:-1]
        elif kind == 5:
            s = s.astype(np.float32)
        elif kind == 6:
            y = None
        elif kind == 7:
            y = y * 1e200
        base = ({"auc": 0.6, "accuracy": 0.5, "loss": 0.4} if task != "regression" else
                {"auc": float("nan"), "accuracy": float("nan"), "loss": 0.4, "mse": 0.3, "r2": 0.1})
        if task != "regression" and y is not None and y.size and np.all(y == y.flat[0]):
            base["auc"] = float("nan")
        out.append(ClientEvaluation(cid if kind != 9 else 0, base, y, s))
    return out


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_evaluations_judged_in_one_pass_fail_as_one_by_one(task, monkeypatch):
    c = 3 if task == "multiclass" else 2
    model = {"binary": BinaryLogistic(4), "multiclass": SoftmaxRegression(4, n_classes=3),
             "regression": LeastSquares(4)}[task]
    infos = {cid: ClientInfo(cid, 30, 10) for cid in range(12)}
    seen_checked = set()
    for seed in range(60):
        rng = np.random.default_rng(seed)
        evs = _evaluations(rng, int(rng.integers(1, 12)), task, c)
        if seed % 3 == 0:   # all sound: the one pass is taken
            evs = [ClientEvaluation(e.client_id, e.metrics, rng.integers(0, c, 10).astype(float)
                                    if task != "regression" else rng.standard_normal(10),
                                    e.scores if e.scores.dtype == np.float64 and np.all(e.scores <= 1)
                                    and not np.isnan(e.scores).any() else rng.random(e.scores.shape))
                   for i, e in enumerate(evs) if e.client_id == i]
            evs = [ClientEvaluation(e.client_id, {**e.metrics, "auc": float("nan")}
                                    if task != "regression" and np.all(e.y_true == e.y_true[0]) else
                                    {**e.metrics, "auc": 0.6} if task != "regression" else e.metrics,
                                    e.y_true, e.scores) for e in evs]
        asked = {cid: object() for cid in range(12)}
        seen_checked.add(pooled_values_sound(evs, task, c if task != "regression" else 0))
        fail_one_pass: list[Any] = []
        good = runner_module._screen_evaluations(evs, asked, infos, model, 1, fail_one_pass)
        with monkeypatch.context() as m:
            m.setattr(runner_module, "pooled_values_sound", lambda *args: False)
            fail_each: list[Any] = []
            good_each = runner_module._screen_evaluations(evs, asked, infos, model, 1, fail_each)
        assert good == good_each
        assert fail_one_pass == fail_each
    assert seen_checked == {True, False}   # both paths were compared


def test_oversized_pooled_arrays_are_not_copied_for_the_one_pass():
    import tracemalloc

    model, infos = BinaryLogistic(4), {cid: ClientInfo(cid, 30, 10) for cid in range(2)}
    big = np.zeros(3_000_000)
    evs = [ClientEvaluation(0, {"auc": float("nan"), "accuracy": 0.5, "loss": 0.3}, big, big),
           ClientEvaluation(1, {"auc": 0.5, "accuracy": 0.5, "loss": 0.3}, np.array([0.0, 1.0] * 5), np.full(10, 0.5))]
    tracemalloc.start()
    failures: list[Any] = []
    good = runner_module._screen_evaluations(evs, dict.fromkeys(range(2)), infos, model, 1, failures)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [e.client_id for e in good] == [1] and "y_true must have shape (10,)" in failures[0].reason
    assert peak < 4_000_000   # the 24 MB arrays were read where they lie


def test_a_model_that_cannot_say_its_task_fails_each_evaluation_not_the_round():
    class Broken:
        @property
        def task(self):
            raise RuntimeError("no task")

    infos = {0: ClientInfo(0, 30, 10)}
    evs = [ClientEvaluation(0, {"auc": 0.5, "accuracy": 0.5, "loss": 0.3}, np.array([0.0, 1.0] * 5), np.full(10, 0.5))]
    failures: list[Any] = []
    assert runner_module._screen_evaluations(evs, {0: None}, infos, Broken(), 1, failures) == []
    assert failures[0].reason == "invalid payload: malformed evaluation (RuntimeError: no task)"


def test_evaluations_handed_over_as_any_iterable_are_all_judged():
    model, infos = BinaryLogistic(4), {cid: ClientInfo(cid, 30, 10) for cid in range(3)}
    rng = np.random.default_rng(0)
    evs = [ClientEvaluation(cid, {"auc": 0.5, "accuracy": 0.5, "loss": 0.3}, np.array([0.0, 1.0] * 5), rng.random(10))
           for cid in range(3)]
    failures: list[Any] = []
    good = runner_module._screen_evaluations(iter(evs), dict.fromkeys(range(3)), infos, model, 1, failures)
    assert good == evs and failures == []


@settings(max_examples=200, deadline=None)
@given(task=st.sampled_from(["binary", "multiclass", "regression"]), seed=st.integers(0, 2**32 - 1),
       k=st.integers(1, 6))
def test_values_found_sound_in_one_pass_are_sound_one_by_one(task, seed, k):
    rng = np.random.default_rng(seed)
    c = 3 if task == "multiclass" else 2
    evs = _evaluations(rng, k, task, c)
    nc = c if task != "regression" else 0
    if pooled_values_sound(evs, task, nc):
        for ev in evs:
            info = ClientInfo(0, 30, 10)
            assert _evaluation_problem(ev, info, task, nc, True) == evaluation_problem(ev, info, task, nc)


# ---- sizes and the summary's means ------------------------------------------------------------------------------
def test_a_payload_size_is_counted_as_before():
    p = np.arange(7.0)
    cases = [ClientUpdate(0, p, 3), ClientUpdate(0, p.astype(np.float32), 3),
             ClientUpdate(0, p, 3, descriptor=np.zeros(4)), ClientUpdate(0, p, 3, extras={"c": np.zeros((2, 3))}),
             ClientUpdate(0, p.reshape(7, 1), 3), ClientUpdate(0, [1.0, 2.0], 3)]   # type: ignore[arg-type]
    for u in cases:
        assert u.n_floats() == _n_floats(u.params, u.descriptor, *u.extras.values())
        assert u.n_bytes() == _n_bytes(u.params, u.descriptor, *u.extras.values())
        assert type(u.n_floats()) is int and type(u.n_bytes()) is int


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=False, width=64),
                                 st.integers(-10**6, 10**6), st.sampled_from([5e-324, 1e-310, -2e-320])), max_size=60))
def test_the_summary_means_are_numpys_bit_for_bit(values):
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    # numpy's own warnings, the same in both (underflow reported too)
    with warnings.catch_warnings(record=True) as numpys, np.errstate(all="warn"):
        warnings.simplefilter("always")
        want_mean = float(v.mean()) if v.size else float("nan")
        want_std = float(v.std()) if v.size else float("nan")
    with warnings.catch_warnings(record=True) as ours, np.errstate(all="warn"):
        warnings.simplefilter("always")
        got_mean, got_std = nanmean(values), nanstd(values)
    assert [str(w.message) for w in ours] == [str(w.message) for w in numpys]
    assert np.float64(got_mean).tobytes() == np.float64(want_mean).tobytes() or (
        math.isnan(want_mean) and math.isnan(got_mean))
    assert np.float64(got_std).tobytes() == np.float64(want_std).tobytes() or (
        math.isnan(want_std) and math.isnan(got_std))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        both = nanmean_std(values)
    assert np.asarray(both).tobytes() == np.asarray((got_mean, got_std)).tobytes()
