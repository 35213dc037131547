"""Finding 3: SCAFFOLD's control-variate delta with a wrong shape, or missing, crashed the run; ×1e6
was aggregated. Each algorithm now declares the schema of what it receives, and the shared
validation drops any reply that does not match it (never a crash)."""
import numpy as np
import pytest
from attacking import replace, run_attacked, victim_failures


def extras(**arrays):
    return lambda u, m: replace(u, extras={**u.extras, **arrays})


@pytest.mark.parametrize("tamper, words", [
    (lambda u, m: replace(u, extras={"dc": np.zeros(3)}), "extras['dc'] must have shape"),
    (lambda u, m: replace(u, extras={}), "extras['dc'] is missing"),
    (lambda u, m: replace(u, extras={"dc": u.extras["dc"] * 1e6}), "extras['dc']"),
    (lambda u, m: replace(u, extras={"dc": u.extras["dc"].astype(np.float32)}), "extras['dc'] must be float64"),
    (extras(zz=np.zeros(2)), "unexpected extras 'zz'"),
])
def test_scaffold_control_variates_are_validated(tamper, words):
    clean, clean_algo = run_attacked("scaffold")
    h, algo = run_attacked("scaffold", tamper)
    assert len(h.rounds) == 3
    fails = victim_failures(h)
    assert [f.round for f in fails] == [1, 2, 3] and all(words in f.reason for f in fails), [f.reason for f in fails]
    assert np.linalg.norm(algo.c) < 10 * np.linalg.norm(clean_algo.c) + 1.0
    assert abs(h.final["auc"] - clean.final["auc"]) <= 0.01


@pytest.mark.parametrize("cluster, words", [
    (np.array([7.0]), "extras['cluster'] must be in [0, 1]"),
    (np.array([0.5]), "extras['cluster'] must hold integers"),
    (np.array([0.0, 1.0]), "extras['cluster'] must have shape (1,)"),
    (None, "extras['cluster'] is missing"),
])
def test_ifca_cluster_choice_is_validated(cluster, words):
    tamper = (lambda u, m: replace(u, extras={})) if cluster is None else extras(cluster=cluster)
    h, _ = run_attacked("ifca", tamper)
    fails = victim_failures(h)
    assert len(fails) == 3 and all(words in f.reason for f in fails), [f.reason for f in fails]


def test_local_only_accepts_nothing_but_an_empty_vector():
    h, _ = run_attacked("local", lambda u, m: replace(u, params=np.ones(3)))
    assert all("params must have shape (0,)" in f.reason for f in victim_failures(h))
