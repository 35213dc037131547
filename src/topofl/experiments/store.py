"""Where a run's results live and how a finished run is recognised (no execution here).

A run writes its files under ``DIR/runs/`` as rounds finish and, when complete, a sealed ``<id>.done.json``
(:func:`verified_done` checks it and every file); :func:`results_lock` lets one process at a time write a
results directory. See docs/internals.md#topofl.experiments.store for the files and what the seal detects.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from topofl.atomic import LOCK_NAME, directory_lock
from topofl.experiments.results import _json_default, file_record, read_csv, write_json_atomic, write_text_atomic
from topofl.job import Job

#: a run's result files (by kind) and whether each has a header line
RESULT_FILES = {"rounds": True, "curves": True, "log": False}


def run_paths(run_dir: Path, spec: Job) -> dict[str, Path]:
    """The files of one run in ``run_dir``, by kind: ``rounds``, ``curves``, ``log`` and ``done``."""
    rid = spec.run_id
    return {k: run_dir / f"{rid}.{k}.{ext}"
            for k, ext in (("rounds", "csv"), ("curves", "csv"), ("log", "jsonl"), ("done", "json"))}


#: the format of a done-record's seal (:func:`seal_of`)
SEAL_FORMAT = 1


def results_lock(out: str | os.PathLike[str]) -> AbstractContextManager[Path]:
    """The lock of results directory ``out`` (:func:`topofl.atomic.directory_lock` on ``out/.lock``),
    held for as long as a process writes there — an experiment's runs, their merge and its
    analysis; a comparison; a tuning. A second process is refused at once with a one-line
    ``ValueError`` naming the directory; blocks nested in one thread share the lock.
    """
    return directory_lock(out, "results directory", hint="wait for it to finish (or stop it), or use another --out",
                          reentrant=True)


def holds_results(directory: Path) -> bool:
    """Whether ``directory`` exists and holds anything but its lock file."""
    return directory.is_dir() and any(p.name != LOCK_NAME for p in directory.iterdir())


def canonical_json(record: Any) -> bytes:
    """``record`` as canonical JSON: keys sorted, no spaces, ASCII only (NaN written as ``NaN``)."""
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=_json_default).encode()


def seal_of(record: Mapping[str, Any]) -> dict[str, Any]:
    """The seal of a done-record as read back from JSON: ``{"format", "sha256"}``, the SHA-256 of
    the canonical JSON of every field but ``seal`` — the metrics, and the ``files`` row counts and
    hashes that stand for the result files' rows.
    """
    body = {k: v for k, v in record.items() if k != "seal"}
    return {"format": SEAL_FORMAT, "sha256": hashlib.sha256(canonical_json(body)).hexdigest()}


def write_done(paths: Mapping[str, Path], done: Mapping[str, Any]) -> dict[str, Any]:
    """Atomically write a run's done-record, with every result file's row count and SHA-256, sealed
    (:func:`seal_of`): a run is either complete, with files and a record that can be verified, or
    not. Returns the record, as a resumed run reads it back (numpy values as numbers, tuples as lists).
    """
    files = {kind: file_record(paths[kind], header) for kind, header in RESULT_FILES.items()}
    body = json.loads(json.dumps({**{k: v for k, v in done.items() if k != "seal"}, "files": files},
                                 default=_json_default))
    record = {**body, "seal": seal_of(body)}
    write_json_atomic(paths["done"], record, indent=None)
    return record


def verified_done(paths: Mapping[str, Path]) -> tuple[dict[str, Any] | None, str | None]:
    """``(done-record, None)`` when the run is complete: its record parses, its seal matches its
    content and its files match the record; ``(None, reason)`` when it must be redone (``reason``
    names the file; it is ``None`` for a run never finished).
    """
    done = paths["done"]
    if not done.exists():
        return None, None
    try:
        record = json.loads(done.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"{done.name} is torn or not JSON ({exc})"
    if not isinstance(record, dict):
        return None, f"{done.name} is not a done-record (a JSON object)"
    seal = record.get("seal")
    if seal is None:
        return None, f"{done.name} has no seal (written by an older topofl), so its content cannot be checked"
    if not isinstance(seal, dict) or seal.get("format") != SEAL_FORMAT or not isinstance(seal.get("sha256"), str):
        return None, (f"{done.name}: its seal is not a format-{SEAL_FORMAT} seal "
                      f"({{\"format\": {SEAL_FORMAT}, \"sha256\": ...}})")
    if seal["sha256"] != seal_of(record)["sha256"]:
        return None, f"{done.name} does not match its seal (the record was edited or damaged after it was written)"
    files = record.get("files")
    if not isinstance(files, dict):
        return None, f"{done.name} records no file row counts and hashes"
    for kind, header in RESULT_FILES.items():
        path = paths[kind]
        if not path.exists():
            return None, f"{path.name} is missing"
        got, want = file_record(path, header), files.get(kind)
        if got != want:
            rows = want.get("rows") if isinstance(want, dict) else "?"
            return None, (f"{path.name} does not match its done-record ({got['rows']} rows now, {rows} recorded; "
                          "SHA-256 differs)")
    return record, None


def load_done(run_dir: Path, spec: Job) -> dict[str, Any]:
    """A complete run's verified done-record; ``ValueError`` naming the file otherwise."""
    record, problem = verified_done(run_paths(run_dir, spec))
    if record is None:
        raise ValueError(f"run {spec.run_id} is not complete: {problem or 'no done-record'}")
    return record


def merge(specs: Sequence[Job], out: Path) -> None:
    """Concatenate the runs' files, in plan order, into the experiment's tidy files (atomically)."""
    run_dir = out / "runs"
    for kind, name in (("rounds", "rounds.csv"), ("curves", "curves.csv"), ("log", "server_log.jsonl")):
        parts: list[str] = []
        header_written = False
        for spec in specs:
            lines = run_paths(run_dir, spec)[kind].read_text().splitlines(keepends=True)
            if not RESULT_FILES[kind]:
                parts.extend(lines)
                continue
            if lines and not header_written:
                parts.append(lines[0])
                header_written = True
            parts.extend(lines[1:])
        write_text_atomic(out / name, "".join(parts))


def load_curves(out: Path) -> list[dict[str, str]]:
    """The merged per-round curves of an experiment directory."""
    return read_csv(Path(out) / "curves.csv")
