"""Issue 25's later fast paths of the round give what the step-by-step code gives: each pass's rows gathered once
for the linear kernel (:meth:`LinearModel.epoch_gradient`) and its steps in one frame (``epoch_sgd``), one schema per
array sent in the server's screening and a round of models alone judged at once, the pooled predictions' values
judged in one pass and a whole round of evaluations at once, a payload's size, the round summary's means without
their layers, the aggregation's stack, the config checks of defaults and the job's config built once. Each is
compared with the path it goes around, bit for bit or reason for reason."""
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
import topofl.federation.validation as validation_module
from linear_cases import linear_model, random_labels
from topofl.federation.history import nanmean, nanmean_std, nanmean_std_columns, nanstd
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
        good, _ = runner_module._screen_evaluations(evs, asked, infos, model, 1, fail_one_pass)
        with monkeypatch.context() as m:
            m.setattr(runner_module, "pooled_values_sound", lambda *args: False)
            m.setattr(runner_module, "sound_round_pooled", lambda *args: None)
            fail_each: list[Any] = []
            good_each, _ = runner_module._screen_evaluations(evs, asked, infos, model, 1, fail_each)
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
    good, _ = runner_module._screen_evaluations(evs, dict.fromkeys(range(2)), infos, model, 1, failures)
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
    assert runner_module._screen_evaluations(evs, {0: None}, infos, Broken(), 1, failures) == ([], None)
    assert failures[0].reason == "invalid payload: malformed evaluation (RuntimeError: no task)"


def test_evaluations_handed_over_as_any_iterable_are_all_judged():
    model, infos = BinaryLogistic(4), {cid: ClientInfo(cid, 30, 10) for cid in range(3)}
    rng = np.random.default_rng(0)
    evs = [ClientEvaluation(cid, {"auc": 0.5, "accuracy": 0.5, "loss": 0.3}, np.array([0.0, 1.0] * 5), rng.random(10))
           for cid in range(3)]
    failures: list[Any] = []
    good, _ = runner_module._screen_evaluations(iter(evs), dict.fromkeys(range(3)), infos, model, 1, failures)
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


@settings(max_examples=150, deadline=None)
@given(columns=st.integers(1, 4).flatmap(lambda k: st.integers(0, 40).flatmap(lambda n: st.lists(
    st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64), st.sampled_from([0.0, 0.5, 1.0])),
             min_size=n, max_size=n), min_size=k, max_size=k))))
def test_the_columns_means_are_each_columns_bit_for_bit(columns):
    with warnings.catch_warnings(record=True) as each, np.errstate(all="warn"):
        warnings.simplefilter("always")
        want = [nanmean_std(c) for c in columns]
    with warnings.catch_warnings(record=True) as together, np.errstate(all="warn"):
        warnings.simplefilter("always")
        got = nanmean_std_columns(*columns)
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
    assert [str(w.message) for w in together] == [str(w.message) for w in each]


def test_columns_of_metrics_take_the_matrix_pass_with_numpys_bits():
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 8, 9, 100, 129, 1000, 4099):
        cols = [list(rng.random(n)), list(rng.random(n) * 1e3), [float(x) for x in rng.integers(0, 2, n)]]
        got = nanmean_std_columns(*cols)
        want = [(float(np.mean(c)), float(np.std(c))) for c in cols]
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), n


# ---- a round of models alone, judged at once -------------------------------------------------------------------
def _models_round(rng: np.random.Generator, k: int, d: int) -> tuple[Any, dict[int, ServerMessage],
                                                                     dict[int, ClientInfo], list[Any]]:
    algorithm = build_server("fedavg", {})
    algorithm.setup(BinaryLogistic(d - 1), list(range(k)), rng)
    sent = rng.standard_normal(d) * rng.choice([0.0, 1e-3, 1.0, 1e3])
    message = ServerMessage(sent)
    messages = {cid: message for cid in range(k)}
    infos = {cid: ClientInfo(cid, 20 + cid, 10) for cid in range(k)}
    replies = []
    for cid in range(k):
        scale = rng.choice([1e-6, 0.1, 1.0, 10.0, 1e4, 1e150])   # 1e150: beyond the squares' test (the full checks)
        replies.append(ClientUpdate(cid, sent + rng.standard_normal(d) * scale, 20 + cid))
    return algorithm, messages, infos, replies


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 40), d=st.integers(2, 30))
def test_a_round_of_models_alone_gets_the_reply_by_reply_verdicts(seed, k, d):
    """The round at once (_models_alone) against the reply-by-reply path: the same replies kept, in order, with the
    same arrays, and the same refusals with the same reasons (the norm bound's numbers printed to 4 digits, so the
    deviations must agree to the bit where a reason is near its limit: compared exactly below)."""
    algorithm, messages, infos, replies = _models_round(np.random.default_rng(seed), k, d)
    taken, measured = [], []
    original, norm_bound = validation_module._models_alone, validation_module._norm_bound

    def spy(*args):
        out = original(*args)
        taken.append(out is not None)
        return out

    def deviations(algorithm, passed, rejected):   # each path's (client, deviation, reference) to the bit
        measured.append(np.array([(u.client_id, dev, ref) for u, dev, ref in passed]).tobytes())
        return norm_bound(algorithm, passed, rejected)

    validation_module._models_alone, validation_module._norm_bound = spy, deviations
    try:
        valid, rejected = screen_updates(algorithm, replies, messages, infos)
        validation_module._models_alone = lambda *args: None
        valid_each, rejected_each = screen_updates(algorithm, replies, messages, infos)
    finally:
        validation_module._models_alone, validation_module._norm_bound = original, norm_bound
    assert len(measured) == 2 and measured[0] == measured[1]
    assert rejected == rejected_each
    assert [(u.client_id, u.n_examples, u.params.tobytes()) for u in valid] == \
        [(u.client_id, u.n_examples, u.params.tobytes()) for u in valid_each]
    assert all(type(u) is ClientUpdate and u.metrics == {} and u.extras == {} and u.descriptor is None for u in valid)
    assert all(u is not r for u, r in zip(valid, replies, strict=False))   # snapshots, as the other path's
    big = max(float(np.max(np.abs(r.params))) for r in replies)
    assert taken == [big * big * d <= np.finfo(np.float64).max / 1024]   # taken exactly when its test holds


def test_the_round_at_once_deviations_are_the_reply_by_reply_bits():
    rng = np.random.default_rng(11)
    for d in (1, 2, 3, 15, 16, 17, 31, 32, 33, 64, 100, 1000):
        schema = ReplySchema(ArraySpec((d,)), centers=rng.standard_normal((1, d)))
        rows = rng.standard_normal((9, d)) * 3
        stack = np.subtract(np.array(list(rows)), schema.centers[0])
        for row, diff in zip(rows, stack, strict=True):
            assert math.sqrt(float(np.dot(diff, diff))) == schema.deviation(row)[0]


@pytest.mark.parametrize("change", ["two arrays sent", "a float32 reply", "a descriptor", "a metric", "an extra",
                                    "a count of another kind", "a wrong count", "twice the same client",
                                    "a stranger", "not a reply", "a non-finite model", "a longer model",
                                    "a generator of replies", "underflow to report", "a reply check of its own"])
def test_a_round_not_all_models_alone_is_judged_reply_by_reply(change, monkeypatch):
    rng = np.random.default_rng(5)
    algorithm, messages, infos, replies = _models_round(rng, 6, 5)
    r = replies[2]
    if change == "two arrays sent":
        messages[2] = ServerMessage(messages[2].params.copy())
    elif change == "a float32 reply":
        replies[2] = ClientUpdate(2, r.params.astype(np.float32), r.n_examples)
    elif change == "a descriptor":
        replies[2] = ClientUpdate(2, r.params, r.n_examples, descriptor=np.zeros(3))
    elif change == "a metric":
        replies[2] = ClientUpdate(2, r.params, r.n_examples, metrics={"x": 1.0})
    elif change == "an extra":
        replies[2] = ClientUpdate(2, r.params, r.n_examples, extras={"c": r.params})
    elif change == "a count of another kind":
        replies[2] = ClientUpdate(2, r.params, np.int64(r.n_examples))
    elif change == "a wrong count":
        replies[2] = ClientUpdate(2, r.params, r.n_examples + 1)
    elif change == "twice the same client":
        replies.append(replies[2])
    elif change == "a stranger":
        replies.append(ClientUpdate(99, r.params, 20))
    elif change == "not a reply":
        replies.append("a reply")
    elif change == "a non-finite model":
        replies[2] = ClientUpdate(2, np.full(5, np.nan), r.n_examples)
    elif change == "a longer model":
        replies[2] = ClientUpdate(2, np.zeros(6), r.n_examples)
    elif change == "underflow to report":
        monkeypatch.setattr(np, "geterr", lambda: {"divide": "warn", "over": "warn", "under": "warn",
                                                   "invalid": "warn"})
    elif change == "a reply check of its own":
        algorithm.reply_problem = lambda u, m, i: "no" if u.client_id == 2 else None
    taken = []
    original = validation_module._models_alone
    monkeypatch.setattr(validation_module, "_models_alone", lambda *a: taken.append(1) or original(*a))
    given = (u for u in replies) if change == "a generator of replies" else replies
    valid, rejected = screen_updates(algorithm, given, messages, infos)
    monkeypatch.setattr(validation_module, "_models_alone", lambda *a: None)
    valid_each, rejected_each = screen_updates(algorithm, list(replies), messages, infos)
    assert rejected == rejected_each
    assert [u.client_id for u in valid] == [u.client_id for u in valid_each]
    if change in ("underflow to report", "a reply check of its own", "a generator of replies"):
        assert not taken   # not even tried
    else:
        assert taken and (change == "two arrays sent" or rejected)


# ---- a round of evaluations, judged at once ---------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(task=st.sampled_from(["binary", "multiclass"]), seed=st.integers(0, 2**32 - 1), k=st.integers(1, 12),
       change=st.sampled_from(["none", "auc of one class", "nan auc of two", "accuracy", "loss", "int metric",
                               "extra metric", "labels", "scores", "shape", "float32", "client", "twice", "n_test"]))
def test_a_round_of_evaluations_at_once_fails_as_one_by_one(task, seed, k, change):
    rng = np.random.default_rng(seed)
    c = 3 if task == "multiclass" else 2
    model = BinaryLogistic(4) if task == "binary" else SoftmaxRegression(4, n_classes=3)
    infos = {cid: ClientInfo(cid, 30, int(rng.integers(1, 12))) for cid in range(k)}
    evs = []
    for cid in range(k):
        n = infos[cid].n_test
        y = rng.integers(0, c, n).astype(float) if rng.random() < 0.8 else np.full(n, float(rng.integers(0, c)))
        s = rng.random((n, c)) if task == "multiclass" else rng.random(n)
        auc = float("nan") if np.all(y == y[0]) else float(rng.random())
        evs.append(ClientEvaluation(cid, {"auc": auc, "accuracy": float(rng.random()), "loss": float(rng.random())},
                                    y, s))
    j = int(rng.integers(0, k))
    e = evs[j]
    m = dict(e.metrics)
    if change == "auc of one class":
        evs[j] = ClientEvaluation(j, {**m, "auc": 0.5}, np.zeros(e.y_true.size), e.scores)
    elif change == "nan auc of two":
        y = e.y_true.copy()
        y[0] = 0.0
        y[-1] = 1.0 if y.size > 1 else 0.0
        evs[j] = ClientEvaluation(j, {**m, "auc": float("nan")}, y, e.scores)
    elif change == "accuracy":
        evs[j] = ClientEvaluation(j, {**m, "accuracy": 1.5}, e.y_true, e.scores)
    elif change == "loss":
        evs[j] = ClientEvaluation(j, {**m, "loss": float("inf")}, e.y_true, e.scores)
    elif change == "int metric":
        evs[j] = ClientEvaluation(j, {**m, "accuracy": 1}, e.y_true, e.scores)
    elif change == "extra metric":
        evs[j] = ClientEvaluation(j, {**m, "mse": 0.1}, e.y_true, e.scores)
    elif change == "labels":
        evs[j] = ClientEvaluation(j, m, e.y_true + 0.5, e.scores)
    elif change == "scores":
        evs[j] = ClientEvaluation(j, m, e.y_true, e.scores * 3.0)
    elif change == "shape":
        evs[j] = ClientEvaluation(j, m, e.y_true, e.scores.ravel()[:-1] if e.scores.size > 1 else e.scores[None])
    elif change == "float32":
        evs[j] = ClientEvaluation(j, m, e.y_true, e.scores.astype(np.float32))
    elif change == "client":
        evs[j] = ClientEvaluation(j + 100, m, e.y_true, e.scores)
    elif change == "twice":
        evs.append(evs[j])
    elif change == "n_test":
        infos[j] = ClientInfo(j, 30, infos[j].n_test + 1)
    asked = dict.fromkeys(range(k))
    fail_at_once: list[Any] = []
    good, joined = runner_module._screen_evaluations(evs, asked, infos, model, 1, fail_at_once)
    original = runner_module.sound_round_pooled
    runner_module.sound_round_pooled = lambda *args: None
    try:
        fail_each: list[Any] = []
        good_each, none = runner_module._screen_evaluations(evs, asked, infos, model, 1, fail_each)
    finally:
        runner_module.sound_round_pooled = original
    assert none is None
    assert good == good_each and fail_at_once == fail_each
    if joined is not None:   # taken only when nothing is refused; the pooled arrays are the concatenations
        assert not fail_each
        assert joined[0].tobytes() == np.concatenate([e.y_true for e in evs]).tobytes()
        assert joined[1].tobytes() == np.concatenate([e.scores for e in evs]).tobytes()
    elif change == "none":
        raise AssertionError("a sound round was judged one by one")


def test_the_summary_of_joined_arrays_is_the_summary_of_the_evaluations():
    from topofl.federation.history import History

    rng = np.random.default_rng(2)
    model, k = BinaryLogistic(4), 5
    infos = {cid: ClientInfo(cid, 30, 10) for cid in range(k)}
    evs = [ClientEvaluation(cid, {"auc": 0.5, "accuracy": 0.5, "loss": 0.3}, rng.integers(0, 2, 10).astype(float),
                            rng.random(10)) for cid in range(k)]
    evs = [ClientEvaluation(e.client_id, {**e.metrics, "auc": float("nan")} if np.all(e.y_true == e.y_true[0])
                            else e.metrics, e.y_true, e.scores) for e in evs]
    good, joined = runner_module._screen_evaluations(evs, dict.fromkeys(range(k)), infos, model, 1, [])
    assert joined is not None and good == evs
    sizes = {cid: (5, 40) for cid in range(k)}
    a = runner_module._summarise_round(History("fedavg", 0), model, good, 1, sizes, sizes, joined)
    b = runner_module._summarise_round(History("fedavg", 0), model, good, 1, sizes, sizes)
    assert np.asarray(list(a.as_dict().values()), dtype=float).tobytes() == \
        np.asarray(list(b.as_dict().values()), dtype=float).tobytes()


# ---- local training: a pass's steps in one frame ----------------------------------------------------------------
@settings(max_examples=80, deadline=None)
@given(task=st.sampled_from(["binary", "multiclass", "regression"]), n=st.integers(1, 70), d=st.integers(1, 6),
       batch=st.integers(1, 40), epochs=st.integers(1, 3), local_steps=st.sampled_from([0, 1, 5, 9]),
       seed=st.integers(0, 2**32 - 1), lr=st.sampled_from([0.1, 0.05, 3.0]))
def test_a_pass_in_one_frame_gives_the_kernels_steps_bit_for_bit(task, n, d, batch, epochs, local_steps, seed, lr):
    rng = np.random.default_rng(seed)
    model = linear_model(task, d, 1e-3)
    X, y = rng.standard_normal((n, d)), random_labels(task, rng, n)
    theta = rng.standard_normal(model.n_params)
    kw = dict(epochs=epochs, lr=lr, batch_size=batch, local_steps=local_steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            lean = sgd(model, theta, X, y, rng=np.random.default_rng(seed), **kw)
        except FloatingPointError as exc:
            lean = str(exc)
        cls = type(model)
        saved = cls.epoch_sgd
        try:
            cls.epoch_sgd = lambda self, *a: None   # the gathered kernel, step by step in local.sgd
            try:
                stepwise = sgd(model, theta, X, y, rng=np.random.default_rng(seed), **kw)
            except FloatingPointError as exc:
                stepwise = str(exc)
        finally:
            cls.epoch_sgd = saved
    if isinstance(lean, str):
        assert lean == stepwise
    else:
        assert lean.tobytes() == stepwise.tobytes()


def test_a_pass_in_one_frame_only_for_plain_sgd_of_the_librarys_models():
    model = BinaryLogistic(3)
    X, y = np.ones((5, 3)), np.ones(5)
    assert model.epoch_sgd(np.zeros(4), X, y, 2, 0.1) is not None
    assert model.epoch_sgd(np.zeros(4), np.asmatrix(X), y, 2, 0.1) is None
    assert model.epoch_sgd(np.zeros(4), X, np.ma.masked_array(y), 2, 0.1) is None

    class Mine(BinaryLogistic):
        def _dlogits(self, Z, y, sample_weight):
            return super()._dlogits(Z, y, sample_weight) * 2.0

    assert Mine(3).epoch_sgd(np.zeros(4), X, y, 2, 0.1) is None
    with pytest.raises(ValueError, match="theta must be a float64 vector of shape"):
        model.epoch_sgd(np.zeros(5), X, y, 2, 0.1)
    with pytest.raises(ValueError, match="theta must be a float64 vector of shape"):
        model.epoch_sgd(np.zeros(4, dtype=np.float32), X, y, 2, 0.1)


# ---- the aggregation's stack and shares; a reply's size ---------------------------------------------------------
def test_the_aggregations_stack_is_vstacks_bit_for_bit():
    from topofl.algorithms.base import weighted_sum

    rng = np.random.default_rng(4)
    for k in (1, 2, 8, 100):
        for d in (1, 21, 1000):
            w = rng.random(k)
            for vectors in ([rng.standard_normal(d) for _ in range(k)],
                            [rng.standard_normal(d).astype(np.float32) for _ in range(k)],
                            [rng.standard_normal((1, d)) for _ in range(k)]):   # 2-d rows: np.vstack itself
                want = w @ np.vstack(vectors, dtype=np.float64)
                assert weighted_sum(vectors, w).tobytes() == want.tobytes()


@pytest.mark.parametrize("weights", [[1.0, -1.0, 3.0], [1.0, np.nan], [], [[1.0, 2.0]], [0.0, 0.0], [np.inf, 1.0]])
def test_shares_of_bad_weights_are_refused_as_before(weights):
    from topofl.robustness.aggregators import cap_shares

    with pytest.raises(ValueError, match="aggregation weights must be non-negative with a positive finite sum"):
        cap_shares(np.asarray(weights, dtype=float))


def test_a_replys_size_is_read_as_before():
    p = np.arange(7.0)
    replies = [ClientUpdate(0, p, 3), ClientUpdate(1, p.astype(np.float32), 3), ClientUpdate(2, p, 3, np.zeros(4)),
               ClientUpdate(3, p, 3, extras={"c": np.zeros((2, 3))}), ClientUpdate(4, p.reshape(7, 1), 3)]
    assert runner_module._reply_sizes(replies) == {u.client_id: (u.n_floats(), u.n_bytes()) for u in replies}


# ---- set-up: a config's defaults, the job's config, the range checks -------------------------------------------
def test_every_registered_configs_defaults_pass_their_bounds():
    """What lets a config skip the check of a field that holds its declared default (checked when its class was
    made): every such default passes its bounds."""
    import dataclasses as dc

    from topofl.config import _checked_defaults
    from topofl.methods import available, get

    checked = 0
    for family in ("server", "peer"):
        for name in available(family):
            cls = get(name).config
            defaults = _checked_defaults(cls)
            bounds_of = cls.field_bounds()
            for field_name, (default, bounds) in defaults.items():
                assert bounds is bounds_of[field_name]
                bounds.check(field_name, default)
                checked += 1
            # every bounded field with a default is among them: the library's defaults all pass
            assert set(defaults) == {f.name for f in dc.fields(cls) if f.default is not dc.MISSING} & set(bounds_of)
    assert checked > 100


def test_a_value_given_is_checked_even_when_it_equals_the_default():
    cfg = build_server("fedavg", {}).config
    assert build_server("fedavg", {"lr": float(cfg.lr)}).config == cfg   # an equal value, checked and kept
    with pytest.raises(ValueError, match="lr"):
        build_server("fedavg", {"lr": -cfg.lr})
    with pytest.raises(ValueError, match="must be finite"):
        build_server("fedavg", {"lr": float("nan")})


def test_a_job_builds_its_method_from_the_config_it_validated(monkeypatch):
    import topofl
    from topofl.config import Config
    from topofl.job import Job
    from topofl.methods import build

    calls = []
    from_dict = Config.from_dict.__func__   # type: ignore[attr-defined]
    monkeypatch.setattr(Config, "from_dict", classmethod(lambda cls, v: calls.append(cls) or from_dict(cls, v)))
    fed = topofl.make_scenario("healthcare", 0, n_clients=8)
    topofl.simulate(fed, "fedavg", rounds=1, lr=0.05)
    assert len(calls) == 1   # once, when the job was made
    job = Job(method="fedavg", data=fed, hyperparameters={"lr": 0.05})
    assert job.method_config.lr == 0.05 and job == job.with_()   # not a field: no part of the job's identity
    with pytest.raises(ValueError, match="fedavg needs a GlobalModelConfig; got"):
        build("fedavg", config=build_server("fedprox", {}).config)


@pytest.mark.parametrize("value", [True, float("nan"), float("inf"), -float("inf"), np.float64("nan"), "1", None,
                                   np.float32(0.5), np.int64(3), 2, 0.5, 10**400])
def test_a_range_check_answers_as_before(value):
    from topofl._validation import check_range, show

    def before(name, v, low=None, high=None, *, low_open=False, high_open=False):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise ValueError(f"{name} must be a number; got {show(v)}")
        if not isinstance(v, (int, np.integer)) and not np.isfinite(v):
            raise ValueError(f"{name} must be finite; got {show(v)}")
        ok = True
        if low is not None:
            ok &= v > low if low_open else v >= low
        if high is not None:
            ok &= v < high if high_open else v <= high
        if not ok:
            raise ValueError("out of range")

    for bounds in ({}, {"low": 0.0, "high": 1.0, "low_open": True}, {"low": 1}):
        outcomes = []
        for check in (before, check_range):
            try:
                check("x", value, **bounds)
                outcomes.append(None)
            except ValueError as exc:
                outcomes.append(str(exc) if "out of range" not in str(exc) else "range")
            except Exception as exc:  # noqa: BLE001 - the same exception either way
                outcomes.append(type(exc).__name__)
        if outcomes[1] is not None and outcomes[1].startswith("x must be in"):
            outcomes[1] = "range"
        assert outcomes[0] == outcomes[1], (value, bounds)



# ---- the review's findings (helper-44), each seen failing first ------------------------------------------------
def test_a_jobs_hyperparameters_changed_after_it_was_made_are_the_ones_run():
    from topofl.job import Job

    job = Job(method="fedavg", rounds=1, hyperparameters={"lr": 0.1})
    job.hyperparameters["lr"] = 0.5   # a plain dict: a user may change it
    assert job.method_config.lr == 0.5
    job.hyperparameters["local_epochs"] = 0
    with pytest.raises(ValueError, match="local_epochs must be in"):
        _ = job.method_config


def test_the_aggregations_stack_refuses_what_vstack_refused():
    from topofl.algorithms.base import weighted_average, weighted_sum

    for vectors in ([np.array([1 + 2j, 3.0])], [np.array(["1.5", "2"]), np.array(["3", "4"])],
                    [np.array([1.0, None], dtype=object)], [np.array([1, 2], dtype="m8[s]")]):
        with pytest.raises(TypeError):
            weighted_average(vectors, np.ones(len(vectors)))
    with pytest.raises(ValueError, match="need at least one array"):
        weighted_sum([], np.array([]))


def test_a_schema_that_cannot_be_read_refuses_the_replies_as_before():
    from topofl.algorithms.fedavg import FedAvg

    class MyFedAvg(FedAvg):
        def params_spec(self, n):
            return ArraySpec((n,), low=None)   # type: ignore[arg-type]

    a = MyFedAvg()
    a.setup(BinaryLogistic(3), [0, 1], np.random.default_rng(0))
    m = ServerMessage(np.zeros(4))
    infos = {c: ClientInfo(c, 10, 5) for c in (0, 1)}
    valid, rejected = screen_updates(a, [ClientUpdate(c, np.full(4, 0.1), 10) for c in (0, 1)], {0: m, 1: m}, infos)
    assert valid == [] and [r for _, r in rejected] == ["malformed reply (TypeError: must be real number, not "
                                                        "NoneType)"] * 2


def test_a_default_outside_the_bounds_a_class_resolves_is_checked():
    from dataclasses import dataclass

    from topofl.config import Config, hp

    @dataclass(frozen=True)
    class A(Config):
        x: float = hp(1.0, "x", low=0.0, high=10.0)

    @dataclass(frozen=True)
    class B1(A):
        x: float = 5.0

    @dataclass(frozen=True)
    class B2(A):
        x: float = hp(1.0, "x", low=0.0, high=2.0)

    @dataclass(frozen=True)
    class C(B1, B2):
        pass

    with pytest.raises(ValueError, match=r"x must be in \[0.0, 2.0\]"):
        C()
    with pytest.raises(ValueError, match=r"x must be in \[0.0, 2.0\]"):
        C(x=5.0)

    @dataclass(frozen=True)
    class Strict(A):
        @classmethod
        def field_bounds(cls):
            from topofl.config import Bounds

            return {"x": Bounds(low=0.0, high=0.5)}

    with pytest.raises(ValueError, match="x must be in"):
        Strict()


def test_the_columns_means_warn_as_each_columns_under_any_error_setting():
    cols = ([1e-200, 3e-200], [5e-324, 0.0], [0.5, 0.25])
    for under in ("warn", "raise"):
        outcomes = []
        for means in (lambda: nanmean_std_columns(*cols), lambda: [nanmean_std(c) for c in cols]):
            with warnings.catch_warnings(record=True) as seen, np.errstate(under=under):
                warnings.simplefilter("always")
                try:
                    outcomes.append((np.asarray(means()).tobytes(), [str(w.message) for w in seen]))
                except FloatingPointError as exc:
                    outcomes.append(str(exc))
        assert outcomes[0] == outcomes[1], under


def test_a_summary_of_no_evaluations_does_not_ask_the_models_task():
    from topofl.federation.history import History

    class Broken:
        @property
        def task(self):
            raise RuntimeError("no task")

    summary = runner_module._summarise_round(History("m", 0), Broken(), [], 1, {}, {})
    assert math.isnan(summary.auc) and summary.n_clients_auc == 0



# ---- the second review's findings (helper-45), each seen failing first -----------------------------------------
def test_a_rounds_loss_is_the_mean_alone_as_before():
    from topofl.federation.history import History

    evs = [ClientEvaluation(c, {"auc": float("nan"), "accuracy": float("nan"), "loss": v, "mse": 0.1, "r2": 0.5},
                            None, None) for c, v in enumerate([1e-200, 2e-200, 1e200])]
    for setting in ({"under": "warn"}, {"over": "raise"}, {"under": "raise"}):
        with warnings.catch_warnings(record=True) as seen, np.errstate(**setting):
            warnings.simplefilter("always")
            summary = runner_module._summarise_round(History("m", 0), LeastSquares(3), evs, 1, {}, {})
        assert summary.loss == nanmean([1e-200, 2e-200, 1e200]) and not seen, setting


@pytest.mark.parametrize("changed", [2.0, True, -0.0])
def test_a_hyperparameter_replaced_by_an_equal_value_is_judged_anew(changed):
    from topofl.job import Job

    first = {2.0: 2, True: 1, -0.0: 0.0}[changed]
    name = "local_epochs" if changed == 2.0 and type(changed) is float else "lr" if changed is True else "l2"
    job = Job(method="fedavg", hyperparameters={name: first}, rounds=1)
    job.hyperparameters[name] = changed
    try:
        want = build_server("fedavg", dict(job.hyperparameters)).config
    except ValueError as exc:
        with pytest.raises(ValueError, match=str(exc)[:20]):
            _ = job.method_config
        return
    got = job.method_config
    assert got == want and np.float64(getattr(got, name)).tobytes() == np.float64(getattr(want, name)).tobytes()


@pytest.mark.parametrize("columns", [([1e200, 1.0], ["x", 1.0]), ([1.0, 2.0], [np.longdouble("1e400"), 1.0]),
                                     ([[1.0], [2.0, 3.0]], [[3.0], [4.0]]), ([1, 2], [True, 0.5])])
def test_columns_that_are_not_plain_floats_are_each_columns(columns):
    outcomes = []
    for means in (lambda: nanmean_std_columns(*columns), lambda: [nanmean_std(c) for c in columns]):
        with warnings.catch_warnings(record=True) as seen, np.errstate(over="raise"):
            warnings.simplefilter("always")
            try:
                outcomes.append((np.asarray(means()).tobytes(), [str(w.message) for w in seen]))
            except Exception as exc:  # noqa: BLE001 - the same exception, in the same words
                outcomes.append((type(exc).__name__, str(exc), [str(w.message) for w in seen]))
    assert outcomes[0] == outcomes[1]


# ---- a round's evaluations at once (the in-process pool, every client scoring the model sent) ----------------------
def _bits(a: Any) -> Any:
    """A result as comparable bits: floats by their bytes, arrays by dtype, shape and bytes."""
    if isinstance(a, dict):
        return [(k, _bits(v)) for k, v in a.items()]
    if isinstance(a, (list, tuple)):
        return [_bits(x) for x in a]
    if isinstance(a, np.ndarray):
        return (a.dtype.str, a.shape, a.tobytes())
    if isinstance(a, float):
        return (type(a), np.float64(a).tobytes())
    return (type(a), a)


def _each_and_together(model, theta, splits, action="always", raise_all=False):
    """One call per split and evaluate_clients, each under the same warning filter (and numpy error setting):
    their results (bits) or exceptions, and their warnings with where they were raised."""
    from topofl.metrics import evaluate, evaluate_clients

    outcomes = []
    for run in (lambda: [evaluate(model, theta, X, y) for X, y in splits], lambda: evaluate_clients(model, theta, splits)):
        with warnings.catch_warnings(record=True) as seen, np.errstate(all="raise" if raise_all else None):
            warnings.simplefilter(action)
            try:
                result: Any = _bits(run())
            except Exception as exc:  # noqa: BLE001 - the same exception, in the same words
                result = (type(exc).__name__, str(exc))
        outcomes.append((result, [(str(w.message), w.filename, w.lineno) for w in seen]))
    return outcomes


@settings(max_examples=150, deadline=None)
@given(sizes=st.lists(st.integers(1, 40), min_size=2, max_size=6), d=st.integers(1, 5),
       scale=st.sampled_from([0.0, 0.01, 1.0, 30.0, 1e3]), l2=st.sampled_from([0.0, 1e-3, 0.37]),
       kinds=st.lists(st.sampled_from(["mixed", "zeros", "ones", "tied"]), min_size=6, max_size=6),
       seed=st.integers(0, 2**32 - 1))
def test_a_rounds_evaluations_at_once_are_each_clients_bit_for_bit(sizes, d, scale, l2, kinds, seed):
    """evaluate_clients against evaluate split by split: metrics (their types and bits) and scores, on splits of
    one class, of tied scores (repeated rows) and of logits large enough to saturate."""

    rng = np.random.default_rng(seed)
    model = BinaryLogistic(d, l2)
    theta = rng.standard_normal(model.n_params) * scale
    splits = []
    for n, kind in zip(sizes, kinds, strict=False):
        X = rng.standard_normal((n, d))
        if kind == "tied":
            X = np.repeat(X[:1], n, axis=0)
        y = {"mixed": (rng.random(n) > 0.5).astype(float), "zeros": np.zeros(n), "ones": np.ones(n),
             "tied": (rng.random(n) > 0.5).astype(float)}[kind]
        splits.append((X, y))
    joined = model.joined_evaluation_outputs(theta, [X for X, _ in splits], [y for _, y in splits])
    if scale <= 30.0:   # logits within ±1e3 or so: nothing under- or overflows, the joined steps are taken
        assert joined is not None
    each, together = _each_and_together(model, theta, splits)
    assert together == each


@pytest.mark.parametrize("change", ["inf theta", "nan theta", "nan label", "float32 rows", "one split", "subclass",
                                    "softmax", "wrong width"])
def test_evaluations_at_once_fall_back_to_each_clients_where_they_could_differ(change):
    """Where the joined steps could warn otherwise or compute otherwise, each split is evaluated on its own: the same
    results and the same warnings as one call per split."""

    @dataclasses.dataclass(frozen=True)
    class Halved(BinaryLogistic):
        def _data_loss_at(self, Z, y, sample_weight):
            return 0.5 * super()._data_loss_at(Z, y, sample_weight)

    rng = np.random.default_rng(3)
    model = {"subclass": Halved(3, 1e-3), "softmax": SoftmaxRegression(3, 1e-3, n_classes=3)}.get(
        change, BinaryLogistic(3, 1e-3))
    theta = rng.standard_normal(model.n_params)
    splits = [(rng.standard_normal((n, 3)), (rng.random(n) > 0.5).astype(float)) for n in (5, 9, 4)]
    if change == "softmax":
        splits = [(X, rng.integers(0, 3, X.shape[0]).astype(float)) for X, _ in splits]
    if change == "inf theta":
        theta[0] = np.inf
    elif change == "nan theta":
        theta[1] = np.nan
    elif change == "nan label":
        splits[1][1][0] = np.nan
    elif change == "float32 rows":
        splits[2] = (splits[2][0].astype(np.float32), splits[2][1])
    elif change == "one split":
        splits = splits[:1]
    elif change == "wrong width":
        splits[0] = (rng.standard_normal((5, 4)), splits[0][1])
    joined = getattr(model, "joined_evaluation_outputs", None)
    if joined is not None and change != "one split":
        assert joined(theta, [X for X, _ in splits], [y for _, y in splits]) is None
    each, together = _each_and_together(model, theta, splits)
    assert together == each
    if change == "wrong width":
        assert each[0][0] == "ValueError"   # the one-by-one error, raised by both


def test_the_pool_evaluates_at_once_only_where_every_client_scores_the_model_sent(monkeypatch):
    """FedAvg's round goes through evaluate_clients once; a personalised method (its own client_params), an attacked
    run (the wrapper's) and messages of different arrays are evaluated client by client."""
    import topofl
    import topofl.federation.pool as pool_module

    calls = []
    real = pool_module.evaluate_clients
    monkeypatch.setattr(pool_module, "evaluate_clients", lambda *a: calls.append(len(a[2])) or real(*a))
    fed = topofl.make_scenario("healthcare", 0, n_clients=6)
    topofl.simulate(fed, "fedavg", rounds=2, seed=0)
    assert calls == [6, 6]
    for method, options in [("ditto", {}), ("fedavg", {"attack": "sign_flip:fraction=0.34"}), ("ifca", {})]:
        calls.clear()
        topofl.simulate(fed, method, rounds=2, seed=0, **options)
        assert calls == [], method


def test_evaluations_at_once_of_labels_other_than_0_and_1_are_each_clients():
    """Labels a binary model does not expect (0 and 2; 0.5 and 1; one class of 2s): each split's AUC as auc_score
    gives it — NaN with its warning where a split has no positive or no negative — and its accuracy and loss."""
    from topofl.metrics import evaluate_clients

    rng = np.random.default_rng(11)
    model = BinaryLogistic(2, 1e-3)
    theta = rng.standard_normal(model.n_params)
    labels = [np.array([0.0, 2.0, 2.0, 0.0]), np.array([0.5, 1.0, 1.0]), np.array([2.0, 2.0]),
              np.array([1.0, 0.0, 1.0, 1.0, 0.0])]
    splits = [(rng.standard_normal((y.size, 2)), y) for y in labels]
    each, together = _each_and_together(model, theta, splits)
    assert together == each
    with pytest.warns(RuntimeWarning, match="invalid value encountered in scalar divide"):   # client 0's AUC: 0/0
        aucs = [metrics["auc"] for metrics, _ in evaluate_clients(model, theta, splits)]
    assert math.isnan(aucs[0]) and not math.isnan(aucs[3])


# ---- review of issue 25 (helper-46): evaluations at once only where nothing could differ -----------------------
@pytest.mark.parametrize("case", ["penalty overflows", "penalty underflows", "logits overflow", "labels overflow",
                                  "raise"])
def test_evaluations_at_once_warn_and_raise_as_each_clients(case):
    """Every warning (its words and the line raising it) and every exception as one call per split gives them, in
    its order: a penalty that overflows or underflows warns once per client, logits whose sum overflows warn once
    per client and only once, and under np.seterr(all="raise") the first client's error is the one raised."""
    rng = np.random.default_rng(0)
    splits = [(rng.standard_normal((4, 2)) * 10, np.array([0.0, 1.0, 0.0, 1.0])) for _ in range(3)]
    model, theta, raise_all = BinaryLogistic(2, 1e-3), np.array([0.3, -0.2, 0.1]), False
    if case == "penalty overflows":
        theta = np.array([1e300, 1e300, 0.0])
    elif case == "penalty underflows":
        theta = np.array([1e-200, 1e-200, 0.0])
    elif case == "logits overflow":
        model, theta = BinaryLogistic(1, 0.0), np.array([1.0, 1e308])
        splits = [(np.array([[1e308], [0.0]]), np.array([0.0, 1.0])), (np.array([[0.5], [-1.0]]), np.array([1.0, 0.0])),
                  (np.array([[1e308], [1.0]]), np.array([1.0, 0.0]))]
    else:   # logits of ±1e300 and labels of 1e10: the loss's products overflow, client by client
        model, theta, X = BinaryLogistic(1, 0.0), np.array([1.0, 0.0]), np.array([[-1e300], [1e300]])
        splits = [(X, np.array([1e10, 0.0])), (X, np.array([1e10, 1.0])), (X, np.array([1e10, 0.0]))]
        if case == "raise":   # the first client's error: its AUC's 0/0 (no positive)
            raise_all, splits[0] = True, (np.array([[0.1], [0.2]]), np.array([0.0, 2.0]))
    with np.errstate(under="warn" if case == "penalty underflows" else None):
        for action in ("always", "default"):
            each, together = _each_and_together(model, theta, splits, action, raise_all)
            assert together == each


def test_evaluations_at_once_respect_a_model_with_its_own_outputs():
    """metrics.evaluate asks a model's ``outputs`` first: a BinaryLogistic subclass that gives its own is evaluated
    split by split, with its outputs."""
    @dataclasses.dataclass(frozen=True)
    class Tempered(BinaryLogistic):
        def outputs(self, theta, X, y):
            return self.evaluation_outputs(theta / 2.0, X, y)

    rng = np.random.default_rng(5)
    splits = [(rng.standard_normal((6, 2)), (rng.random(6) > 0.5).astype(float)) for _ in range(3)]
    each, together = _each_and_together(Tempered(2, 1e-3), rng.standard_normal(3), splits)
    assert together == each


@pytest.mark.parametrize("name", ["client_params", "client_features", "client_feature_state"])
def test_a_client_method_set_on_the_instance_is_the_one_that_runs(name):
    """Review of issue 25 (helper-46): the pool's evaluations at once and its final models without contexts apply
    only where the algorithm's client methods are the base class's — on the instance as on the class."""
    import topofl
    from topofl.methods import build_server

    fed = topofl.make_scenario("healthcare", 0, n_clients=6)
    algorithm = build_server("fedavg", {})
    marker = {"scale": np.ones(1)}
    replacement = {"client_params": lambda ctx, message: np.zeros_like(message.params),
                   "client_features": lambda ctx, X: np.zeros_like(X),
                   "client_feature_state": lambda ctx: marker}[name]
    setattr(algorithm, name, replacement)
    result = topofl.simulate(fed, algorithm, rounds=2, seed=0)
    if name == "client_feature_state":
        assert all(state is marker for state in result.client_feature_states.values())
    else:   # every client scores a constant logit: no AUC but 0.5
        assert result.final["auc"] == 0.5
    if name == "client_params":
        assert all(not model.any() for model in result.client_models.values())


@pytest.mark.parametrize("setting", ["warn", "raise"])
def test_evaluations_at_once_report_scipys_own_errors_as_each_clients(setting):
    """Review of issue 25 (helper-47): expit and log_expit report through SciPy's own error setting
    (scipy.special.errstate), not numpy's: under-/overflows there are reported once per client and from
    _outputs_at's line, as one call per split reports them (or the same SpecialFunctionError is raised)."""
    import scipy.special

    rng = np.random.default_rng(5)
    model, theta = BinaryLogistic(3, 1e-3), rng.standard_normal(4)
    splits = [(rng.standard_normal((20, 3)) * (1e4 if k in (1, 3) else 1.0), (rng.random(20) > 0.5).astype(float))
              for k in range(4)]
    with scipy.special.errstate(underflow=setting, overflow=setting):
        each, together = _each_and_together(model, theta, splits)
    assert together == each
    assert (each[0][0] == "SpecialFunctionError") if setting == "raise" else len(each[1]) >= 2


def test_evaluations_at_once_ask_the_model_objects_own_class():
    """Review of issue 25 (helper-47): a model object that hands attribute lookups to an inner BinaryLogistic but
    gives its own evaluation_outputs is evaluated with those, split by split."""
    from topofl.metrics import evaluate_clients

    class Calibrated:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def evaluation_outputs(self, theta, X, y):
            loss, scores, pred = self.inner.evaluation_outputs(theta, X, y)
            return loss, 1.0 - scores, 1.0 - pred

    rng = np.random.default_rng(2)
    model = Calibrated(BinaryLogistic(2, 1e-3))
    splits = [(rng.standard_normal((8, 2)), np.array([0.0, 1.0] * 4)) for _ in range(3)]
    each, together = _each_and_together(model, rng.standard_normal(3), splits)
    assert together == each
    flipped = evaluate_clients(model.inner, np.zeros(3) + 0.5, splits)
    assert _bits(evaluate_clients(model, np.zeros(3) + 0.5, splits)) != _bits(flipped)
