"""Results as data: tidy CSV files written as rounds finish, so finished work is never lost."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence


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
        for row in rows:
            self._writer.writerow({k: _fmt(row.get(k)) for k in self.fields})
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> "CsvAppender":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _fmt(v: Any) -> Any:
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(round(v, 10))
    return v


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]], fields: Sequence[str] | None = None) -> None:
    """Write ``rows`` to ``path`` at once (replacing it)."""
    path = Path(path)
    if path.exists():
        path.unlink()
    with CsvAppender(path, fields or list(rows[0]) if rows else fields or []) as out:
        out.write(rows)


def read_csv(path: Path) -> list[dict[str, str]]:
    """Rows of a CSV file as dicts of strings."""
    with Path(path).open(newline="") as fh:
        return list(csv.DictReader(fh))


def append_jsonl(path: Path, record: Mapping[str, Any]) -> None:
    """Append one JSON record (numpy scalars converted) to a JSON-lines file."""
    with Path(path).open("a") as fh:
        fh.write(json.dumps(record, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (set, tuple)):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
