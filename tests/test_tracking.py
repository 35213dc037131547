"""Experiment tracking (``--track mlflow`` / ``--track tensorboard``, :mod:`topofl.tracking`): what
``run``, ``compare``, ``experiment`` and ``tune`` log is read back with MLflow's own client (local
SQLite store) and TensorBoard's own event reader, and compared with the results files the command
wrote; nothing touches the network; a failing tracker never breaks a run.
"""
from __future__ import annotations

import csv
import logging
import socket
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from topofl.cli import app
from topofl.tracking import (
    GuardedTracker,
    TensorBoardTracker,
    default_location,
    flatten,
    log_results,
    make_tracker,
    mlflow_uri,
    tracked,
)

# find_spec, not importorskip: collecting this module in every test worker must not import MLflow (seconds)
pytestmark = pytest.mark.skipif(find_spec("mlflow") is None or find_spec("tensorboard") is None,
                                reason="needs the mlflow and tensorboard extras")

runner = CliRunner()
TRACKERS = ("mlflow", "tensorboard")


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# ---------------------------------------------------------------- reading back with each tool's own reader

def mlflow_job(location: Path, experiment: str) -> dict[str, Any]:
    """The last job tracked in MLflow experiment ``experiment``: parent params, artifacts, status, and its
    child runs as ``{"name", "params", "metrics": {name: [(step, value)]}}``.
    """
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{location / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no MLflow experiment {experiment!r}"
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"])
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]

    def artifacts(path: str | None = None) -> list[str]:
        out = []
        for a in client.list_artifacts(parent.info.run_id, path):
            out += artifacts(a.path) if a.is_dir else [a.path]
        return out

    return {
        "params": parent.data.params, "status": parent.info.status, "artifacts": artifacts(),
        "runs": [{"name": r.info.run_name, "params": r.data.params, "status": r.info.status,
                  "metrics": {k: [(m.step, m.value) for m in client.get_metric_history(r.info.run_id, k)]
                              for k in r.data.metrics}} for r in children],
    }


def tensorboard_job(location: Path) -> dict[str, Any]:
    """The one job directory under TensorBoard log directory ``location``: its text summaries and its
    runs (every directory below it with an event file), read with TensorBoard's EventAccumulator.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    (job,) = [d for d in location.iterdir() if d.is_dir()]
    acc = EventAccumulator(str(job))
    acc.Reload()
    texts = {t: acc.Tensors(t)[0].tensor_proto.string_val[0].decode() for t in acc.Tags()["tensors"]}
    runs = []
    for events in sorted(job.rglob("events.out.tfevents.*")):
        if events.parent == job:
            continue
        acc = EventAccumulator(str(events.parent))
        acc.Reload()
        content = acc.PluginTagToContent("hparams")["_hparams_/session_start_info"]
        hparams = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
        params = {k: v.string_value or str(v.number_value) for k, v in hparams.items()}
        runs.append({"name": str(events.parent.relative_to(job)), "params": params,
                     "metrics": {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}})
    return {"texts": texts, "runs": runs}


def read_job(kind: str, location: Path, experiment: str) -> dict[str, Any]:
    return mlflow_job(location, experiment) if kind == "mlflow" else tensorboard_job(location)


def expected_runs(directory: Path) -> list[dict[str, Any]]:
    """Every run a results directory holds, from its own files: an experiment's ``runs/*.curves.csv``
    (one file a run), else ``curves.csv`` by method and seed.
    """
    files = sorted((directory / "runs").glob("*.curves.csv")) if (directory / "runs").is_dir() else []
    groups: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for path in files or [directory / "curves.csv"]:
        for row in _rows(path):
            who = (row.get("scenario", ""), row["method"], row["seed"]) + ((path.name,) if files else ())
            groups.setdefault(who, []).append(row)
    return [{"scenario": k[0], "method": k[1], "seed": k[2], "rows": rows} for k, rows in groups.items()]


def assert_run_tracked(job: dict[str, Any], expected: dict[str, Any], metric: str = "auc") -> None:
    """One tracked run has the expected run's method, seed (and scenario) and its ``metric`` at every round."""
    want = [(int(r["round"]), float(r[metric])) for r in expected["rows"]]
    matches = [r for r in job["runs"] if r["params"].get("method") == expected["method"]
               and r["params"].get("seed") in (expected["seed"], f"{float(expected['seed'])}")
               and r["params"].get("scenario", expected["scenario"]) == expected["scenario"]
               and [s for s, _ in r["metrics"].get(metric, [])] == [s for s, _ in want]
               and all(v == pytest.approx(w, rel=1e-6) for (_, v), (_, w) in zip(r["metrics"][metric], want, strict=True))]
    assert matches, f"no tracked run of {expected['method']} seed {expected['seed']} with {metric} {want}"


@pytest.fixture(scope="module")
def shared_mlflow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One MLflow store for the tests of a module (a new SQLite store costs MLflow's migrations, ~10 s)."""
    return tmp_path_factory.mktemp("mlflow-store")


def where(kind: str, out: Path, shared: Path) -> tuple[list[str], Path]:
    """The ``--track`` flags of a test and the store to read back: MLflow's shared store, or TensorBoard's
    default directory under ``out``.
    """
    if kind == "mlflow":
        return ["--track", kind, "--track-uri", str(shared)], shared
    return ["--track", kind], out / "tensorboard"


def _invoke(args: list[str]) -> Any:
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return res


# ---------------------------------------------------------------- the four commands, with each tracker

@pytest.mark.parametrize("kind", TRACKERS)
def test_run_is_tracked_per_round(tmp_path: Path, kind: str, shared_mlflow: Path) -> None:
    out = tmp_path / "out"
    flags, store = where(kind, out, shared_mlflow)
    res = _invoke(["run", "--method", "fedavg", "--rounds", "3", "--out", str(out), *flags])
    assert "view it with" in res.output
    job = read_job(kind, store, "topofl run")
    (run,) = job["runs"]
    for expected in expected_runs(out):
        assert_run_tracked(job, expected, "auc")
        assert_run_tracked(job, expected, "accuracy")
    assert len(run["metrics"]["auc"]) == 3
    if kind == "mlflow":
        assert job["status"] == "FINISHED" and job["params"]["rounds"] == "3" and job["params"]["methods"] == '["fedavg"]'
        assert {"curves.csv", "rounds.csv", "summary.csv", "config.json"} <= set(job["artifacts"])
    else:
        assert "| rounds | 3 |" in job["texts"]["parameters"] and "summary.csv" in job["texts"]
        assert job["texts"]["status"] == "FINISHED"


@pytest.mark.parametrize("kind", TRACKERS)
def test_run_without_out_is_tracked_from_its_history(tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch,
                                                     shared_mlflow: Path) -> None:
    monkeypatch.chdir(tmp_path)
    # MLflow: where MLFLOW_TRACKING_URI says; TensorBoard: results/tracking/tensorboard (no --out)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{shared_mlflow / 'mlflow.db'}")
    _invoke(["run", "--method", "ptopofl", "--rounds", "2", "--seed", "3", "--track", kind])
    store = shared_mlflow if kind == "mlflow" else tmp_path / "results" / "tracking" / kind
    assert not (tmp_path / "results" / "tracking" / "mlflow").exists()
    job = read_job(kind, store, "topofl run")
    (run,) = job["runs"]
    assert run["params"]["method"] == "ptopofl" and run["params"]["seed"] in ("3", "3.0")
    assert [s for s, _ in run["metrics"]["auc"]] == [1, 2] and all(0.5 < v <= 1 for _, v in run["metrics"]["auc"])


@pytest.mark.parametrize("kind", TRACKERS)
def test_compare_tracks_every_method_and_seed(tmp_path: Path, kind: str, shared_mlflow: Path) -> None:
    out = tmp_path / "cmp"
    flags, store = where(kind, out, shared_mlflow)
    _invoke(["compare", "--methods", "fedavg,ptopofl", "--seeds", "0-1", "--rounds", "2", "-p", "ptopofl.tau=1.5",
             "--out", str(out), *flags])
    job = read_job(kind, store, "topofl compare")
    expected = expected_runs(out)
    assert len(expected) == 4 and len(job["runs"]) == 4
    for e in expected:
        assert_run_tracked(job, e)
    ptopofl = [r for r in job["runs"] if r["params"]["method"] == "ptopofl"]
    assert all(r["params"]["tau"] in ("1.5", "1.5") for r in ptopofl)   # the method's own hyper-parameters
    if kind == "mlflow":
        assert job["params"]["hyperparameters.ptopofl.tau"] == "1.5"
        assert sorted(r["name"] for r in job["runs"]) == ["fedavg seed 0", "fedavg seed 1", "ptopofl seed 0",
                                                         "ptopofl seed 1"]
    else:
        assert sorted(r["name"] for r in job["runs"]) == ["fedavg/seed_0", "fedavg/seed_1", "ptopofl/seed_0",
                                                         "ptopofl/seed_1"]


@pytest.mark.parametrize("kind", TRACKERS)
def test_experiment_tracks_every_finished_run(tmp_path: Path, kind: str, shared_mlflow: Path) -> None:
    out = tmp_path / "exp"
    flags, store = where(kind, out, shared_mlflow)
    _invoke(["experiment", "comparison", "--smoke", "--seeds", "0", "-j", "1", "--out", str(out), *flags])
    job = read_job(kind, store, "topofl experiment")
    expected = expected_runs(out / "comparison")
    assert len(expected) >= 2 and len(job["runs"]) == len(expected)
    for e in expected:
        assert_run_tracked(job, e)
    if kind == "mlflow":
        assert job["params"]["profile"] == "smoke" and job["params"]["experiment"] == "comparison"
        assert {"summary.csv", "manifest.json", "config.json"} <= set(job["artifacts"])
        assert any(a.endswith(".png") for a in job["artifacts"])
    else:
        assert "summary.csv" in job["texts"] and "| profile | smoke |" in job["texts"]["parameters"]


@pytest.mark.parametrize("kind", TRACKERS)
def test_tune_tracks_trials_both_passes_and_report(tmp_path: Path, kind: str, shared_mlflow: Path) -> None:
    out = tmp_path / "tune"
    flags, store = where(kind, out, shared_mlflow)
    _invoke(["tune", "--methods", "fedavg", "--seeds", "0", "--rounds", "2", "--trials", "2", "-j", "1",
             "--out", str(out), *flags])
    job = read_job(kind, store, "topofl tune")
    for sub in ("default", "tuned"):
        for e in expected_runs(out / sub):
            assert_run_tracked(job, e)
    trials = _rows(out / "trials.csv")
    tuning = [r for r in job["runs"] if "validation" in r["metrics"]]
    assert len(tuning) == 1
    assert [s for s, _ in tuning[0]["metrics"]["validation"]] == [int(t["trial"]) for t in trials]
    assert [v for _, v in tuning[0]["metrics"]["validation"]] == pytest.approx([float(t["validation"]) for t in trials])
    if kind == "mlflow":
        assert {"report.html", "trials.csv", "tuning_summary.csv", "default/curves.csv"} <= set(job["artifacts"])
        assert len(job["runs"]) == 3
    else:
        assert "tuning_summary.csv" in job["texts"] and "report.html" in job["texts"]["files"]


# ---------------------------------------------------------------- failures, inputs, the network

def test_a_failing_tracker_leaves_the_run_and_its_files_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    def broken(self: Any, *args: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(TensorBoardTracker, "log_run", broken)
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING, logger="topofl.tracking"):
        res = runner.invoke(app, ["run", "--method", "fedavg", "--rounds", "2", "--out", str(out),
                                  "--track", "tensorboard"])
    assert res.exit_code == 0, res.output
    assert len(_rows(out / "curves.csv")) == 2 and (out / "summary.csv").exists()
    assert "tracking with tensorboard failed (OSError: disk full)" in res.output
    assert any("disk full" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("args", "message"), [
    (["--track", "wandb"], "--track: unknown tracker 'wandb'; choose one of mlflow, tensorboard"),
    (["--track-uri", "somewhere"], "--track-uri 'somewhere' goes with --track"),
    (["--track", "tensorboard", "--track-uri", "http://example.org:6006"], "TensorBoard writes to a local directory"),
    (["--track", "mlflow", "--track-uri", "file:./mlruns"], "refuses its file store unless MLFLOW_ALLOW_FILE_STORE"),
])
def test_bad_tracking_options_are_one_line_errors_before_anything_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      args: list[str], message: str) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    out = tmp_path / "out"
    res = runner.invoke(app, ["run", "--method", "fedavg", "--rounds", "2", "--out", str(out), *args])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output
    assert not out.exists()   # refused before the results directory is made


def _closed_port() -> int:
    """A local port nothing listens on (bound, then closed): connecting to it is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("how", ["--track-uri", "MLFLOW_TRACKING_URI"])
def test_an_unreachable_tracking_server_is_refused_before_anything_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       how: str) -> None:
    import time

    uri = f"http://127.0.0.1:{_closed_port()}"
    args = ["--track-uri", uri] if how == "--track-uri" else []
    if how == "MLFLOW_TRACKING_URI":
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    out = tmp_path / "out"
    start = time.monotonic()
    res = runner.invoke(app, ["compare", "--methods", "fedavg", "--seeds", "0", "--rounds", "2", "--out", str(out),
                              "--track", "mlflow", *args])
    assert res.exit_code == 2, res.output
    assert f"cannot reach the MLflow tracking server {uri}" in " ".join(res.output.split())
    assert "Traceback" not in res.output and not out.exists()
    assert time.monotonic() - start < 30


def test_mlflow_retries_and_timeouts_are_short_unless_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    from topofl.tracking import MLflowTracker

    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "33")
    MLflowTracker(str(tmp_path))
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "1"
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "33"   # the user's own setting is kept


@pytest.mark.parametrize(("kind", "module"), [("mlflow", "mlflow"), ("tensorboard", "tensorboard")])
def test_a_missing_extra_names_the_extra_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str,
                                                     module: str) -> None:
    for name in [m for m in sys.modules if m == module or m.startswith(f"{module}.")] + [module]:
        monkeypatch.setitem(sys.modules, name, None)   # as if not installed
    res = runner.invoke(app, ["compare", "--methods", "fedavg", "--seeds", "0", "--rounds", "2",
                              "--out", str(tmp_path / "c"), "--track", kind])
    assert res.exit_code == 2, res.output
    assert f'--track {kind} needs the {kind} extra: pip install "topofl[{kind}]"' in " ".join(res.output.split())
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())


@pytest.mark.parametrize("kind", TRACKERS)
def test_tracking_opens_no_network_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """A new store in the default place (MLflow: creating its SQLite database too), with every socket refused."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    attempts: list[Any] = []

    def refuse(self: socket.socket, address: Any, *args: Any) -> None:
        attempts.append(address)
        raise OSError("network access in a test")

    def refuse_lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        attempts.append(host)
        raise OSError("network access in a test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse_lookup)
    monkeypatch.setattr(socket, "create_connection", refuse_lookup)
    out = tmp_path / "out"
    _invoke(["run", "--method", "fedavg", "--rounds", "2", "--out", str(out), "--track", kind])
    assert read_job(kind, out / kind, "topofl run")["runs"]
    assert attempts == []


# ---------------------------------------------------------------- the pieces

def test_flatten_makes_plain_dotted_parameters() -> None:
    flat = flatten({"a": {"b": 1, "c": {"d": "x"}}, "l": [1, 2], "n": None, "f": float("nan"), "long": "y" * 501,
                    "ok": True})
    assert flat == {"a.b": 1, "a.c.d": "x", "l": "[1, 2]", "n": "none", "f": "nan", "ok": True}


def test_locations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert default_location("tensorboard", tmp_path) == str(tmp_path / "tensorboard")
    assert default_location("mlflow", None) == str(Path("results") / "tracking" / "mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///elsewhere.db")
    assert default_location("mlflow", tmp_path) == "sqlite:///elsewhere.db"
    assert default_location("tensorboard", tmp_path) == str(tmp_path / "tensorboard")
    assert mlflow_uri(str(tmp_path / "store")) == f"sqlite:///{(tmp_path / 'store' / 'mlflow.db').resolve()}"
    assert mlflow_uri(str(tmp_path / "x.db")) == f"sqlite:///{(tmp_path / 'x.db').resolve()}"
    assert mlflow_uri("http://localhost:5000") == "http://localhost:5000"
    assert mlflow_uri("C:\\runs").startswith("sqlite:///")   # a drive letter is not a URI scheme
    with pytest.raises(ValueError, match="--track: unknown tracker 'neptune'"):
        default_location("neptune", tmp_path)


class _Recorder:
    """A tracker that records what it is asked (and fails on request)."""

    name, location = "recorder", "memory"

    def __init__(self, fail_on: str = "") -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail_on = fail_on

    def __getattr__(self, what: str) -> Any:
        def record(*args: Any) -> None:
            self.calls.append((what, *args))
            if what == self.fail_on:
                raise RuntimeError(f"{what} broke")
        return record


def test_tracked_closes_the_job_with_its_status() -> None:
    for error, status in ((None, "FINISHED"), (ValueError("bad"), "FAILED"), (KeyboardInterrupt(), "KILLED")):
        rec = _Recorder()
        guarded = GuardedTracker(rec)  # type: ignore[arg-type]
        with pytest.raises(type(error)) if error else _nothing():
            with tracked(guarded, "exp", "job", {"t": "1"}) as t:
                assert t is guarded
                t.log_params({"a": 1})
                if error:
                    raise error
        assert rec.calls[0] == ("start", "exp", "job", {"t": "1"}) and rec.calls[-1] == ("finish", status)
    with tracked(None, "exp", "job") as t:
        assert t is None


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def test_a_guarded_tracker_starts_lazily_and_stops_after_its_first_failure(caplog: pytest.LogCaptureFixture) -> None:
    rec = _Recorder()
    guarded = GuardedTracker(rec)  # type: ignore[arg-type]
    guarded.start("exp", "job", {})
    guarded.finish("FAILED")
    assert rec.calls == [] and guarded.view_hint() == "nothing was logged to recorder"   # nothing logged: no job
    rec = _Recorder(fail_on="log_run")
    guarded = GuardedTracker(rec)  # type: ignore[arg-type]
    guarded.start("exp", "job", {})
    with caplog.at_level(logging.WARNING, logger="topofl.tracking"):
        guarded.log_params({"a": 1})
        guarded.log_run(["m", "seed 0"], {}, [(1, {"auc": 0.5})])
        guarded.log_run(["m", "seed 1"], {}, [(1, {"auc": 0.5})])
        guarded.finish()
    assert [c[0] for c in rec.calls] == ["start", "log_params", "log_run"]
    assert "RuntimeError: log_run broke" in guarded.view_hint()
    assert sum("tracking with recorder stopped" in r.getMessage() for r in caplog.records) == 1


def test_nothing_is_written_before_the_first_log(tmp_path: Path) -> None:
    for kind in TRACKERS:
        tracker = make_tracker(kind, str(tmp_path / kind))
        tracker.start("topofl test", "job", {})
        assert not (tmp_path / kind).exists()


def test_log_results_of_an_unreadable_directory_is_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "config.json").write_text("{not json")
    rec = _Recorder()
    with caplog.at_level(logging.WARNING, logger="topofl.tracking"):
        log_results(rec, tmp_path)  # type: ignore[arg-type]
    assert any("could not read the results" in r.getMessage() for r in caplog.records)
    log_results(None, tmp_path)   # no tracker: nothing at all


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _logged_runs(directory: Path, under: str = "") -> dict[str, tuple[dict[str, Any], Any]]:
    rec = _Recorder()
    log_results(rec, directory, under)  # type: ignore[arg-type]
    return {" ".join(c[1]): (c[2], c[3]) for c in rec.calls if c[0] == "log_run"}


def test_a_run_is_logged_with_its_resolved_hyperparameters(tmp_path: Path) -> None:
    """Defaults merged with what the command set, not only what it set."""
    import json

    (tmp_path / "config.json").write_text(json.dumps({"hyperparameters": {"fedavg": {"lr": 0.3}}}))
    _write_csv(tmp_path / "curves.csv", [{"method": "fedavg", "seed": 0, "round": 1, "auc": 0.5}])
    params, _ = _logged_runs(tmp_path)["fedavg seed 0"]
    assert params["lr"] == 0.3 and params["local_epochs"] == 2 and params["optimizer"] == "sgd"


def test_tune_logs_the_tuned_values_and_every_trials_params(tmp_path: Path) -> None:
    import json

    (tmp_path / "config.json").write_text(json.dumps({"experiment": "tune", "runs": [
        {"scenario": "healthcare", "method": "fedavg", "hyperparameters": {}, "setting": {}, "label": ""}]}))
    _write_csv(tmp_path / "trials.csv", [
        {"method": "fedavg", "trial": 0, "params": "lr=0.1, local_epochs=2", "metric": "auc", "validation": 0.8,
         "best_so_far": 0.8},
        {"method": "fedavg", "trial": 1, "params": "lr=0.2247, local_epochs=1", "metric": "auc", "validation": 0.81,
         "best_so_far": 0.81}])
    _write_csv(tmp_path / "tuning_summary.csv", [{"method": "fedavg", "trials": 2, "chosen": "lr=0.2247, local_epochs=1",
                                                  "defaults": "lr=0.1, local_epochs=2"}])
    for under in ("default", "tuned"):
        (tmp_path / under / "runs").mkdir(parents=True)
        key = {"experiment": "tune", "scenario": "healthcare", "method": "fedavg", "seed": 0}
        (tmp_path / under / "runs" / "r.done.json").write_text(json.dumps(key))
        _write_csv(tmp_path / under / "runs" / "r.curves.csv", [{**key, "round": 1, "auc": 0.7}])
    default, _ = _logged_runs(tmp_path / "default", "default")["default healthcare fedavg seed 0"]
    tuned, _ = _logged_runs(tmp_path / "tuned", "tuned")["tuned healthcare fedavg seed 0"]
    assert default["lr"] == 0.1 and default["batch_size"] == 32
    assert tuned["lr"] == pytest.approx(0.2247) and tuned["local_epochs"] == 1 and tuned["batch_size"] == 32
    params, metrics = _logged_runs(tmp_path)["tuning fedavg"]
    assert params["trial 1"] == "lr=0.2247, local_epochs=1"
    assert [(s, m["lr"]) for s, m in metrics] == [(0, 0.1), (1, pytest.approx(0.2247))]


def test_nan_and_infinite_metrics_are_logged_empty_cells_are_not(tmp_path: Path) -> None:
    import math

    _write_csv(tmp_path / "curves.csv", [{"method": "fedavg", "seed": 0, "round": 1, "auc": "nan", "loss": "inf",
                                          "r2": "-inf", "mse": ""}])
    _, metrics = _logged_runs(tmp_path)["fedavg seed 0"]
    (step, row), = metrics
    assert math.isnan(row["auc"]) and row["loss"] == math.inf and row["r2"] == -math.inf and "mse" not in row


def test_tensorboard_run_directories_are_safe_and_distinct(tmp_path: Path) -> None:
    tb = TensorBoardTracker(str(tmp_path))
    tb.start("exp", "job", {})
    for method in (".", "..", "a/b", "a b", "a_b"):
        tb.log_run([method, "seed 0"], {}, [(1, {"auc": 0.5})])
    tb.finish()
    (job,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    runs = sorted(str(p.parent.relative_to(job)) for p in job.rglob("events.out.tfevents.*") if p.parent != job)
    assert len(runs) == 5 and all(p.resolve().is_relative_to(job) for p in job.rglob("*"))
    assert all(part not in (".", "..") for r in runs for part in Path(r).parts)


def test_an_experiment_logged_again_logs_each_finished_run_once(tmp_path: Path) -> None:
    """A resumed experiment (or group) logs its results directory again: MLflow keeps one child run per
    done-record (tagged ``topofl.record``), the second job logs only what is new."""
    import json

    from mlflow import MlflowClient

    d = tmp_path / "exp"
    (d / "runs").mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"experiment": "demo"}))

    def finish(seed: int) -> None:
        key = {"experiment": "demo", "scenario": "healthcare", "method": "fedavg", "seed": seed}
        (d / "runs" / f"r{seed}.done.json").write_text(json.dumps({**key, "seal": f"s{seed}"}))
        _write_csv(d / "runs" / f"r{seed}.curves.csv", [{**key, "round": 1, "auc": 0.5}])

    store = tmp_path / "store"
    finish(0)
    for _ in range(2):
        tracker = make_tracker("mlflow", str(store))
        with tracked(tracker, "topofl experiment", "experiment demo"):
            log_results(tracker, d)
        finish(1)
    client = MlflowClient(tracking_uri=mlflow_uri(str(store)))
    exp = client.get_experiment_by_name("topofl experiment")
    children = [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    assert sorted(r.info.run_name for r in children) == ["healthcare fedavg seed 0", "healthcare fedavg seed 1"]
    assert all(r.data.tags.get("topofl.record") for r in children)


def test_a_run_in_memory_is_logged_with_its_resolved_hyperparameters() -> None:
    from types import SimpleNamespace

    from topofl.tracking import log_history

    rec = _Recorder()
    history = SimpleNamespace(method="fedavg", seed=0, rounds=[SimpleNamespace(round=1, as_dict=lambda: {"auc": 0.5})])
    log_history(rec, history, {"method": "fedavg", "seed": 0, "hyperparameters": {"lr": 0.3}})  # type: ignore[arg-type]
    (params,) = [c[2] for c in rec.calls if c[0] == "log_run"]
    assert params["hyperparameters"]["lr"] == 0.3 and params["hyperparameters"]["local_epochs"] == 2
