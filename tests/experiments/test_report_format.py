"""The report's numbers, tables and layout: formatting by column, paired statistics, and (with
Chromium installed) no table or figure overflowing a 1400- or 760-pixel window."""
import importlib.util
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from topofl.experiments.analysis import against, paired_curves, paired_differences, t_interval
from topofl.experiments.report import _fmt, _groups, _kind, build_report


@pytest.mark.parametrize("name, values, cell, expected", [
    ("convergence_round_mean", ["2.5", "1.0", "3.3333333"], "2.5", "2.5"),          # no "2.500 rounds"
    ("convergence_round_mean", ["2.5", "1.0", "3.3333333"], "3.3333333", "3.3"),
    ("auc_mean", ["0.8", "0.8712", "0.5"], "0.8", "0.800"),                          # three decimals, column-wide
    ("n_seeds", ["10", "3"], "10", "10"),
    ("bytes_up_per_run", ["1738000.0", "250.5"], "1738000.0", "1,738,000"),
    ("diff_mean", ["0.0123", "-0.004", "0.2"], "0.0123", "+0.012"),
    ("diff_mean", ["0.0123", "-0.004", "0.2"], "-0.004", "−0.004"),
    ("TFLOPs", ["0.000470815", "0.0012"], "0.000470815", "0.000471"),               # a column of small values keeps 3 significant figures
    ("auc_mean", ["nan", "0.8"], "nan", "–"),
    ("method", ["ptopofl", "fedavg"], "ptopofl", "ptopofl"),
    ("method", ["<b>", "x"], "<b>", "&lt;b&gt;"),
])
def test_cells_are_formatted_by_column(name, values, cell, expected):
    assert _fmt(cell, _kind(name, values)) == expected


def test_columns_are_grouped_into_mean_std_intervals_and_won_lost():
    cols = ["method", "auc_mean", "auc_std", "diff_mean", "ci_low", "ci_high", "wins", "losses",
            "auc_vs_fedavg_mean", "auc_vs_fedavg_ci_low", "auc_vs_fedavg_ci_high", "reference_wins", "other_wins", "paper_auc"]
    got = [(h, keys) for h, keys, _ in _groups(cols)]
    assert got == [
        ("method", ["method"]), ("auc (mean ± std)", ["auc_mean", "auc_std"]),
        ("difference (95 % CI)", ["diff_mean", "ci_low", "ci_high"]), ("won/lost", ["wins", "losses"]),
        ("auc vs fedavg (95 % CI)", ["auc_vs_fedavg_mean", "auc_vs_fedavg_ci_low", "auc_vs_fedavg_ci_high"]),
        ("ref. won/lost", ["reference_wins", "other_wins"]), ("paper auc", ["paper_auc"]),
    ]


def _done(values):
    return [{"method": m, "seed": s, "final": {"auc": v}} for m, per in values.items() for s, v in enumerate(per)]


def test_against_is_method_minus_baseline_with_wins_and_a_t_interval():
    done = _done({"fedavg": [0.80, 0.70, 0.90, 0.60], "ptopofl": [0.82, 0.73, 0.90, 0.61]})
    (row,) = against(done, (), "fedavg", "auc")
    d = np.array([0.02, 0.03, 0.0, 0.01])
    half = 3.182446305284263 * d.std(ddof=1) / 2   # t_{0.975, 3} · s / √4
    assert row["method"] == "ptopofl" and row["versus"] == "fedavg"
    assert row["diff_mean"] == pytest.approx(d.mean()) and row["ci_low"] == pytest.approx(d.mean() - half)
    assert row["ci_high"] == pytest.approx(d.mean() + half)
    assert (row["wins"], row["losses"]) == (3, 0)     # the tie counts for neither
    (ref,) = paired_differences(done, (), "fedavg", "auc")
    assert ref["diff_mean"] == pytest.approx(-row["diff_mean"])


def test_t_interval_and_paired_curves_by_hand():
    m, lo, hi = t_interval([1.0, 2.0, 3.0])
    assert m == 2.0 and hi - m == pytest.approx(4.302652729911275 * 1.0 / math.sqrt(3))
    assert math.isnan(t_interval([5.0])[1]) and math.isnan(t_interval([])[0])
    rows = [{"method": m, "seed": str(s), "round": str(k), "auc": str(v)}
            for m, base in (("fedavg", 0.5), ("ptopofl", 0.6)) for s in range(3) for k, v in ((1, base + 0.1 * s), (2, base + 0.1 * s + 0.05))]
    curves = paired_curves(rows, (), "fedavg")
    assert list(curves) == [("ptopofl",)]
    c = curves[("ptopofl",)]
    assert list(c["round"]) == [1, 2] and np.allclose(c["mean"], 0.1) and np.allclose(c["low"], 0.1) and list(c["n"]) == [3, 3]


def _tiny_experiment(root: Path) -> None:
    d = root / "demo"
    d.mkdir(parents=True)
    (d / "summary.csv").write_text("method,n_seeds,auc_mean,auc_std,convergence_round_mean\nptopofl,3,0.8,0.01,2.5\n")
    (d / "manifest.json").write_text(json.dumps({"name": "demo", "title": "Demo", "description": "d", "notes": [],
                                                 "tables": [{"csv": "summary.csv", "title": "t"}], "figures": []}))
    (d / "config.json").write_text(json.dumps({
        "seeds": [0, 1, 2], "n_runs": 3, "seconds": 1.0, "profile": "full",
        "runs": [{"method": "ptopofl", "label": "", "scenario": "healthcare", "rounds": 15, "model": "linear",
                  "hyperparameters": {"beta": 0.0}, "scenario_params": {}, "setting": {}, "graph": {}}],
        "versions": {"topofl": "0.1.0", "git commit": "abc123"}}))


def test_the_report_states_settings_defaults_commit_and_formats_rounds(tmp_path):
    _tiny_experiment(tmp_path)
    page = build_report(tmp_path).read_text()
    assert "<code>abc123</code>" in page and "beta=0.0" in page and "Default hyper-parameters" in page
    assert "<td>2.5</td>" in page and "2.500" not in page and "0.800 ± 0.010" in page
    assert "issue" not in page.lower()


def _layout_tool():
    spec = importlib.util.spec_from_file_location("check_report_layout", Path(__file__).parents[2] / "tools" / "check_report_layout.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromium") is None and shutil.which("google-chrome") is None, reason="needs Chromium (apt-get install chromium)")
def test_the_report_fits_1400_and_760_pixel_windows(tmp_path):
    from topofl.experiments.driver import run_experiment

    for name in ("comparison", "heart-disease", "ablation"):
        run_experiment(name, [0, 1], tmp_path)
    report = build_report(tmp_path)
    tool = _layout_tool()
    for width in (1400, 760):
        r = tool.check(report, width)
        assert r["problems"] == [] and r["scrollWidth"] <= width, (width, r)
    # the check can fail: a table wider than the window is reported
    wide = tmp_path / "wide.html"
    wide.write_text("<html><body><div class=tw><table><caption>w</caption><tr>" + "<td>123456789012</td>" * 40 + "</tr></table></div></body></html>")
    assert tool.check(wide, 760)["problems"]
