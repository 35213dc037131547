"""Decentralised runs inside the experiment runner, and the Sheaf-FMTL experiment plans."""
import json

import numpy as np
import pytest

from topofl.experiments.runs import RunSpec, execute
from topofl.experiments.suite import EXPERIMENTS
from topofl.experiments.suite.sheaf import GAMMAS, plan_digits


def spec(method, seed=0, **hp):
    return RunSpec("t", "tabular", method, seed, 6, label=method, hyperparameters={"gamma": 0.3, **hp} if method == "sheaf" else hp,
                   scenario_params={"n_clients": 6}, graph={"kind": "complete"})


def test_decentralised_runs_write_tidy_results_and_resume(tmp_path):
    specs = [spec("sheaf"), spec("local-peers")]
    done = execute(specs, tmp_path / "a")
    assert done[0]["final"]["cumulative_bits"] > 0 and done[1]["final"]["cumulative_bits"] == 0
    F = np.array(done[0]["frobenius"])
    assert F.shape == (6, 6) and (F[~np.eye(6, dtype=bool)] > 0).all()  # complete graph: every map learnt
    assert len(set(done[0]["client_dims"])) > 1  # synthetic_tabular: different model sizes
    header = (tmp_path / "a" / "curves.csv").read_text().splitlines()[0]
    assert "cumulative_bits" in header and "accuracy" in header
    execute(specs[:1], tmp_path / "b")
    execute(specs, tmp_path / "b", resume=True)
    for f in ("rounds.csv", "curves.csv"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()


def test_digits_plan_covers_the_paper_comparison():
    specs = plan_digits([0, 1])
    labels = {s.label for s in specs}
    assert {f"Sheaf-FMTL γ={g:g}" for g in GAMMAS} | {"dFedU", "D-PSGD", "Local"} == labels
    from topofl.methods import family

    assert all(family(s.method) == "peer" and s.graph == {"kind": "erdos_renyi", "p": 0.15} for s in specs)
    assert len(specs) == 2 * 7


def test_sheaf_experiments_default_to_the_papers_five_runs():
    for name in ("sheaf-digits", "sheaf-centralised", "sheaf-hetero", "sheaf-topology", "sheaf-init"):
        assert EXPERIMENTS[name].default_seeds == (0, 1, 2, 3, 4)
    assert EXPERIMENTS["comparison"].default_seeds == tuple(range(10))


def test_unknown_decentralised_dataset_is_a_clear_error(tmp_path):
    bad = RunSpec("t", "imagenet", "local-peers", 0, 2)
    with pytest.raises(ValueError, match="unknown decentralised dataset 'imagenet'; available: digits, tabular"):
        execute([bad], tmp_path)


@pytest.mark.slow
def test_sheaf_hetero_experiment_end_to_end(tmp_path):
    from topofl.experiments.driver import run_experiment

    d = run_experiment("sheaf-hetero", [0], tmp_path)
    man = json.loads((d / "manifest.json").read_text())
    assert [f["png"] for f in man["figures"]] == ["accuracy.png", "frobenius.png"]
    assert "Sheaf-FMTL − Local" in man["notes"][0]


def test_sheaf_school_plan_and_a_seed_with_original_units(tmp_path):
    import csv

    from topofl.experiments.driver import plan_for, run_experiment
    from topofl.experiments.suite import sheaf_school

    specs = plan_for("sheaf-school", [0, 1])
    assert len(specs) == 2 * (len(sheaf_school.GAMMAS) + 3) and {s.scenario for s in specs} == {"school"}
    assert EXPERIMENTS["sheaf-school"].default_seeds == (0, 1, 2, 3, 4)
    sheaf_school.ROUNDS, rounds = 5, sheaf_school.ROUNDS
    try:
        out = run_experiment("sheaf-school", [0], tmp_path)
    finally:
        sheaf_school.ROUNDS = rounds
    rows = {r["method"]: r for r in csv.DictReader(open(out / "summary.csv"))}
    assert set(rows) == {"Sheaf-FMTL γ=0.1", "Sheaf-FMTL γ=0.3", "dFedU", "D-PSGD", "Local"}
    for r in rows.values():   # finite, and the score-unit MSE is the standardised one rescaled (School's targets have sd ~ 10)
        assert 0 < float(r["loss_mean"]) < 5 and 10 < float(r["mse_original_mean"]) / float(r["loss_mean"]) < 1000
    assert float(rows["Local"]["transmitted_MB"]) == 0 and float(rows["dFedU"]["transmitted_MB"]) > float(rows["Sheaf-FMTL γ=0.1"]["transmitted_MB"])
