"""What every experiment provides, and the manifest its analysis leaves for the report."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from topofl.experiments.results import _json_default, write_csv
from topofl.experiments.runs import RunSpec


@dataclass
class Manifest:
    """Tables (CSV files), figures (PNG + SVG) and notes of one experiment, in report order."""

    name: str
    title: str
    description: str = ""
    tables: list[dict[str, Any]] = field(default_factory=list)
    figures: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def table(self, out: Path, stem: str, title: str, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> None:
        columns = list(columns or (rows[0].keys() if rows else []))
        write_csv(out / f"{stem}.csv", rows, columns)
        self.tables.append({"csv": f"{stem}.csv", "title": title, "columns": columns})

    def figure(self, files: Mapping[str, str], caption: str) -> None:
        self.figures.append({**files, "caption": caption})

    def write(self, out: Path) -> None:
        (out / "manifest.json").write_text(json.dumps(self.__dict__, indent=2, default=_json_default))


@dataclass(frozen=True)
class Experiment:
    """``plan(seeds)`` → the runs; ``analyse(out, done)`` → tables, figures, notes (a Manifest)."""

    name: str
    title: str
    plan: Callable[[Sequence[int]], list[RunSpec]]
    analyse: Callable[[Path, list[dict[str, Any]]], Manifest]
    default_seeds: tuple[int, ...] = tuple(range(10))
