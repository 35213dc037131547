"""Every experiment by name (:data:`EXPERIMENTS`, grouped by paper in :mod:`~topofl.experiments.ptopofl`,
:mod:`~topofl.experiments.sheaf` and :mod:`~topofl.experiments.security`), and running one end to
end: plan → execute (resumable, parallel) → analyse → manifest, with the experiment's directory
locked throughout (:func:`~topofl.experiments.store.results_lock`).
"""
from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from topofl.atomic import LOCK_NAME
from topofl.experiments import ptopofl, security, sheaf
from topofl.experiments.base import Experiment, Manifest
from topofl.experiments.compare import versions
from topofl.experiments.results import write_json_atomic
from topofl.experiments.runs import execute
from topofl.experiments.store import results_lock
from topofl.job import Job
from topofl.threads import run_threads

log = logging.getLogger(__name__)

#: every experiment's name, in the order ``topofl experiment --help`` lists them
NAMES = ("comparison", "robustness", "continual", "privacy", "ablation", "attacks", "privacy-attacks", "diagrams",
         "heart-disease", "controls",
         "deep", "sheaf-digits", "sheaf-hetero", "sheaf-topology", "sheaf-init", "sheaf-centralised", "sheaf-mnist",
         "sheaf-school",
         "privacy-dp", "secure-aggregation", "paper-protocol", "ptopofl-options")
_BY_NAME = {e.name: e for package in (ptopofl, security, sheaf) for e in package.EXPERIMENTS}
assert set(_BY_NAME) == set(NAMES), sorted(set(_BY_NAME) ^ set(NAMES))
EXPERIMENTS: dict[str, Experiment] = {n: _BY_NAME[n] for n in NAMES}

ORDER = ("comparison", "paper-protocol", "controls", "heart-disease", "robustness", "continual", "privacy", "ablation",
         "ptopofl-options",
         "diagrams", "secure-aggregation")
SHEAF_ORDER = ("sheaf-digits", "sheaf-school", "sheaf-centralised", "sheaf-hetero", "sheaf-topology", "sheaf-init")
GROUPS = {"all": ORDER, "sheaf-all": SHEAF_ORDER}


def experiment_names() -> list[str]:
    """Every experiment name, then the group names (``all``, ``sheaf-all``)."""
    return list(EXPERIMENTS) + list(GROUPS)


def experiment(name: str) -> Experiment:
    """The experiment ``name``; ``ValueError`` naming the available ones otherwise."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; available: {', '.join(experiment_names())}")
    return EXPERIMENTS[name]


#: seeds of the smoke budget by default: two, so that its paired tables still have intervals
SMOKE_SEEDS = 2


def default_seeds(name: str, profile: str = "full") -> tuple[int, ...]:
    """The default seeds of an experiment (its ``quick_seeds`` for the quick budget, when it has
    them; its first :data:`SMOKE_SEEDS` seeds for the smoke budget, a check that everything runs),
    or of a group's first experiment; 0–9 otherwise.
    """
    first = GROUPS.get(name, (name,))[0]
    if first not in EXPERIMENTS:
        return tuple(range(SMOKE_SEEDS if profile == "smoke" else 10))
    exp = EXPERIMENTS[first]
    if profile == "smoke":
        return exp.default_seeds[:SMOKE_SEEDS]
    return exp.quick_seeds if profile == "quick" and exp.quick_seeds is not None else exp.default_seeds


def budget_for(name: str, profile: str = "full", budget: Any = None) -> Any:
    """``budget`` when given, else experiment ``name``'s budget ``profile`` (``ValueError``: it offers none such)."""
    exp = experiment(name)
    return exp.budget(profile) if budget is None else budget


def plan_for(name: str, seeds: Sequence[int], profile: str = "full", data_root: str | None = None,
             budget: Any = None) -> list[Job]:
    """The runs of experiment ``name`` for ``seeds`` at a budget (``budget``, else the one named
    ``profile``); ``ValueError`` for an unknown name, or a budget or data root the experiment does not offer.
    """
    exp, b = experiment(name), budget_for(name, profile, budget)
    if not exp.takes_data_root:
        if data_root:
            raise ValueError(f"experiment {name!r} takes no --data-root")
        return exp.plan(list(seeds), b)
    return exp.plan(list(seeds), b, data_root)


def analyse_for(name: str, out: Path, done: list[dict[str, Any]], profile: str = "full",
                budget: Any = None) -> Manifest:
    """Experiment ``name``'s analysis of the done-records ``done`` in ``out``, at its budget."""
    return experiment(name).analyse(Path(out), done, budget_for(name, profile, budget))


def run_experiment(  # noqa: PLR0913 (user-facing keyword options of the experiment runner, used by the CLI and tests)
    name: str,
    seeds: Sequence[int],
    out: Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    jobs: int = 1,
    on_done: Callable[[Job, dict[str, Any]], None] | None = None,
    profile: str = "full",
    data_root: str | None = None,
    robust_defaults: bool = False,
    budget: Any = None,
    adjust: Callable[[list[Job]], list[Job]] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Path:
    """Run experiment ``name`` into ``out/name`` and return that directory.

    ``budget`` (a value of the experiment's budget type) replaces the budget named ``profile``.
    With ``robust_defaults`` every run's method gets the deployments' Byzantine-robust defaults
    (:func:`topofl.deployment_defaults.deployment_hyperparameters`) wherever the plan does not
    set the field, and the experiment goes to ``out/name-robust``. ``adjust`` changes the planned
    jobs (the command line's data, model and hyper-parameter flags; ``overrides`` says which, for
    ``config.json``), and the experiment goes to ``out/name-custom`` when they change a run (its run
    id: where the data are, School's ``-s path=FILE``, changes none).

    The directory is locked from before ``overwrite`` empties it until its ``config.json`` is
    written: a second process writing it meanwhile is refused (a ``ValueError`` naming it), and
    one refused changes nothing there.

    An interruption (``KeyboardInterrupt``) stops the queue and the worker processes at once
    (:func:`topofl.experiments.runs.execute`) and propagates, leaving the finished runs sealed in
    ``out/name/runs``: the same call with ``resume=True`` reuses them.

    Raises
    ------
    ValueError
        ``resume`` and ``overwrite`` together (the one keeps the finished runs, the other deletes
        them), an unknown name, a budget or data root the experiment does not offer, or a locked directory.
    """
    if resume and overwrite:
        raise ValueError("resume and overwrite exclude each other: resume continues the finished runs, overwrite "
                         "deletes them first")
    b = budget_for(name, profile, budget)
    specs = plan_for(name, seeds, profile, data_root, b)
    exp_dir = Path(out) / name
    if robust_defaults:
        from topofl.deployment_defaults import deployment_hyperparameters

        specs = [s.with_(hyperparameters=deployment_hyperparameters(s.method, s.hyperparameters)) for s in specs]
        exp_dir = Path(out) / f"{name}-robust"
    if adjust is not None:
        planned, specs = specs, adjust(list(specs))
        if [s.run_id for s in specs] != [s.run_id for s in planned]:
            exp_dir = exp_dir.with_name(f"{exp_dir.name}-custom")
    threads = run_threads(jobs)
    with results_lock(exp_dir):
        if overwrite:
            clear_directory(exp_dir)
        elif resume:
            _warn_of_other_threads(exp_dir, threads)
        t0 = time.perf_counter()
        done = execute(specs, exp_dir, resume=resume, jobs=jobs, on_done=on_done) if specs else []
        analyse_for(name, exp_dir, done, budget=b).write(exp_dir)
        config = {
            "experiment": name, "robust_defaults": robust_defaults, "profile": profile, "data_root": data_root,
            "seeds": list(seeds), "threads": threads,
            "n_runs": len(specs), "seconds": time.perf_counter() - t0, "runs": distinct_runs(specs),
            "versions": versions(),
        }
        if budget is not None:
            config["budget"] = repr(budget)
        if overrides:
            config["overrides"] = dict(overrides)
        write_json_atomic(exp_dir / "config.json", config)
    return exp_dir


def _warn_of_other_threads(exp_dir: Path, threads: int) -> None:
    """Warn when the runs being resumed in ``exp_dir`` were made with another compute-thread count than
    ``threads`` (its ``config.json`` says): torch's results can differ in the last bit between counts.
    """
    try:
        before = json.loads((exp_dir / "config.json").read_text()).get("threads")
    except (OSError, ValueError, AttributeError):
        return
    if before is not None and before != threads:
        log.warning("resuming %s with %d compute thread(s) per run; its finished runs used %s (torch's results can "
                    "differ in the last bit: pass --threads %s for identical ones)", exp_dir, threads, before, before)


def clear_directory(directory: Path) -> None:
    """Delete everything in ``directory`` but its lock file (which its holder must keep: a new lock
    file would let a second writer in).
    """
    for p in Path(directory).iterdir():
        if p.name == LOCK_NAME:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def distinct_runs(specs: Sequence[Job]) -> list[dict[str, Any]]:
    """The runs of a plan less their seed, each once, in plan order (what the report lists as settings)."""
    seen: dict[str, dict[str, Any]] = {}
    for spec in specs:
        d = {k: v for k, v in spec.spec_dict().items() if k != "seed"}
        seen.setdefault(json.dumps(d, sort_keys=True, default=str), d)
    return list(seen.values())


def total_runs(names: Sequence[str], seeds: Sequence[int], profile: str = "full", data_root: str | None = None) -> int:
    """Number of runs the experiments ``names`` plan for ``seeds``."""
    return sum(len(plan_for(n, seeds, profile, data_root)) for n in names)
