"""Property-based tests (hypothesis): whatever a client, a user or a file sends, the library either
accepts it with the documented meaning or refuses it with a ValueError — never another exception,
never a silent NaN. Bounded (few, small examples) so the default suite stays fast."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from topofl import Federation
from topofl.cli_common import parse_assignments, parse_seeds
from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.federation.validation import ClientInfo, evaluation_problem, screen_updates
from topofl.methods import available
from topofl.methods import build_server as build
from topofl.models.linear import make_model
from topofl.tda import descriptor, diagrams
from topofl.tda.descriptor import descriptor_problems

FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

clouds = st.integers(3, 30).flatmap(
    lambda n: st.integers(1, 4).flatmap(
        lambda d: hnp.arrays(np.float64, (n, d), elements=st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False))
    )
)


def significant(dgm, spread):
    """Pairs whose persistence is above float32 noise (1e-5 of the cloud's spread): rounding
    alone (of a translation, or of giotto-ph's float32 distances) can create or merge the others."""
    return dgm[(dgm[:, 1] - dgm[:, 0]) > 1e-5 * spread] if dgm.size else dgm


@FAST
@given(X=clouds, exponent=st.integers(-900, 900), offset=st.sampled_from([0.0, 1e6, -1e12]))
def test_diagrams_are_scale_and_translation_equivariant(X, exponent, offset):
    s = 2.0 ** exponent  # exact scaling: a decimal factor would itself round near-duplicate points apart
    spread = float(np.ptp(X, axis=0).max())
    assume(offset == 0.0 or spread > 1e-6 * abs(offset))  # else X + offset itself rounds the cloud away
    ref = diagrams(X)
    got = diagrams((X + offset) * s)
    assert len(got) == 2 and all(np.isfinite(g).all() and (g[:, 1] > g[:, 0]).all() for g in got)
    for g, r in zip(got, ref, strict=False):
        g, r = significant(g / s, spread), significant(r, spread)
        assert g.shape == r.shape
        np.testing.assert_allclose(np.sort(g[:, 1]), np.sort(r[:, 1]), rtol=1e-5, atol=1e-5 * spread)


@FAST
@given(X=clouds, exponent=st.integers(-900, 900), n_sub=st.integers(30, 40))
def test_every_descriptor_passes_its_own_invariants(X, exponent, n_sub):
    # a cloud of identical points has no H0 pair and is refused by design (n_sub >= n: no subsample) — judged after
    # the scaling, which can round distinct points to one (1e-194 and 0 scaled by 2^-431 both underflow to 0)
    scaled = X * 2.0 ** exponent
    assume(np.unique(scaled, axis=0).shape[0] >= 2)
    phi = descriptor(scaled, n_sub=n_sub, seed=0)
    assert descriptor_problems(phi, n_points=min(X.shape[0], n_sub)) is None


labels = st.lists(st.sampled_from([-1.0, 0.0, 0.5, 1.0, 2.0, 3.0, 7.0]), min_size=4, max_size=12)


@FAST
@given(y_train=labels, y_test=st.lists(st.sampled_from([-1.0, 0.0, 1.0, 2.0]), min_size=1, max_size=4),
       task=st.sampled_from([None, "binary", "multiclass", "regression"]))
def test_labels_are_resolved_or_refused_never_guessed(y_train, y_test, task):
    rng = np.random.default_rng(0)
    arrays = [(rng.standard_normal((len(y_train), 2)), np.array(y_train), rng.standard_normal((len(y_test), 2)), np.array(y_test))]
    try:
        fed = Federation.from_arrays(arrays, task=task)
    except ValueError:
        return
    ys = np.concatenate([fed[0].y_train, fed[0].y_test])
    if fed.task == "regression":
        assert task == "regression"
    else:
        assert set(np.unique(ys)) <= set(range(fed.n_classes)) and fed.n_classes >= 2
        if task is None:  # inferred only from the classes 0..C-1, all present
            assert sorted(set(y_train + y_test)) == list(range(len(set(y_train + y_test)))) or set(y_train + y_test) <= {0.0, 1.0}


shapes = st.one_of(hnp.array_shapes(max_dims=2, max_side=30), st.sampled_from([(6,), (12,), (48,), (1,), (0,)]))
weird_arrays = st.one_of(
    hnp.arrays(np.float64, shapes, elements=st.floats(allow_nan=True, allow_infinity=True)),
    hnp.arrays(np.float32, shapes, elements=st.floats(allow_nan=True, allow_infinity=True, width=32)),
    hnp.arrays(np.int64, shapes, elements=st.integers(-(2**62), 2**62)),
    st.just(None), st.just([1.0, 2.0]), st.just("x"),
)


@pytest.mark.parametrize("method", ["fedavg", "scaffold", "ifca", "ptopofl", "local"])
@FAST
@given(params=weird_arrays, extra=weird_arrays, phi=weird_arrays,
       n=st.one_of(st.integers(-5, 10**13), st.just(10**400), st.floats(allow_nan=True), st.none()),
       m=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.just(10**400), st.text(max_size=2)))
def test_screening_never_raises_and_never_passes_garbage(method, params, extra, phi, n, m):
    algo = build(method, {})
    model = make_model("binary", algo.input_dim(5), 2, algo.config.l2)
    algo.setup(model, [0, 1], np.random.default_rng(0))
    messages = algo.configure_fit(1, [0, 1])
    infos = {0: ClientInfo(0, 30, 10), 1: ClientInfo(1, 30, 10)}
    update = ClientUpdate(0, params, n, descriptor=phi, extras={"dc": extra, "cluster": extra, "dgm0": extra},
                          metrics={"risk_gradient": m} if m is not None else {})
    valid, rejected = screen_updates(algo, [update], messages, infos)
    for u in valid:  # anything accepted is a finite float64 vector of the model's size with the declared count
        assert isinstance(u.params, np.ndarray) and u.params.dtype == np.float64 and np.isfinite(u.params).all()
        assert u.n_examples == 30
    assert len(valid) + len(rejected) == 1


metric = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 3), st.just(10**400), st.just(-(10**400)),
                   st.none(), st.text(max_size=3), st.booleans())


@FAST
@given(auc=metric, acc=metric, loss=metric, mse=metric, r2=metric, extra=st.booleans(),
       y=weird_arrays, s=weird_arrays, task=st.sampled_from(["binary", "multiclass", "regression"]))
def test_evaluation_checks_never_raise(auc, acc, loss, mse, r2, extra, y, s, task):
    from topofl.federation.pool import ClientEvaluation

    regression = {"mse": mse, "r2": r2} if task == "regression" else {}
    metrics = {"auc": auc, "accuracy": acc, "loss": loss, **regression, **({"x": 1.0} if extra else {})}
    reason = evaluation_problem(ClientEvaluation(0, metrics, y, s), ClientInfo(0, 30, 10), task, 3)
    if reason is None:
        assert isinstance(loss, (int, float)) and math.isfinite(loss) and loss >= 0
        if task == "regression":
            assert math.isfinite(mse) and mse >= 0 and (math.isnan(r2) or r2 <= 1)


@FAST
@given(text=st.text(alphabet="0123456789-, x", max_size=20))
def test_seed_parsing_only_raises_value_error(text):
    try:
        seeds = parse_seeds(text)
    except ValueError:
        return
    assert 1 <= len(seeds) <= 1000 and all(0 <= s for s in seeds)


values = st.one_of(st.integers(-10**6, 10**20), st.just(2**64), st.just(10**400), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5),
                   st.booleans(), st.lists(st.integers(0, 3), max_size=3), st.none())


@FAST
@given(method=st.sampled_from(available()), data=st.data())
def test_hyperparameters_are_validated_at_construction(method, data):
    from topofl.methods import build as build_any
    from topofl.methods import get

    name = data.draw(st.sampled_from(sorted(get(method).config.field_help())))
    value = data.draw(values)
    try:
        build_any(method, {name: value})
    except ValueError:
        pass


@FAST
@given(items=st.lists(st.text(max_size=12), max_size=4))
def test_assignments_only_raise_value_error(items):
    try:
        parse_assignments(items, "--param")
    except ValueError:
        pass


def test_server_message_sanity():  # the fixtures above build real server messages
    algo = build("fedavg", {})
    algo.setup(make_model("binary", 5, 2), [0], np.random.default_rng(0))
    assert isinstance(algo.message_for(0), ServerMessage)


def _toml_value(v):
    import json

    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float, str)):
        return json.dumps(v)
    return "[" + ", ".join(_toml_value(x) for x in v) + "]"


toml_values = st.one_of(st.integers(-10, 10**12), st.floats(-1e9, 1e9), st.text(max_size=6), st.booleans(),
                        st.lists(st.one_of(st.integers(0, 5), st.text(max_size=4)), max_size=3))


@FAST
@given(entries=st.dictionaries(st.sampled_from(["scenario", "method", "methods", "seed", "seeds", "rounds", "client_fraction",
                                                "scenario_params", "hyperparameters", "bogus"]), toml_values, max_size=4))
def test_config_files_are_type_checked_never_crash(entries, tmp_path_factory):
    from topofl.cli_common import CONFIG_KEYS, load_toml

    path = tmp_path_factory.mktemp("toml") / "c.toml"
    path.write_text("".join(f"{k} = {_toml_value(v)}\n" for k, v in entries.items()))
    try:
        data = load_toml(path)
    except ValueError as exc:
        assert "c.toml" in str(exc)
        return
    for key, value in data.items():
        assert CONFIG_KEYS[key][1](value)
