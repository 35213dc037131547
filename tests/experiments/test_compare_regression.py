"""Regression tasks report MSE, RMSE and R² (never a NaN AUC), with paired MSE differences."""
import numpy as np
import pytest

from topofl.api import simulate
from topofl.data.federation import Federation
from topofl.experiments.compare import REGRESSION_SUMMARY_FIELDS, SUMMARY_FIELDS, add_paired, summarise, summary_fields


def regression_federation(seed=0):
    rng = np.random.default_rng(seed)
    arrays = []
    for k in range(4):
        X = rng.normal(size=(90, 4))
        y = X @ np.array([0.5, -0.3, 0.2, 0.1]) + 0.4 * k * X[:, 0] + rng.normal(size=90) * 0.3
        arrays.append((X[:60], y[:60], X[60:], y[60:]))
    return Federation.from_arrays(arrays, task="regression", standardise="per_client")


@pytest.fixture(scope="module")
def runs():
    fed = regression_federation()
    return {m: {s: simulate(fed, m, rounds=4, seed=s) for s in range(3)} for m in ("fedavg", "ditto", "local")}


def test_round_summaries_carry_mse_rmse_r2_from_the_clients_records(runs):
    h = runs["fedavg"][0]
    last = [r for r in h.records if r["round"] == 4]
    assert np.isnan(h.final["auc"]) and np.isnan(h.final["accuracy"])
    assert h.final["mse"] == pytest.approx(np.mean([r["mse"] for r in last]), rel=1e-12)
    assert h.final["rmse"] == pytest.approx(np.mean([np.sqrt(r["mse"]) for r in last]), rel=1e-12)
    assert h.final["r2"] == pytest.approx(np.mean([r["r2"] for r in last]), rel=1e-12)
    assert 0 < h.final["r2"] <= 1


def test_summary_rows_for_regression_have_no_auc_and_pair_the_mse(runs):
    assert summary_fields("regression") == REGRESSION_SUMMARY_FIELDS and summary_fields("binary") == SUMMARY_FIELDS
    rows = [summarise(m, list(per.values()), [1.0]) for m, per in runs.items()]
    add_paired(rows, runs, "mse")
    by = {r["method"]: r for r in rows}
    assert not any(k.startswith("auc") for k in by["ditto"])
    for r in rows:
        assert np.isfinite([r["mse_mean"], r["rmse_mean"], r["r2_mean"]]).all()
    # paired difference = method − FedAvg per seed; a win is a lower MSE
    d = [runs["ditto"][s].final["mse"] - runs["fedavg"][s].final["mse"] for s in range(3)]
    assert by["ditto"]["mse_vs_fedavg_mean"] == pytest.approx(np.mean(d), rel=1e-12)
    assert by["ditto"]["mse_vs_fedavg_wins"] == sum(x < 0 for x in d)
    assert by["ditto"]["mse_vs_fedavg_losses"] == sum(x > 0 for x in d)
    # the best other method is the one with the lowest mean MSE
    best = min((m for m in by if m != "fedavg"), key=lambda m: by[m]["mse_mean"])
    assert by["fedavg"]["best_other"] == best


def test_cli_compare_on_a_regression_csv_prints_mse_rmse_r2(tmp_path):
    import csv

    from typer.testing import CliRunner

    from topofl.cli import app

    rng = np.random.default_rng(1)
    path = tmp_path / "scores.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["school", "x1", "x2", "score"])
        for site in ("a", "b", "c"):
            for _ in range(40):
                x = rng.normal(size=2)
                w.writerow([site, *x.round(4), round(float(2 * x[0] - x[1] + rng.normal() * 0.2), 4)])
    res = CliRunner().invoke(app, ["compare", "--data", str(path), "--site-column", "school", "--label-column", "score",
                                   "-s", "task=regression", "--methods", "fedavg,ditto", "--seeds", "0-1", "--rounds", "3",
                                   "--out", str(tmp_path / "out")], env={"COLUMNS": "160"})
    assert res.exit_code == 0, res.output
    assert "MSE (mean ± std)" in res.output and "R²" in res.output and "AUC" not in res.output
    summary = list(csv.DictReader(open(tmp_path / "out" / "summary.csv")))
    assert list(summary[0])[:8] == list(REGRESSION_SUMMARY_FIELDS[:8])
    assert all(float(r["r2_mean"]) > 0.5 for r in summary)
