"""The report's defects stay fixed: integer counts print as integers, a one-seed interval is explained
(never "(+nan, +nan)"), a best method is named only when its paired interval excludes 0, distinct
colours for distinct curves, integer round ticks, and a budget below the paper's labelled visibly on
every table and figure of its experiment."""
import json

import pytest

from topofl.experiments.analysis import best_method, best_text, interval_text
from topofl.experiments.base import Budget, Experiment, Manifest, budget_label
from topofl.experiments.figures import colours, pyplot, save
from topofl.experiments.report import _fmt, _kind, build_report


@pytest.mark.parametrize("name, values, cell, expected", [
    ("n_flagged", ["21.0", "3.0"], "21.0", "21"),            # a count written as a float is still a count
    ("n_runs", ["21.0", "3.0"], "3.0", "3"),
    ("participants", ["21.0", "40.0"], "40.0", "40"),
    ("n_flagged", ["2.5", "3.0"], "2.5", "2.500"),            # a mean count is not an integer
    ("accuracy_mean", ["1.0", "0.0"], "1.0", "1.000"),        # a metric that happens to be 0 or 1 keeps its decimals
])
def test_integer_valued_counts_print_as_integers(name, values, cell, expected):
    assert _fmt(cell, _kind(name, values)) == expected


def test_a_one_seed_interval_is_explained_not_printed_as_nan():
    assert interval_text(float("nan"), float("nan")) == "(one seed: no interval)"
    assert interval_text(-0.01, 0.02, prefix="95 % CI ") == "(95 % CI −0.010, +0.020)".replace("−", "-")


def _done(per_method):
    return [{"method": m, "seed": s, "final": {"auc": v}} for m, vals in per_method.items() for s, v in enumerate(vals)]


def test_a_best_method_is_named_only_when_its_paired_interval_excludes_zero():
    tiny_lead = best_method(_done({"a": [0.801, 0.7, 0.9, 0.6], "b": [0.80, 0.701, 0.899, 0.600]}))
    assert tiny_lead["leader"] == "a" and tiny_lead["best"] is None
    assert "no method is distinguishable" in best_text(tiny_lead)
    clear = best_method(_done({"a": [0.85, 0.75, 0.95, 0.66], "b": [0.80, 0.70, 0.90, 0.60], "c": [0.5] * 4}))
    assert clear["best"] == "a" and clear["runner_up"] == "b" and clear["ci_low"] > 0
    assert best_text(clear).startswith("best: a")
    one_seed = best_method(_done({"a": [0.9], "b": [0.5]}))
    assert one_seed["best"] is None and "one seed: no interval" in best_text(one_seed)
    lower = best_method(_done({"a": [0.10, 0.20, 0.30], "b": [0.20, 0.31, 0.41]}), higher_is_better=False)
    assert lower["best"] == "a" and lower["diff_mean"] > 0


def test_one_seed_intervals_in_tables_are_explained(tmp_path):
    d = tmp_path / "demo"
    d.mkdir()
    (d / "paired.csv").write_text("method,n_seeds,diff_mean,ci_low,ci_high\nptopofl,1,0.01,,\n")
    (d / "manifest.json").write_text(json.dumps({"name": "demo", "title": "Demo", "description": "", "notes": [],
                                                 "tables": [{"csv": "paired.csv", "title": "t"}], "figures": []}))
    page = build_report(tmp_path).read_text()
    assert "nan" not in page.lower().replace("nanmean", "") and "(–, –)" not in page
    assert "(1 seed, no CI)" in page


def test_the_robustness_gate_variant_has_its_own_colour():
    from topofl.experiments.ptopofl.robustness import FLAGGED

    methods = ["ptopofl", "fedavg", "fedprox", "scaffold", "pfedme", "ditto", "perfedavg", "ifca", "local", FLAGGED]
    got = colours(methods)
    assert len(set(got)) == len(methods)


def test_round_axes_get_integer_ticks_and_log_axes_readable_labels(tmp_path):
    plt = pyplot()
    fig, (ax, bx) = plt.subplots(1, 2)
    ax.plot([1, 2, 3], [0.5, 0.6, 0.7])
    ax.set_xlabel("round")
    bx.plot([1e3, 1e9], [0.5, 0.6])
    bx.set(xscale="log", xlabel="transmitted (MB; log)")
    save(fig, tmp_path, "f")
    ticks = [t for t in ax.get_xticks() if 1 <= t <= 3]
    assert ticks and all(float(t).is_integer() for t in ticks)
    labelled = [t.get_text() for t in bx.get_xticklabels(minor=True) if t.get_text()]
    assert labelled == []   # no minor labels crowding the decades


def _budget_experiment(figures):
    def analyse(out, done, budget):
        man = Manifest("demo", "Demo")
        man.table(out, "summary", "Summary", [{"method": "ptopofl", "n_seeds": 1, "auc_mean": 0.8}])
        plt = pyplot()
        fig, ax = plt.subplots()
        ax.plot([1, 2], [0.5, 0.6])
        figures.append(fig)
        man.figure(save(fig, out, "curve"), "A curve")
        return man

    return Experiment("demo", "Demo", lambda seeds, b: [], analyse,
                      {"full": Budget(rounds=15), "smoke": Budget(rounds=3, methods=("ptopofl", "fedavg"))})


def test_a_budget_below_the_papers_is_labelled_on_every_table_and_figure(tmp_path):
    figures = []
    exp = _budget_experiment(figures)
    assert budget_label(exp, exp.budgets["full"]) == ""
    label = budget_label(exp, exp.budgets["smoke"])
    assert label.startswith("smoke budget") and "rounds 3 (full: 15)" in label
    d = tmp_path / "demo"
    d.mkdir()
    man = exp.analyse(d, [], exp.budgets["smoke"])
    man.write(d)
    assert json.loads((d / "manifest.json").read_text())["budget"] == label
    assert any("smoke budget" in t.get_text() for t in figures[-1].texts)     # in the image itself
    page = build_report(tmp_path).read_text()
    section = page.split('<h2 id="demo">')[1].split("<h2")[0]
    assert "<details" not in section.split("<table")[0]          # the banner is visible, not collapsed
    assert section.count("smoke budget") >= 3                     # banner, table caption, figure caption
    full = exp.analyse(d, [], exp.budgets["full"])
    assert full.budget == "" and not any("budget" in t.get_text() for t in figures[-1].texts)


def test_compare_gives_peer_methods_enough_iterations_by_default():
    """A peer iteration is one mini-batch step: without --rounds, compare's 15 rounds would leave
    Sheaf-FMTL untrained (accuracy 0.26 on digits, "converged" at round 1); an explicit --rounds is kept."""
    from topofl.cli_common import DEFAULT_PEER_ITERATIONS, Options, jobs_from_options

    jobs = jobs_from_options(Options(scenario="digits"), {}, ["sheaf", "fedavg"], "0")
    assert {j.method: j.rounds for j in jobs} == {"sheaf": DEFAULT_PEER_ITERATIONS, "fedavg": 15}
    jobs = jobs_from_options(Options(scenario="digits", rounds=7), {}, ["sheaf", "fedavg"], "0")
    assert {j.rounds for j in jobs} == {7}
    jobs = jobs_from_options(Options(scenario="digits"), {"rounds": 5}, ["sheaf", "fedavg"], "0")
    assert {j.rounds for j in jobs} == {5}
