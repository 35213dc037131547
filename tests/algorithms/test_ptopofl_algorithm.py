"""pTopoFL in whole runs: exact special cases, what is transmitted, drift, trust, clustering."""
import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from helpers import blob_client
from topofl import Federation, make_scenario, simulate
from topofl.federation.messages import BYTES_PER_FLOAT


def shared_feature_federation(k: int = 4) -> Federation:
    """Clients with identical training features (so identical descriptors) but different labels
    and sizes of test data."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((60, 5))
    clients = []
    for j in range(k):
        w = rng.standard_normal(5)
        y = (X @ w > 0).astype(float)
        Xt = rng.standard_normal((20 + j, 5))
        clients.append((X, y, Xt, (Xt @ w > 0).astype(float)))
    return Federation.from_arrays(clients)


def test_one_cluster_equal_descriptors_no_augmentation_is_exactly_fedavg():
    """M = 1 and equal descriptors: Eq. 6 weights reduce to n_k / Σn (FedAvg), trust is 1 (z = 0)."""
    fed = shared_feature_federation()
    p = simulate(fed, "ptopofl", rounds=4, seed=2, n_clusters=1, augment=False)
    f = simulate(fed, "fedavg", rounds=4, seed=2)
    np.testing.assert_allclose(p.curve("loss"), f.curve("loss"), rtol=0, atol=1e-12)
    assert p.server_logs[-1]["flagged"] == [] and set(p.server_logs[-1]["trust"].values()) == {1.0}


def test_beta_one_sends_every_client_the_same_model():
    fed = make_scenario("healthcare", seed=0)
    h = simulate(fed, "ptopofl", rounds=2, seed=0, beta=1.0)
    from topofl.federation.runner import run_federation
    from topofl.methods import build_server as build

    algo = build("ptopofl", {"beta": 1.0})
    run_federation(fed, algo, 2, seed=0)
    models = {tuple(np.round(algo.message_for(c).params, 12)) for c in fed.client_ids}
    assert len(models) == 1
    assert len(set(h.server_logs[-1]["clusters"].values())) == 2  # two clusters, one model


def test_beta_zero_keeps_clusters_apart():
    fed = make_scenario("healthcare", seed=0)
    from topofl.federation.runner import run_federation
    from topofl.methods import build_server as build

    algo = build("ptopofl", {"beta": 0.0})
    run_federation(fed, algo, 2, seed=0)
    a, b = (algo.cluster_models[j] for j in (0, 1))
    assert np.linalg.norm(a - b) > 1e-3


def test_descriptor_is_sent_once_for_static_data():
    fed = make_scenario("healthcare", seed=1)
    h = simulate(fed, "ptopofl", rounds=3, seed=0)
    p = fed.n_features + 4 + 1  # augmented logistic model: weights + intercept
    ups = {r["round"]: r["bytes_up"] for r in h.records if r["client"] == 0}
    assert ups == {1: (p + 48) * BYTES_PER_FLOAT, 2: p * BYTES_PER_FLOAT, 3: p * BYTES_PER_FLOAT}
    downs = {r["round"]: r["bytes_down"] for r in h.records if r["client"] == 0}
    assert set(downs.values()) == {p * BYTES_PER_FLOAT}


def test_clusters_recover_the_healthcare_subpopulations():
    fed = make_scenario("healthcare", seed=0)
    h = simulate(fed, "ptopofl", rounds=1, seed=0)
    labels = h.server_logs[-1]["clusters"]
    groups = [c.meta["group"] for c in fed]
    assert adjusted_rand_score(groups, [labels[c] for c in fed.client_ids]) == 1.0


def test_topological_outlier_is_flagged_and_down_weighted():
    rng = np.random.default_rng(0)
    clients = [blob_client(rng, 100) for _ in range(6)]
    X, y, Xt, yt = clients[4]
    clients[4] = (X[:, :1] * np.ones((1, 5)) * 3.0, y, Xt, yt)  # collapsed onto a line, stretched
    h = simulate(Federation.from_arrays(clients), "ptopofl", rounds=2, seed=0, n_clusters=2)
    log = h.server_logs[-1]
    assert log["flagged"] == [4]
    assert log["trust"][4] < 0.5 and all(log["trust"][k] == 1.0 for k in (0, 1, 2, 3, 5))


def test_drifting_clients_are_detected_and_stable_ones_are_not():
    fed = make_scenario("continual", seed=0)
    h = simulate(fed, "ptopofl", rounds=20, seed=0, drift_lr_boost=2.0)
    drift = h.server_logs[-1]["drift"]
    drifting = [c.client_id for c in fed if c.meta["drifting"]]
    assert all(drift[k] > 0.0 for k in drifting)
    assert all(drift[k] == 0.0 for k in fed.client_ids if k not in drifting)
    # descriptors were re-sent in later rounds only by drifting clients (data changed)
    late = [r for r in h.records if r["round"] == 10]
    p = fed.n_features + 4 + 1
    assert {r["client"] for r in late if r["bytes_up"] > p * BYTES_PER_FLOAT} == set(drifting)


def test_descriptor_schedule_recomputes_on_schedule():
    fed = make_scenario("healthcare", seed=0)
    h = simulate(fed, "ptopofl", rounds=4, seed=0, descriptor_every=2)
    sends = sorted({r["round"] for r in h.records if r["bytes_up"] > (fed.n_features + 5) * BYTES_PER_FLOAT})
    assert sends == [1, 3]


@pytest.mark.parametrize("distance", ["wasserstein", "bottleneck"])
def test_diagram_distance_clustering_transmits_diagrams(distance):
    fed = make_scenario("healthcare", seed=0)
    h = simulate(fed, "ptopofl", rounds=2, seed=0, cluster_distance=distance)
    first = [r["bytes_up"] for r in h.records if r["round"] == 1]
    p = fed.n_features + 5
    assert min(first) > (p + 48 + 100) * BYTES_PER_FLOAT  # diagrams (>= 50 pairs) ride along
    assert len(set(h.server_logs[-1]["clusters"].values())) == 2


def test_trust_can_be_switched_off():
    fed = make_scenario("healthcare", seed=1)
    h = simulate(fed, "ptopofl", rounds=1, seed=0, use_trust=False)
    assert set(h.server_logs[-1]["trust"].values()) == {1.0}


def test_privacy_accounting_per_client():
    fed = make_scenario("healthcare", seed=0)
    h = simulate(fed, "ptopofl", rounds=1, seed=0)
    m = h.client_metrics[0]
    n, d = fed[0].X_train.shape
    assert m["transmitted_descriptor_dim"] == 48
    assert m["risk_descriptor"] == pytest.approx(48 / (n * d) * 0.1)
    assert m["risk_gradient"] == pytest.approx(min(1.0, (d + 5) / (n * d)))
    assert m["mi_descriptor_bits"] == pytest.approx(np.log2(5.8))
