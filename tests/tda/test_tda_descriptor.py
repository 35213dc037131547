"""The pTopoFL descriptor φ (topofl.tda.descriptor), its layout and the sklearn transformer."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from topofl.tda import (
    DESCRIPTOR_DIM,
    LAYOUT,
    DescriptorLayout,
    betti_curve,
    descriptor,
    descriptor_from_diagrams,
    descriptors,
    persistence_entropy,
)
from topofl.tda.descriptor import client_seed
from topofl.tda.sklearn import TopologicalDescriptor

SCALAR_NAMES = (
    "h0_betti",
    "h1_betti",
    "h0_entropy",
    "h1_entropy",
    "h0_amplitude",
    "h1_amplitude",
    "h0_n_persistent",
    "h1_n_persistent",
)
UNIT_SQUARE = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])


def _cloud(n: int = 60, d: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d))


def _noisy_circle(n: int = 100, noise: float = 0.05, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    theta = rng.uniform(0.0, 2.0 * np.pi, n)
    return np.c_[np.cos(theta), np.sin(theta)] + rng.normal(0.0, noise, (n, 2))


# ---------------------------------------------------------------------------------------------
# Layout
# ---------------------------------------------------------------------------------------------


def test_layout_has_48_unique_names_scalars_first():
    assert len(LAYOUT) == 48 == DESCRIPTOR_DIM
    names = LAYOUT.names
    assert len(names) == 48
    assert len(set(names)) == 48
    assert names[:8] == SCALAR_NAMES
    assert names[8] == "h0_curve_00" and names[27] == "h0_curve_19"
    assert names[28] == "h1_curve_00" and names[47] == "h1_curve_19"


def test_layout_index_and_slices():
    assert LAYOUT.index("h0_entropy") == 2
    assert LAYOUT.index("h1_n_persistent") == 7
    assert LAYOUT.index("h1_curve_07") == 8 + 20 + 7
    assert LAYOUT.slice("scalars") == slice(0, 8)
    assert LAYOUT.slice("h0_curve") == slice(8, 28)
    assert LAYOUT.slice("h1_curve") == slice(28, 48)


def test_layout_for_other_resolutions():
    lay = DescriptorLayout(n_thresholds=5)
    assert len(lay) == 8 + 2 * 5
    assert lay.names[-1] == "h1_curve_04"
    assert lay.index("h1_curve_00") == 13
    assert len(descriptor(_cloud(), n_thresholds=5)) == 18


def test_layout_get_on_a_batch_and_a_single_descriptor():
    batch = np.arange(3 * 48, dtype=float).reshape(3, 48)
    np.testing.assert_array_equal(LAYOUT.get(batch, "h0_entropy"), batch[:, 2])
    np.testing.assert_array_equal(LAYOUT.get(batch, "h1_curve"), batch[:, 28:48])
    np.testing.assert_array_equal(LAYOUT.get(batch, "scalars"), batch[:, :8])
    assert LAYOUT.get(batch[1], "h1_amplitude") == batch[1, 5]


def test_layout_unknown_names_raise():
    with pytest.raises(ValueError, match="unknown descriptor entry 'h2_betti'"):
        LAYOUT.index("h2_betti")
    with pytest.raises(ValueError, match="unknown descriptor entry"):
        LAYOUT.get(np.zeros(48), "h0_curve_20")
    with pytest.raises(ValueError, match="unknown descriptor block 'curves'"):
        LAYOUT.slice("curves")


# ---------------------------------------------------------------------------------------------
# Hand-checked building blocks
# ---------------------------------------------------------------------------------------------


def test_persistence_entropy_of_equal_persistences_is_log_k():
    for k in (1, 2, 5, 17):
        assert persistence_entropy(np.full(k, 0.7)) == pytest.approx(np.log(k), abs=1e-12)


def test_persistence_entropy_hand_value_and_empty():
    # p = (1/4, 3/4): H = -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.25 ln 4 + 0.75 ln(4/3) ≈ 0.5623351
    assert persistence_entropy(np.array([1.0, 3.0])) == pytest.approx(0.5623351446188083, abs=1e-12)
    assert persistence_entropy(np.array([])) == 0.0


def test_betti_curve_hand_example_with_half_open_intervals():
    dgm = np.array([[0.0, 1.0], [0.5, 2.0]])
    t = np.array([0.0, 0.5, 1.0, 2.0])
    # t=0: only [0,1) alive; t=0.5: both; t=1: [0,1) just died, [0.5,2) alive; t=2: none
    np.testing.assert_array_equal(betti_curve(dgm, t), [1.0, 2.0, 1.0, 0.0])
    np.testing.assert_array_equal(betti_curve(np.empty((0, 2)), t), np.zeros(4))


def test_descriptor_from_hand_made_diagrams():
    d0 = np.array([[0.0, 1.0], [0.0, 2.0], [0.0, 3.0]])
    d1 = np.array([[1.0, 2.0]])
    phi = descriptor_from_diagrams([d0, d1], n_thresholds=4)
    assert phi.shape == (8 + 2 * 4,)
    # H0 persistences (1, 2, 3): p = (1/6, 1/3, 1/2)
    # H0 entropy = ln6/6 + ln3/3 + ln2/2 ≈ 0.298627 + 0.366204 + 0.346574 = 1.011404
    h0_entropy = np.log(6) / 6 + np.log(3) / 3 + np.log(2) / 2
    assert h0_entropy == pytest.approx(1.0114042647, abs=1e-9)
    # amplitudes: sqrt(1 + 4 + 9) = sqrt 14 and sqrt(1) = 1
    # n_persistent: H0 median 2, only 3 > 2 -> 1; H1 single pair (median = itself) -> 0
    expected_scalars = [3, 1, h0_entropy, 0.0, np.sqrt(14.0), 1.0, 1, 0]
    np.testing.assert_allclose(phi[:8], expected_scalars, rtol=0, atol=1e-12)
    # thresholds: 95th percentile of deaths (1, 2, 3): pos 0.95*2 = 1.9 -> 2 + 0.9*(3-2) = 2.9
    # linspace(0, 2.9, 4) = (0, 0.9667, 1.9333, 2.9)
    # H0 alive (birth <= t < death): 3, 3, 2 (deaths 2, 3), 1 (death 3)
    np.testing.assert_array_equal(phi[8:12], [3, 3, 2, 1])
    # H1 [1, 2): alive only at 1.9333
    np.testing.assert_array_equal(phi[12:16], [0, 0, 1, 0])


def test_descriptor_from_diagrams_without_h1_and_with_empty_h0():
    d0 = np.array([[0.0, 2.0], [0.0, 2.0]])
    phi = descriptor_from_diagrams([d0], n_thresholds=3)
    # thresholds linspace(0, 2, 3) = (0, 1, 2); H0 alive 2, 2, 0; H1 all zero
    np.testing.assert_allclose(phi, [2, 0, np.log(2), 0, np.sqrt(8), 0, 0, 0, 2, 2, 0, 0, 0, 0], atol=1e-12)
    empty = descriptor_from_diagrams([np.empty((0, 2)), np.empty((0, 2))], n_thresholds=3)
    np.testing.assert_array_equal(empty, np.zeros(14))


def test_descriptor_of_unit_square_by_hand():
    # Rips of the unit square: H0 = 3 x [0, 1), H1 = [1, sqrt2) (see test_tda_diagrams).
    phi, dgms = descriptor(UNIT_SQUARE, n_thresholds=5, return_diagrams=True)
    assert len(dgms) == 2
    expected = [
        3, 1,  # pair counts
        np.log(3), 0.0,  # entropies: 3 equal bars, 1 bar
        np.sqrt(3), np.sqrt(2) - 1,  # amplitudes
        0, 0,  # nothing strictly above the median
        3, 3, 3, 3, 0,  # H0 curve on linspace(0, 1, 5); at t = 1 all have died
        0, 0, 0, 0, 1,  # H1 curve: born at 1, alive at t = 1
    ]
    np.testing.assert_allclose(phi, expected, rtol=0, atol=1e-6)


def test_noisy_circle_shows_one_persistent_loop():
    phi, (d0, d1) = descriptor(_noisy_circle(), seed=0, return_diagrams=True)
    pers1 = d1[:, 1] - d1[:, 0]
    assert (pers1 > 1.0).sum() == 1
    assert LAYOUT.get(phi, "h1_betti") == d1.shape[0]
    assert LAYOUT.get(phi, "h0_betti") == 79  # n_sub = 80 points
    # the single big loop dominates the H1 amplitude and gives exactly one feature above the median
    assert LAYOUT.get(phi, "h1_amplitude") > 1.0
    assert LAYOUT.get(phi, "h1_amplitude") == pytest.approx(pers1[0], rel=0.05)
    assert LAYOUT.get(phi, "h1_n_persistent") == 1
    assert LAYOUT.get(phi, "h1_curve").max() == 1
    # a Gaussian blob of similar spread has no persistent loop
    blob = np.random.default_rng(9).normal(0.0, 0.7, (100, 2))
    assert LAYOUT.get(descriptor(blob), "h1_amplitude") < 0.5


# ---------------------------------------------------------------------------------------------
# Seeding and batch form
# ---------------------------------------------------------------------------------------------


def test_descriptor_shape_and_types():
    phi = descriptor(_cloud())
    assert phi.shape == (48,)
    assert phi.dtype == np.float64
    assert np.isfinite(phi).all()
    # counts are whole numbers
    counts = phi[[0, 1, 6, 7]]
    np.testing.assert_array_equal(counts, np.round(counts))
    np.testing.assert_array_equal(phi[8:], np.round(phi[8:]))


def test_same_seed_same_descriptor_different_seed_differs_when_subsampling():
    X = _cloud(n=200)
    np.testing.assert_array_equal(descriptor(X, seed=3), descriptor(X, seed=3))
    assert not np.array_equal(descriptor(X, seed=3), descriptor(X, seed=4))


def test_seed_irrelevant_when_no_subsampling():
    X = _cloud(n=50)  # fewer than n_sub = 80: all points used
    np.testing.assert_array_equal(descriptor(X, seed=1), descriptor(X, seed=2))


def test_generator_seed_is_accepted():
    X = _cloud(n=200)
    a = descriptor(X, seed=np.random.default_rng(11))
    b = descriptor(X, seed=np.random.default_rng(11))
    np.testing.assert_array_equal(a, b)


def test_batch_equals_stacked_per_client_calls():
    clouds = [_cloud(n=120 + 10 * k, seed=k) for k in range(3)]
    batch = descriptors(clouds, seed=7)
    assert batch.shape == (3, 48)
    for k, X in enumerate(clouds):
        np.testing.assert_array_equal(batch[k], descriptor(X, seed=client_seed(7, k)))


def test_batch_errors_name_the_cloud():
    with pytest.raises(ValueError, match="at least one point cloud"):
        descriptors([])
    with pytest.raises(ValueError, match=r"point cloud 1: X needs at least 3 points"):
        descriptors([_cloud(), np.zeros((2, 3))])


# ---------------------------------------------------------------------------------------------
# Scaling
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", ["standard", "unit_box"])
def test_scaled_descriptors_are_invariant_to_affine_rescaling(scale):
    X = _cloud(n=60)
    Y = X * 3.0 + 5.0
    np.testing.assert_allclose(descriptor(Y, scale=scale), descriptor(X, scale=scale), rtol=0, atol=1e-6)


def test_standard_scaling_invariant_to_per_feature_rescaling():
    X = _cloud(n=60)
    Y = X * np.array([0.01, 7.0, 300.0]) + np.array([-2.0, 5.0, 1e3])
    np.testing.assert_allclose(descriptor(Y, scale="standard"), descriptor(X, scale="standard"), atol=1e-6)


def test_unscaled_descriptor_sees_spread_but_not_translation():
    X = _cloud(n=60)
    base = descriptor(X, scale="none")
    # translation leaves all distances unchanged
    np.testing.assert_allclose(descriptor(X + 5.0, scale="none"), base, atol=1e-6)
    # scaling by 3 multiplies every birth/death by 3: amplitudes x3, entropies, counts and curves unchanged
    tripled = descriptor(X * 3.0 + 5.0, scale="none")
    assert np.abs(tripled - base).max() > 1.0
    np.testing.assert_allclose(tripled[4:6], 3.0 * base[4:6], rtol=1e-5)
    np.testing.assert_allclose(tripled[[0, 1, 2, 3, 6, 7]], base[[0, 1, 2, 3, 6, 7]], atol=1e-6)
    np.testing.assert_array_equal(tripled[8:], base[8:])


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"scale": "minmax"}, "scale"),
        ({"n_sub": 2}, "n_sub"),
        ({"n_sub": 80.0}, "n_sub"),
        ({"n_thresholds": 0}, "n_thresholds"),
        ({"n_thresholds": True}, "n_thresholds"),
    ],
)
def test_invalid_arguments_raise_naming_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field} must"):
        descriptor(_cloud(), **kwargs)


def test_invalid_points_raise():
    X = _cloud()
    X[5, 0] = np.nan
    with pytest.raises(ValueError, match="X contains a non-finite value"):
        descriptor(X)
    with pytest.raises(ValueError, match="X needs at least 3 points"):
        descriptor(np.zeros((2, 2)))


# ---------------------------------------------------------------------------------------------
# scikit-learn transformer
# ---------------------------------------------------------------------------------------------


def test_sklearn_transformer_matches_descriptors():
    clouds = [_cloud(n=90 + 5 * k, seed=20 + k) for k in range(4)]
    tr = TopologicalDescriptor(seed=5)
    out = tr.fit(clouds).transform(clouds)
    assert out.shape == (4, 48)
    assert tr.n_features_out_ == 48
    np.testing.assert_array_equal(out, descriptors(clouds, seed=5))
    np.testing.assert_array_equal(tr.fit_transform(clouds), out)


def test_sklearn_transformer_in_pipeline_and_clone():
    clouds = [_cloud(n=40, seed=30 + k) * (1 + k) for k in range(5)]
    pipe = Pipeline([("topo", TopologicalDescriptor(n_thresholds=10)), ("scale", StandardScaler())])
    Z = pipe.fit_transform(clouds)
    assert Z.shape == (5, 8 + 2 * 10)
    raw = descriptors(clouds, n_thresholds=10)
    np.testing.assert_allclose(Z, StandardScaler().fit_transform(raw))
    twin = clone(TopologicalDescriptor(n_sub=50, scale="standard"))
    assert twin.get_params() == {"n_sub": 50, "n_thresholds": 20, "scale": "standard", "seed": 0}


def test_sklearn_feature_names_match_layout():
    names = TopologicalDescriptor().fit([_cloud()]).get_feature_names_out()
    assert list(names) == list(LAYOUT.names)
    assert list(TopologicalDescriptor(n_thresholds=3).get_feature_names_out()) == list(DescriptorLayout(3).names)
