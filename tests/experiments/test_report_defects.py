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
    assert lower["best"] == "a" and lower["diff_mean"] < 0 and lower["ci_high"] < 0   # a − b, in the metric's units
    assert "a − b -0.107" in best_text(lower, "loss") and "lower is better" in best_text(lower, "loss")


def test_the_best_method_must_beat_every_other_not_only_the_runner_up():
    """A beats B by exactly 0.01 on every seed, but C (third by mean) swings ±0.15 around A: nobody is best."""
    b = best_method(_done({"A": [.90, .91, .92, .93], "B": [.89, .90, .91, .92], "C": [.99, .70, .99, .70]}))
    assert b["best"] is None and b["leader"] == "A" and b["runner_up"] == "C"
    text = best_text(b)
    assert "no method is distinguishable" in text and "A − C" in text and "includes 0" in text


def test_the_leader_is_ranked_on_the_seeds_both_methods_ran():
    """A's mean is lifted by a seed B has no result for; on the three seeds both ran, B is ahead."""
    b = best_method(_done({"A": [.99, .5, .5, .5], "B": [float("nan"), .6, .6, .6]}))
    assert b["leader"] == "B" and b["runner_up"] == "A" and b["n_seeds"] == 3
    assert b["diff_mean"] == pytest.approx(0.1) and b["best"] == "B"
    assert "B − A +0.100" in best_text(b) and "paired over 3 seeds" in best_text(b)


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


def test_an_experiment_with_overridden_settings_is_labelled_custom_not_full(tmp_path, monkeypatch):
    """``topofl experiment NAME --rounds 2`` (``NAME-custom/``, ``config.json`` ``overrides``) is not the
    paper's budget: the manifest, the figures and the report say how it differs."""
    from topofl.experiments import driver

    figures = []
    exp = _budget_experiment(figures)
    monkeypatch.setitem(driver.EXPERIMENTS, "demo", exp)
    label = budget_label(exp, exp.budgets["full"], {"rounds": 2})
    assert label == "custom budget — differs from the paper's: rounds 2 (full: 15)"
    smoke = budget_label(exp, exp.budgets["smoke"], {"model": "mlp"})
    assert smoke.startswith("custom budget") and "rounds 3 (full: 15)" in smoke and "model mlp" in smoke
    d = tmp_path / "demo-custom"
    d.mkdir()
    man = exp.analyse(d, [], exp.budgets["full"])        # the overrides are not known yet: still labelled custom
    man.write(d)
    assert man.budget.startswith("custom budget") and any("custom budget" in t.get_text() for t in figures[-1].texts)
    (d / "config.json").write_text(json.dumps({"experiment": "demo", "profile": "full", "overrides": {"rounds": 2},
                                               "runs": [{"method": "fedavg", "rounds": 2}], "seeds": [0]}))
    section = build_report(tmp_path).read_text().split('<h2 id="demo">')[1].split("<h2")[0]
    assert "budget full" not in section and "rounds 2 (full: 15)" in section
    assert "budget custom (full with rounds=2)" in section
    assert section.count("custom budget") >= 3                    # banner, table caption, figure caption


def test_a_smoke_budget_equal_to_the_full_one_gets_no_budget_note():
    """An experiment whose smoke budget is its full one (diagrams) is at the paper's budget: its manifest's
    empty label stands; only a manifest written before labels falls back to the profile's name."""
    from topofl.experiments.report import _budget_of

    assert _budget_of({"budget": ""}, {"profile": "smoke"}) == ""
    assert _budget_of({}, {"profile": "smoke"}).startswith("smoke budget")
