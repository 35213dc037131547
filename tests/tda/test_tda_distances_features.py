"""Diagram and descriptor distances (topofl.tda.distances) and TopoContext (topofl.tda.features)."""
from __future__ import annotations

import numpy as np
import pytest

from topofl.tda import (
    FEATURE_NAMES,
    TopoContext,
    bottleneck,
    descriptor_distance,
    diagrams,
    normalise_rows,
    pairwise_descriptor_distances,
    pairwise_diagram_distances,
    wasserstein,
)

EMPTY = np.empty((0, 2))
UNIT_SQUARE = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])


# ---------------------------------------------------------------------------------------------
# Diagram distances (L-infinity ground metric: matching (b, d) to the diagonal costs (d - b) / 2)
# ---------------------------------------------------------------------------------------------


def test_bottleneck_and_wasserstein_of_nearby_single_points():
    a, b = np.array([[0.0, 1.0]]), np.array([[0.0, 1.1]])
    # direct match costs max(|0-0|, |1-1.1|) = 0.1; both to the diagonal would cost 0.5 and 0.55
    assert bottleneck(a, b) == pytest.approx(0.1, abs=1e-9)
    assert wasserstein(a, b, p=2) == pytest.approx(0.1, abs=1e-9)
    assert wasserstein(a, b, p=1) == pytest.approx(0.1, abs=1e-9)


def test_distances_of_identical_diagrams_are_zero():
    d = np.array([[0.0, 1.0], [0.2, 0.9], [0.5, 3.0]])
    assert wasserstein(d, d) == pytest.approx(0.0, abs=1e-12)
    assert wasserstein(d, d.copy(), p=1) == pytest.approx(0.0, abs=1e-12)
    assert bottleneck(d, d) == pytest.approx(0.0, abs=1e-12)
    assert wasserstein(EMPTY, EMPTY) == 0.0


def test_distances_against_empty_diagram():
    d = np.array([[0.0, 2.0], [1.0, 2.0]])
    # bottleneck: largest half-persistence = 2/2 = 1
    assert bottleneck(d, EMPTY) == pytest.approx(1.0, abs=1e-9)
    assert bottleneck(EMPTY, d) == pytest.approx(1.0, abs=1e-9)
    # 2-Wasserstein: sqrt(1^2 + 0.5^2) = sqrt(1.25); 1-Wasserstein: 1 + 0.5
    assert wasserstein(d, EMPTY, p=2) == pytest.approx(np.sqrt(1.25), abs=1e-9)
    assert wasserstein(d, [], p=1) == pytest.approx(1.5, abs=1e-9)


def test_matching_to_the_diagonal_when_cheaper():
    # (0, 4) vs (1, 3): direct L-inf cost 1, vs 2 + 1 via the diagonal -> 1
    assert wasserstein([[0.0, 4.0]], [[1.0, 3.0]], p=1) == pytest.approx(1.0, abs=1e-9)
    # (0, 1) vs (5, 6): direct cost 5; via the diagonal 0.5 each -> bottleneck 0.5, W1 = 1
    assert bottleneck([[0.0, 1.0]], [[5.0, 6.0]]) == pytest.approx(0.5, abs=1e-9)
    assert wasserstein([[0.0, 1.0]], [[5.0, 6.0]], p=1) == pytest.approx(1.0, abs=1e-9)


def test_diagram_distances_are_symmetric():
    rng = np.random.default_rng(0)
    d1 = diagrams(rng.standard_normal((30, 2)))[1]
    d2 = diagrams(rng.standard_normal((30, 2)))[1]
    assert wasserstein(d1, d2) == pytest.approx(wasserstein(d2, d1), rel=1e-9)
    assert bottleneck(d1, d2) == pytest.approx(bottleneck(d2, d1), rel=1e-9)
    assert bottleneck(d1, d2) <= wasserstein(d1, d2, p=1) + 1e-12


def test_diagram_distance_input_validation():
    with pytest.raises(ValueError, match="d2 must hold finite"):
        wasserstein([[0.0, 1.0]], [[0.0, np.inf]])
    with pytest.raises(ValueError, match="d1 must hold finite"):
        bottleneck([[0.0, np.nan]], [[0.0, 1.0]])
    with pytest.raises(ValueError, match=r"p must be in \[1.0, inf\)"):
        wasserstein([[0.0, 1.0]], [[0.0, 1.0]], p=0.5)


# ---------------------------------------------------------------------------------------------
# Descriptor distances
# ---------------------------------------------------------------------------------------------


def test_normalise_rows_unit_norm_and_zero_rows_stay_zero():
    phi = np.array([[3.0, 4.0], [0.0, 0.0], [0.0, -2.0]])
    out = normalise_rows(phi)
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0], [0.0, -1.0]], atol=1e-15)
    assert np.isfinite(out).all()
    # a single vector becomes a (1, m) row
    np.testing.assert_allclose(normalise_rows(np.array([0.0, 5.0])), [[0.0, 1.0]])


def test_descriptor_distance_is_scale_invariant_and_hand_checked():
    a = np.random.default_rng(1).uniform(0.1, 5.0, 48)
    assert descriptor_distance(a, 5.0 * a) == pytest.approx(0.0, abs=1e-12)
    # orthogonal unit vectors: ||e1 - e2|| = sqrt 2
    assert descriptor_distance(np.array([2.0, 0.0]), np.array([0.0, 7.0])) == pytest.approx(np.sqrt(2.0))
    # (3, 4)/5 vs (1, 0): ||(-0.4, 0.8)|| = sqrt(0.8)
    assert descriptor_distance(np.array([3.0, 4.0]), np.array([1.0, 0.0])) == pytest.approx(np.sqrt(0.8))


def test_pairwise_descriptor_distances_symmetric_zero_diagonal_and_matches_pairs():
    phi = np.random.default_rng(2).uniform(0.0, 3.0, (6, 48))
    phi[2] = 4.0 * phi[0]  # same direction as client 0
    D = pairwise_descriptor_distances(phi)
    assert D.shape == (6, 6)
    np.testing.assert_array_equal(D, D.T)
    np.testing.assert_array_equal(np.diag(D), np.zeros(6))
    assert D[0, 2] == pytest.approx(0.0, abs=1e-6)
    for i in range(6):
        for j in range(6):
            assert D[i, j] == pytest.approx(descriptor_distance(phi[i], phi[j]), abs=1e-7)


def test_pairwise_diagram_distances_sums_over_dimensions():
    a = [np.array([[0.0, 1.0]]), np.array([[0.0, 2.0]])]
    b = [np.array([[0.0, 1.1]]), EMPTY]
    c = [np.array([[0.0, 1.0]]), np.array([[0.0, 2.0]])]
    D = pairwise_diagram_distances([a, b, c], metric="bottleneck")
    # a-b: 0.1 (H0) + 2/2 (H1 to the diagonal) = 1.1; a-c: 0; b-c = a-b
    np.testing.assert_allclose(D, [[0.0, 1.1, 0.0], [1.1, 0.0, 1.1], [0.0, 1.1, 0.0]], atol=1e-9)
    W = pairwise_diagram_distances([a, b, c], metric="wasserstein", p=1)
    np.testing.assert_allclose(W, D, atol=1e-9)  # single points: W1 = bottleneck here


def test_pairwise_diagram_distances_symmetric_with_zero_diagonal():
    rng = np.random.default_rng(3)
    dgms = [diagrams(rng.standard_normal((25, 2)) * (1 + k)) for k in range(4)]
    D = pairwise_diagram_distances(dgms)
    np.testing.assert_array_equal(D, D.T)
    np.testing.assert_array_equal(np.diag(D), np.zeros(4))
    assert (D[~np.eye(4, dtype=bool)] > 0).all()
    assert D[0, 1] == pytest.approx(wasserstein(dgms[0][0], dgms[1][0]) + wasserstein(dgms[0][1], dgms[1][1]))


def test_pairwise_diagram_distances_unknown_metric():
    with pytest.raises(ValueError, match="metric must be one of wasserstein, bottleneck; got 'l2'"):
        pairwise_diagram_distances([[EMPTY], [EMPTY]], metric="l2")


# ---------------------------------------------------------------------------------------------
# TopoContext: per-sample TDA features
# ---------------------------------------------------------------------------------------------


def test_feature_names():
    assert FEATURE_NAMES == ("centroid_distance", "h0_entropy", "h1_entropy", "betti0_median")


def test_topo_context_of_unit_square_by_hand():
    dgms = diagrams(UNIT_SQUARE)  # H0 = 3 x [0, 1), H1 = [1, sqrt 2)
    ctx = TopoContext.from_data(UNIT_SQUARE, dgms, n_points=4)
    np.testing.assert_allclose(ctx.centroid, [0.5, 0.5])
    # every corner is sqrt(0.5) from the centre
    assert ctx.scale == pytest.approx(np.sqrt(0.5))
    # H0 entropy ln3 / ln3 = 1; H1 has a single pair -> 0;
    # thresholds linspace(0, 1, 21), median t = 0.5: all 3 H0 pairs alive -> 3 / 4 points
    np.testing.assert_allclose(ctx.client_stats, [1.0, 0.0, 0.75], atol=1e-6)
    F = ctx.transform(np.array([[0.5, 0.5], [0.0, 0.0], [1.5, 0.5]]))
    # distances 0, sqrt(.5), 1 divided by sqrt(.5)
    np.testing.assert_allclose(F[:, 0], [0.0, 1.0, np.sqrt(2.0)])
    np.testing.assert_allclose(F[:, 1:], np.tile([1.0, 0.0, 0.75], (3, 1)), atol=1e-6)


def test_topo_context_columns_on_random_client():
    rng = np.random.default_rng(4)
    X = rng.normal(2.0, 1.5, (51, 3))
    dgms = diagrams(X)
    ctx = TopoContext.from_data(X, dgms, n_points=X.shape[0])
    F = ctx.transform(X)
    assert F.shape == (51, 4)
    dist = np.linalg.norm(X - X.mean(axis=0), axis=1)
    np.testing.assert_allclose(F[:, 0], dist / np.median(dist), rtol=1e-12)
    assert np.median(F[:, 0]) == pytest.approx(1.0, abs=1e-12)
    # the three client-level columns are constant and equal to the stored statistics
    np.testing.assert_array_equal(F[:, 1:], np.tile(ctx.client_stats, (51, 1)))
    h0, h1, b0 = ctx.client_stats
    assert 0.0 <= h0 <= 1.0 and 0.0 <= h1 <= 1.0
    assert 0.0 < h0 and 0.0 < h1  # many pairs of unequal persistence
    assert 0.0 <= b0 <= 1.0
    # new points: same stats, distance measured from the training centroid
    Xn = rng.normal(0.0, 1.0, (7, 3))
    Fn = ctx.transform(Xn)
    np.testing.assert_allclose(Fn[:, 0], np.linalg.norm(Xn - X.mean(axis=0), axis=1) / np.median(dist))
    np.testing.assert_array_equal(Fn[:, 1:], np.tile(ctx.client_stats, (7, 1)))


def test_topo_context_augment_appends_four_columns():
    X = np.random.default_rng(5).standard_normal((20, 5))
    ctx = TopoContext.from_data(X, diagrams(X), n_points=20)
    A = ctx.augment(X)
    assert A.shape == (20, 9)
    np.testing.assert_array_equal(A[:, :5], X)
    np.testing.assert_array_equal(A[:, 5:], ctx.transform(X))


def test_topo_context_degenerate_scale_falls_back_to_one():
    # more than half the points at the centroid: median distance 0 -> scale 1 (no division by 0)
    X = np.array([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [-1.0, 0.0]])
    ctx = TopoContext.from_data(X, diagrams(X), n_points=5)
    assert ctx.scale == 1.0
    np.testing.assert_allclose(ctx.transform(X)[:, 0], [0.0, 0.0, 0.0, 1.0, 1.0])


def test_topological_sample_weights_by_hand():
    """§3.2 as the paper-era code weights samples: exp(−‖x − x̄‖ / max(A_0, 0.1)), mean one, clipped to [0.2, 5]."""
    from topofl.tda.features import topological_sample_weights

    X = np.array([[-1.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])  # centroid 0; distances 1, 1, 0, 0
    dgm0 = np.array([[0.0, 3.0], [0.0, 4.0]])  # A_0 = √(9 + 16) = 5
    raw = np.array([np.exp(-0.2), np.exp(-0.2), 1.0, 1.0])
    np.testing.assert_allclose(topological_sample_weights(X, dgm0), raw / raw.mean())
    # no H0 pairs: the scale floor 0.1; far points fall to the lower clip, the near one to the upper
    ring = np.vstack([[[0.0, 0.0]], 10 * np.column_stack([np.cos(np.arange(6) * np.pi / 3), np.sin(np.arange(6) * np.pi / 3)])])
    w = topological_sample_weights(ring, np.empty((0, 2)))  # centre at distance 0, six points at 10: e^{-100} ≈ 0
    np.testing.assert_allclose(w, [5.0] + [0.2] * 6)  # before clipping: 7 and ~0
    with pytest.raises(ValueError, match="non-empty"):
        topological_sample_weights(np.empty((0, 3)), dgm0)
