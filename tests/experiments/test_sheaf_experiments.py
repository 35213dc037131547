"""Decentralised runs inside the experiment runner, and the Sheaf-FMTL experiment plans."""
import json

import numpy as np
import pytest

from topofl.experiments.driver import EXPERIMENTS
from topofl.experiments.runs import execute
from topofl.experiments.sheaf.digits import COMPACT_GAMMAS, GAMMAS, SHARED_GAMMAS, DigitsBudget
from topofl.experiments.sheaf.digits import plan as plan_digits
from topofl.job import Job


def spec(method, seed=0, **hp):
    return Job(experiment="t", data="tabular", method=method, seed=seed, rounds=6, label=method,
               hyperparameters={"gamma": 0.3, **hp} if method == "sheaf" else hp, data_params={"n_clients": 6},
               graph="complete")


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


def test_digits_plan_covers_the_paper_comparison_and_the_variants():
    specs = plan_digits([0, 1])
    labels = {s.label for s in specs}
    paper = {f"Sheaf-FMTL γ={g:g}" for g in GAMMAS} | {"dFedU", "D-PSGD", "Local"}
    compact = {f"Sheaf-FMTL γ={g:g}, compact exchange" for g in COMPACT_GAMMAS}
    shared = {f"Sheaf-FMTL γ={g:g}, shared maps" for g in SHARED_GAMMAS}
    public = {"Sheaf-FMTL γ=0.03, η=1e-5", "Sheaf-FMTL γ=0.03, α=5e-4, η=1e-5", "Local, α=5e-4"}
    assert paper | compact | shared | public == labels
    from topofl.methods import family

    assert all(family(s.method) == "peer" for s in specs)
    assert all((s.graph, s.graph_params) == ("erdos_renyi", {"p": 0.15}) for s in specs)
    assert len(specs) == 2 * len(labels)
    hp = {s.label: s.hyperparameters for s in specs if s.seed == 0}
    for g in COMPACT_GAMMAS:  # the same run but for the exchange
        assert hp[f"Sheaf-FMTL γ={g:g}, compact exchange"] == {**hp[f"Sheaf-FMTL γ={g:g}"], "exchange": "compact"}
    assert hp["Sheaf-FMTL γ=0.03, shared maps"] == {**hp["Sheaf-FMTL γ=0.03"], "map_init": "shared"}
    assert hp["Sheaf-FMTL γ=0.03, α=5e-4, η=1e-5"] == {**hp["Sheaf-FMTL γ=0.03"], "lr": 5e-4, "eta": 1e-5}
    assert hp["Local, α=5e-4"] == {**hp["Local"], "lr": 5e-4}
    assert "exchange" not in hp["Sheaf-FMTL γ=0.01"] and "map_init" not in hp["Sheaf-FMTL γ=0.01"]  # the paper's runs keep their ids


def test_digits_analysis_reports_both_exchanges_storage_and_paired_differences(tmp_path):
    import csv

    from topofl.experiments.driver import run_experiment

    out = run_experiment("sheaf-digits", [0, 1], tmp_path, budget=DigitsBudget(rounds=4))
    rows = {r["method"]: r for r in csv.DictReader(open(out / "summary.csv"))}
    d, K = 650, 4  # (64 + 1) features × 10 classes; iterations
    for g in COMPACT_GAMMAS:  # identical iterates; bits: (K + 1)·d_ij + K per directed edge (compact) vs 2K·d_ij (paper)
        paper, compact = rows[f"Sheaf-FMTL γ={g:g}"], rows[f"Sheaf-FMTL γ={g:g}, compact exchange"]
        assert paper["accuracy_mean"] == compact["accuracy_mean"]
        d_ij = int(g * d)
        assert float(compact["transmitted_MB"]) / float(paper["transmitted_MB"]) == pytest.approx(((K + 1) * d_ij + K) / (2 * K * d_ij), rel=1e-9)
    for r in rows.values():  # storage = 40 models of d float64 numbers + the maps
        assert float(r["storage_MB"]) == pytest.approx(float(r["map_storage_MB"]) + 40 * d * 8 / 1e6)
    pairs = list(csv.DictReader(open(out / "paired_vs_local.csv")))
    assert {p["versus"] for p in pairs} == {"Local", "Local, α=5e-4"} and all(p["n_seeds"] == "2" for p in pairs)
    assert {p["method"] for p in pairs if p["versus"] == "Local, α=5e-4"} == {"Sheaf-FMTL γ=0.03, α=5e-4, η=1e-5"}
    notes = " ".join(json.loads((out / "manifest.json").read_text())["notes"])
    assert "(paper exchange, 2·d_ij per edge and iteration)" in notes and "(compact exchange, d_ij + 1)" in notes


def test_sheaf_experiments_default_to_the_papers_five_runs():
    for name in ("sheaf-digits", "sheaf-centralised", "sheaf-hetero", "sheaf-topology", "sheaf-init"):
        assert EXPERIMENTS[name].default_seeds == (0, 1, 2, 3, 4)
    assert EXPERIMENTS["comparison"].default_seeds == tuple(range(10))


def test_unknown_decentralised_dataset_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="data must be one of .*rotated-digits.*; got 'imagenet'"):
        execute([Job(experiment="t", data="imagenet", method="local-peers", rounds=2)], tmp_path)


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
    from topofl.experiments.sheaf import school

    specs = plan_for("sheaf-school", [0, 1])
    assert len(specs) == 2 * (2 * len(school.GAMMAS) + 3) and {s.data for s in specs} == {"school"}
    assert EXPERIMENTS["sheaf-school"].default_seeds == (0, 1, 2, 3, 4)
    out = run_experiment("sheaf-school", [0], tmp_path, budget=school.SchoolBudget(rounds=5))
    rows = {r["method"]: r for r in csv.DictReader(open(out / "summary.csv"))}
    assert set(rows) == {"Sheaf-FMTL γ=0.1", "Sheaf-FMTL γ=0.3", "Sheaf-FMTL γ=0.1, compact exchange", "Sheaf-FMTL γ=0.3, compact exchange",
                         "dFedU", "D-PSGD", "Local"}
    K = 5
    for g, d_ij in (("0.1", 2), ("0.3", 8)):  # identical iterates; (K + 1)·d_ij + K numbers per directed edge vs 2K·d_ij (d_i = 29)
        compact, paper = rows[f"Sheaf-FMTL γ={g}, compact exchange"], rows[f"Sheaf-FMTL γ={g}"]
        assert compact["mse_mean"] == paper["mse_mean"]
        assert float(compact["transmitted_MB"]) / float(paper["transmitted_MB"]) == pytest.approx(((K + 1) * d_ij + K) / (2 * K * d_ij), rel=1e-9)
    for r in rows.values():   # finite, and the score-unit MSE is the standardised one rescaled (School's targets have sd ~ 10)
        assert 0 < float(r["mse_mean"]) < 5 and 10 < float(r["mse_original_mean"]) / float(r["mse_mean"]) < 1000
        assert float(r["r2_mean"]) <= 1
    # the MSE is the mean squared error itself, not the least-squares loss (half of it)
    done = [json.loads(p.read_text()) for p in (out / "runs").glob("*.done.json")]
    assert len(done) == 7
    for d in done:
        assert d["final"]["mse"] == pytest.approx(2 * d["final"]["loss"], rel=1e-9)
    assert float(rows["Local"]["transmitted_MB"]) == 0 and float(rows["dFedU"]["transmitted_MB"]) > float(rows["Sheaf-FMTL γ=0.1"]["transmitted_MB"])


def test_topology_plan_pairs_sheaf_fmtl_and_dfedu_at_the_same_lambda():
    """Table 5 compares Sheaf-FMTL with dFedU per topology and λ; Sheaf-FMTL stops where Theorem 1's
    step condition fails for its N(0, 1) maps, dFedU also runs at larger λ."""
    from topofl.experiments.sheaf.topology import DFEDU_LAMBDAS, LAMBDAS, TOPOLOGIES, plan

    specs = plan([0, 1])
    by = {(s.label, s.setting["topology"], s.setting["lam"], s.seed): s for s in specs}
    assert len(by) == len(specs) == 2 * len(TOPOLOGIES) * (len(LAMBDAS) + len(DFEDU_LAMBDAS))
    for (label, topo, lam, seed), s in by.items():
        assert s.hyperparameters["lam"] == lam and (s.graph, s.graph_params) == TOPOLOGIES[topo]
        if label == "dFedU":
            assert s.method == "dfedu" and lam in DFEDU_LAMBDAS
        else:
            assert (label, s.method, s.hyperparameters["gamma"]) == ("Sheaf-FMTL γ=0.03", "sheaf", 0.03) and lam in LAMBDAS
            assert ("dFedU", topo, lam, seed) in by  # every Sheaf-FMTL run has its dFedU pair
    assert max(LAMBDAS) * 0.5 * 2058 < 2 < 0.01 * 0.5 * 2058  # α·λ·λ_max(L_F) against Theorem 1's bound (module comment)


def test_topology_analysis_reports_both_methods_and_their_paired_difference(tmp_path):
    import csv

    from topofl.experiments.driver import run_experiment
    from topofl.experiments.sheaf import topology as sheaf

    small = sheaf.TopologyBudget(rounds=2, topologies=("Watts–Strogatz",), dfedu_lambdas=(*sheaf.LAMBDAS, 0.05))
    out = run_experiment("sheaf-topology", [0, 1], tmp_path, budget=small)
    rows = list(csv.DictReader(open(out / "summary.csv")))
    assert sorted((r["method"], float(r["lam"])) for r in rows) == sorted([("Sheaf-FMTL γ=0.03", lam) for lam in sheaf.LAMBDAS]
                                                                          + [("dFedU", lam) for lam in (*sheaf.LAMBDAS, 0.05)])
    assert all(float(r["transmitted_MB"]) > 0 for r in rows)
    pairs = list(csv.DictReader(open(out / "paired_vs_dfedu.csv")))
    assert sorted(float(p["lam"]) for p in pairs) == sorted(sheaf.LAMBDAS)  # dFedU's λ = 0.05 has no Sheaf-FMTL pair
    assert all(p["method"] == "Sheaf-FMTL γ=0.03" and p["versus"] == "dFedU" and p["n_seeds"] == "2" for p in pairs)


def test_sheaf_mnist_full_budget_uses_the_papers_cnn_and_every_budget_measures_a_common_start():
    from topofl.experiments.driver import plan_for
    from topofl.experiments.sheaf.mnist import BUDGETS

    for profile in ("full", "quick", "smoke"):
        specs = plan_for("sheaf-mnist", [0], profile)
        assert {s.model for s in specs if s.setting["part"] != "hetero"} == {"cnn-same" if profile == "full" else "cnn-small"}
        base = {s.label: s for s in specs if s.setting["part"] == "same"}
        common = [s for s in specs if s.setting["part"] == "same-common"]
        labels = {f"Sheaf-FMTL γ={g:g}" for g in BUDGETS[profile].gammas} | {"dFedU", "D-PSGD", "Local"}
        assert {s.label.removesuffix(", common init") for s in common} == labels
        for s in common:  # the default run but for the initial models
            ref = base[s.label.removesuffix(", common init")]
            assert s.hyperparameters == {**ref.hyperparameters, "model_init": "common"} and (s.method, s.model) == (ref.method, ref.model)
        assert all("model_init" not in s.hyperparameters for s in specs if s.setting["part"] != "same-common")
        assert all(s.hyperparameters.get("on_budget", "error") == "error" for s in specs)  # exact maps: no recompression


@pytest.mark.deep
def test_sheaf_mnist_smoke_pairs_the_common_start_with_the_default(tmp_path):
    import csv

    pytest.importorskip("torch")
    from topofl.experiments.driver import run_experiment

    out = run_experiment("sheaf-mnist", [0, 1], tmp_path, profile="smoke")
    pairs = list(csv.DictReader(open(out / "paired_common_init.csv")))
    assert {p["base"] for p in pairs} == {"Sheaf-FMTL γ=0.1", "dFedU", "D-PSGD", "Local"}
    assert all(p["method"] == "common" and p["versus"] == "independent" and p["n_seeds"] == "2" for p in pairs)
    vs_local = list(csv.DictReader(open(out / "paired_vs_local.csv")))
    assert {p["versus"] for p in vs_local} == {"Local", "Local, common init", "Local (hetero)"}
