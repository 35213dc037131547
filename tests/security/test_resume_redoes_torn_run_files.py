"""Finding 7: ``--resume`` merged torn files (a cut ``rounds.csv`` gave 61 rows too few and a
malformed row) and a torn ``done.json`` ended with an error that did not name the file. Each
run's ``done.json`` now records every file's row count and SHA-256; resume verifies them, redoes a
run whose files do not match (with a warning naming the file), and the merged outputs equal an
uninterrupted run's."""
import csv
import json
import logging

import pytest

from topofl.experiments.runs import execute, run_paths
from topofl.job import Job

FILES = ("rounds.csv", "curves.csv", "server_log.jsonl")


def specs():
    return [Job(experiment="t", data="healthcare", method=m, seed=s, rounds=3) for s in (0, 1) for m in ("ptopofl", "fedavg")]


def sorted_rows(d):
    out = {}
    for f in FILES:
        text = (d / f).read_text()
        out[f] = sorted(text.splitlines())
    return out


@pytest.fixture
def finished(tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    execute(specs(), full)
    execute(specs(), cut)
    return full, cut


@pytest.mark.parametrize("kind", ["rounds", "curves", "log"])
def test_a_torn_run_file_is_detected_and_the_run_redone(finished, kind, caplog):
    full, cut = finished
    path = run_paths(cut / "runs", specs()[1])[kind]
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2 + 7])  # cut mid-line
    with caplog.at_level(logging.WARNING, logger="topofl"):
        execute(specs(), cut, resume=True)
    assert path.name in caplog.text and "redo" in caplog.text
    assert sorted_rows(full) == sorted_rows(cut)
    assert (full / "rounds.csv").read_bytes() == (cut / "rounds.csv").read_bytes()
    with (cut / "rounds.csv").open(newline="") as fh:
        widths = {len(r) for r in csv.reader(fh)}
    assert len(widths) == 1


def test_a_torn_done_record_counts_as_not_done(finished, caplog):
    full, cut = finished
    done = run_paths(cut / "runs", specs()[2])["done"]
    done.write_text(done.read_text()[:97])
    with caplog.at_level(logging.WARNING, logger="topofl"):
        records = execute(specs(), cut, resume=True)
    assert done.name in caplog.text
    assert len(records) == 4 and json.loads(done.read_text())["seed"] == 1
    assert (full / "rounds.csv").read_bytes() == (cut / "rounds.csv").read_bytes()


def test_an_edited_value_with_the_same_row_count_is_caught_by_the_hash(finished, caplog):
    full, cut = finished
    path = run_paths(cut / "runs", specs()[3])["curves"]
    text = path.read_text()
    last = text.rstrip("\n").split("\n")[-1]
    edited = last.replace("0.", "0.9", 1)
    assert edited != last
    path.write_text(text.replace(last, edited))
    with caplog.at_level(logging.WARNING, logger="topofl"):
        execute(specs(), cut, resume=True)
    assert path.name in caplog.text and "SHA-256 differs" in caplog.text
    assert (full / "curves.csv").read_bytes() == (cut / "curves.csv").read_bytes()


def test_a_deleted_run_file_is_redone(finished, caplog):
    full, cut = finished
    run_paths(cut / "runs", specs()[0])["curves"].unlink()
    with caplog.at_level(logging.WARNING, logger="topofl"):
        execute(specs(), cut, resume=True)
    assert "curves.csv" in caplog.text
    assert (full / "curves.csv").read_bytes() == (cut / "curves.csv").read_bytes()


def test_done_record_holds_row_counts_and_hashes(finished):
    _, cut = finished
    rec = json.loads(run_paths(cut / "runs", specs()[0])["done"].read_text())
    files = rec["files"]
    assert set(files) == {"rounds", "curves", "log"}
    assert files["rounds"]["rows"] == 3 * 8 and len(files["rounds"]["sha256"]) == 64
    assert files["curves"]["rows"] == 3


def test_cli_resume_after_a_torn_file_matches_an_uninterrupted_run(tmp_path):
    from typer.testing import CliRunner

    from topofl.cli import app

    runner = CliRunner()
    args = ["experiment", "ablation", "--seeds", "0", "--jobs", "1"]
    assert runner.invoke(app, args + ["--out", str(tmp_path / "full")]).exit_code == 0
    assert runner.invoke(app, args + ["--out", str(tmp_path / "cut")]).exit_code == 0
    runs = sorted((tmp_path / "cut" / "ablation" / "runs").glob("*.rounds.csv"))
    data = runs[0].read_bytes()
    runs[0].write_bytes(data[: len(data) // 3])
    res = runner.invoke(app, args + ["--out", str(tmp_path / "cut"), "--resume"])
    assert res.exit_code == 0, res.output
    assert sorted_rows(tmp_path / "full" / "ablation") == sorted_rows(tmp_path / "cut" / "ablation")
