import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from topofl.metrics import auc_score


def test_binary_auc_matches_scikit_learn_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(20):
        y = rng.integers(0, 2, 40).astype(float)
        s = np.round(rng.random(40), 1)  # many ties
        if 0 < y.sum() < 40:
            assert auc_score("binary", y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-12)


def test_multiclass_auc_matches_scikit_learn_ovr_macro():
    rng = np.random.default_rng(1)
    for _ in range(10):
        y = rng.integers(0, 4, 60).astype(float)
        p = rng.dirichlet(np.ones(4), 60)
        assert auc_score("multiclass", y, p) == pytest.approx(roc_auc_score(y, p, multi_class="ovr"), abs=1e-12)


def test_multiclass_auc_over_present_classes_by_hand():
    y = np.array([0.0, 0.0, 2.0, 2.0])
    p = np.array([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.2, 0.2, 0.6], [0.5, 0.1, 0.4]])
    # class 0: positives {0.7, 0.6} vs negatives {0.2, 0.5}: 4/4 pairs ordered -> 1.0
    # class 2: positives {0.6, 0.4} vs negatives {0.1, 0.1}: 1.0 ; class 1 absent -> ignored
    assert auc_score("multiclass", y, p) == 1.0


def test_single_class_and_regression_have_no_auc():
    assert np.isnan(auc_score("binary", np.ones(5), np.random.rand(5)))
    assert np.isnan(auc_score("regression", np.arange(5.0), np.arange(5.0)))


def test_regression_scores_by_hand_and_against_scikit_learn():
    from sklearn.metrics import mean_squared_error, r2_score

    from topofl.metrics import regression_scores

    y, pred = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 2.5, 2.5, 5.0])
    # residuals 0, .5, -.5, 1 -> SSE 1.5, MSE 0.375; SST = 5 -> R² = 1 - 1.5/5 = 0.7
    assert regression_scores(y, pred) == {"mse": 0.375, "r2": pytest.approx(0.7, abs=1e-15)}
    rng = np.random.default_rng(2)
    y, pred = rng.normal(size=50), rng.normal(size=50)
    got = regression_scores(y, pred)
    assert got["mse"] == pytest.approx(mean_squared_error(y, pred), rel=1e-12)
    assert got["r2"] == pytest.approx(r2_score(y, pred), rel=1e-12)
    assert np.isnan(regression_scores(np.ones(5), np.zeros(5))["r2"])  # constant target: R² undefined


def test_a_regression_evaluation_reports_mse_and_r2_with_no_auc():
    from topofl.metrics import evaluate
    from topofl.models.linear import make_model

    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(30, 3)), rng.normal(size=30)
    model = make_model("regression", 3)
    theta = rng.normal(size=model.n_params)
    metrics, scores = evaluate(model, theta, X, y)
    assert set(metrics) == {"auc", "accuracy", "loss", "mse", "r2"}
    assert np.isnan(metrics["auc"]) and np.isnan(metrics["accuracy"])
    assert metrics["mse"] == pytest.approx(np.mean((scores - y) ** 2), rel=1e-12)
    assert metrics["loss"] == pytest.approx(metrics["mse"] / 2, rel=1e-12)  # least squares' loss is half the MSE


def test_average_ranks_equal_scipy_rankdata_to_the_bit():
    """metrics ranks without scipy.stats (a Flower ClientApp process must not pay its import): same floats."""
    from scipy.stats import rankdata

    from topofl.metrics import average_ranks

    rng = np.random.default_rng(0)
    for i in range(300):
        shape = (int(rng.integers(1, 50)), int(rng.integers(1, 5)))
        a = [rng.normal(size=shape), rng.integers(0, 4, size=shape).astype(float), np.round(rng.normal(size=shape), 1).astype(np.float32)][i % 3]
        if i % 7 == 0:
            a = a.astype(float)
            a[rng.random(shape) < 0.1] = np.nan
            a[rng.random(shape) < 0.1] = -np.inf
        expected, got = rankdata(a, axis=0), average_ranks(a)
        assert got.dtype == expected.dtype and np.array_equal(got, expected, equal_nan=True), a
