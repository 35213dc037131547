"""pTopoFL's faithfulness options: Eq. 12's Wasserstein-exponential weights, §3.2 as sample weights,
and clustering on trained models (cluster_after, recluster_every)."""
import numpy as np
import pytest

from topofl import make_scenario, simulate
from topofl.algorithms.ptopofl import PTopoFLConfig
from topofl.algorithms.ptopofl import algorithm as ptopofl_module
from topofl.algorithms.ptopofl.maths import wasserstein_weights
from topofl.federation.messages import BYTES_PER_FLOAT
from topofl.federation.runner import run_federation
from topofl.methods import build_server
from topofl.tda.barycentre import diagram_barycentre, distances_to_barycentre


def _recording(hp):
    """A pTopoFL whose every call of ``_aggregate`` records (member ids, member models, weights)."""
    algo = build_server("ptopofl", hp)
    calls = []
    inner = algo._aggregate

    def record(members, w, robust, group, everyone):
        calls.append(([u.client_id for u in members], np.vstack([u.params for u in members]), np.array(w)))
        return inner(members, w, robust, group, everyone)

    algo._aggregate = record
    return algo, calls


def test_eq12_weights_are_the_softmax_of_distances_to_the_cluster_barycentre():
    fed = make_scenario("healthcare", seed=0)
    algo, calls = _recording({"intra_weighting": "wasserstein_exp", "wasserstein_temperature": 0.7, "n_sub": 40})
    h = run_federation(fed, algo, 2, seed=0)
    log = h.server_logs[-1]
    assert len(calls) == 4  # two clusters, two rounds
    for ids, _, w in calls[2:]:
        group = sorted(c for c, j in algo.labels.items() if j == algo.labels[ids[0]])
        bary = diagram_barycentre([algo.dgms[c] for c in group])
        W = distances_to_barycentre([algo.dgms[c] for c in ids], bary)
        np.testing.assert_allclose(w, wasserstein_weights(W, 0.7), rtol=1e-12)  # no n_k, no t_k (Eq. 12)
        np.testing.assert_allclose([log["barycentre_distance"][c] for c in ids], W, rtol=1e-12)


def test_eq12_with_a_large_temperature_gives_each_cluster_its_most_central_client():
    fed = make_scenario("healthcare", seed=1)
    algo, calls = _recording({"intra_weighting": "wasserstein_exp", "wasserstein_temperature": 1e4, "beta": 0.0})
    h = run_federation(fed, algo, 1, seed=0)
    dist = h.server_logs[-1]["barycentre_distance"]
    for ids, params, w in calls:
        nearest = int(np.argmin([dist[c] for c in ids]))
        assert w[nearest] == pytest.approx(1.0)
        np.testing.assert_allclose(algo.cluster_raw[algo.labels[ids[0]]], params[nearest], atol=1e-12)


def test_eq12_needs_the_diagrams_and_counts_them():
    fed = make_scenario("healthcare", seed=0)
    h = simulate(fed, "ptopofl", rounds=2, seed=0, intra_weighting="wasserstein_exp")
    p = fed.n_features + 5
    first = [r["bytes_up"] for r in h.records if r["round"] == 1]
    assert min(first) > (p + 48 + 100) * BYTES_PER_FLOAT  # diagrams (>= 50 pairs) ride along
    assert {r["bytes_up"] for r in h.records if r["round"] == 2} == {p * BYTES_PER_FLOAT}
    algo = build_server("ptopofl", {"intra_weighting": "wasserstein_exp"})
    run_federation(fed, algo, 1, seed=0)
    from topofl.federation.messages import ClientUpdate, ServerMessage
    from topofl.federation.validation import ClientInfo

    msg = ServerMessage(np.zeros(p), config={"need_descriptor": True})
    info = ClientInfo(0, fed[0].X_train.shape[0], fed[0].X_test.shape[0])
    update = ClientUpdate(0, np.zeros(p), 10, descriptor=algo.phi[0])
    assert algo.reply_problem(update, msg, info) == "intra_weighting='wasserstein_exp' needs the diagrams dgm0 and dgm1 with the descriptor"
    assert set(algo.reply_schema(0, msg, info).extras) == {"dgm0", "dgm1"}


@pytest.mark.parametrize(("hp", "field"), [
    ({"intra_weighting": "wasserstein"}, "intra_weighting"),
    ({"wasserstein_temperature": 0.0}, "wasserstein_temperature"),
    ({"topo_features": "features"}, "topo_features"),
    ({"topo_features": "sample_weight", "augment": "on"}, "contradicts augment"),
    ({"topo_features": "augment", "augment": False}, "contradicts augment"),
    ({"cluster_after": -1}, "cluster_after"),
    ({"recluster_every": 1.5}, "recluster_every"),
    ({"intra_weighting": "wasserstein_exp", "descriptor_dp_radius": 5.0}, "sent without noise"),
    ({"intra_weighting": "wasserstein_exp", "dp_noise_multiplier": 1.0}, "uniform weights"),
])
def test_options_are_validated(hp, field):
    with pytest.raises(ValueError, match=field):
        PTopoFLConfig(**hp)


def test_sample_weighting_trains_on_the_weighted_loss(monkeypatch):
    fed = make_scenario("healthcare", seed=2)
    off = simulate(fed, "ptopofl", rounds=3, seed=0, topo_features="off")
    weighted = simulate(fed, "ptopofl", rounds=3, seed=0, topo_features="sample_weight")
    assert not np.array_equal(weighted.curve("loss"), off.curve("loss"))
    # unit weights: the weighted path is the unweighted one, bit for bit; no features are appended
    monkeypatch.setattr(ptopofl_module, "topological_sample_weights", lambda points, dgm0: np.ones(points.shape[0]))
    ones = simulate(fed, "ptopofl", rounds=3, seed=0, topo_features="sample_weight")
    np.testing.assert_array_equal(ones.curve("loss"), off.curve("loss"))
    assert build_server("ptopofl", {"topo_features": "sample_weight"}).input_dim(fed.n_features) == fed.n_features


def test_topo_features_follows_and_keeps_augment():
    algo = build_server("ptopofl", {})
    assert (algo.topo_mode(False), algo.topo_mode(True)) == ("augment", "off")
    assert build_server("ptopofl", {"augment": False}).topo_mode(False) == "off"
    assert build_server("ptopofl", {"topo_features": "sample_weight"}).topo_mode(True) == "sample_weight"
    with pytest.raises(ValueError, match="topo_features='augment' appends"):
        build_server("ptopofl", {"topo_features": "augment"}).topo_mode(True)


def test_warm_up_clusters_after_n_rounds_on_descriptors_sent_again():
    fed = make_scenario("healthcare", seed=0)
    base = simulate(fed, "ptopofl", rounds=4, seed=0)
    h = simulate(fed, "ptopofl", rounds=4, seed=0, cluster_after=2)
    logs = h.server_logs
    assert [bool(g["clusters"]) for g in logs] == [False, False, True, True]
    assert logs[0]["waiting"] == "warm-up round 1 of cluster_after=2: clustering waits"
    assert logs[2].get("reclustered_all") and "reclustered_all" not in logs[3]
    # data descriptors on the same rows of the same data: the same φ, so the same clusters as without warm-up
    assert logs[2]["clusters"] == base.server_logs[0]["clusters"]
    sends = sorted({r["round"] for r in h.records if r["bytes_up"] > (fed.n_features + 9) * BYTES_PER_FLOAT})
    assert sends == [1, 3]


def test_reclustering_on_unchanged_descriptors_changes_nothing_but_the_bytes():
    fed = make_scenario("healthcare", seed=0)
    base = simulate(fed, "ptopofl", rounds=5, seed=0)
    h = simulate(fed, "ptopofl", rounds=5, seed=0, recluster_every=2)
    np.testing.assert_array_equal(h.curve("auc"), base.curve("auc"))  # same clusters, each continuing from its own model
    assert [r for r, g in enumerate(h.server_logs, 1) if g.get("reclustered_all")] == [3, 5]
    sends = sorted({r["round"] for r in h.records if r["bytes_up"] > (fed.n_features + 9) * BYTES_PER_FLOAT})
    assert sends == [1, 3, 5]


def test_warm_up_describes_the_trained_representation():
    """With a torch model and descriptor_space='representation', φ after the warm-up is the trained network's."""
    pytest.importorskip("torch")
    fed = make_scenario("healthcare", seed=0)
    algo = build_server("ptopofl", {"descriptor_space": "representation", "cluster_after": 2, "n_sub": 40})
    seen = []
    run_federation(fed, algo, 3, seed=0, model="mlp", on_round=lambda history, summary: seen.append(dict(algo.phi)))
    assert all(np.array_equal(seen[0][c], seen[1][c]) for c in seen[0])  # the warm-up keeps the first φ
    assert all(not np.array_equal(seen[0][c], seen[2][c]) for c in seen[2])  # round 3: φ of the trained network
    assert all(len(v) == 1 for v in algo.history.values())  # the drift history restarts on the fresh φ
