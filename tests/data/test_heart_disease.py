"""The UCI Heart Disease loader: the real files, the missing-value policy, the splits, bad files."""
import hashlib
from pathlib import Path

import numpy as np
import pytest

import topofl
from topofl.data.loaders.heart_disease import FEATURES, SITES, feature_names, heart_disease_dir, impute_site, load_heart_disease, read_site

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "heart-disease"


def test_the_shipped_files_are_the_real_cohorts():
    counts = {"cleveland": 303, "hungary": 294, "switzerland": 123, "va": 200}
    for site, name in SITES.items():
        X, num = read_site(heart_disease_dir() / name)
        assert X.shape == (counts[site], 13) and set(np.unique(num)) <= {0, 1, 2, 3, 4}
        if SHARED.is_dir():   # the copy in the package is byte-identical to the project's data folder
            shipped = hashlib.sha256((heart_disease_dir() / name).read_bytes()).hexdigest()
            assert shipped == hashlib.sha256((SHARED / name).read_bytes()).hexdigest()
    X, _ = read_site(heart_disease_dir() / SITES["cleveland"])
    assert int(np.isnan(X).sum()) == 6   # 4 in ca, 2 in thal (the README)
    assert np.isnan(X[:, FEATURES.index("ca")]).sum() == 4
    Xs, _ = read_site(heart_disease_dir() / SITES["switzerland"])
    assert np.isnan(Xs[:, FEATURES.index("chol")]).all()   # recorded as 0: not measured


def test_federation_shape_labels_and_seeded_stratified_splits():
    fed = load_heart_disease(seed=0)
    assert fed.task == "binary" and len(fed.clients) == 4
    assert [c.meta["site"] for c in fed.clients] == list(SITES)
    assert [c.n_train + c.X_test.shape[0] for c in fed.clients] == [303, 294, 123, 200]
    assert fed.n_features == len(feature_names())
    for c in fed.clients:   # stratified: the test prevalence follows the site's
        assert abs(c.y_test.mean() - c.meta["prevalence"]) < 0.07
        assert np.all(np.isfinite(c.X_train)) and np.all(np.isfinite(c.X_test))
    again, other = load_heart_disease(seed=0), load_heart_disease(seed=1)
    assert np.array_equal(fed.clients[0].X_test, again.clients[0].X_test)
    assert not np.array_equal(fed.clients[0].y_test, other.clients[0].y_test) or not np.array_equal(
        fed.clients[0].X_test, other.clients[0].X_test)


def test_imputation_uses_only_the_sites_own_training_rows_and_flags_what_it_filled():
    Xtr = np.array([[1.0, np.nan], [3.0, np.nan], [np.nan, np.nan]])
    Xte = np.array([[np.nan, 5.0], [100.0, np.nan]])
    a, b = impute_site(Xtr, Xte, [0, 1], indicators=True)
    assert np.array_equal(a, [[1, 0, 0, 1], [3, 0, 0, 1], [2, 0, 1, 1]])   # median of 1 and 3; never observed -> 0
    assert np.array_equal(b, [[2, 5, 1, 0], [100, 0, 0, 1]])                # test rows do not move the medians
    fed = load_heart_disease(seed=0, standardise="none")
    swiss = fed.clients[2]
    j = feature_names().index("chol_missing")
    assert swiss.X_train[:, j].min() == 1.0 and swiss.X_train[:, FEATURES.index("chol")].max() == 0.0
    assert load_heart_disease(seed=0, indicators=False).n_features == 13


def test_standardisation_choices():
    fed = load_heart_disease(seed=0, standardise="federated")
    pooled = np.vstack([c.X_train for c in fed.clients])
    assert np.allclose(pooled.mean(axis=0)[: len(FEATURES)], 0.0, atol=1e-9)
    raw = load_heart_disease(seed=0, standardise="none")
    assert raw.clients[0].X_train[:, 0].max() > 50   # age in years


def test_bad_files_and_arguments_are_named(tmp_path):
    good = (heart_disease_dir() / SITES["va"]).read_text().splitlines()
    cases = {"cols": "1,2,3", "nonnum": good[0].replace(",", ",x,", 1).rsplit(",", 1)[0], "num": good[0].rsplit(",", 1)[0] + ",7"}
    for key, line in cases.items():
        d = tmp_path / key
        d.mkdir()
        for name in SITES.values():
            (d / name).write_text("\n".join([line, *good[1:]]) + "\n")
        with pytest.raises(ValueError, match="line 1"):
            load_heart_disease(d)
    with pytest.raises(ValueError, match="unknown site"):
        load_heart_disease(sites=["cleveland", "mars"])
    with pytest.raises(ValueError, match="at least two"):
        load_heart_disease(sites=["cleveland"])
    with pytest.raises(ValueError, match="test_fraction"):
        load_heart_disease(test_fraction=1.0)
    with pytest.raises(ValueError, match="cannot read"):
        load_heart_disease(tmp_path / "nowhere")


def test_the_scenario_runs_every_method():
    fed = topofl.make_scenario("heart-disease", seed=3, sites="cleveland,hungary,va", standardise="per_client")
    assert [c.meta["site"] for c in fed.clients] == ["cleveland", "hungary", "va"]
    for m in ("ptopofl", "fedavg", "local"):
        h = topofl.simulate(topofl.make_scenario("heart-disease", seed=0), m, rounds=3, seed=0)
        assert 0.5 < h.final["auc"] <= 1.0


def test_pooled_training_reference_trains_on_every_site_and_tests_on_its_own():
    fed, pooled = load_heart_disease(seed=0), load_heart_disease(seed=0, pooled_training=True)
    n_all = sum(c.n_train for c in fed.clients)
    for c, p in zip(fed.clients, pooled.clients, strict=True):
        assert p.n_train == n_all and np.array_equal(p.y_test, c.y_test)
