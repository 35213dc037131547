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
