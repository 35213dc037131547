"""Experiment tracking: a command's parameters, runs and results in MLflow or TensorBoard (``--track``).

One :class:`Tracker` interface, two back ends, chosen by :func:`make_tracker`:

- :class:`MLflowTracker`: one MLflow run per command (its parameters, the result files and the
  report as artifacts) with a child run per method × seed (× setting) holding every round's
  metrics as steps. The default store is SQLite (``DIR/mlflow/mlflow.db``, artifacts beside it):
  MLflow 3 refuses its old file store unless ``MLFLOW_ALLOW_FILE_STORE=true``.
- :class:`TensorBoardTracker`: one event-file directory per command and, below it, one per
  method × seed (× setting) with a scalar per metric and round and its parameters for the HParams
  dashboard; the command's parameters, its CSV tables and its list of result files go to the Text
  dashboard (TensorBoard has no artifact store). Written with TensorBoard's own event writer, no
  TensorFlow needed.

Runs are logged from the files they wrote (:func:`log_results`), by the process that started the
command, once they are finished: tracking works the same whether runs execute in this process or in
worker processes, and a resumed experiment logs each run once. Nothing is sent anywhere but the
local store unless the user names a tracking server (``--track-uri http://...``); MLflow's
telemetry is switched off. A tracker that fails logs a warning and turns itself off
(:class:`GuardedTracker`): tracking never stops a run or loses its files.
"""
from __future__ import annotations

import json
import logging
import math
import os
import re
import time
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from topofl.atomic import LOCK_NAME
from topofl.experiments.results import read_csv

log = logging.getLogger(__name__)

__all__ = ["TRACKERS", "GuardedTracker", "MLflowTracker", "TensorBoardTracker", "Tracker", "check_server",
           "check_tracker", "default_location", "flatten", "log_history", "log_results", "make_tracker", "mlflow_uri",
           "tracked"]

#: tracker name -> the optional extra that installs it (``pip install "topofl[EXTRA]"``)
TRACKERS = {"mlflow": "mlflow", "tensorboard": "tensorboard"}
#: a parameter value longer than this is left out of the parameters (the whole configuration is an artifact)
MAX_PARAM_CHARS = 500
#: a CSV table longer than this many rows is cut in TensorBoard's Text dashboard (the file says where the rest is)
MAX_TEXT_ROWS = 50
#: columns of a run's curve file that identify the step rather than measure it
_STEP = "round"
#: ``run_id`` suffix of a finished run's done-record in an experiment's ``runs/`` directory
_DONE_SUFFIX = ".done.json"
#: MLflow tag of a child run logged from an experiment's done-record: ``<run_id>:<seal>`` (its results, once)
RECORD_TAG = "topofl.record"

Metrics = Sequence[tuple[int, Mapping[str, float]]]


class Tracker(Protocol):
    """What every tracking back end does; a command calls :meth:`start` once, then the ``log_*``
    methods, then :meth:`finish`.
    """

    name: str
    location: str

    def start(self, experiment: str, job: str, tags: Mapping[str, str]) -> None:
        """Open the command's job ``job`` in ``experiment`` (MLflow: experiment and parent run)."""

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log the job's parameters (flat names, plain values: :func:`flatten`)."""

    def log_run(self, parts: Sequence[str], params: Mapping[str, Any], metrics: Metrics, record: str = "") -> None:
        """Log one finished run, named by ``parts`` (e.g. ``("ptopofl", "seed 0")``): its
        parameters and its metrics, one ``(step, {name: value})`` per round. ``record`` identifies
        the run's sealed done-record (an experiment's): a store that can look it up (MLflow) skips
        a run it already holds.
        """

    def log_files(self, files: Sequence[Path], under: str = "") -> None:
        """Log result files (MLflow: artifacts, in folder ``under``)."""

    def finish(self, status: str = "FINISHED") -> None:
        """Close the job with ``status``: ``FINISHED``, ``FAILED`` or ``KILLED`` (interrupted)."""

    def view_hint(self) -> str:
        """One line: where the job was tracked and the command that shows it."""


def default_location(name: str, out: Path | None) -> str:
    """Where ``--track NAME`` writes without ``--track-uri``: ``OUT/mlflow`` or ``OUT/tensorboard``
    under the command's results directory ``out`` (``results/tracking`` when it has none); for
    MLflow, ``MLFLOW_TRACKING_URI`` when that is set.
    """
    _check_name(name)
    if name == "mlflow" and os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    base = Path(out) if out is not None else Path("results") / "tracking"
    return str(base / name)


def mlflow_uri(location: str) -> str:
    """The MLflow tracking URI of ``location``: a URI (``scheme:...``, e.g. ``sqlite:///runs.db`` or
    ``http://host:5000``) as it is, a ``.db`` file as a SQLite URI, any other path as the directory
    of ``mlflow.db`` (a SQLite URI of an absolute path).
    """
    if _is_uri(location):
        return location
    path = Path(location).expanduser()
    db = path if path.suffix == ".db" else path / "mlflow.db"
    return "sqlite:///" + str(db.resolve())


def _is_uri(location: str) -> bool:
    """Whether ``location`` starts with a URI scheme (two letters at least: ``C:`` is a drive)."""
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", location) is not None


def _check_name(name: str) -> None:
    if name not in TRACKERS:
        raise ValueError(f"--track: unknown tracker {name!r}; choose one of {', '.join(TRACKERS)}")


#: the package each tracker needs (what its extra installs)
_MODULES = {"mlflow": "mlflow", "tensorboard": "tensorboard"}


def check_tracker(name: str) -> None:
    """Check that tracker ``name`` exists and its extra is installed, without importing it.

    Raises
    ------
    ValueError
        For an unknown ``name``.
    ImportError
        When the tracker's optional extra is not installed (naming the extra to install).
    """
    from importlib.util import find_spec

    _check_name(name)
    if find_spec(_MODULES[name]) is None:
        raise _missing_extra(name, ImportError(f"no module named {_MODULES[name]!r}"))


def make_tracker(name: str, location: str) -> GuardedTracker:
    """The tracker ``name`` (``mlflow`` or ``tensorboard``) writing to ``location``
    (:func:`default_location`; for MLflow any tracking URI, see :func:`mlflow_uri`), checked now and
    guarded (:class:`GuardedTracker`) from then on; the store itself is opened when the first thing is logged.

    Raises
    ------
    ValueError
        For an unknown ``name``, an empty ``location``, a URI for TensorBoard, MLflow's file store
        where MLflow refuses it, or an MLflow server that cannot be reached (:func:`check_server`; naming the location).
    ImportError
        When the tracker's optional extra is not installed (naming the extra).
    """
    check_tracker(name)
    if not isinstance(location, str) or not location.strip():
        raise ValueError(f"--track-uri must name a directory or a tracking URI; got {location!r}")
    tracker: Tracker = MLflowTracker(location) if name == "mlflow" else TensorBoardTracker(location)
    if name == "mlflow" and re.match(r"^https?://", tracker.location, re.IGNORECASE):
        check_server(tracker.location)
    return GuardedTracker(tracker)


#: seconds to wait for a tracking server's answer when checking that it can be reached
SERVER_CHECK_TIMEOUT = 5.0


def check_server(uri: str, timeout: float = SERVER_CHECK_TIMEOUT) -> None:
    """Check that the MLflow tracking server at ``uri`` (``http(s)://...``) answers (``GET URI/health``),
    so that a wrong URI is reported before anything runs rather than after MLflow's retries. Any HTTP
    answer counts (a server behind a proxy or with authentication may not serve ``/health``).

    Raises
    ------
    ValueError
        When the server cannot be reached within ``timeout`` seconds (naming the URI and where it came from).
    """
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout):  # noqa: S310 (http(s) only)
            pass
    except urllib.error.HTTPError:
        return   # the server answered
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        source = " (from MLFLOW_TRACKING_URI)" if os.environ.get("MLFLOW_TRACKING_URI") == uri else ""
        raise ValueError(f"--track mlflow: cannot reach the MLflow tracking server {uri}{source}: {reason}; "
                         "start it, or give --track-uri a directory for a local store") from None


def _missing_extra(name: str, exc: ImportError) -> ImportError:
    return ImportError(f"--track {name} needs the {TRACKERS[name]} extra: pip install \"topofl[{TRACKERS[name]}]\" "
                       f"({exc})")


class MLflowTracker:
    """Tracking in MLflow through :class:`mlflow.MlflowClient` (no global active run): a parent run
    per command, a child run per method × seed, artifacts in the experiment's artifact location
    (for a local SQLite store: ``mlartifacts/`` beside the database).

    Parameters
    ----------
    location : str
        A directory, a ``.db`` file or an MLflow tracking URI (:func:`mlflow_uri`).
    """

    name = "mlflow"

    def __init__(self, location: str) -> None:
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # MLflow 3 sends usage data unless told not to
        # MLflow retries a request to a server 7 times with a 120 s timeout: minutes of waiting on a
        # server that went away (tracking then stops with a warning; the results files are written)
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        try:
            from mlflow import MlflowClient
        except ImportError as exc:
            raise _missing_extra("mlflow", exc) from None
        import mlflow

        self._client_class = MlflowClient
        self.location = mlflow_uri(location)
        if (self.location.startswith("file:") and int(mlflow.__version__.split(".")[0]) >= 3
                and os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() != "true"):
            raise ValueError(f"--track-uri {location!r}: MLflow {mlflow.__version__} refuses its file store unless "
                             "MLFLOW_ALLOW_FILE_STORE=true; give a directory (a SQLite store is made there) instead")
        self._db = Path(self.location[len("sqlite:///"):]) if self.location.startswith("sqlite:///") else None
        self._client: Any = None
        self._experiment_id = ""
        self._parent = ""

    def start(self, experiment: str, job: str, tags: Mapping[str, str]) -> None:
        if self._db is not None:
            self._db.parent.mkdir(parents=True, exist_ok=True)
        quiet = [logging.getLogger(n) for n in ("mlflow", "alembic")]
        levels = [q.level for q in quiet]
        for q in quiet:  # MLflow logs the creation of its database at INFO
            q.setLevel(logging.WARNING)
        try:
            with warnings.catch_warnings():   # MLflow's SQLAlchemy deprecations: MLflow's to fix, not the user's
                warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"mlflow\.")
                self._client = self._client_class(tracking_uri=self.location)
                found = self._client.get_experiment_by_name(experiment)
        finally:
            for q, level in zip(quiet, levels, strict=True):
                q.setLevel(level)
        if found is None:
            artifacts = (self._db.parent / "mlartifacts").as_uri() if self._db is not None else None
            self._experiment_id = self._client.create_experiment(experiment, artifact_location=artifacts)
        else:
            self._experiment_id = found.experiment_id
        self._parent = self._client.create_run(self._experiment_id, run_name=job, tags=dict(tags)).info.run_id

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._log(self._parent, params, ())

    def log_run(self, parts: Sequence[str], params: Mapping[str, Any], metrics: Metrics, record: str = "") -> None:
        if record and self._holds(record):
            return   # logged by an earlier job (a resumed experiment logs its results directory again)
        tags = {"mlflow.parentRunId": self._parent, **({RECORD_TAG: record} if record else {})}
        run = self._client.create_run(self._experiment_id, run_name=" ".join(parts), tags=tags)
        self._log(run.info.run_id, params, metrics)
        self._client.set_terminated(run.info.run_id, "FINISHED")

    def _holds(self, record: str) -> bool:
        """Whether the experiment already has a run of done-record ``record`` (tag :data:`RECORD_TAG`)."""
        quoted = record.replace("\\", "\\\\").replace("'", "\\'")
        found = self._client.search_runs([self._experiment_id], filter_string=f"tags.`{RECORD_TAG}` = '{quoted}'",
                                         max_results=1)
        return len(found) > 0

    def _log(self, run_id: str, params: Mapping[str, Any], metrics: Metrics) -> None:
        """Log in batches of MLflow's limits (100 parameters, 1,000 metrics a request)."""
        from mlflow.entities import Metric, Param

        now = int(time.time() * 1000)
        ps = [Param(k, str(v)) for k, v in flatten(params).items()]
        ms = [Metric(k, float(v), now, int(step)) for step, row in metrics for k, v in row.items()]
        for i in range(0, len(ps), 100):
            self._client.log_batch(run_id, params=ps[i:i + 100])
        for i in range(0, len(ms), 1000):
            self._client.log_batch(run_id, metrics=ms[i:i + 1000])

    def log_files(self, files: Sequence[Path], under: str = "") -> None:
        for f in files:
            self._client.log_artifact(self._parent, str(f), artifact_path=under or None)

    def finish(self, status: str = "FINISHED") -> None:
        if self._parent:
            self._client.set_terminated(self._parent, status)

    def view_hint(self) -> str:
        return (f"MLflow run {self._parent} in {self.location}; view it with the full mlflow package: "
                f"mlflow ui --backend-store-uri {self.location}")


class TensorBoardTracker:
    """Tracking as TensorBoard event files, with TensorBoard's own writer
    (:class:`tensorboard.summary.writer.event_file_writer.EventFileWriter`; no TensorFlow): the
    command's directory ``LOGDIR/<job>-<time>/`` (its parameters, tables and file list as text) and
    one directory per run below it (a scalar per metric and round, its parameters as HParams).

    Parameters
    ----------
    location : str
        The log directory (``tensorboard --logdir`` it).
    """

    name = "tensorboard"

    def __init__(self, location: str) -> None:
        try:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError as exc:
            raise _missing_extra("tensorboard", exc) from None
        if _is_uri(location):
            raise ValueError(f"--track-uri {location!r}: TensorBoard writes to a local directory; give its path")
        self._writer_class = EventFileWriter
        self.location = str(Path(location).expanduser())
        self._job: Path | None = None
        self._job_writer: Any = None
        self._texts = 0
        self._names: dict[tuple[str, ...], str] = {}   # a run directory's path -> the name part it stands for

    def start(self, experiment: str, job: str, tags: Mapping[str, str]) -> None:
        Path(self.location).mkdir(parents=True, exist_ok=True)
        stem = _path_part(f"{job}-{time.strftime('%Y%m%d-%H%M%S')}")
        path, n = Path(self.location) / stem, 1
        while path.exists():
            n += 1
            path = Path(self.location) / f"{stem}-{n}"
        self._job = path
        self._job_writer = self._writer_class(str(path))
        self._text("job", "\n".join(f"- **{k}**: {v}" for k, v in {"experiment": experiment, **tags}.items()))

    def log_params(self, params: Mapping[str, Any]) -> None:
        rows = [{"parameter": k, "value": v} for k, v in flatten(params).items()]
        self._text("parameters", _markdown_table(rows))

    def log_run(self, parts: Sequence[str], params: Mapping[str, Any], metrics: Metrics, record: str = "") -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.plugins.hparams.summary_v2 import hparams_pb

        assert self._job is not None, "start() first"
        writer = self._writer_class(str(self._job.joinpath(*self._run_path(parts))))
        try:
            hparams = {k: v for k, v in flatten(params).items() if isinstance(v, (bool, int, float, str))}
            writer.add_event(event_pb2.Event(wall_time=time.time(), step=0, summary=hparams_pb(hparams)))
            for step, row in metrics:
                values = [summary_pb2.Summary.Value(tag=k, simple_value=float(v)) for k, v in row.items()]
                writer.add_event(event_pb2.Event(wall_time=time.time(), step=int(step),
                                                 summary=summary_pb2.Summary(value=values)))
        finally:
            writer.close()

    def _run_path(self, parts: Sequence[str]) -> list[str]:
        """A run's directories below the job: each part a safe name (:func:`_path_part`), with a short
        hash of the part added where two different parts would get the same name (``a b`` and ``a_b``).
        """
        import hashlib

        path: list[str] = []
        for part in parts:
            name = _path_part(part)
            owner = self._names.setdefault((*path, name), str(part))
            if owner != str(part):
                name = f"{name}-{hashlib.sha1(str(part).encode()).hexdigest()[:6]}"  # noqa: S324 (a name, not security)
                self._names.setdefault((*path, name), str(part))
            path.append(name)
        return path

    def log_files(self, files: Sequence[Path], under: str = "") -> None:
        prefix = f"{under}/" if under else ""
        self._text(f"{prefix}files", "\n".join(f"- `{f.resolve()}`" for f in files))
        for f in files:
            if f.suffix == ".csv":
                rows = read_csv(f)
                more = f"\n\n({len(rows) - MAX_TEXT_ROWS} more rows in `{f.resolve()}`)" \
                    if len(rows) > MAX_TEXT_ROWS else ""
                self._text(f"{prefix}{f.name}", _markdown_table(rows[:MAX_TEXT_ROWS]) + more)

    def _text(self, tag: str, markdown: str) -> None:
        """One text summary of the command (TensorBoard's Text dashboard renders Markdown)."""
        import numpy as np
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.plugins.text import metadata
        from tensorboard.util import tensor_util

        assert self._job_writer is not None, "start() first"
        value = summary_pb2.Summary.Value(tag=tag, metadata=metadata.create_summary_metadata(display_name=tag,
                                                                                             description=""),
                                          tensor=tensor_util.make_tensor_proto(np.array(markdown, dtype=object)))
        self._job_writer.add_event(event_pb2.Event(wall_time=time.time(), step=self._texts,
                                                   summary=summary_pb2.Summary(value=[value])))
        self._texts += 1

    def finish(self, status: str = "FINISHED") -> None:
        if self._job_writer is not None:
            self._text("status", status)
            self._job_writer.close()
            self._job_writer = None

    def view_hint(self) -> str:
        return f"TensorBoard run {self._job}; view it with: tensorboard --logdir {self.location}"


class GuardedTracker:
    """A tracker whose failures never reach the run. Its job opens at the first thing logged (so that
    a command's results directory holds no tracking store before its results, and a command that
    fails before logging leaves no empty job); the first exception of ``inner`` is logged as a
    warning and turns tracking off for the rest of the command (the results files are unaffected).

    Parameters
    ----------
    inner : Tracker
        The tracker to guard.
    """

    def __init__(self, inner: Tracker) -> None:
        self.inner = inner
        self.name, self.location = inner.name, inner.location
        self.failed: str | None = None
        self.started = False
        self._job: tuple[str, str, dict[str, str]] | None = None

    def _call(self, what: str, *args: Any) -> None:
        if self.failed is not None:
            return
        try:
            if not self.started:
                if self._job is None:
                    raise RuntimeError("the tracker's job was not started (start() first)")
                self.inner.start(*self._job)
                self.started = True
            getattr(self.inner, what)(*args)
        except Exception as exc:  # noqa: BLE001 (whatever the tracker raises, the run goes on)
            self.failed = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            log.warning("tracking with %s stopped (%s); the results files are complete, tracking is off for the rest "
                        "of this command", self.name, self.failed)

    def start(self, experiment: str, job: str, tags: Mapping[str, str]) -> None:
        self._job = (experiment, job, dict(tags))

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._call("log_params", params)

    def log_run(self, parts: Sequence[str], params: Mapping[str, Any], metrics: Metrics, record: str = "") -> None:
        if record:
            self._call("log_run", parts, params, metrics, record)
        else:
            self._call("log_run", parts, params, metrics)

    def log_files(self, files: Sequence[Path], under: str = "") -> None:
        self._call("log_files", files, under)

    def finish(self, status: str = "FINISHED") -> None:
        if self.started:
            self._call("finish", status)

    def view_hint(self) -> str:
        if self.failed is not None:
            return f"tracking with {self.name} failed ({self.failed}); the results files are complete"
        if not self.started:
            return f"nothing was logged to {self.name}"
        return self.inner.view_hint()


@contextmanager
def tracked(tracker: Tracker | None, experiment: str, job: str,
            tags: Mapping[str, str] | None = None) -> Iterator[Tracker | None]:
    """Track a command's job from start to end: ``tracker.start``, then the block, then
    ``tracker.finish`` with ``FINISHED``, ``FAILED`` (an exception) or ``KILLED`` (Ctrl-C).
    Yields ``tracker`` (``None`` without tracking: the block runs as it is).
    """
    if tracker is None:
        yield None
        return
    tracker.start(experiment, job, dict(tags or {}))
    status = "FAILED"
    try:
        yield tracker
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    finally:
        tracker.finish(status)


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``params`` as flat ``a.b.c`` names and plain values: nested mappings flattened, other
    containers and objects as JSON; values longer than :data:`MAX_PARAM_CHARS` characters (a
    configuration's run lists) left out, NaN as the text ``nan``.
    """
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
            continue
        if value is None or (isinstance(value, float) and math.isnan(value)):
            value = str(value).lower()
        elif not isinstance(value, (bool, int, float, str)):
            value = json.dumps(value, default=str)
        if not (isinstance(value, str) and len(value) > MAX_PARAM_CHARS):
            out[name] = value
    return out


def _path_part(text: str) -> str:
    """``text`` as one safe directory name (letters, digits, ``._=-``; the rest ``_``; a name of dots
    only, ``.`` or ``..``, as ``_``).
    """
    safe = re.sub(r"[^A-Za-z0-9._=-]+", "_", str(text)).strip("_") or "_"
    return "_" if set(safe) == {"."} else safe


def _markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return "(empty)"
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")).replace("|", "\\|") for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def _numbers(row: Mapping[str, Any], skip: Iterable[str]) -> dict[str, float]:
    """The numeric values of a results row, less the columns ``skip``: NaN and ±inf kept (a diverged
    run's loss is a result; MLflow and TensorBoard both store them), empty and non-numeric cells dropped.
    """
    out = {}
    skipped = set(skip)
    for k, v in row.items():
        if k in skipped or k == _STEP or v is None or (isinstance(v, str) and not v.strip()):
            continue
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            continue
    return out


#: key columns that are not a setting of the run
_NOT_SETTING = ("experiment", "scenario", "method", "seed")


def _run_parts(key: Mapping[str, Any], under: str) -> list[str]:
    """A run's name from its key columns: ``[under,] [scenario,] method, setting k=v ..., seed N``."""
    setting = [f"{k}={v}" for k, v in key.items() if k not in _NOT_SETTING]
    parts = [under] if under else []
    parts += [str(key["scenario"])] if "scenario" in key else []
    return [*parts, str(key.get("method", "run")), *setting, f"seed {key.get('seed', '')}".strip()]


def _resolved(method: str, hyperparameters: Mapping[str, Any]) -> dict[str, Any]:
    """Every hyper-parameter a run of ``method`` used: its configuration's defaults with
    ``hyperparameters`` over them (:meth:`topofl.config.MethodConfig.from_dict`); ``hyperparameters``
    as they are for a method that is not registered (e.g. the paper-era protocol's).
    """
    import dataclasses

    from topofl.methods import get

    try:
        return dataclasses.asdict(get(method).config.from_dict(dict(hyperparameters)))
    except (ValueError, TypeError, AttributeError):
        return dict(hyperparameters)


def _hyperparameters(config: Mapping[str, Any], key: Mapping[str, Any]) -> dict[str, Any]:
    """A run's hyper-parameters, every one (:func:`_resolved`), with the values its results directory's
    ``config.json`` sets: a comparison's ``hyperparameters`` of its method, or the hyper-parameters of
    the experiment's planned run (``runs``) with the run's scenario, method (label) and setting; the
    method's defaults when the configuration does not say.
    """
    method = str(key.get("method", ""))
    if isinstance(config.get("hyperparameters"), Mapping):
        own = config["hyperparameters"].get(method, {})
        return _resolved(method, own if isinstance(own, Mapping) else {})
    setting = {k: str(v) for k, v in key.items() if k not in _NOT_SETTING}
    for run in config.get("runs", []) if isinstance(config.get("runs"), list) else []:
        if not isinstance(run, Mapping) or (run.get("label") or run.get("method")) != method:
            continue
        if "scenario" in key and run.get("scenario") != key["scenario"]:
            continue
        planned, hyper = run.get("setting"), run.get("hyperparameters")
        same = {k: str(v) for k, v in (planned if isinstance(planned, Mapping) else {}).items()} == setting
        if same and isinstance(hyper, Mapping):
            return _resolved(str(run.get("method") or method), hyper)
    return _resolved(method, {})


def _assignments(text: str) -> dict[str, str]:
    """``"lr=0.1, local_epochs=2"`` (a tuning table's ``params``, ``chosen``) as ``{"lr": "0.1", ...}``."""
    pairs = (p.split("=", 1) for p in str(text).split(", ") if "=" in p)
    return {k.strip(): v.strip() for k, v in pairs}


def _tuned_values(directory: Path) -> list[tuple[dict[str, str], dict[str, str]]]:
    """A tuned comparison's chosen values (its ``tuning_summary.csv``, as printed there: 4 significant
    digits), each with the setting columns it applies to (``method``, ...).
    """
    path = directory / "tuning_summary.csv"
    if not path.exists():
        return []
    out = []
    for row in read_csv(path):
        cols = list(row)
        setting = {c: row[c] for c in cols[:cols.index("trials")]} if "trials" in cols else {"method": row["method"]}
        out.append((setting, _assignments(row.get("chosen", ""))))
    return out


def _with_tuned(hyper: dict[str, Any], key: Mapping[str, Any],
                tuned: Sequence[tuple[dict[str, str], dict[str, str]]]) -> dict[str, Any]:
    """``hyper`` with the tuned values of ``key``'s setting over it (coerced as the method's configuration
    coerces them) and the tuned values as the parameter ``tuned``; ``hyper`` when none apply.
    """
    for setting, values in tuned:
        if values and all(str(key.get(c, v)) == v for c, v in setting.items()):
            method = str(key.get("method", ""))
            merged = _resolved(method, {**hyper, **values}) if hyper else {**values}
            return {**merged, "tuned": ", ".join(f"{k}={v}" for k, v in values.items())}
    return hyper


def _series(rows: Sequence[Mapping[str, Any]], key_columns: Iterable[str]) -> list[tuple[int, dict[str, float]]]:
    return [(int(float(r[_STEP])), _numbers(r, key_columns)) for r in rows if r.get(_STEP) not in (None, "")]


def runs_in(directory: Path) -> Iterator[tuple[dict[str, Any], list[tuple[int, dict[str, float]]]]]:
    """The finished runs of a results directory, each as ``(key columns, metrics per round)``: an
    experiment's ``runs/*.curves.csv`` that have a done-record (the key columns are those the
    done-record also holds), or a comparison's ``curves.csv`` (by method and seed).
    """
    for key, metrics, _ in _records_in(directory):
        yield key, metrics


def _records_in(directory: Path) -> Iterator[tuple[dict[str, Any], list[tuple[int, dict[str, float]]], str]]:
    """:func:`runs_in` with each run's done-record id (``<run_id>:<seal>``; ``""`` for a comparison's runs)."""
    directory = Path(directory)
    run_dir = directory / "runs"
    if run_dir.is_dir():
        for done in sorted(run_dir.glob(f"*{_DONE_SUFFIX}")):
            curves = run_dir / f"{done.name[:-len(_DONE_SUFFIX)]}.curves.csv"
            if not curves.exists():
                continue
            record = json.loads(done.read_text())
            rows = read_csv(curves)
            columns = [c for c in (rows[0] if rows else {}) if c in record and c != _STEP]
            key = {c: record[c] for c in columns}
            yield key, _series(rows, columns), f"{done.name[:-len(_DONE_SUFFIX)]}:{record.get('seal', '')}"
    elif (directory / "curves.csv").exists():
        groups: dict[tuple[str, str], list[dict[str, str]]] = {}
        for row in read_csv(directory / "curves.csv"):
            groups.setdefault((row.get("method", ""), row.get("seed", "")), []).append(row)
        for (method, seed), rows in groups.items():
            yield ({"method": method, "seed": int(seed) if seed.isdigit() else seed}, _series(rows, ("method", "seed")),
                   "")


def log_results(tracker: Tracker | None, directory: Path, under: str = "") -> None:
    """Log a results directory to ``tracker`` (nothing when ``None``): its configuration
    (``config.json``) as parameters (named ``UNDER.…`` when ``under`` is given), every finished run
    with its metrics per round (:func:`runs_in`; a comparison's runs with their method's
    hyper-parameters), every tuning trial's validation score (``trials.csv``), and its files — CSV,
    JSON, figures, ``report.html``; not the per-run files — as artifacts in folder ``under``.
    A directory that cannot be read is a warning, never an error.
    """
    if tracker is None:
        return
    directory = Path(directory)
    try:
        config = json.loads((directory / "config.json").read_text()) if (directory / "config.json").exists() else {}
        if config:
            tracker.log_params(flatten(config, f"{under}." if under else ""))
        # ``topofl tune``'s default/ and tuned/ passes: the plan is in the tuning's config.json above them
        plan = config or (json.loads((directory.parent / "config.json").read_text())
                          if under and (directory.parent / "config.json").exists() else {})
        tuned = _tuned_values(directory.parent) if under == "tuned" and not config else []
        for key, metrics, record in _records_in(directory):
            hyper = _with_tuned(_hyperparameters(plan, key), key, tuned)
            if record:
                tracker.log_run(_run_parts(key, under), {**key, **hyper}, metrics, record)
            else:
                tracker.log_run(_run_parts(key, under), {**key, **hyper}, metrics)
        if (directory / "trials.csv").exists():
            _log_trials(tracker, directory / "trials.csv", under)
        files = sorted(p for p in directory.iterdir() if p.is_file() and p.name != LOCK_NAME)
        tracker.log_files(files, under)
    except Exception as exc:  # noqa: BLE001 (tracking never breaks a command whose results are written)
        log.warning("tracking: could not read the results in %s (%s); they are on disk as written", directory, exc)


def _log_trials(tracker: Tracker, path: Path, under: str) -> None:
    """Each tuned setting's trials as one run: the validation score and the best so far, by trial."""
    rows = read_csv(path)
    if not rows:
        return
    setting = list(rows[0])[:list(rows[0]).index("trial")] if "trial" in rows[0] else ["method"]
    groups: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for row in rows:
        groups.setdefault(tuple(row.get(c, "") for c in setting), []).append(row)
    for values, trials in groups.items():
        key = dict(zip(setting, values, strict=True))
        # each trial's numeric values as metrics too (a step per trial): how the search moved
        metrics = [(int(r["trial"]), {**_numbers(_assignments(r.get("params", "")), ()),
                                      **_numbers({k: r.get(k, "") for k in ("validation", "best_so_far")}, ())})
                   for r in trials]
        params = {f"trial {r['trial']}": r.get("params", "") for r in trials}
        parts = [*([under] if under else []), "tuning", *(f"{k}={v}" if k != "method" else v for k, v in key.items())]
        tracker.log_run(parts, {**key, "metric": trials[0].get("metric", ""), **params}, metrics)


def log_history(tracker: Tracker | None, history: Any, params: Mapping[str, Any]) -> None:
    """Log one in-memory run (``topofl run`` without ``--out``): its rounds (:class:`~topofl.federation.
    history.RoundSummary`) as metrics per round, ``params`` as its parameters and the job's (its
    ``hyperparameters`` resolved: :func:`_resolved`).
    """
    if tracker is None:
        return
    metrics = [(int(s.round), _numbers(s.as_dict(), ())) for s in history.rounds]
    if isinstance(params.get("hyperparameters"), Mapping):   # every hyper-parameter, not only those the command set
        params = {**params, "hyperparameters": _resolved(str(history.method), params["hyperparameters"])}
    tracker.log_params(params)
    tracker.log_run(_run_parts({"method": history.method, "seed": history.seed}, ""), params, metrics)
