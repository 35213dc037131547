"""The ``secure-aggregation`` experiment: plan, registration in ``experiment all`` and the report, and a small
end-to-end run whose tables say what the acceptance asks: the inversion recovers every plain upload and no
secure one, dropout rounds complete with the survivors' sum to within the quantisation bound, and the cost
and paired differences are reported."""
from __future__ import annotations

import csv
import json

from topofl.experiments import report
from topofl.experiments.driver import EXPERIMENTS, GROUPS
from topofl.experiments.security import secure_aggregation as sa
from topofl.methods import build_server


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_registered_in_all_and_the_report_with_plain_and_secure_per_seed(monkeypatch):
    assert EXPERIMENTS["secure-aggregation"] is sa.EXPERIMENT
    assert "secure-aggregation" in GROUPS["all"] and "secure-aggregation" in report.ORDER
    monkeypatch.setattr(sa, "torch_available", lambda: False)
    jobs = sa.plan([0, 3], sa.BUDGETS["full"])
    assert len(jobs) == 2 * 2 * 2 and {j.seed for j in jobs} == {0, 3}
    assert {(j.method, j.label) for j in jobs} == {(m, mode) for m in sa.METHODS for mode in sa.MODES}
    for j in jobs:
        assert j.hyperparameters["secure_aggregation"] == (j.label == "secure")
        assert ("probe" in j.setting) == (j.label == "secure")
        build_server(j.method, j.hyperparameters)
    monkeypatch.setattr(sa, "torch_available", lambda: True)
    deep = [j for j in sa.plan([0], sa.BUDGETS["full"]) if j.model == "cnn-small"]
    assert len(deep) == 4 and all(j.data == "mnist" and j.data_params["n_clients"] == 10 for j in deep)


def test_small_run_reports_attacks_dropouts_and_cost(tmp_path, monkeypatch):
    from topofl.experiments.driver import run_experiment

    monkeypatch.setattr(sa, "torch_available", lambda: False)   # the cnn-small part is the deep suite's
    out = run_experiment("secure-aggregation", [0, 1], tmp_path, budget=sa.SecureBudget(rounds=3, mnist_rounds=0))
    man = json.loads((out / "manifest.json").read_text())
    assert [t["csv"] for t in man["tables"]] == ["summary.csv", "paired.csv", "overhead.csv", "groups.csv",
                                                 "inversion.csv", "membership.csv", "dropouts.csv"]
    inv = {(r["algorithm"], r["mode"], r["target"]): r for r in _rows(out / "inversion.csv")}
    for m in sa.METHODS:
        assert float(inv[(m, "plain", "its model")]["recovered_share"]) == 1.0   # every plain upload inverted
        assert float(inv[(m, "secure", "its masked input")]["recovered_share"]) == 0.0
        assert float(inv[(m, "secure", "its masked input")]["error_mean"]) > 0.5   # at chance, as a random vector
        assert float(inv[(m, "chance", "a random vector")]["error_mean"]) > 0.5
    drops = _rows(out / "dropouts.csv")
    assert len(drops) == 2 * 6 and all(r["completed"] == "True" for r in drops)
    assert all(float(r["max_error_steps"]) <= float(r["bound_steps"]) for r in drops)
    paired = _rows(out / "paired.csv")
    assert {r["algorithm"] for r in paired} == set(sa.METHODS)
    assert all(abs(float(r["diff_mean"])) < 1e-6 for r in paired)   # healthcare's clusters are never merged
    over = {r["algorithm"]: r for r in _rows(out / "overhead.csv")}
    assert all(float(over[m]["total_bytes_ratio_mean"]) > 1.0 for m in sa.METHODS)
    assert all(r["rounds_merged"] == "0" for r in _rows(out / "groups.csv"))
