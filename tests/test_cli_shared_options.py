"""run, compare, experiment and flower take the same data, model and method options, declared once
(topofl.cli_common.JOB_OPTIONS), and each builds its jobs from them the same way."""
from __future__ import annotations

import json

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from helpers import one_line_error
from topofl.cli import app

runner = CliRunner()
DATA_MODEL_METHOD = {"--scenario", "--data", "--site-column", "--label-column", "--rounds", "--param", "-p", "--scenario-param",
                     "-s", "--config", "-c", "--model", "--client-fraction", "--graph", "--graph-param", "-g",
                     "--robust-defaults", "--papers-rules"}


def flags(command: str) -> set[str]:
    cmd = get_command(app).commands[command]  # type: ignore[attr-defined]
    return {opt for p in cmd.params for opt in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize("command", ["run", "compare", "experiment", "flower"])
def test_every_run_command_takes_the_data_model_and_method_options(command):
    assert DATA_MODEL_METHOD <= flags(command), DATA_MODEL_METHOD - flags(command)


@pytest.mark.parametrize("command", ["run", "compare", "flower", "tune"])
def test_the_commands_that_choose_methods_and_seeds_name_them_alike(command):
    assert {"--methods", "--method", "-m", "--seeds", "--seed"} <= flags(command)


def test_run_and_flower_take_one_method_and_one_seed():
    one_line_error(runner.invoke(app, ["run", "--methods", "fedavg,ptopofl"]), "runs one", "--method")
    one_line_error(runner.invoke(app, ["run", "--seeds", "0-1"]), "one seed", "--seed")
    one_line_error(runner.invoke(app, ["flower", "--method", "fedavg,local"]), "runs one")  # refused before Ray starts


def test_flower_resume_refuses_the_options_of_a_new_run(tmp_path):
    one_line_error(runner.invoke(app, ["flower", "--resume", str(tmp_path), "--model", "mlp", "-p", "lr=0.1"]),
                   "--resume", "--model", "--param")


def test_an_experiment_takes_the_data_model_and_hyperparameter_options_into_its_own_directory(tmp_path):
    res = runner.invoke(app, ["experiment", "ablation", "--seeds", "0", "--jobs", "1", "--rounds", "2", "-p", "lr=0.05",
                              "-s", "n_clients=6", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    config = json.loads((tmp_path / "ablation-custom" / "config.json").read_text())
    assert config["overrides"] == {"rounds": 2, "data_params": {"n_clients": 6}, "hyperparameters": {"lr": 0.05}}
    assert not (tmp_path / "ablation").exists()
    done = [json.loads(p.read_text()) for p in (tmp_path / "ablation-custom" / "runs").glob("*.done.json")]
    assert done and all(d["final"]["round"] == 2 for d in done)
    rows = (tmp_path / "ablation-custom" / "curves.csv").read_text().splitlines()
    assert {r.split(",")[rows[0].split(",").index("round")] for r in rows[1:]} == {"1", "2"}


def test_an_experiment_refuses_an_unknown_hyperparameter_by_name(tmp_path):
    one_line_error(runner.invoke(app, ["experiment", "ablation", "--seeds", "0", "-p", "nonsense=1", "--out", str(tmp_path)]),
                   "nonsense")


def test_run_prints_a_peer_method_that_logs_nothing():
    res = runner.invoke(app, ["run", "-m", "dfedu", "-r", "2", "-s", "n_clients=4", "-s", "adversarial=(1,)"])
    assert res.exit_code == 0, res.output
    assert "final" in res.output


def test_one_config_file_serves_run_and_compare(tmp_path):
    """run reads method and seed first, compare methods and seeds (as before the shared options)."""
    from topofl import cli_common as ui
    from topofl.cli import _methods_and_seeds

    path = tmp_path / "c.toml"
    path.write_text('method = "fedavg"\nmethods = ["fedavg", "ditto"]\nseed = 3\nseeds = "0-1"\n')
    options = ui.Options(config=path)
    assert _methods_and_seeds(options, "0", one=True)[1:] == (["fedavg"], 3)
    assert _methods_and_seeds(options, "0-9")[1:] == (["fedavg", "ditto"], "0-1")
