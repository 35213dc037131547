"""The public Python API: Federation.from_arrays, make_scenario, simulate; bad input."""
import numpy as np
import pytest

import topofl
from helpers import blob_client
from topofl import Federation, make_scenario, simulate


def test_simulate_returns_final_metrics(small_federation):
    h = simulate(small_federation, "fedavg", rounds=3, seed=1)
    f = h.final
    for key in ("auc", "accuracy", "pooled_auc", "pooled_accuracy", "auc_std", "n_clients_auc"):
        assert key in f
    assert 0.5 < f["auc"] <= 1.0 and 0.5 < f["accuracy"] <= 1.0
    assert len(h.rounds) == 3 and len(h.records) == 3 * len(small_federation)


def test_same_seed_same_numbers_different_seed_different_numbers(small_federation):
    a = simulate(small_federation, "ptopofl", rounds=3, seed=7).curve("loss")
    b = simulate(small_federation, "ptopofl", rounds=3, seed=7).curve("loss")
    c = simulate(small_federation, "ptopofl", rounds=3, seed=8).curve("loss")
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_iterating_a_scenario_yields_client_arrays():
    fed = make_scenario("benchmark", seed=0)
    for client in fed:
        X_train, y_train, X_test, y_test = client
        assert X_train.shape[1] == X_test.shape[1] == 20
        assert X_train.shape[0] == y_train.shape[0] and X_test.shape[0] == y_test.shape[0]


def test_single_class_client_trains_and_is_scored_without_auc():
    """Documented behaviour: a one-class client trains normally; its AUC is undefined (NaN) and is
    left out of the mean over clients; accuracy and pooled metrics still count it."""
    rng = np.random.default_rng(0)
    clients = [blob_client(rng, 80) for _ in range(3)]
    X = rng.standard_normal((40, 5))
    clients.append((X[:30], np.ones(30), X[30:], np.ones(10)))
    h = simulate(Federation.from_arrays(clients), "ptopofl", rounds=3, seed=0, n_clusters=2)
    last = [r for r in h.records if r["round"] == 3]
    assert np.isnan(last[3]["auc"]) and not np.isnan(last[3]["accuracy"])
    assert h.final["n_clients_auc"] == 3
    assert h.final["auc"] == pytest.approx(np.mean([r["auc"] for r in last[:3]]))
    assert np.isfinite(h.final["pooled_auc"])


def _arrays(rng, k=3, n=40, d=4):
    return [blob_client(rng, n, d) for _ in range(k)]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda a: a[1][0].__setitem__((2, 1), np.nan), "client 1 X_train contains a non-finite value (nan) at index (2, 1)"),
        (lambda a: a[0][2].__setitem__((0, 0), np.inf), "client 0 X_test contains a non-finite value (inf)"),
        (lambda a: a.__setitem__(2, (a[2][0][:2], a[2][1][:2], a[2][2], a[2][3])), "client 2 X_train needs at least 3 points; got 2"),
        (lambda a: a.__setitem__(0, (a[0][0][:, 0], a[0][1], a[0][2], a[0][3])), "client 0 X_train must be a 2-D array"),
        (lambda a: a.__setitem__(1, (a[1][0][:, :3], a[1][1], a[1][2][:, :3], a[1][3])), "client 1 has 3 features but client 0 has 4"),
        (lambda a: a.__setitem__(0, (a[0][0], a[0][1][:-1], a[0][2], a[0][3])), "client 0 y_train has 29 labels but the features have 30 rows"),
        (lambda a: a[0][1].__setitem__(0, np.nan), "client 0 y_train contains a non-finite value"),
        (lambda a: a.__setitem__(0, (a[0][0], a[0][1])), "client 0 must be (X_train, y_train, X_test, y_test); got 2 items"),
    ],
)
def test_from_arrays_rejects_bad_input_by_field(mutate, message):
    arrays = [list(t) for t in _arrays(np.random.default_rng(0))]
    mutate(arrays)
    with pytest.raises(ValueError) as err:
        Federation.from_arrays(arrays)
    assert message in str(err.value)


def test_binary_labels_must_be_zero_one():
    arrays = _arrays(np.random.default_rng(0))
    X, y, Xt, yt = arrays[0]
    arrays[0] = (X, np.where(y > 0, 1.0, 0.5), Xt, yt)
    with pytest.raises(ValueError, match=r"task='binary' needs labels \{0, 1\} or \{-1, 1\}; got \{0, 0.5, 1\}"):
        Federation.from_arrays(arrays, task="binary")


@pytest.mark.parametrize(
    "method, hp, message",
    [
        ("sgd-magic", {}, "unknown method 'sgd-magic'; available: ptopofl, fedavg, fedprox, scaffold, pfedme, ditto, perfedavg, ifca, local"),
        ("ptopofl", {"beta": 1.5}, "beta must be in [0.0, 1.0]; got 1.5"),
        ("ptopofl", {"n_clusters": 5}, "n_clusters=5 exceeds the number of clients (3)"),
        ("ptopofl", {"tau": -1.0}, "tau must be in [0.0, inf); got -1.0"),
        ("ptopofl", {"cluster_distance": "cosine"}, "cluster_distance must be one of l2, wasserstein, bottleneck; got 'cosine'"),
        ("fedavg", {"lr": 0.0}, "lr must be in (0.0, 100.0]; got 0.0"),
        ("fedavg", {"local_epochs": 0}, "local_epochs must be in [1, 10000]; got 0"),
        ("fedavg", {"n_clusters": 2}, "unknown hyper-parameter(s) n_clusters for GlobalModelConfig"),
        ("fedavg", {"batch_size": 2.5}, "batch_size must be an integer; got 2.5"),
    ],
)
def test_simulate_rejects_bad_methods_and_hyperparameters(method, hp, message):
    fed = Federation.from_arrays(_arrays(np.random.default_rng(0)))
    with pytest.raises(ValueError) as err:
        simulate(fed, method, rounds=2, **hp)
    assert message in str(err.value)


@pytest.mark.parametrize("kw, message", [
    ({"rounds": 0}, "rounds must be in [1"), ({"seed": -3}, "seed must be in [0"), ({"client_fraction": 0.0}, "client_fraction must be in (0.0, 1.0]"),
])
def test_simulate_rejects_bad_run_settings(small_federation, kw, message):
    with pytest.raises(ValueError) as err:
        simulate(small_federation, "fedavg", **{"rounds": 2, **kw})
    assert message in str(err.value)


def test_simulate_needs_a_federation():
    with pytest.raises(ValueError, match="federation must be a topofl Federation; got list"):
        simulate([1, 2], "fedavg")


def test_version_is_exposed():
    assert topofl.__version__.count(".") == 2
