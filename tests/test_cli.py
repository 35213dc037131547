"""The command line, through typer's runner and (for the entry point) a real subprocess."""
import csv
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from topofl.cli import app
from topofl.cli_common import method_hyperparameters, parse_assignments, parse_seeds

runner = CliRunner()


def rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_compare_writes_rounds_and_summary(tmp_path):
    res = runner.invoke(app, ["compare", "--methods", "ptopofl,fedavg", "--seeds", "0-1", "--rounds", "3", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "ptopofl" in res.output and "fedavg" in res.output
    r = rows(tmp_path / "rounds.csv")
    assert list(r[0]) == ["method", "seed", "round", "client", "auc", "accuracy", "loss", "bytes_up", "bytes_down", "floats_up", "floats_down",
                          "mse", "r2"]
    assert all(x["mse"] == "" and x["r2"] == "" for x in r)   # classification: no regression metrics
    assert len(r) == 2 * 2 * 3 * 8
    s = rows(tmp_path / "summary.csv")
    assert [x["method"] for x in s] == ["ptopofl", "fedavg"] and all(x["n_seeds"] == "2" for x in s)
    assert 0.5 < float(s[0]["auc_mean"]) <= 1.0
    assert 1 <= float(s[0]["convergence_round_mean"]) <= 3
    assert (tmp_path / "config.json").exists() and (tmp_path / "server_log.jsonl").exists()


def test_run_prints_rounds_and_final(tmp_path):
    res = runner.invoke(app, ["run", "--scenario", "benchmark", "--method", "ptopofl", "--rounds", "2", "--seed", "42", "-p", "beta=0.5"])
    assert res.exit_code == 0, res.output
    assert "final" in res.output and "clusters" in res.output


def test_toml_config_and_flag_override(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('scenario = "benchmark"\nseeds = "0"\nrounds = 2\nmethods = ["fedavg"]\n[hyperparameters]\nlr = 0.05\n[scenario_params]\nn_clients = 4\n')
    res = runner.invoke(app, ["compare", "-c", str(cfg), "--rounds", "3", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    r = rows(tmp_path / "o" / "rounds.csv")
    assert {x["round"] for x in r} == {"1", "2", "3"} and {x["client"] for x in r} == {"0", "1", "2", "3"}


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "--method", "nope"], "unknown method 'nope'"),
        (["run", "--scenario", "mars"], "unknown scenario 'mars'"),
        (["run", "-p", "beta=3"], "beta must be in [0.0, 1.0]; got 3"),
        (["run", "-p", "ptopofl.n_clusters=20"], "n_clusters=20 exceeds the number of clients (8)"),
        (["run", "-p", "foo=1"], "unknown hyper-parameter 'foo'"),
        (["run", "-p", "lr"], "--param takes KEY=VALUE; got 'lr'"),
        (["run", "-s", "n_clients=0"], "n_clients must be in [1, 10000]; got 0"),
        (["compare", "--seeds", "a-b"], "seeds must look like"),
        (["compare", "--methods", ","], "--methods must name at least one method"),
        (["run", "--rounds", "0"], "rounds must be in [1"),
        (["run", "-c", "missing.toml"], "config file 'missing.toml' does not exist"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    res = runner.invoke(app, args)
    assert res.exit_code == 2
    out = res.output.strip()
    assert message in " ".join(out.split()), out
    assert "Traceback" not in out


def test_bad_toml_is_reported(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("rounds = [unclosed\n")
    res = runner.invoke(app, ["run", "-c", str(cfg)])
    assert res.exit_code == 2 and "is not valid TOML" in res.output
    cfg.write_text("roundz = 3\n")
    res = runner.invoke(app, ["run", "-c", str(cfg)])
    assert res.exit_code == 2 and "unknown key(s) roundz" in res.output


def test_methods_and_scenarios_list_their_parameters():
    res = runner.invoke(app, ["methods"])
    assert res.exit_code == 0 and "n_clusters" in res.output and "blending" in res.output
    res = runner.invoke(app, ["scenarios"])
    assert res.exit_code == 0 and "flip_rate" in res.output and "continual" in res.output


def test_help_explains_hyperparameters():
    res = runner.invoke(app, ["compare", "--help"])
    assert res.exit_code == 0 and "--seeds" in res.output and "n_clusters" in res.output


def test_parsers():
    assert parse_seeds("0-3,7,2") == (0, 1, 2, 3, 7)
    assert parse_seeds("42") == (42,)
    assert parse_assignments(["a=1", "b=0.5", "c=true", "d=l2", "e=1,5"], "x") == {"a": 1, "b": 0.5, "c": True, "d": "l2", "e": (1, 5)}
    routed = method_hyperparameters(["ptopofl", "fedavg"], {"lr": 0.2, "ptopofl.beta": 0.1, "n_clusters": 3})
    assert routed == {"ptopofl": {"lr": 0.2, "beta": 0.1, "n_clusters": 3}, "fedavg": {"lr": 0.2}}


def test_console_script_error_is_one_line_without_traceback():
    proc = subprocess.run([sys.executable, "-m", "topofl.cli", "run", "--method", "nope"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("Error: unknown method 'nope'") and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_default_compare_runs_the_healthcare_comparison(tmp_path):
    """`topofl compare` with no flags: healthcare, every method, seeds 0-9, 15 rounds."""
    proc = subprocess.run([sys.executable, "-m", "topofl.cli", "compare"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    s = rows(tmp_path / "results" / "compare-healthcare" / "run-0001" / "summary.csv")
    from topofl.methods import available

    assert [x["method"] for x in s] == available("server") and all(x["n_seeds"] == "10" for x in s)


def test_methods_lists_both_families():
    from topofl.methods import REGISTRY

    res = runner.invoke(app, ["methods"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    for name in REGISTRY:
        assert name in res.output
    assert "gamma" in res.output and "max_update_ratio" in res.output


@pytest.mark.parametrize("scenario, extra", [("digits", ["-s", "n_clients=8", "-p", "sheaf.gamma=0.1"]), ("healthcare", ["-p", "sheaf.gamma=0.3"])])
def test_compare_runs_peer_methods_beside_server_methods(tmp_path, scenario, extra):
    args = ["compare", "--scenario", scenario, "--methods", "sheaf,dfedu,dpsgd,local-peers,fedavg", "--seeds", "0-1", "--rounds", "3",
            "--graph", "erdos_renyi", "-g", "p=0.5", "--out", str(tmp_path), *extra]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    s = rows(tmp_path / "summary.csv")
    assert [x["method"] for x in s] == ["sheaf", "dfedu", "dpsgd", "local-peers", "fedavg"]
    assert all(0.5 < float(x["auc_mean"]) <= 1.0 for x in s)
    r = rows(tmp_path / "rounds.csv")
    local = [x for x in r if x["method"] == "local-peers"]
    assert local and all(float(x["bytes_up"]) == 0 for x in local)  # Local sends nothing
    assert all(float(x["bytes_up"]) > 0 for x in r if x["method"] == "sheaf")


def test_run_peer_method_on_a_graph_and_its_errors(tmp_path):
    res = runner.invoke(app, ["run", "--method", "sheaf", "--scenario", "healthcare", "--graph", "ring", "-p", "gamma=0.3", "--rounds", "2"])
    assert res.exit_code == 0, res.output
    assert "final" in res.output
    res = runner.invoke(app, ["run", "--method", "sheaf", "--scenario", "healthcare", "--rounds", "2"])
    assert res.exit_code == 2 and "raise gamma" in res.output  # healthcare's 21-parameter model needs a larger γ
    res = runner.invoke(app, ["run", "--method", "dpsgd", "--graph", "moebius", "--rounds", "2"])
    assert res.exit_code == 2 and "moebius" in res.output


def test_compare_summary_has_paired_differences_against_fedavg_and_the_best_other(tmp_path):
    from scipy.stats import t

    res = runner.invoke(app, ["compare", "--methods", "ptopofl,fedavg,local", "--seeds", "0-3", "--rounds", "3", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    s = {x["method"]: x for x in rows(tmp_path / "summary.csv")}
    final = {}   # per (method, seed): the final-round client-mean AUC, from curves.csv
    for r in rows(tmp_path / "curves.csv"):
        if r["round"] == "3":
            final[(r["method"], int(r["seed"]))] = float(r["auc"])
    d = [final[("ptopofl", k)] - final[("fedavg", k)] for k in range(4)]
    half = t.ppf(0.975, 3) * float(np.std(d, ddof=1)) / 2.0
    p = s["ptopofl"]
    assert float(p["auc_vs_fedavg_mean"]) == pytest.approx(np.mean(d))
    assert float(p["auc_vs_fedavg_ci_high"]) - float(p["auc_vs_fedavg_ci_low"]) == pytest.approx(2 * half)
    assert int(p["auc_vs_fedavg_wins"]) + int(p["auc_vs_fedavg_losses"]) <= 4
    assert s["fedavg"]["auc_vs_fedavg_mean"] == ""   # no difference with itself
    best = max(("fedavg", "local"), key=lambda m: float(s[m]["auc_mean"]))
    assert p["best_other"] == best
