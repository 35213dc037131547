"""Results as data: tidy CSV files written as rounds finish, so finished work is never lost.

Whole files (summaries, done-records, ``result.json``) are written atomically — a temporary
file in the same directory, flushed to disk, then renamed over the target — so a reader sees the
old file or the new one, never half of one. Appended files (rows per round) get each round's rows
in one write; a run's done-record lists their row counts and SHA-256 (:func:`file_record`) so a
torn or edited file is detected before it is reused.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from topofl.atomic import write_text_atomic


class CsvAppender:
    """Append rows to a CSV file, writing the header once and flushing after every batch."""

    def __init__(self, path: Path, fields: Sequence[str]) -> None:
        self.path = Path(path)
        self.fields = list(fields)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists() or self.path.stat().st_size == 0
        self._fh = self.path.open("a", newline="")
        self._writer = csv.DictWriter(self._fh, fieldnames=self.fields, extrasaction="ignore")
        if new:
            self._writer.writeheader()
            self._fh.flush()

    def write(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append ``rows`` in one write (a round's rows land together or, if the process dies
        mid-write, as a torn tail that the done-record's hash exposes).
        """
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=self.fields, extrasaction="ignore")
        for row in rows:
            writer.writerow({k: _fmt(row.get(k)) for k in self.fields})
        self._fh.write(buf.getvalue())
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> CsvAppender:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _fmt(v: Any) -> Any:
    """A CSV cell: floats rounded to 10 decimals (NaN as an empty cell), numpy scalars as the plain
    Python number they hold (NumPy 2's ``repr`` would write ``np.float64(0.5)``), anything else as is.
    """
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(round(v, 10))
    return v


def write_json_atomic(path: Path, record: Any, indent: int | None = 2) -> None:
    """Replace ``path`` by ``record`` as JSON, atomically (numpy values converted)."""
    write_text_atomic(path, json.dumps(record, indent=indent, default=_json_default))


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]], fields: Sequence[str] | None = None) -> None:
    """Replace ``path`` by ``rows`` atomically."""
    fields = list(fields or (list(rows[0]) if rows else []))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _fmt(row.get(k)) for k in fields})
    write_text_atomic(path, buf.getvalue())


def file_record(path: Path, header: bool) -> dict[str, Any]:
    """``{"rows", "sha256"}`` of a results file (rows: lines, less the header of a CSV)."""
    data = Path(path).read_bytes()
    lines = data.count(b"\n")
    return {"rows": max(0, lines - 1) if header else lines, "sha256": hashlib.sha256(data).hexdigest()}


def read_csv(path: Path) -> list[dict[str, str]]:
    """Rows of a CSV file as dicts of strings."""
    with Path(path).open(newline="") as fh:
        return list(csv.DictReader(fh))


def append_jsonl(path: Path, record: Mapping[str, Any]) -> None:
    """Append one JSON record (numpy scalars converted) to a JSON-lines file."""
    with Path(path).open("a") as fh:
        fh.write(json.dumps(record, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (set, tuple)):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
