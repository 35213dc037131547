"""Equal-budget tuning on validation splits (topofl.experiments.tuning, ``topofl tune``; issue 19)."""
import csv
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from topofl.cli import app
from topofl.data import scenarios as scen
from topofl.data.federation import ClientData, Federation
from topofl.experiments import tuning
from topofl.experiments.runs import execute_run
from topofl.experiments.tuning import TuneSettings, best_trial, plan_studies, propose, run_studies, tune_comparison
from topofl.job import Job


def job(experiment, data, method, seed, rounds, **kw):
    """A job given as the experiment runner's runs were: experiment, data, method, seed, rounds."""
    return Job(experiment=experiment, data=data, method=method, seed=seed, rounds=rounds, **kw)


runner = CliRunner()


def rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def specs(methods=("fedavg", "ditto"), seeds=(0, 1), rounds=3, scenario="healthcare", **kw):
    return [job("tune", scenario, m, s, rounds, **kw) for s in seeds for m in methods]


def test_settings_refuse_bad_values():
    with pytest.raises(ValueError, match="trials"):
        TuneSettings(trials=0)
    with pytest.raises(ValueError, match="validation"):
        TuneSettings(validation=0.6)
    with pytest.raises(ValueError, match=r"metric \(--tune-metric\) must be auto or one of"):
        TuneSettings(metric="f1")
    assert TuneSettings(trials=30).n_startup == 10 and TuneSettings(trials=6).n_startup == 2


def test_studies_never_tune_what_defines_the_settings():
    """An ablation-like plan: two Ditto variants (λ 0.5 and 1.0, a tie: λ defines both) and FedAvg with lr set
    everywhere (a default, tuned from there)."""
    plan = [job("tune", "healthcare", m, s, 3, label=lab, hyperparameters=hp) for s in (0, 1) for m, lab, hp in (
        ("ditto", "ditto-a", {"lam": 0.5}), ("ditto", "ditto-b", {"lam": 1.0}), ("fedavg", "", {"lr": 0.05}))]
    studies = plan_studies(plan, TuneSettings())
    assert [s.label for s in studies] == ["ditto-a", "ditto-b", "fedavg"] and all(s.seeds == (0, 1) for s in studies)
    assert set(studies[0].space) == {"lr", "local_epochs"} and studies[0].defaults == {"lr": 0.1, "local_epochs": 2}
    assert set(studies[2].space) == {"lr", "local_epochs"} and studies[2].defaults["lr"] == 0.05
    forced = plan_studies(plan, TuneSettings(params=("lam", "lr"), seeds=(5,)))
    assert set(forced[0].space) == {"lam", "lr"} and forced[1].defaults["lam"] == 1.0 and forced[0].seeds == (5,)
    assert set(forced[2].space) == {"lr"}                                  # FedAvg has no lam: it tunes the rest
    with pytest.raises(ValueError, match="no method of the plan has a search space for mu"):
        plan_studies(plan, TuneSettings(params=("mu",)))


def test_an_ablations_variant_fixes_only_what_it_changes_whatever_the_order():
    variants = [("full", {}), ("M = 1", {"n_clusters": 1}), ("β = 0", {"beta": 0.0})]
    plan = [job("ablation", "healthcare", "ptopofl", 0, 3, label=lab, hyperparameters=hp) for lab, hp in variants]
    for order in (plan, plan[::-1]):
        spaces = {s.label: set(s.space) for s in plan_studies(order, TuneSettings())}
        assert spaces["full"] == {"lr", "local_epochs", "n_clusters", "beta", "use_trust"}
        assert spaces["M = 1"] == spaces["full"] - {"n_clusters"} and spaces["β = 0"] == spaces["full"] - {"beta"}


def test_real_data_are_tuned_seed_by_seed_and_synthetic_data_over_all_seeds():
    hd = plan_studies([job("t", "heart-disease", m, s, 3) for s in (0, 1) for m in ("fedavg", "ditto")], TuneSettings())
    assert [(s.label, s.for_seed, s.seeds) for s in hd] == [("fedavg", 0, (0,)), ("fedavg", 1, (1,)), ("ditto", 0, (0,)), ("ditto", 1, (1,))]
    assert len({s.name for s in hd}) == 4
    hc = plan_studies([job("t", "healthcare", "fedavg", s, 3) for s in (0, 1)], TuneSettings())
    assert [(s.for_seed, s.seeds) for s in hc] == [(None, (0, 1))]
    with pytest.raises(ValueError, match="'heart-disease' re-splits one set of rows by seed.*leave out --tune-seeds"):
        plan_studies([job("t", "heart-disease", "fedavg", s, 3) for s in (0, 1)], TuneSettings(seeds=(5,)))
    assert plan_studies([job("t", "healthcare", "fedavg", s, 3) for s in (0, 1)], TuneSettings(seeds=(5,)))[0].seeds == (5,)


def test_on_real_data_each_seed_is_tuned_and_run_with_its_own_choice(tmp_path):
    """Seed s's trials run on seed s only (their validation rows are carved from seed s's training
    rows), and seed s's final run takes seed s's choice: no choice ever saw a test row it is tested on."""
    from topofl.experiments.tuning import chosen, run_studies, study_of, trial_specs, tuned_plan

    plan = [job("t", "heart-disease", "fedavg", s, 2) for s in (0, 1, 2)]
    studies = plan_studies(plan, TuneSettings(trials=3))
    assert [(st.for_seed, st.seeds) for st in studies] == [(0, (0,)), (1, (1,)), (2, (2,))]
    assert all({sp.seed for sp in trial_specs(st, st.defaults, 0.25)} == {st.for_seed} for st in studies)
    run_studies(studies, TuneSettings(trials=3), tmp_path / "runs")
    for spec, tuned in zip(plan, tuned_plan(plan, studies), strict=True):
        st = study_of(spec, studies)
        assert st.for_seed == spec.seed and {k: tuned.hyperparameters[k] for k in st.space} == chosen(st)


def test_a_metric_the_runs_do_not_report_is_refused_before_any_trial():
    with pytest.raises(ValueError, match="'mse' is not reported by server-based runs of a binary task.*auc, accuracy"):
        plan_studies(specs(), TuneSettings(metric="mse"))
    with pytest.raises(ValueError, match="'auc' is not reported by peer-to-peer runs"):
        plan_studies([job("t", "rotated-digits", "local-peers", 0, 3)], TuneSettings(metric="auc"))
    assert plan_studies(specs(), TuneSettings())[0].metric == "auc"
    assert plan_studies([job("t", "rotated-digits", "local-peers", 6, 3)], TuneSettings())[0].metric == "accuracy"


def test_every_tuning_seed_is_checked_before_any_trial(monkeypatch):
    original = scen.SCENARIOS["healthcare"][0]

    def small_on_seed_2(seed, **params):
        fed = original(seed, **params)
        if seed != 2:
            return fed
        c = fed.clients[3]
        tiny = ClientData(c.X_train[:3], c.y_train[:3], c.X_test, c.y_test, c.client_id, c.meta)
        return Federation([*fed.clients[:3], tiny, *fed.clients[4:]], task="binary", name="healthcare")

    monkeypatch.setitem(scen.SCENARIOS, "healthcare", (small_on_seed_2, *scen.SCENARIOS["healthcare"][1:]))
    with pytest.raises(ValueError, match=r"cannot tune on 'healthcare' \(seed 2\): client 3 has 3 training rows"):
        plan_studies(specs(seeds=(0, 1, 2)), TuneSettings())


def test_wins_are_better_seeds_for_a_lower_is_better_metric_and_unchanged_settings_are_no_test():
    from topofl.experiments.tuning import orient_wins, tuned_vs_default

    rows = orient_wins([{"metric": "mse", "reference_wins": 3, "other_wins": 0}, {"metric": "auc", "reference_wins": 3, "other_wins": 0}])
    assert [(r["reference_wins"], r["other_wins"]) for r in rows] == [(0, 3), (3, 0)]
    done = lambda which, m, vals: [{"method": m, "seed": s, "final": {"mse": v}} for s, v in enumerate(vals)]  # noqa: E731
    default = done("d", "fedavg", [1.0, 1.2, 0.9]) + done("d", "ditto", [1.0, 1.0, 1.0])
    tuned = done("t", "fedavg", [0.8, 1.0, 0.7]) + done("t", "ditto", [1.0, 1.0, 1.0])
    by = {r["method"]: r for r in tuned_vs_default(default, tuned, (), ("mse",), unchanged={("ditto",)})}
    assert (by["fedavg"]["tuned_wins"], by["fedavg"]["tuned_losses"]) == (3, 0)  # lower MSE on every seed: tuned wins them
    assert by["ditto"]["tuned"] == "defaults kept" and np.isnan(by["ditto"]["p_value"]) and np.isnan(by["ditto"]["p_holm"])
    assert by["fedavg"]["n_comparisons"] == 1 and by["fedavg"]["p_holm"] == by["fedavg"]["p_value"]


def test_settings_of_several_scenarios_stay_apart_in_the_tables():
    from topofl.experiments.tuning import Study, setting_keys, summary_rows, tuned_vs_default

    a = Study("a_00000001", job("c", "healthcare", "fedavg", 0, 3), (0,), {}, {}, "auc", trials=[{"trial": 0, "params": {}, "metric": "auc",
                                                                                                    "value": 0.8, "seconds": 1.0}])
    b = Study("b_00000002", job("c", "benchmark", "fedavg", 0, 3), (0,), {}, {}, "auc", trials=[{"trial": 0, "params": {}, "metric": "auc",
                                                                                                   "value": 0.7, "seconds": 1.0}])
    assert setting_keys([a, b]) == ("scenario",) and [r["scenario"] for r in summary_rows([a, b])] == ["healthcare", "benchmark"]
    done = lambda sc, vals: [{"scenario": sc, "method": "fedavg", "seed": s, "final": {"auc": v}} for s, v in enumerate(vals)]  # noqa: E731
    rows = tuned_vs_default(done("healthcare", [0.8, 0.8]) + done("benchmark", [0.7, 0.7]),
                            done("healthcare", [0.81, 0.82]) + done("benchmark", [0.7, 0.7]), ("scenario",), ("auc",))
    assert {r["scenario"]: round(r["diff_mean"], 3) for r in rows} == {"healthcare": 0.015, "benchmark": 0.0}


def test_data_that_cannot_be_split_stop_the_tuning_before_any_trial():
    with pytest.raises(ValueError, match="cannot tune on 'continual'.*changes its data by round"):
        plan_studies([job("t", "continual", "fedavg", 0, 3)], TuneSettings())
    with pytest.raises(ValueError, match="cannot tune on 'school'.*training rows"):
        plan_studies([job("t", "school", "local-peers", 0, 3, graph="ring")], TuneSettings())


def test_proposals_are_deterministic_and_trial_zero_is_the_defaults():
    study = plan_studies(specs(("ditto",)), TuneSettings())[0]
    settings = TuneSettings(trials=8)
    assert propose(study, 0, settings) == study.defaults
    study.trials = [{"trial": t, "params": propose(study, t, settings), "value": 0.8 + 0.01 * t} for t in range(4)]
    a, b = propose(study, 4, settings), propose(study, 4, settings)
    assert a == b and set(a) == set(study.space)
    assert all(study.space[k].contains(v) for k, v in a.items())
    other = propose(study, 4, TuneSettings(trials=8, sampler_seed=1))
    assert other != a


def test_best_trial_prefers_the_earliest_of_equals_and_falls_back_to_the_defaults():
    trials = [{"trial": 0, "params": {"lr": 0.1}, "value": 0.8}, {"trial": 1, "params": {"lr": 0.2}, "value": 0.8},
              {"trial": 2, "params": {"lr": 0.3}, "value": None}]
    assert best_trial(trials, True)["trial"] == 0
    assert best_trial([{**trials[0], "value": 0.9}, trials[1]], False)["trial"] == 1   # lower is better (MSE)
    assert best_trial([{**t, "value": None} for t in trials], True)["trial"] == 0


def test_a_failing_trial_counts_in_the_budget_and_never_stops_the_tuning(tmp_path, monkeypatch):
    study = plan_studies(specs(("pfedme",), rounds=2), TuneSettings())[0]
    bad = {**study.defaults, "lr": 0.1, "lam": 30.0}  # lr*lam >= 2: pFedMe's config refuses it

    def forced(st, t, settings):
        return dict(st.defaults) if t != 1 else bad

    monkeypatch.setattr(tuning, "propose", forced)
    run_studies([study], TuneSettings(trials=3), tmp_path / "runs")
    assert [t["state"] for t in study.trials] == ["complete", "failed", "complete"]
    assert "lr*lam" in study.trials[1]["error"] and study.trials[1]["value"] is None


def test_tuning_reads_no_test_label_and_the_final_runs_do(tmp_path, monkeypatch):
    settings = TuneSettings(trials=3)
    clean = tune_comparison(specs(), tmp_path / "clean", settings, reference="fedavg")
    original = scen.SCENARIOS["healthcare"][0]

    def noisy_test_labels(seed, **params):  # healthcare with every test label replaced by noise
        fed = original(seed, **params)
        rng = np.random.default_rng(seed + 99)
        clients = [ClientData(c.X_train, c.y_train, c.X_test, rng.integers(0, 2, c.y_test.size).astype(float), c.client_id, c.meta)
                   for c in fed]
        return Federation(clients, task="binary", name="healthcare")

    monkeypatch.setitem(scen.SCENARIOS, "healthcare", (noisy_test_labels, *scen.SCENARIOS["healthcare"][1:]))
    noisy = tune_comparison(specs(), tmp_path / "noisy", settings, reference="fedavg")
    t_clean, t_noisy = rows(clean / "trials.csv"), rows(noisy / "trials.csv")
    assert [(r["params"], r["validation"]) for r in t_clean] == [(r["params"], r["validation"]) for r in t_noisy]
    s_clean, s_noisy = rows(clean / "summary.csv"), rows(noisy / "summary.csv")
    assert [r["auc_mean"] for r in s_clean] != [r["auc_mean"] for r in s_noisy]


def test_trial_values_are_validation_scores_of_the_proposed_values(tmp_path):
    out = tune_comparison(specs(("fedavg",)), tmp_path / "t", TuneSettings(trials=3), reference="fedavg")
    trials = rows(out / "trials.csv")
    assert len(trials) == 3 and trials[0]["params"] == "lr=0.1, local_epochs=2"
    first = [execute_run(job("tune", "healthcare", "fedavg", s, 3, hyperparameters={"lr": 0.1, "local_epochs": 2}, validation=0.25),
                         tmp_path / "check")["final"]["auc"] for s in (0, 1)]
    assert float(trials[0]["validation"]) == pytest.approx(np.mean(first), rel=1e-9)  # CSV keeps 10 digits
    summary = rows(out / "tuning_summary.csv")[0]
    best = max(trials, key=lambda r: (float(r["validation"]), -int(r["trial"])))
    assert summary["best_trial"] == best["trial"] and float(summary["validation_best"]) == float(best["validation"])
    tuned_cfg = json.loads((out / "config.json").read_text())
    assert tuned_cfg["tuning"]["trials"] == 3 and tuned_cfg["reference"] == "fedavg"
    man = json.loads((out / "manifest.json").read_text())
    assert [t["csv"] for t in man["tables"]] == ["summary.csv", "paired.csv", "tuning_summary.csv", "tuned_vs_default.csv"]


def test_an_interrupted_tuning_resumes_to_the_same_trials_and_results(tmp_path):
    settings = TuneSettings(trials=4)
    full = tune_comparison(specs(), tmp_path / "full", settings, reference="ditto")
    seen = []

    def stop(what):
        seen.append(what)
        if len(seen) == 7:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tune_comparison(specs(), tmp_path / "cut", settings, reference="ditto", on_run=stop)
    with pytest.raises(ValueError, match="--resume"):
        tune_comparison(specs(), tmp_path / "cut", settings, reference="ditto")
    with pytest.raises(ValueError, match="holds a tuning with other settings: trials=4 \\(now 5\\)"):
        tune_comparison(specs(), tmp_path / "cut", TuneSettings(trials=5), reference="ditto", resume=True)
    resumed = tune_comparison(specs(), tmp_path / "cut", settings, reference="ditto", resume=True)
    for name in ("trials.csv", "paired.csv", "tuned_vs_default.csv"):
        a, b = rows(full / name), rows(resumed / name)
        for r in a + b:
            r.pop("seconds", None)
        assert a == b, name


@pytest.mark.slow
def test_parallel_tuning_gives_the_serial_results(tmp_path):
    settings = TuneSettings(trials=4)
    one = tune_comparison(specs(("fedavg", "ifca", "fedprox")), tmp_path / "one", settings, reference="fedavg", jobs=1)
    two = tune_comparison(specs(("fedavg", "ifca", "fedprox")), tmp_path / "two", settings, reference="fedavg", jobs=2)
    for name in ("paired.csv", "tuned_vs_default.csv"):
        assert rows(one / name) == rows(two / name)
    strip = [{k: v for k, v in r.items() if k != "seconds"} for r in rows(one / "trials.csv")]
    assert strip == [{k: v for k, v in r.items() if k != "seconds"} for r in rows(two / "trials.csv")]


def test_cli_tune_writes_tables_and_refuses_bad_input(tmp_path):
    out = tmp_path / "tune"
    res = runner.invoke(app, ["tune", "--methods", "fedavg,fedprox", "--seeds", "0-1", "--rounds", "2", "--trials", "2", "--out", str(out), "-j", "1"])
    assert res.exit_code == 0, res.output
    assert "Tuning (validation splits" in res.output and "Holm" in res.output and (out / "report.html").exists()
    assert {r["method"] for r in rows(out / "tuning_summary.csv")} == {"fedavg", "fedprox"}
    again = runner.invoke(app, ["tune", "--methods", "fedavg", "--seeds", "0-1", "--rounds", "2", "--trials", "2", "--out", str(out)])
    assert again.exit_code == 2 and "--resume" in again.output
    for args, msg in ((["--methods", "sheaf"], "peer-to-peer"), (["--tune-params", "nope"], "no method of the plan has a search space for nope"),
                      (["--trials", "0"], "trials"), (["--validation-fraction", "0.8"], "validation")):
        res = runner.invoke(app, ["tune", "--seeds", "0", "--rounds", "1", "--out", str(tmp_path / "x"), *args])
        assert res.exit_code == 2 and msg in res.output, (args, res.output)


def test_cli_tune_reads_a_tuning_table_and_refuses_unknown_keys(tmp_path):
    good = tmp_path / "t.toml"
    good.write_text('methods = ["fedavg"]\nseeds = "0-1"\nrounds = 2\n[tuning]\ntrials = 2\nseeds = [0, 1]\nvalidation_fraction = 0.3\n')
    res = runner.invoke(app, ["tune", "--config", str(good), "--out", str(tmp_path / "o"), "-j", "1"])
    assert res.exit_code == 0, res.output
    assert {r["trials"] for r in rows(tmp_path / "o" / "tuning_summary.csv")} == {"2"}
    bad = tmp_path / "b.toml"
    bad.write_text("[tuning]\ntrails = 2\n")
    res = runner.invoke(app, ["tune", "--config", str(bad), "--out", str(tmp_path / "p")])
    assert res.exit_code == 2 and "tuning must be a table" in res.output and "trials" in res.output


def test_cli_experiment_tuning_flags_need_tuned_and_a_tunable_experiment(tmp_path):
    res = runner.invoke(app, ["experiment", "controls", "--trials", "3", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "--trials go with --tuned" in res.output
    res = runner.invoke(app, ["experiment", "privacy", "--tuned", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "cannot be tuned" in res.output and "controls" in res.output
    res = runner.invoke(app, ["experiment", "all", "--tuned", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "group" in res.output


@pytest.mark.slow
def test_experiment_controls_tuned_writes_both_and_the_report(tmp_path):
    res = runner.invoke(app, ["experiment", "controls", "--tuned", "--trials", "2", "--seeds", "0-1", "--out", str(tmp_path), "-j", "2"])
    assert res.exit_code == 0, res.output
    tuned = tmp_path / "controls-tuned"
    assert (tmp_path / "controls" / "paired.csv").exists() and (tuned / "paired.csv").exists()
    summary = rows(tuned / "tuning_summary.csv")
    assert {r["geometry"] for r in summary} == {"coupled", "independent", "shared"} and all(r["trials"] == "2" for r in summary)
    tvd = rows(tuned / "tuned_vs_default.csv")
    for g in ("coupled", "independent", "shared"):
        fam = [r for r in tvd if r["metric"] == "auc" and r["geometry"] == g]
        changed = [r for r in fam if r["tuned"] == "changed"]
        assert len(fam) == 9 and {r["n_comparisons"] for r in fam} == {str(len(changed))}  # the family: the settings tuning changed
        assert all(r["p_value"] == "" for r in fam if r["tuned"] == "defaults kept")
    report = (tmp_path / "report.html").read_text()
    assert report.index('id="controls"') < report.index('id="controls-tuned"')
