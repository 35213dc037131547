"""Default output directories: each invocation of a command writes into its own ROOT/run-NNNN (a second
`topofl compare` never fails on the first one's files), an explicit --out that holds files is still
refused, and --resume without --out continues the latest run of the default root."""
import threading

import pytest
from typer.testing import CliRunner

from helpers import one_line_error
from topofl import cli_common
from topofl.cli import app
from topofl.cli_common import latest_run_dir, new_run_dir, run_dirs

runner = CliRunner()
FAST = ["--methods", "fedavg", "--seeds", "0", "--rounds", "1", "--scenario", "benchmark"]


# ---- the run directories themselves ----------------------------------------------------------------


def test_run_directories_count_up_and_ignore_other_entries(tmp_path):
    root = tmp_path / "results" / "compare-x"
    assert new_run_dir(root).name == "run-0001"   # the root and its parents are created
    (root / "summary.csv").write_text("an older layout's flat results\n")
    (root / "run-notes").mkdir()
    (root / "run-0007").mkdir()
    (root / "run-0009.txt").write_text("a file, not a run")
    made = new_run_dir(root)
    assert made.name == "run-0008" and made.is_dir() and not any(made.iterdir())
    assert [p.name for p in run_dirs(root)] == ["run-0001", "run-0007", "run-0008"]


def test_the_counter_sorts_past_four_digits(tmp_path):
    (tmp_path / "run-9999").mkdir()
    assert new_run_dir(tmp_path).name == "run-10000"
    assert latest_run_dir(tmp_path).name == "run-10000"   # by number, not by name


def test_a_directory_made_meanwhile_is_skipped_not_shared(tmp_path, monkeypatch):
    """mkdir is the claim: a process that lost the race for run-0001 takes run-0002."""
    (tmp_path / "run-0001").mkdir()
    monkeypatch.setattr(cli_common, "run_dirs", lambda root: [])   # as if listed before the other process's mkdir
    assert new_run_dir(tmp_path).name == "run-0002"


def test_concurrent_callers_get_distinct_directories(tmp_path):
    made: list = []
    barrier = threading.Barrier(8)

    def claim():
        barrier.wait()
        made.append(new_run_dir(tmp_path))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(p.name for p in made) == [f"run-{k:04d}" for k in range(1, 9)]


def test_latest_without_any_run_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"--resume: no earlier run in .*nothing.*--out"):
        latest_run_dir(tmp_path / "nothing")
    (tmp_path / "run-x").mkdir()
    with pytest.raises(ValueError, match="no earlier run"):
        latest_run_dir(tmp_path)


def test_a_file_in_the_way_of_the_root_is_a_one_line_error(tmp_path):
    (tmp_path / "results").write_text("not a directory")
    with pytest.raises(ValueError, match="is a file, not a directory"):
        new_run_dir(tmp_path / "results" / "compare-x")


# ---- the commands --------------------------------------------------------------------------------


def test_a_second_default_compare_writes_into_a_new_run_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "results" / "compare-benchmark"
    for k in (1, 2):
        res = runner.invoke(app, ["compare", *FAST], env={"COLUMNS": "200"})
        assert res.exit_code == 0, res.output
        assert f"results/compare-benchmark/run-000{k}" in res.output   # the directory used is said
        assert (root / f"run-000{k}" / "summary.csv").is_file()
    assert [p.name for p in run_dirs(root)] == ["run-0001", "run-0002"]


def test_an_explicit_out_that_holds_files_is_still_refused(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "summary.csv").write_text("earlier\n")
    one_line_error(runner.invoke(app, ["compare", *FAST, "--out", str(out)]), str(out), "--overwrite")
    assert sorted(p.name for p in out.iterdir()) == ["summary.csv"]   # no run directory made inside it


def test_a_refused_command_leaves_no_run_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one_line_error(runner.invoke(app, ["compare", *FAST, "-p", "lr=-1"]), "lr")
    assert not (tmp_path / "results").exists()


TUNE = ["tune", "--scenario", "benchmark", "--methods", "fedavg", "--seeds", "0", "--rounds", "1", "--trials", "1"]


def test_tune_resume_without_out_continues_the_latest_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "results" / "tune-benchmark"
    one_line_error(runner.invoke(app, [*TUNE, "--resume"]), "--resume: no earlier run", "results/tune-benchmark")
    for _ in range(2):
        res = runner.invoke(app, TUNE, env={"COLUMNS": "200"})
        assert res.exit_code == 0, res.output
    assert [p.name for p in run_dirs(root)] == ["run-0001", "run-0002"]
    before = (root / "run-0002" / "summary.csv").read_text()
    res = runner.invoke(app, [*TUNE, "--resume"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "resuming" in res.output and "results/tune-benchmark/run-0002" in res.output
    assert [p.name for p in run_dirs(root)] == ["run-0001", "run-0002"]   # no third directory
    assert (root / "run-0002" / "summary.csv").read_text() == before


def test_experiment_default_runs_resume_and_report(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "results" / "experiments"
    args = ["experiment", "diagrams", "--seeds", "0", "-j", "1"]
    one_line_error(runner.invoke(app, [*args, "--resume"]), "no earlier run", "results/experiments")
    for _ in range(2):   # the second run of the same experiment is not refused: it has its own directory
        res = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert res.exit_code == 0, res.output
    assert [p.name for p in run_dirs(root)] == ["run-0001", "run-0002"]
    assert (root / "run-0002" / "diagrams" / "manifest.json").is_file()
    res = runner.invoke(app, [*args, "--resume"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "resuming" in res.output and "results/experiments/run-0002" in res.output
    assert len(run_dirs(root)) == 2
    # `topofl report` (default DIR) and `topofl report results/experiments` report the latest run
    for extra in ([], ["results/experiments"]):
        res = runner.invoke(app, ["report", *extra], env={"COLUMNS": "200"})
        assert res.exit_code == 0, res.output
        assert "run-0002" in res.output and (root / "run-0002" / "report.html").is_file()
    # an explicit --out keeps holding several experiments side by side, as before
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "mine")])
    assert res.exit_code == 0 and (tmp_path / "mine" / "diagrams" / "manifest.json").is_file(), res.output


def test_a_command_refused_at_run_time_leaves_no_run_directory(tmp_path, monkeypatch):
    """A value refused once the run directory exists (a cluster count above the clients) removes the
    directory the command made: it never becomes "the latest run" of --resume or report.
    """
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "results" / "experiments"
    refused = ["experiment", "heart-disease", "--smoke", "--seeds", "0", "-j", "1", "-p", "ptopofl.n_clusters=50"]
    res = runner.invoke(app, refused)
    assert res.exit_code == 2 and "Error: n_clusters=50 exceeds" in res.output, res.output
    assert "run-0001" in res.output and run_dirs(root) == []
    made = new_run_dir(root)   # one made by another command: an error of this one leaves it alone
    real = root / "run-0002"
    (real / "comparison" / "runs").mkdir(parents=True)
    (real / "comparison" / "runs" / "x.done.json").write_text("{}")
    monkeypatch.setattr(cli_common, "new_run_dir", lambda r, flag="--out": real)   # noqa: ARG005
    res = runner.invoke(app, refused)
    assert res.exit_code == 2 and "Error: n_clusters=50 exceeds" in res.output, res.output
    assert made.is_dir() and real.is_dir()   # one holds sealed runs: kept


def test_resume_and_report_pick_the_latest_run_that_holds_results(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "results" / "experiments"
    args = ["experiment", "diagrams", "--seeds", "0", "-j", "1"]
    res = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    (root / "run-0002" / "comparison").mkdir(parents=True)   # another experiment's run, unfinished
    (root / "run-0003").mkdir()                                # an empty one
    res = runner.invoke(app, [*args, "--resume"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "results/experiments/run-0001" in res.output
    one_line_error(runner.invoke(app, ["experiment", "controls", "--seeds", "0", "--resume"]),
                   "no earlier run of controls")
    res = runner.invoke(app, ["report"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "run-0001" in res.output, res.output


@pytest.mark.parametrize("command", [["experiment", "diagrams", "--seeds", "0"], TUNE])
def test_resume_and_overwrite_exclude_each_other(tmp_path, monkeypatch, command):
    """The interruption's hint (--resume --out DIR) must never be the command that wipes the finished runs."""
    monkeypatch.chdir(tmp_path)
    one_line_error(runner.invoke(app, [*command, "--resume", "--overwrite", "--out", str(tmp_path / "o")]),
                   "--resume", "--overwrite")
    assert not (tmp_path / "o").exists()


def test_run_experiment_refuses_resume_with_overwrite(tmp_path):
    from topofl.experiments.driver import run_experiment

    with pytest.raises(ValueError, match="resume.*overwrite"):
        run_experiment("diagrams", [0], tmp_path, resume=True, overwrite=True)


def test_a_run_name_of_other_digits_is_not_a_run(tmp_path):
    """'²' is a digit to str.isdigit() but no number to int(): such an entry is ignored, not an error."""
    (tmp_path / "run-²").mkdir()
    (tmp_path / "run-0003").mkdir()
    (tmp_path / "run-٣").mkdir()   # an Arabic-Indic three
    assert [p.name for p in run_dirs(tmp_path)] == ["run-0003"]
    assert new_run_dir(tmp_path).name == "run-0004"
