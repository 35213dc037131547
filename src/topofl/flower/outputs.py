"""Results of a Flower run, written as rounds finish (finished work is never lost).

``rounds.csv`` (one row per round and client), ``curves.csv`` (one row per round),
``server_log.jsonl`` (the server's log per round), ``failures.jsonl`` (every failed or dropped
reply, with the reason) and, at the end, ``result.json``
(``{"method", "rounds", "final", "clients", "failures", "settings"}``).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from topofl.experiments.results import CsvAppender, _json_default, append_jsonl
from topofl.federation.pool import Failure

log = logging.getLogger(__name__)


class RunOutputs:
    """Appends a run's results under ``out_dir`` (does nothing when ``out_dir`` is empty)."""

    def __init__(self, out_dir: str, record_fields: Sequence[str], curve_fields: Sequence[str]) -> None:
        self.dir = Path(out_dir) if out_dir else None
        self.failures: list[Failure] = []
        self.last: dict[str, Any] = {}
        self.n_rounds = 0
        self.clients: set[int] = set()
        self._records = self._curves = None
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            for name in ("rounds.csv", "curves.csv", "server_log.jsonl", "failures.jsonl", "result.json"):
                (self.dir / name).unlink(missing_ok=True)  # a new run replaces an old one's files
            self._records = CsvAppender(self.dir / "rounds.csv", record_fields)
            self._curves = CsvAppender(self.dir / "curves.csv", curve_fields)

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
        self._records.write(rows)
        self._curves.write([summary])
        if log_entry is not None:
            append_jsonl(self.dir / "server_log.jsonl", log_entry)
        for f in failures:
            append_jsonl(self.dir / "failures.jsonl", f.as_dict())

    def finish(self, method: str, settings: Mapping[str, Any], extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        result = {
            "method": method, "rounds": self.n_rounds, "final": {k: _null_nan(v) for k, v in self.last.items()}, "clients": sorted(self.clients),
            "failures": [f.as_dict() for f in self.failures], "settings": dict(settings), **dict(extra or {}),
        }
        if self.dir is not None:
            self._records.close()
            self._curves.close()
            (self.dir / "result.json").write_text(json.dumps(result, indent=2, default=_json_default))
            log.info("results written to %s", self.dir)
        return result


def _null_nan(v: Any) -> Any:
    """NaN (a metric that does not exist, e.g. pooled AUC when clients keep their predictions) → null."""
    return None if isinstance(v, float) and v != v else v
