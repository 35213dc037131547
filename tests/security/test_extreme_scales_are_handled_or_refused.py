"""Finding 9: ``diagrams(X * 1e39)`` and ``X * 1e-46`` returned empty diagrams and an all-zero
descriptor silently; complex input only warned; features near 1e300 raised FloatingPointError from
deep inside; unscaled real features trained to AUC 0.54–0.59 with loss ≈ 3000 and no warning."""
import numpy as np
import pytest

import topofl
from topofl.tda import descriptor, diagrams
from topofl.tda.descriptor import LAYOUT

SCALES = [1e-300, 1e-46, 1e-40, 1e-20, 1e20, 1e39, 1e40, 1e300]


@pytest.fixture(scope="module")
def cloud():
    return np.random.default_rng(3).standard_normal((60, 5))


@pytest.mark.parametrize("s", SCALES)
def test_diagrams_are_scale_equivariant(cloud, s):
    ref = diagrams(cloud)
    got = diagrams(cloud * s)
    assert [d.shape for d in got] == [d.shape for d in ref]
    assert ref[0].shape[0] == 59 and ref[1].shape[0] > 0
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(g / s, r, rtol=1e-5)


@pytest.mark.parametrize("s", SCALES)
def test_descriptor_is_scale_invariant_but_for_its_amplitudes(cloud, s):
    ref = descriptor(cloud, n_sub=60, seed=0)
    got = descriptor(cloud * s, n_sub=60, seed=0)
    amp = [LAYOUT.index("h0_amplitude"), LAYOUT.index("h1_amplitude")]
    rest = np.setdiff1d(np.arange(ref.size), amp)
    np.testing.assert_allclose(got[rest], ref[rest], rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(got[amp] / s, ref[amp], rtol=1e-5)
    for scale in ("standard", "unit_box"):
        np.testing.assert_allclose(descriptor(cloud * s, n_sub=60, seed=0, scale=scale),
                                   descriptor(cloud, n_sub=60, seed=0, scale=scale), rtol=1e-5, atol=1e-9)


def test_non_real_input_is_a_value_error(cloud):
    with pytest.raises(ValueError, match="real"):
        diagrams(cloud.astype(complex))
    with pytest.raises(ValueError, match="real"):
        descriptor(cloud + 1j)
    with pytest.raises(ValueError, match="X"):
        diagrams(np.array([["a", "b"], ["c", "d"], ["e", "f"]]))


def test_distances_beyond_float64_are_a_value_error_naming_the_input(cloud):
    X = cloud.copy()
    X[0, 0], X[1, 0] = 1.7e308, -1.7e308
    with pytest.raises(ValueError, match="X.*float64"):
        diagrams(X)


def breast_cancer_clients(standardise="none"):
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(y))
    parts = np.array_split(order, 4)
    arrays = []
    for p in parts:
        k = len(p) * 3 // 4
        arrays.append((X[p[:k]], y[p[:k]], X[p[k:]], y[p[k:]]))
    return topofl.Federation.from_arrays(arrays, standardise=standardise)


def test_training_on_unscaled_features_warns_naming_client_and_columns():
    from topofl.federation.runner import TrainingWarning

    with pytest.warns(TrainingWarning) as record:
        topofl.simulate(breast_cancer_clients(), "fedavg", rounds=3, seed=0)
    text = " ".join(str(w.message) for w in record)
    assert "client 0" in text and "columns" in text and "standardise" in text
    assert len([w for w in record if "differ" in str(w.message)]) == 1  # once, not per round or client


def test_diverging_loss_warns():
    from topofl.federation.runner import TrainingWarning

    with pytest.warns(TrainingWarning) as record:
        topofl.simulate(breast_cancer_clients(), "fedavg", rounds=3, seed=0)
    assert any("test loss" in str(w.message) and "diverges" in str(w.message) for w in record)


@pytest.mark.parametrize("mode", ["per_client", "federated"])
def test_standardising_fixes_unscaled_features(mode, recwarn):
    from topofl.federation.runner import TrainingWarning

    h = topofl.simulate(breast_cancer_clients(mode), "fedavg", rounds=5, seed=0)
    assert h.final["auc"] > 0.95
    assert not [w for w in recwarn if issubclass(w.category, TrainingWarning)]


def test_federated_standardisation_uses_pooled_statistics():
    raw = breast_cancer_clients()
    fed = breast_cancer_clients("federated")
    pooled = np.vstack([c.X_train for c in raw])
    mu, sd = pooled.mean(axis=0), pooled.std(axis=0)
    for r, c in zip(raw, fed, strict=False):
        np.testing.assert_allclose(c.X_train, (r.X_train - mu) / sd, atol=1e-9)
        np.testing.assert_allclose(c.X_test, (r.X_test - mu) / sd, atol=1e-9)
    with pytest.raises(ValueError, match="standardise"):
        breast_cancer_clients("global")
