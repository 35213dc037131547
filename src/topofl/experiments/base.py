"""What every experiment provides (:class:`Experiment`: a plan and an analysis at a :class:`Budget`),
the manifest its analysis leaves for the report (:class:`Manifest`), and readers of its server logs.
"""
from __future__ import annotations

import csv
import dataclasses
import json
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topofl.experiments.results import write_csv, write_json_atomic

#: budgets an experiment may offer: the paper-sized one, one under 15 minutes on 2 cores, a CI smoke run
PROFILES = ("full", "quick", "smoke")


@dataclass(frozen=True)
class Budget:
    """What an experiment spends: rounds per run and the server-based methods it compares
    (``None``: every registered one). Experiments with more to size (grids, data, models) subclass
    it; a budget is a value passed to ``plan`` and ``analyse``, never a module constant.
    """

    rounds: int = 15
    methods: tuple[str, ...] | None = None

    def server_methods(self) -> list[str]:
        """:attr:`methods`, or every server-based method in registry order."""
        return server_methods(self.methods)


def server_methods(methods: Sequence[str] | None) -> list[str]:
    """``methods``, or (``None``) every server-based method in registry order."""
    from topofl.methods import available

    return list(methods) if methods is not None else list(available("server"))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every entry of a JSON-lines file, in file order; ``[]`` without the file."""
    if not path.is_file():
        return []
    with path.open() as fh:
        return [json.loads(line) for line in fh if line.strip()]


def iter_csv(path: Path) -> Iterator[dict[str, str]]:
    """The rows of a CSV file as a stream (large files: rounds.csv); none without the file."""
    if not path.is_file():
        return
    with path.open(newline="") as fh:
        yield from csv.DictReader(fh)


def server_logs(out: Path) -> list[dict[str, Any]]:
    """Every entry of ``out/server_log.jsonl`` (one per run and round), in file order; ``[]`` without the file."""
    return read_jsonl(Path(out) / "server_log.jsonl")


def last_round(logs: Iterable[Mapping[str, Any]], key: Callable[[Any], Hashable | None]) -> dict[Any, Any]:
    """The last round's entry of every run among server-log entries ``logs``, by ``key(entry)``
    (entries whose key is ``None`` are skipped): what an analysis of final clusters, flags or ε reads.
    """
    last: dict[Any, Any] = {}
    for r in logs:
        k = key(r)
        if k is not None and (k not in last or r["round"] > last[k]["round"]):
            last[k] = r
    return last


def last_round_logs(out: Path, key: Callable[[Any], Hashable | None]) -> dict[Any, Any]:
    """:func:`last_round` of the server log of experiment directory ``out``."""
    return last_round(server_logs(out), key)


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
    #: the budget's label when it is not the paper-sized ``full`` one (:func:`budget_label`); ``""`` at ``full``
    budget: str = ""

    def table(self, out: Path, stem: str, title: str, rows: Sequence[Mapping[str, Any]],
              columns: Sequence[str] | None = None,
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


@dataclass(frozen=True)
class Experiment:
    """An experiment: ``plan(seeds, budget)`` → its runs (:class:`~topofl.job.Job`);
    ``analyse(out, done, budget)`` → tables, figures, notes (a :class:`Manifest`).

    ``budgets`` maps each budget it offers (a name of :data:`PROFILES`, ``"full"`` first) to the
    budget's value. An experiment that can read real data sets (``takes_data_root``) takes
    ``plan(seeds, budget, data_root)``.
    """

    name: str
    title: str
    plan: Callable[..., list[Any]]
    analyse: Callable[..., Manifest]
    budgets: Mapping[str, Any] = field(default_factory=lambda: {"full": Budget()})
    default_seeds: tuple[int, ...] = tuple(range(10))
    #: the default seeds of the ``quick`` budget, when they differ from :attr:`default_seeds`
    quick_seeds: tuple[int, ...] | None = None
    #: whether ``--tuned`` may tune its settings (:mod:`topofl.experiments.tuning`): a comparison of
    #: methods whose analysis reads only the runs' results
    tunable: bool = False
    takes_data_root: bool = False

    def __post_init__(self) -> None:
        # every analysis labels a budget below the paper's: its figures (in the image) and its manifest
        object.__setattr__(self, "analyse", _labelled_analysis(self, self.analyse))

    @property
    def profiles(self) -> tuple[str, ...]:
        """The names of the budgets it offers."""
        return tuple(self.budgets)

    def budget(self, profile: str = "full") -> Any:
        """The budget named ``profile``; ``ValueError`` when the experiment does not offer it."""
        if profile not in self.budgets:
            raise ValueError(f"experiment {self.name!r} has no {profile!r} budget (--quick/--smoke); it offers: "
                             f"{', '.join(self.budgets)}")
        return self.budgets[profile]


def _short(value: Any) -> str:
    """A budget field's value in a label: tuples joined by commas, ``None`` as "all", long values cut."""
    if value is None:
        return "all"
    if isinstance(value, tuple):
        text = ", ".join(_short(v) for v in value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        text = ", ".join(f"{f.name} {_short(getattr(value, f.name))}" for f in dataclasses.fields(value))
    else:
        text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


#: the label's detail for an experiment whose settings the command line changed (``NAME-custom/``)
#: before its ``config.json`` says how (the report replaces it with the ``overrides`` themselves)
CUSTOM_SETTINGS = "settings changed on the command line (config.json: overrides)"


def override_diffs(full: Any, overrides: Mapping[str, Any] | None) -> list[str]:
    """``overrides`` (a ``config.json``'s, e.g. ``{"rounds": 2}``) as label parts, with the paper's
    value where the ``full`` budget has that field: ``["rounds 2 (full: 15)", "model mlp"]``.
    """
    parts = []
    for key, value in (overrides or {}).items():
        name = key.replace("_", " ")
        if dataclasses.is_dataclass(full) and hasattr(full, key):
            parts.append(f"{name} {_short(value)} (full: {_short(getattr(full, key))})")
        else:
            parts.append(f"{name} {_short(value)}")
    return parts


def budget_label(exp: Experiment, budget: Any, overrides: Mapping[str, Any] | None = None,
                 custom: bool = False) -> str:
    """How ``budget`` and the command line's ``overrides`` differ from ``exp``'s paper-sized ``full``
    budget, as a label for its tables and figures: ``""`` at ``full`` with nothing overridden; else
    ``"<profile> budget — below the paper's: rounds 3 (full: 15), ..."``, field by field, or
    ``"custom budget — differs from the paper's: ..."`` when it is none of the offered budgets or
    settings were overridden (``overrides``, or ``custom``: overridden, not yet known how).
    """
    full = exp.budgets.get("full")
    changed = bool(overrides) or custom
    if (budget is None or budget == full) and not changed:
        return ""
    profile = next((name for name, b in exp.budgets.items() if b == budget), "custom")
    if budget is None or budget == full:
        diffs = []
    elif dataclasses.is_dataclass(budget) and dataclasses.is_dataclass(full) and type(budget) is type(full):
        diffs = [f"{f.name.replace('_', ' ')} {_short(getattr(budget, f.name))} (full: {_short(getattr(full, f.name))})"
                 for f in dataclasses.fields(budget) if getattr(budget, f.name) != getattr(full, f.name)]
    else:
        diffs = [_short(budget)]
    if changed:
        diffs += override_diffs(full, overrides) if overrides else [CUSTOM_SETTINGS]
        profile = "custom"
    return (f"{profile} budget — below the paper's, not comparable with its numbers: " + "; ".join(diffs)
            if profile != "custom" else "custom budget — differs from the paper's: " + "; ".join(diffs))


def _labelled_analysis(exp: Experiment, analyse: Callable[..., Manifest]) -> Callable[..., Manifest]:
    """``analyse`` with a budget other than ``full`` labelled (:func:`budget_label`): every figure it
    saves carries the label in the image (:func:`topofl.experiments.figures.labelled`) and its
    manifest's ``budget`` holds it for the report's tables and captions.
    """
    if getattr(analyse, "labels_budget", False):
        return analyse

    def run(*args: Any, **kwargs: Any) -> Manifest:
        from topofl.experiments.figures import labelled

        budget = args[2] if len(args) > 2 else kwargs.get("budget", exp.budgets.get("full"))
        out = args[0] if args else kwargs.get("out")
        # the driver runs an experiment whose settings the command line changed in ``NAME-custom/``
        label = budget_label(exp, budget, custom=out is not None and Path(out).name.endswith("-custom"))
        with labelled(label.split(":")[0]):
            man = analyse(*args, **kwargs)
        man.budget = label
        return man

    run.labels_budget = True  # type: ignore[attr-defined]
    run.__doc__, run.__name__ = analyse.__doc__, getattr(analyse, "__name__", "analyse")
    return run
