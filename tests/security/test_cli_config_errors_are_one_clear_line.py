"""Finding 10: config type errors did not name the key; ``methods = "ptopofl"`` gave "unknown
method 'p'"; an output path under a file printed a traceback; seeds and clients had no upper
bound; rich markup ate ``[flower]`` from the install hint and ``[scenario_params]`` from help."""
import sys
import time

import pytest
from typer.testing import CliRunner

from helpers import one_line_error
from topofl.cli import app

runner = CliRunner()


@pytest.mark.parametrize("toml, fragments", [
    ('rounds = "three"', ("rounds", "integer", "'three'")),
    ('methods = "ptopofl"', ("methods", "list", "'ptopofl'")),
    ("methods = [1, 2]", ("methods", "list of method names")),
    ('seed = "x"', ("seed", "integer")),
    ("client_fraction = \"half\"", ("client_fraction", "number")),
    ("scenario = 3", ("scenario", "string")),
    ("scenario_params = 3", ("scenario_params", "table")),
    ("hyperparameters = [1]", ("hyperparameters", "table")),
])
def test_config_type_errors_name_the_key(tmp_path, toml, fragments):
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml + "\n")
    res = runner.invoke(app, ["compare", "-c", str(cfg), "--out", str(tmp_path / "o")])
    one_line_error(res, "c.toml", *fragments)


def test_output_path_under_a_file_is_a_one_line_error(tmp_path):
    (tmp_path / "afile").write_text("x")
    for cmd in (["compare", "--methods", "fedavg", "--seeds", "0", "--rounds", "1"], ["run", "--rounds", "1"],
                ["experiment", "privacy", "--seeds", "0"]):
        res = runner.invoke(app, cmd + ["--out", str(tmp_path / "afile" / "sub")])
        one_line_error(res, "afile")


@pytest.mark.parametrize("args, fragments", [
    (["compare", "--seeds", "0-100000000"], ("seeds", "1000")),
    (["run", "-s", "n_clients=100000000"], ("n_clients", "10000")),
    (["run", "-s", "n_max=1000000000"], ("n_max",)),
    (["run", "--rounds", "100000000"], ("rounds",)),
    (["run", "--seed", str(2**40)], ("seed",)),
    (["experiment", "privacy", "--seeds", "0-5000"], ("seeds", "1000")),
    (["experiment", "privacy", "--seeds", "0", "--jobs", "100000"], ("--jobs", "64")),
])
def test_requests_above_the_documented_bounds_are_refused_before_any_work(tmp_path, args, fragments):
    from topofl.limits import MAX_CLIENTS, MAX_SEEDS

    assert (MAX_SEEDS, MAX_CLIENTS) == (1000, 10_000)  # the documented bounds
    t0 = time.perf_counter()
    res = runner.invoke(app, args + ["--out", str(tmp_path / "o")])
    assert time.perf_counter() - t0 < 30  # refused up front, not after generating the data
    one_line_error(res, *fragments)


def test_install_hint_keeps_its_brackets(monkeypatch):
    monkeypatch.setitem(sys.modules, "flwr", None)  # as if the flower extra were not installed
    res = runner.invoke(app, ["flower", "--rounds", "1"])
    one_line_error(res, 'topofl[flower]')


def test_error_messages_with_brackets_are_printed_verbatim(tmp_path):
    res = runner.invoke(app, ["run", "-p", "beta=[bold]3"])
    one_line_error(res, "[bold]3")


def test_help_keeps_bracketed_words():
    res = runner.invoke(app, ["compare", "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    assert "[scenario_params]" in res.output and "[hyperparameters]" in res.output
