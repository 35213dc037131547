"""pTopoFL's server mathematics (topofl.algorithms.ptopofl.maths), checked by hand."""
from __future__ import annotations

import numpy as np
import pytest

from topofl.algorithms.ptopofl.maths import (
    anomaly_scores,
    blend,
    cluster_centroids,
    cluster_clients,
    drift,
    intra_cluster_weights,
    nearest_cluster,
    trust_from_z,
)
from topofl.tda.distances import pairwise_euclidean

# Five clients: four identical descriptors at e1, one outlier at (1, 4).
OUTLIER_PHI = np.array([[1.0, 0.0]] * 4 + [[1.0, 4.0]])


# ---------------------------------------------------------------------------------------------
# Anomaly scores and trust
# ---------------------------------------------------------------------------------------------


def test_anomaly_scores_of_constructed_outlier_by_hand():
    delta, z = anomaly_scores(OUTLIER_PHI)
    # delta_k = mean distance to the 4 others: normal clients 4/4 = 1, outlier 16/4 = 4
    np.testing.assert_allclose(delta, [1.0, 1.0, 1.0, 1.0, 4.0])
    # mean 8/5 = 1.6; population variance (4 * 0.6^2 + 2.4^2) / 5 = 7.2 / 5 = 1.44 -> std 1.2
    # z = (1 - 1.6)/1.2 = -0.5 for the normal clients, (4 - 1.6)/1.2 = 2 for the outlier
    # (the sample std sqrt(1.8) would give 1.789 instead)
    np.testing.assert_allclose(z, [-0.5, -0.5, -0.5, -0.5, 2.0], atol=1e-12)
    assert int(np.argmax(z)) == 4


def test_trust_of_constructed_outlier_by_hand():
    _, z = anomaly_scores(OUTLIER_PHI)
    t, flagged = trust_from_z(z, tau=1.5)
    # t = exp(-max(z - 1, 0)): normal clients z = -0.5 -> 1; outlier z = 2 -> exp(-1)
    np.testing.assert_allclose(t, [1.0, 1.0, 1.0, 1.0, np.exp(-1.0)], atol=1e-12)
    np.testing.assert_array_equal(flagged, [False, False, False, False, True])
    # with tau above the outlier's z nothing is flagged, but gate="all" still down-weights it
    t, flagged = trust_from_z(z, tau=2.5)
    assert not flagged.any()
    assert t[4] == pytest.approx(np.exp(-1.0))
    # gate="flagged" only down-weights flagged clients
    t, _ = trust_from_z(z, tau=2.5, gate="flagged")
    np.testing.assert_array_equal(t, np.ones(5))


def test_trust_from_z_gates_and_strict_threshold():
    z = np.array([0.5, 1.5, 3.0, 2.0])
    t_all, flagged = trust_from_z(z, tau=2.0)
    np.testing.assert_allclose(t_all, [1.0, np.exp(-0.5), np.exp(-2.0), np.exp(-1.0)])
    np.testing.assert_array_equal(flagged, [False, False, True, False])  # z = tau is not flagged
    t_flag, flagged2 = trust_from_z(z, tau=2.0, gate="flagged")
    np.testing.assert_allclose(t_flag, [1.0, 1.0, np.exp(-2.0), 1.0])
    np.testing.assert_array_equal(flagged2, flagged)


def test_anomaly_scores_equal_descriptors_give_zero_z():
    phi = np.tile(np.array([0.3, 1.0, 2.0]), (6, 1))
    delta, z = anomaly_scores(phi)
    np.testing.assert_array_equal(delta, np.zeros(6))
    np.testing.assert_array_equal(z, np.zeros(6))
    t, flagged = trust_from_z(z, tau=0.0)
    np.testing.assert_array_equal(t, np.ones(6))
    assert not flagged.any()


def test_anomaly_scores_symmetric_configuration_gives_zero_z():
    # vertices of an equilateral-like configuration: all delta equal (non-zero), std 0 -> z = 0
    phi = np.eye(3)
    delta, z = anomaly_scores(phi)
    np.testing.assert_allclose(delta, np.full(3, np.sqrt(2.0)))
    np.testing.assert_array_equal(z, np.zeros(3))


def test_anomaly_scores_single_client():
    delta, z = anomaly_scores(np.array([[1.0, 2.0]]))
    np.testing.assert_array_equal(delta, [0.0])
    np.testing.assert_array_equal(z, [0.0])


# ---------------------------------------------------------------------------------------------
# Aggregation weights and blending
# ---------------------------------------------------------------------------------------------


def test_intra_cluster_weights_reduce_to_fedavg_with_equal_descriptors():
    n = np.array([10, 30, 60, 100])
    phi_hat = np.tile([0.6, 0.8], (4, 1))
    w = intra_cluster_weights(n, phi_hat, centroid=np.array([0.6, 0.8]), trust=np.ones(4))
    np.testing.assert_allclose(w, n / n.sum(), atol=1e-15)  # 0.05, 0.15, 0.3, 0.5
    # the same when the centroid is off but equidistant from every client
    w2 = intra_cluster_weights(n, phi_hat, centroid=np.array([1.0, 0.0]), trust=np.ones(4))
    np.testing.assert_allclose(w2, [0.05, 0.15, 0.3, 0.5], atol=1e-15)


def test_intra_cluster_weights_hand_example():
    n = np.array([1, 1, 2])
    phi_hat = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    trust = np.array([1.0, 1.0, 0.5])
    w = intra_cluster_weights(n, phi_hat, np.zeros(2), trust)
    # unnormalised: 1*e^0*1, 1*e^-1*1, 2*e^0*0.5 = 1, e^-1, 1
    raw = np.array([1.0, np.exp(-1.0), 1.0])
    np.testing.assert_allclose(w, raw / raw.sum(), atol=1e-15)
    assert w.sum() == pytest.approx(1.0)


def test_intra_cluster_weights_without_mass_raise():
    with pytest.raises(ValueError, match="no positive mass"):
        intra_cluster_weights(np.array([5, 5]), np.zeros((2, 2)), np.zeros(2), np.zeros(2))


CLUSTER_MODELS = {0: np.array([1.0, 0.0]), 1: np.array([0.0, 1.0]), 2: np.array([2.0, 2.0])}
SIZES = {0: 2, 1: 1, 2: 1}
# consensus = 2/4 (1, 0) + 1/4 (0, 1) + 1/4 (2, 2) = (0.5 + 0.5, 0.25 + 0.5) = (1.0, 0.75)
CONSENSUS = np.array([1.0, 0.75])


def test_blend_beta_one_gives_size_weighted_consensus_everywhere():
    out = blend(CLUSTER_MODELS, SIZES, beta=1.0)
    assert set(out) == {0, 1, 2}
    for j in out:
        np.testing.assert_allclose(out[j], CONSENSUS, atol=1e-15)


def test_blend_beta_zero_returns_cluster_models():
    out = blend(CLUSTER_MODELS, SIZES, beta=0.0)
    for j, theta in CLUSTER_MODELS.items():
        np.testing.assert_array_equal(out[j], theta)


def test_blend_intermediate_beta_by_hand():
    out = blend(CLUSTER_MODELS, SIZES, beta=0.5)
    np.testing.assert_allclose(out[0], [1.0, 0.375])  # (0.5 * (1, 0) + 0.5 * (1, 0.75))
    np.testing.assert_allclose(out[1], [0.5, 0.875])
    np.testing.assert_allclose(out[2], [1.5, 1.375])


def test_blend_ignores_sizes_of_absent_clusters_and_rejects_empty():
    # cluster 5 has a size but no model: K counts only clusters with a model
    out = blend({0: np.array([2.0]), 1: np.array([4.0])}, {0: 1, 1: 3, 5: 100}, beta=1.0)
    np.testing.assert_allclose(out[0], [3.5])  # 1/4 * 2 + 3/4 * 4
    with pytest.raises(ValueError, match="at least one non-empty cluster"):
        blend({0: np.array([1.0])}, {0: 0}, beta=0.5)


# ---------------------------------------------------------------------------------------------
# Drift
# ---------------------------------------------------------------------------------------------


def test_drift_of_constant_history_is_zero():
    assert drift(np.tile([1.0, 2.0, 3.0], (5, 1))) == 0.0


def test_drift_of_linear_history_by_hand():
    a, v = np.array([1.0, -2.0]), np.array([3.0, 4.0])  # |v| = 5
    hist = np.stack([a, a + v, a + 2 * v])
    # (0 + 5 + 10) / 3 = 5
    assert drift(hist) == pytest.approx(5.0)
    assert drift(a) == 0.0  # a single round


# ---------------------------------------------------------------------------------------------
# Clustering
# ---------------------------------------------------------------------------------------------


def test_cluster_clients_recovers_two_groups_numbered_by_first_appearance():
    pts = np.array([[10.0, 0.0], [0.0, 0.1], [0.1, 0.0], [10.1, 0.1], [0.0, 0.0], [9.9, 0.0]])
    labels = cluster_clients(pairwise_euclidean(pts), n_clusters=2)
    np.testing.assert_array_equal(labels, [0, 1, 1, 0, 1, 0])


def test_cluster_clients_three_groups_labels_in_order_of_first_appearance():
    centres = np.array([[5.0, 5.0], [0.0, 0.0], [-5.0, 5.0]])
    assign = [2, 0, 0, 1, 2, 1, 0]
    pts = centres[assign] + np.random.default_rng(0).normal(0, 0.05, (7, 2))
    labels = cluster_clients(pairwise_euclidean(pts), n_clusters=3)
    # client 0 (group 2) -> 0, client 1 (group 0) -> 1, client 3 (group 1) -> 2
    np.testing.assert_array_equal(labels, [0, 1, 1, 2, 0, 2, 1])


def test_cluster_clients_edge_cases():
    D = pairwise_euclidean(np.random.default_rng(1).standard_normal((4, 3)))
    np.testing.assert_array_equal(cluster_clients(D, 1), np.zeros(4, dtype=int))
    np.testing.assert_array_equal(cluster_clients(D, 4), np.arange(4))
    with pytest.raises(ValueError, match=r"n_clusters must be in \[1, 4\].*got 5"):
        cluster_clients(D, 5)
    with pytest.raises(ValueError, match="n_clusters"):
        cluster_clients(D, 0)


def test_nearest_cluster_and_centroids():
    assert nearest_cluster(np.array([0.9, 0.8]), {3: np.zeros(2), 7: np.ones(2)}) == 7
    assert nearest_cluster(np.array([0.1, 0.0]), {3: np.zeros(2), 7: np.ones(2)}) == 3
    phi = {0: np.array([2.0, 0.0]), 1: np.array([0.0, 3.0]), 2: np.array([0.0, 5.0]), 4: np.array([3.0, 4.0])}
    labels = {0: 0, 1: 1, 2: 1, 3: 1, 4: 0}  # client 3 has no descriptor and is skipped
    cents = cluster_centroids(phi, labels)
    assert set(cents) == {0, 1}
    # cluster 0: mean of (1, 0) and (0.6, 0.8) = (0.8, 0.4); cluster 1: (0, 1) twice
    np.testing.assert_allclose(cents[0], [0.8, 0.4])
    np.testing.assert_allclose(cents[1], [0.0, 1.0])


def test_trust_gate_is_validated():
    with pytest.raises(ValueError, match="gate must be one of all, flagged; got 'flaged'"):
        trust_from_z(np.array([1.5]), 2.0, gate="flaged")


# ---------------------------------------------------------------------------------------------
# Wasserstein-exponential weights (Eq. 12)
# ---------------------------------------------------------------------------------------------


def test_wasserstein_weights_by_hand():
    from topofl.algorithms.ptopofl.maths import wasserstein_weights

    # exp(-1·0) = 1, exp(-1·ln 2) = 1/2: weights 2/3, 1/3
    np.testing.assert_allclose(wasserstein_weights(np.array([0.0, np.log(2.0)]), 1.0), [2 / 3, 1 / 3])
    # λ = 2 squares the ratio: 1 : 1/4
    np.testing.assert_allclose(wasserstein_weights(np.array([0.0, np.log(2.0)]), 2.0), [0.8, 0.2])
    # a common shift of the distances leaves them unchanged, and large distances do not underflow to 0/0
    np.testing.assert_allclose(wasserstein_weights(np.array([1000.0, 1000.0 + np.log(2.0)]), 1.0), [2 / 3, 1 / 3])
    np.testing.assert_allclose(wasserstein_weights(np.array([3.0, 3.0, 3.0]), 5.0), [1 / 3] * 3)


def test_wasserstein_weights_bound_adversarial_mass_as_theorem_3_5():
    """ε K clients at distance Δ beyond the others get Σ_A α = ε e^{−λΔ} / ((1 − ε) + ε e^{−λΔ})."""
    from topofl.algorithms.ptopofl.maths import wasserstein_weights

    eps, lam, delta = 0.25, 2.0, 0.7
    W = np.array([1.0] * 6 + [1.0 + delta] * 2)  # K = 8, ε K = 2 adversaries
    a = wasserstein_weights(W, lam)
    bound = eps * np.exp(-lam * delta) / ((1 - eps) + eps * np.exp(-lam * delta))
    assert a[6:].sum() == pytest.approx(bound, rel=1e-12)
    # The theorem's second claim, Σ_A α <= ε² once λΔ >= log((1 − ε)/ε), does not follow from the
    # first: at equality the mass is ε² / ((1 − ε)² + ε²) — 0.1 for ε = 1/4, above ε² = 0.0625 —
    # which is at most 2ε² for ε <= 1/2 (docs/ptopofl-options.md)
    lam2 = np.log((1 - eps) / eps) / delta
    mass = wasserstein_weights(W, lam2)[6:].sum()
    assert mass == pytest.approx(eps**2 / ((1 - eps) ** 2 + eps**2), rel=1e-12)
    assert eps**2 < mass <= 2 * eps**2


@pytest.mark.parametrize("bad", [np.array([-1.0, 0.0]), np.array([np.nan]), np.array([])])
def test_wasserstein_weights_refuse_bad_distances(bad):
    from topofl.algorithms.ptopofl.maths import wasserstein_weights

    with pytest.raises(ValueError, match="distances must be"):
        wasserstein_weights(bad, 1.0)
    with pytest.raises(ValueError, match="temperature must be"):
        wasserstein_weights(np.array([1.0]), 0.0)
