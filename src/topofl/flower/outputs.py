"""Results of a Flower run, written as rounds finish (finished work is never lost).

Every run writes into a fresh ``run-<run id>`` directory inside the results root (an ``out-dir`` that
escapes it is refused): ``rounds.csv``, ``curves.csv``, ``server_log.jsonl``, ``failures.jsonl`` and
``result.json`` (:func:`run_status`). See docs/internals.md#topofl.flower.outputs.
"""
from __future__ import annotations

import itertools
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from topofl.experiments.results import CsvAppender, append_jsonl, write_json_atomic
from topofl.federation.history import PEER_RECORD_FIELDS, ROUND_SUMMARY_FIELDS
from topofl.federation.pool import Failure

log = logging.getLogger(__name__)

#: the columns a Flower run adds to each round's row: clients that replied, and failures
FAILURE_FIELDS = ("n_clients", "n_failures")
#: a federated Flower run's ``curves.csv``: the round summary (no regression columns) and the failures
SERVER_CURVE_FIELDS = tuple(f for f in ROUND_SUMMARY_FIELDS if f not in ("mse", "rmse", "r2")) + FAILURE_FIELDS
#: a relayed peer run: what the relay sees of each node (accuracy, loss, model size) and of each iteration
RELAY_RECORD_FIELDS = PEER_RECORD_FIELDS[:5]
RELAY_CURVE_FIELDS = (("round", "accuracy", "accuracy_std", "loss", "bits", "cumulative_bits", "map_storage_bytes")
                      + FAILURE_FIELDS)

#: environment variable, set on the host running the ServerApp, naming the results root
RESULTS_ROOT_ENV = "TOPOFL_RESULTS_ROOT"


def results_root() -> Path:
    """The results root of this host: ``$TOPOFL_RESULTS_ROOT`` or ``./results`` (resolved)."""
    return Path(os.environ.get(RESULTS_ROOT_ENV) or Path.cwd() / "results").resolve()


def _inside_root(path: str, root: Path, key: str) -> Path:
    given = Path(path)
    target = (given if given.is_absolute() else root / given).resolve()
    if target != root and root not in target.parents:
        raise ValueError(
            f"{key}={path!r} is outside the results root {root}; give a path inside it "
            f"(the root is set on the host running the ServerApp with ${RESULTS_ROOT_ENV})"
        )
    return target


def resume_run_dir(resume_dir: str, root: str | os.PathLike[str]) -> Path:
    """The existing directory of the run to resume: ``resume_dir`` inside ``root`` (``ValueError`` otherwise)."""
    target = _inside_root(resume_dir, Path(root).resolve(), "resume-dir")
    if not target.is_dir():
        raise ValueError(f"resume-dir={resume_dir!r}: {target} is not a directory")
    return target


def resolve_run_dir(out_dir: str, root: str | os.PathLike[str], run_id: Any) -> Path | None:
    """Create and return the fresh directory of one run: ``<root>/<out_dir>/run-<run_id>``.

    ``None`` when ``out_dir`` is empty (no files). ``ValueError`` naming ``out-dir`` when the
    path (absolute, relative to ``root``, after ``..`` and symlinks) is not inside ``root``.
    """
    if not out_dir:
        return None
    target = _inside_root(out_dir, Path(root).resolve(), "out-dir")
    target.mkdir(parents=True, exist_ok=True)
    base = "run-" + (re.sub(r"[^A-Za-z0-9_.-]+", "-", str(run_id)).strip("-.") or "x")
    for k in itertools.count():
        candidate = target / (base if k == 0 else f"{base}-{k}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise AssertionError("unreachable")  # pragma: no cover


class RunOutputs:
    """Appends a run's results in ``run_dir`` (from :func:`resolve_run_dir`; nothing when ``None``)."""

    def __init__(self, run_dir: Path | None, record_fields: Sequence[str], curve_fields: Sequence[str]) -> None:
        self.dir = run_dir
        self.failures: list[Failure] = []
        self.last: dict[str, Any] = {}
        self.n_rounds = 0
        self.clients: set[int] = set()
        self._records: CsvAppender | None = None
        self._curves: CsvAppender | None = None
        if self.dir is not None:
            self._records = CsvAppender(self.dir / "rounds.csv", record_fields)
            self._curves = CsvAppender(self.dir / "curves.csv", curve_fields)

    def state(self) -> dict[str, Any]:
        """The bookkeeping a checkpoint keeps (the files themselves are pinned by the checkpoint)."""
        return {"failures": list(self.failures), "last": dict(self.last), "n_rounds": self.n_rounds,
                "clients": sorted(self.clients)}

    def restore(self, state: Mapping[str, Any]) -> None:
        """Continue from a checkpoint's :meth:`state` (the files were cut back to it)."""
        self.failures, self.last = list(state["failures"]), dict(state["last"])
        self.n_rounds, self.clients = int(state["n_rounds"]), set(state["clients"])

    def round(self, rows: Iterable[Mapping[str, Any]], summary: Mapping[str, Any], log_entry: Mapping[str, Any] | None,
              failures: Iterable[Failure]) -> None:
        rows = list(rows)
        failures = list(failures)
        self.failures.extend(failures)
        self.clients.update(int(r["client"]) for r in rows)
        self.last = dict(summary)
        self.n_rounds += 1
        if self.dir is None:
            return
        assert self._records is not None and self._curves is not None  # opened with the directory
        self._records.write(rows)
        self._curves.write([summary])
        if log_entry is not None:
            append_jsonl(self.dir / "server_log.jsonl", log_entry)
        for f in failures:
            append_jsonl(self.dir / "failures.jsonl", f.as_dict())

    def finish(self, method: str, settings: Mapping[str, Any],
               extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        result = {
            "method": method, "rounds": self.n_rounds, "final": {k: _null_nan(v) for k, v in self.last.items()},
            "clients": sorted(self.clients),
            "failures": [f.as_dict() for f in self.failures], "settings": dict(settings), **dict(extra or {}),
        }
        if self.dir is not None:
            assert self._records is not None and self._curves is not None  # opened with the directory
            self._records.close()
            self._curves.close()
            write_json_atomic(self.dir / "result.json", result)
            log.info("results written to %s", self.dir)
        return result


def run_status(failures: Iterable[Failure], unit: str = "round") -> dict[str, Any]:
    """``{"status", "degraded_rounds"}`` for result.json: ``"degraded"`` when a SuperLink outage
    cost a round a client's reply that sending it again did not recover
    (:func:`topofl.flower.exchange.outage_rounds`; logged), else ``"completed"``.
    """
    from topofl.flower.exchange import outage_rounds  # here: the results-root checks need no flwr

    rounds = outage_rounds(failures)
    if rounds:
        log.warning("the run finished DEGRADED: a SuperLink outage lost clients' replies in %s(s) %s "
                    "(see failures.jsonl); its metrics differ from an undisturbed run's", unit, rounds)
    return {"status": "degraded" if rounds else "completed", "degraded_rounds": rounds}


def _null_nan(v: Any) -> Any:
    """NaN (a metric that does not exist, e.g. pooled AUC when clients keep their predictions) → null."""
    return None if isinstance(v, float) and v != v else v
