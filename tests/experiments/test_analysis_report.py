import math

import numpy as np
import pytest
from typer.testing import CliRunner

from topofl.cli import app
from topofl.experiments.analysis import detection_scores, final_table, group_curves
from topofl.experiments.driver import run_experiment
from topofl.experiments.ptopofl.robustness import adversaries
from topofl.experiments.report import build_report


def test_detection_scores_by_hand():
    assert detection_scores([1, 2], [2, 5, 6]) == {"precision": 0.5, "recall": 1 / 3, "n_flagged": 2.0}
    s = detection_scores([], [1])
    assert math.isnan(s["precision"]) and s["recall"] == 0.0
    assert math.isnan(detection_scores([3], [])["recall"])


def test_group_curves_mean_std_se():
    rows = [{"m": "a", "round": r, "auc": v} for r, v in ((1, "0.5"), (1, "0.7"), (2, "0.8"), (2, "0.8"))]
    g = group_curves(rows, ("m",))[("a",)]
    np.testing.assert_allclose(g["mean"], [0.6, 0.8])
    np.testing.assert_allclose(g["std"], [0.1, 0.0])
    np.testing.assert_allclose(g["se"], [0.1 / np.sqrt(2), 0.0])


def test_final_table_by_hand():
    done = [{"method": "x", "final": {"auc": a, "accuracy": 0.5, "pooled_auc": 0.6}, "convergence_round": c, "seconds": 1.0} for a, c in ((0.8, 1), (0.6, 3))]
    (row,) = final_table(done, ("method",))
    assert row["auc_mean"] == pytest.approx(0.7) and row["auc_std"] == pytest.approx(0.1)
    assert row["convergence_round_mean"] == 2.0 and row["n_seeds"] == 2


def test_adversaries_are_nested_and_sized():
    levels = [adversaries(r, 3) for r in (0.0, 0.125, 0.25, 0.375, 0.5)]
    assert [len(a) for a in levels] == [0, 1, 2, 3, 4]
    assert all(set(a) <= set(b) for a, b in zip(levels, levels[1:], strict=False))


def test_report_embeds_tables_and_figures(tmp_path):
    run_experiment("privacy", [0], tmp_path)
    run_experiment("diagrams", [0], tmp_path)
    html = build_report(tmp_path).read_text()
    assert "Privacy: reconstruction risk" in html and "Persistence diagrams" in html
    assert html.count("data:image/png;base64,") == 2
    assert "ρ_grad" in html and "<table>" in html and "Versions" in html and "git commit" in html
    assert (tmp_path / "privacy" / "privacy.svg").exists()


def test_privacy_numbers_match_the_equations(tmp_path):
    from topofl.experiments.results import read_csv

    run_experiment("privacy", [0], tmp_path)
    row = next(r for r in read_csv(tmp_path / "privacy" / "grid.csv") if r["n"] == "100" and r["d"] == "20")
    assert float(row["risk_gradient"]) == pytest.approx(21 / 2000)
    assert float(row["risk_descriptor"]) == pytest.approx(48 / 2000 * 0.1)


def test_report_of_an_empty_directory_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="holds no experiment results"):
        build_report(tmp_path)


def test_cli_experiment_and_report(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["experiment", "continual", "--seeds", "0", "--out", str(tmp_path), "--jobs", "1"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "continual" / "signatures.png").exists() and (tmp_path / "continual" / "drift.csv").exists()
    res = runner.invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 0 and (tmp_path / "report.html").exists()
    res = runner.invoke(app, ["experiment", "everything"])
    assert res.exit_code == 2 and "unknown experiment 'everything'" in res.output
    res = runner.invoke(app, ["experiment", "continual", "--seeds", "0", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "already holds results" in " ".join(res.output.split())


def _done(method, seed, acc, part="C"):
    return {"method": method, "seed": seed, "part": part, "final": {"accuracy": acc}}


def test_paired_differences_match_a_hand_computed_t_interval():
    from scipy.stats import t

    from topofl.experiments.analysis import paired_differences

    ref = [0.80, 0.85, 0.90, 0.70]
    other = [0.78, 0.86, 0.85, 0.69]
    done = [_done("ptopofl", s, a) for s, a in enumerate(ref)] + [_done("fedavg", s, a) for s, a in enumerate(other)]
    (row,) = paired_differences(done, ("part",), "ptopofl")
    d = np.array(ref) - np.array(other)
    half = t.ppf(0.975, 3) * d.std(ddof=1) / 2.0
    assert row["method"] == "fedavg" and row["n_seeds"] == 4 and (row["reference_wins"], row["other_wins"]) == (3, 1)
    assert row["diff_mean"] == pytest.approx(d.mean())
    assert (row["ci_low"], row["ci_high"]) == (pytest.approx(d.mean() - half), pytest.approx(d.mean() + half))


def test_paired_differences_pair_only_common_finite_seeds_and_refuse_bad_arguments():
    from topofl.experiments.analysis import paired_differences

    done = [_done("ptopofl", 0, 0.9), _done("ptopofl", 1, 0.8), _done("ptopofl", 2, float("nan")),
            _done("local", 1, 0.7), _done("local", 2, 0.5), _done("local", 3, 0.6)]
    (row,) = paired_differences(done, ("part",), "ptopofl")
    assert row["n_seeds"] == 1 and row["diff_mean"] == pytest.approx(0.1)
    assert np.isnan(row["ci_low"]) and np.isnan(row["ci_high"])     # one seed: no interval
    assert paired_differences(done, ("part",), "fedavg") == []       # no reference, no rows
    with pytest.raises(ValueError, match="method"):
        paired_differences(done, ("method",), "ptopofl")
    with pytest.raises(ValueError, match="level"):
        paired_differences(done, ("part",), "ptopofl", level=1.5)


def test_heart_disease_experiment_has_both_references_and_holm_adjusted_paired_rows(tmp_path):
    """The plan and tables; the measured conclusions over 10 seeds are pinned in test_conclusions.py."""
    import csv

    from topofl.experiments.driver import plan_for
    from topofl.methods import available

    specs = plan_for("heart-disease", [0, 1])
    assert len(specs) == 2 * (len(available("server")) + 1)
    pooled = [s for s in specs if s.label == "pooled"]
    assert len(pooled) == 2 and all(s.method == "local" and s.data_params["pooled_training"] for s in pooled)
    out = run_experiment("heart-disease", [0, 1], tmp_path)
    summary = {r["method"]: r for r in csv.DictReader(open(out / "summary.csv"))}
    assert {"ptopofl", "local", "pooled"} <= set(summary)
    paired = list(csv.DictReader(open(out / "paired.csv")))
    assert {r["method"] for r in paired} == set(summary) - {"ptopofl"} and all(r["n_seeds"] == "2" for r in paired)
    for metric in ("auc", "accuracy"):
        fam = [r for r in paired if r["metric"] == metric]
        assert {r["n_comparisons"] for r in fam} == {str(len(summary) - 1)}
        assert all(float(r["p_holm"]) >= float(r["p_value"]) for r in fam)
    assert (out / "auc_curves.png").is_file()


def test_controls_cluster_agreement_is_high_only_where_geometry_carries_the_groups(tmp_path):
    """pTopoFL's clusters against the rule groups (adjusted Rand index), seeds 0-9. Measured (15 rounds;
    the clusters form in round 1 and static data never drift, so one round gives the same): coupled
    0.849 (1.0 on 8 seeds, 0.495 and 0.0 on the others), independent −0.021, shared −0.033.
    """
    import csv

    from topofl.experiments.base import server_logs
    from topofl.experiments.ptopofl import controls

    small = controls.ControlsBudget(rounds=1, methods=("ptopofl", "fedavg"))  # a budget is a value passed in
    out = run_experiment("controls", list(range(10)), tmp_path, budget=small)
    ari = {r["geometry"]: float(r["ari_mean"]) for r in csv.DictReader(open(out / "cluster_agreement.csv"))}
    assert ari["coupled"] == pytest.approx(0.849, abs=0.01)
    assert abs(ari["independent"]) < 0.1 and abs(ari["shared"]) < 0.1
    per_seed = [r for r in controls.cluster_agreement(server_logs(out)) if r["geometry"] == "coupled"]
    assert sum(r["ari"] == 1.0 for r in per_seed) == 8
    paired = list(csv.DictReader(open(out / "paired.csv")))
    assert {(r["geometry"], r["metric"]) for r in paired} == {(g, m) for g in controls.GEOMETRIES for m in ("auc", "accuracy")}
    assert all(r["n_comparisons"] == "1" and r["p_holm"] == r["p_value"] for r in paired)  # a family of one comparison


