"""The deep-model experiments (deep, sheaf-mnist): plans at every budget, and a smoke run of each
that writes tidy results, resumes, and lays out its tables."""
import csv
import math

import pytest

from topofl.experiments.driver import plan_for

pytest.importorskip("torch")


def test_plans_cover_the_papers_comparisons():
    quick = plan_for("deep", [0], "quick")
    assert {s.setting["part"] for s in quick} == {"C'", "D'"}
    assert {s.setting["alpha"] for s in quick if s.setting["part"] == "C'"} == {"0.1", "0.5"}
    assert {s.method for s in quick} == {"ptopofl", "fedavg", "fedprox", "scaffold", "pfedme", "ditto", "perfedavg", "ifca", "local"}
    assert all(s.model != "linear" for s in quick)
    d = [s for s in quick if s.setting["part"] == "D'"][0]
    assert d.data_params["n_clients"] == 50 and d.data_params["styles"] > 0
    sm = plan_for("sheaf-mnist", [0], "full")
    assert {s.setting["gamma"] for s in sm if s.method == "sheaf" and s.setting["part"] == "same"} == {0.01, 0.03, 0.1, 0.3}
    assert any(s.model == "cnn-small,cnn-medium,cnn-large" for s in sm)
    assert all((s.graph, s.graph_params) == ("erdos_renyi", {"p": 0.15}) for s in sm)


def test_budgets_and_data_root_are_checked(tmp_path):
    with pytest.raises(ValueError, match="has no 'quick' budget"):
        plan_for("comparison", [0], "quick")
    with pytest.raises(ValueError, match="neither CIFAR-10 pickles"):
        plan_for("deep", [0], "full", str(tmp_path))
    (tmp_path / "train").mkdir()
    (tmp_path / "test").mkdir()
    real = plan_for("deep", [0], "full", str(tmp_path))
    d = [s for s in real if s.setting["part"] == "D"]
    assert d and all(s.model == "convnet2" and s.rounds == 200 and s.hyperparameters["local_epochs"] == 3 for s in d)


@pytest.mark.deep
@pytest.mark.parametrize("name", ["deep", "sheaf-mnist"])
def test_smoke_runs_write_results_and_resume(tmp_path, name):
    from topofl.experiments.driver import run_experiment

    out = run_experiment(name, [0], tmp_path, profile="smoke")
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert rows and all(0.0 <= float(r["accuracy_mean"]) <= 1.0 for r in rows)
    before = (out / "curves.csv").read_bytes()
    run_experiment(name, [0], tmp_path, profile="smoke", resume=True)
    assert (out / "curves.csv").read_bytes() == before
    assert not any(math.isnan(float(r["accuracy_mean"])) for r in rows)


def test_ptopofl_uses_table_3s_three_clusters_and_a_trained_representation_variant():
    for profile in ("quick", "full"):
        specs = plan_for("deep", [0], profile)
        p = [s for s in specs if s.method == "ptopofl"]
        assert p and all(s.hyperparameters["n_clusters"] == 3 for s in p)
        assert all("n_clusters" not in s.hyperparameters for s in specs if s.method != "ptopofl")
        trained = [s for s in p if s.label == "ptopofl-trained"]
        assert {s.setting["part"] for s in trained} == {"C'"} and len(trained) == 2
        assert all(s.hyperparameters["cluster_after"] == s.rounds // 3 for s in trained)


def test_label_groups_and_the_note_on_dominant_clusters():
    import numpy as np

    from topofl.experiments.ptopofl.deep import cluster_note, label_groups

    y = [np.array([0] * 9 + [1]), np.array([0] * 8 + [1] * 2), np.array([2] * 10), np.array([2] * 9 + [1]), np.array([1] * 10)]
    assert label_groups(y, 3, 3) == [0, 0, 1, 1, 2]  # mostly 0, mostly 2, all 1
    rows = [{"method": "ptopofl", "largest_share": 0.8, "accuracy_minus_fedavg": -0.002},
            {"method": "ptopofl", "largest_share": 0.5, "accuracy_minus_fedavg": 0.01}]
    note = cluster_note(rows)
    assert "ptopofl: in 1 of 2 runs one cluster holds at least 80% of the clients" in note and "-0.002" in note
