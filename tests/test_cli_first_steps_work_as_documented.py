"""A command line a newcomer can trust: listings readable at 80 columns, a real description for
every method and scenario, no silent overwrite of earlier results, flags over the config file."""
import json
import logging

import pytest
from typer.testing import CliRunner

from helpers import one_line_error
from topofl.cli import app
from topofl.cli_common import route_hyperparameters

runner = CliRunner()
COMMANDS = ("compare", "run", "experiment", "report", "methods", "models", "scenarios", "flower")


# ---- listings and descriptions -------------------------------------------------------------------


@pytest.mark.parametrize("command", ["scenarios", "methods"])
def test_listings_fit_80_columns_and_name_every_entry(command):
    from topofl.data.scenarios import SCENARIOS
    from topofl.methods import REGISTRY

    res = runner.invoke(app, [command], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(len(ln) for ln in lines) <= 80, max(lines, key=len)
    names = SCENARIOS if command == "scenarios" else REGISTRY
    starts = {ln.split()[0] for ln in lines if ln and not ln[0].isspace()}
    assert set(names) <= starts


def test_every_method_and_scenario_has_a_real_description():
    from topofl.data.scenarios import DESCRIPTIONS, SCENARIOS
    from topofl.methods import REGISTRY

    assert set(DESCRIPTIONS) == set(SCENARIOS)
    texts = {**{f"method {n}": m.summary for n, m in REGISTRY.items()}, **{f"scenario {n}": d for n, d in DESCRIPTIONS.items()}}
    for what, text in texts.items():
        assert len(text.split()) >= 5, (what, text)
        assert "module docstring" not in text.lower(), (what, text)
    for command in COMMANDS:
        res = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert res.exit_code == 0 and "module docstring" not in res.output.lower(), command


def test_the_digits_scenario_says_what_it_is():
    res = runner.invoke(app, ["scenarios"], env={"COLUMNS": "200"})
    block = res.output.split("\ndigits\n", 1)[1].split("\n\n", 1)[0]
    assert "scikit-learn's bundled 8x8 digits" in block and "4 rotation groups" in block and "40 clients" in block
    assert "synthetic" not in block.lower()


def test_top_level_help_lists_each_command_on_one_line():
    res = runner.invoke(app, ["--help"], env={"COLUMNS": "100"})
    assert res.exit_code == 0
    for command in COMMANDS:
        line = next(ln for ln in res.output.splitlines() if ln.strip("│ ").startswith(command + " "))
        assert line.rstrip("│ ").endswith("."), line  # the whole one-line summary, not a sentence cut at a line break


# ---- output directories --------------------------------------------------------------------------

FAST = ["--methods", "fedavg", "--seeds", "0", "--rounds", "1", "--scenario", "benchmark"]


def test_compare_refuses_a_non_empty_out_without_overwrite(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    one_line_error(runner.invoke(app, ["compare", *FAST, "--out", str(out)]), str(out), "notes.txt", "--overwrite")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]  # nothing written, nothing removed
    res = runner.invoke(app, ["compare", *FAST, "--out", str(out), "--overwrite"])
    assert res.exit_code == 0, res.output
    assert (out / "notes.txt").read_text() == "mine" and (out / "summary.csv").is_file()
    # a second comparison into the same directory is refused too, then replaces the results
    one_line_error(runner.invoke(app, ["compare", *FAST, "--out", str(out)]), "--overwrite")
    res = runner.invoke(app, ["compare", *FAST[:-1], "healthcare", "--out", str(out), "--overwrite"])
    assert res.exit_code == 0, res.output
    assert json.loads((out / "config.json").read_text())["scenario"] == "healthcare"


def test_compare_into_a_new_or_empty_directory_needs_no_flag(tmp_path):
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "new" / "deeper"):
        res = runner.invoke(app, ["compare", *FAST, "--out", str(out)])
        assert res.exit_code == 0, res.output


def test_the_default_out_of_compare_is_protected_too(tmp_path, monkeypatch):
    """Without --out a comparison gets a new run directory (tests/test_run_dirs.py): earlier results stay."""
    monkeypatch.chdir(tmp_path)
    default = tmp_path / "results" / "compare-benchmark"
    default.mkdir(parents=True)
    (default / "summary.csv").write_text("earlier results\n")
    res = runner.invoke(app, ["compare", *FAST])
    assert res.exit_code == 0, res.output
    assert (default / "summary.csv").read_text() == "earlier results\n"
    assert (default / "run-0001" / "summary.csv").is_file()


def test_run_out_refuses_a_non_empty_directory_without_overwrite(tmp_path):
    (tmp_path / "x.csv").write_text("1")
    args = ["run", "--method", "fedavg", "--scenario", "benchmark", "--rounds", "1", "--out", str(tmp_path)]
    one_line_error(runner.invoke(app, args), "x.csv", "--overwrite")
    res = runner.invoke(app, [*args, "--overwrite"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "rounds.csv").is_file() and (tmp_path / "x.csv").read_text() == "1"


# ---- config file and flags -----------------------------------------------------------------------


def test_a_file_may_hold_settings_of_methods_that_are_not_selected(tmp_path, caplog):
    cfg = tmp_path / "c.toml"
    cfg.write_text('scenario = "benchmark"\nseeds = "0"\nrounds = 1\n[hyperparameters]\nlr = 0.05\nn_clusters = 3\n'
                   "[hyperparameters.ptopofl]\nbeta = 0.5\n")
    with caplog.at_level(logging.INFO, logger="topofl.cli_common"):
        res = runner.invoke(app, ["compare", "-c", str(cfg), "--methods", "fedavg", "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "o" / "config.json").read_text())["hyperparameters"] == {"fedavg": {"lr": 0.05}}
    notes = " ".join(r.getMessage() for r in caplog.records)
    assert "ptopofl.beta ignored" in notes and "n_clusters ignored" in notes


def test_flags_override_the_file(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('scenario = "benchmark"\nmethods = ["fedavg", "fedprox"]\nseeds = "0"\nrounds = 3\n'
                   "[hyperparameters]\nlr = 0.05\nmu = 0.5\n[hyperparameters.fedavg]\nlr = 0.01\n")
    out = tmp_path / "o"
    res = runner.invoke(app, ["compare", "-c", str(cfg), "--rounds", "1", "-p", "lr=0.2", "-p", "fedprox.mu=0.3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    spec = json.loads((out / "config.json").read_text())
    assert spec["rounds"] == 1 and spec["methods"] == ["fedavg", "fedprox"]
    assert spec["hyperparameters"] == {"fedavg": {"lr": 0.2}, "fedprox": {"lr": 0.2, "mu": 0.3}}


def test_routing_keeps_typos_and_flags_for_unselected_methods_errors():
    assert route_hyperparameters(["fedavg"], {"ptopofl.n_clusters": 3, "lr": 0.1}, {}) == {"fedavg": {"lr": 0.1}}
    assert route_hyperparameters(["fedavg"], {"fedavg.lr": 0.1}, {"lr": 0.3}) == {"fedavg": {"lr": 0.3}}
    assert route_hyperparameters(["fedavg"], {"lr": 0.1}, {"fedavg.lr": 0.4, "lr": 0.3}) == {"fedavg": {"lr": 0.4}}
    with pytest.raises(ValueError, match="unknown hyper-parameter 'n_clustrs'"):
        route_hyperparameters(["fedavg"], {"n_clustrs": 3}, {})
    with pytest.raises(ValueError, match="unknown method 'ptopfl'"):
        route_hyperparameters(["fedavg"], {"ptopfl.beta": 0.1}, {})
    with pytest.raises(ValueError, match="names method 'ptopofl', which is not selected"):
        route_hyperparameters(["fedavg"], {}, {"ptopofl.beta": 0.1})


def test_run_with_a_file_listing_several_methods_asks_for_one(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('methods = ["fedavg", "ptopofl"]\n')
    one_line_error(runner.invoke(app, ["run", "-c", str(cfg)]), "lists methods fedavg, ptopofl", "--method")
    cfg.write_text('methods = ["fedavg"]\nscenario = "benchmark"\nrounds = 1\n[hyperparameters.ptopofl]\nbeta = 0.5\n')
    res = runner.invoke(app, ["run", "-c", str(cfg)])
    assert res.exit_code == 0 and "fedavg on benchmark" in res.output, res.output
