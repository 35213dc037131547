"""What every experiment provides, and the manifest its analysis leaves for the report."""
from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topofl.experiments.results import write_csv, write_json_atomic
from topofl.experiments.store import RunSpec


def server_logs(out: Path) -> list[dict[str, Any]]:
    """Every entry of ``out/server_log.jsonl`` (one per run and round), in file order; ``[]`` without the file."""
    path = out / "server_log.jsonl"
    if not path.is_file():
        return []
    with path.open() as fh:
        return [json.loads(line) for line in fh if line.strip()]


def last_round_logs(out: Path, key: Callable[[dict[str, Any]], Hashable | None]) -> dict[Any, dict[str, Any]]:
    """The last round's server-log entry of every run, by ``key(entry)`` (entries whose key is
    ``None`` are skipped): what an analysis of final clusters, flags or ε reads.
    """
    last: dict[Any, dict[str, Any]] = {}
    for r in server_logs(out):
        k = key(r)
        if k is not None and (k not in last or r["round"] > last[k]["round"]):
            last[k] = r
    return last


@dataclass
class Manifest:
    """Tables (CSV files), figures (PNG + SVG) and notes of one experiment, in report order."""

    name: str
    title: str
    description: str = ""
    tables: list[dict[str, Any]] = field(default_factory=list)
    figures: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: lines ``topofl experiment`` prints when the experiment finishes (its headline numbers), if any
    console: list[str] = field(default_factory=list)

    def table(self, out: Path, stem: str, title: str, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None,
              show: Sequence[str] | None = None) -> None:
        """Write ``stem.csv`` (``columns``, default every key) and list it for the report, which
        displays the ``show`` columns only (default all; the CSV keeps every column).
        """
        columns = list(columns or (rows[0].keys() if rows else []))
        write_csv(out / f"{stem}.csv", rows, columns)
        entry: dict[str, Any] = {"csv": f"{stem}.csv", "title": title, "columns": columns}
        if show is not None:
            entry["show"] = list(show)
        self.tables.append(entry)

    def figure(self, files: Mapping[str, str], caption: str) -> None:
        self.figures.append({**files, "caption": caption})

    def write(self, out: Path) -> None:
        write_json_atomic(out / "manifest.json", self.__dict__)


#: budgets an experiment may offer: the paper-sized one, one under 15 minutes on 2 cores, a CI smoke run
PROFILES = ("full", "quick", "smoke")


@dataclass(frozen=True)
class Experiment:
    """``plan(seeds)`` → the runs; ``analyse(out, done)`` → tables, figures, notes (a Manifest).

    An experiment with several budgets lists them in ``profiles`` and takes ``plan(seeds,
    profile, data_root)`` (``data_root``: real data sets, when the experiment can use them).
    """

    name: str
    title: str
    plan: Callable[..., list[RunSpec]]
    analyse: Callable[[Path, list[dict[str, Any]]], Manifest]
    default_seeds: tuple[int, ...] = tuple(range(10))
    profiles: tuple[str, ...] = ("full",)
    #: the default seeds of the ``quick`` budget, when they differ from :attr:`default_seeds`
    quick_seeds: tuple[int, ...] | None = None
    #: whether ``--tuned`` may tune its settings (:mod:`topofl.experiments.tuning`): a comparison of
    #: methods whose analysis reads only the runs' results
    tunable: bool = False
