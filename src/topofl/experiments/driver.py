"""Run an experiment end to end: plan → execute (resumable, parallel) → analyse → manifest, with the
experiment's directory locked throughout (:func:`~topofl.experiments.store.results_lock`).
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from topofl.atomic import LOCK_NAME
from topofl.experiments.compare import versions
from topofl.experiments.results import write_json_atomic
from topofl.experiments.runs import RunSpec, execute
from topofl.experiments.store import results_lock
from topofl.experiments.suite import EXPERIMENTS

ORDER = ("comparison", "paper-protocol", "controls", "heart-disease", "robustness", "continual", "privacy", "ablation", "ptopofl-options",
         "diagrams")
SHEAF_ORDER = ("sheaf-digits", "sheaf-school", "sheaf-centralised", "sheaf-hetero", "sheaf-topology", "sheaf-init")
GROUPS = {"all": ORDER, "sheaf-all": SHEAF_ORDER}


def experiment_names() -> list[str]:
    """Every experiment name, then the group names (``all``, ``sheaf-all``)."""
    return list(EXPERIMENTS) + list(GROUPS)


def default_seeds(name: str, profile: str = "full") -> tuple[int, ...]:
    """The default seeds of an experiment (its ``quick_seeds`` for the quick budget, when it has
    them), or of a group's first experiment; 0–9 otherwise.
    """
    first = GROUPS.get(name, (name,))[0]
    if first not in EXPERIMENTS:
        return tuple(range(10))
    exp = EXPERIMENTS[first]
    return exp.quick_seeds if profile == "quick" and exp.quick_seeds is not None else exp.default_seeds


def plan_for(name: str, seeds: Sequence[int], profile: str = "full", data_root: str | None = None) -> list[RunSpec]:
    """The runs of experiment ``name`` for ``seeds`` at a budget (``profile``); ``ValueError`` for
    an unknown name, or a budget or data root the experiment does not offer.
    """
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; available: {', '.join(experiment_names())}")
    exp = EXPERIMENTS[name]
    if profile not in exp.profiles:
        raise ValueError(f"experiment {name!r} has no {profile!r} budget (--quick/--smoke); it offers: {', '.join(exp.profiles)}")
    if len(exp.profiles) > 1:
        return exp.plan(list(seeds), profile, data_root)
    if data_root:
        raise ValueError(f"experiment {name!r} takes no --data-root")
    return exp.plan(list(seeds))


def run_experiment(
    name: str,
    seeds: Sequence[int],
    out: Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    jobs: int = 1,
    on_done: Callable[[RunSpec, dict[str, Any]], None] | None = None,
    profile: str = "full",
    data_root: str | None = None,
    robust_defaults: bool = False,
) -> Path:
    """Run experiment ``name`` into ``out/name`` and return that directory.

    With ``robust_defaults`` every run's method gets the deployments' Byzantine-robust defaults
    (:func:`topofl.deployment_defaults.deployment_hyperparameters`) wherever the plan does not
    set the field, and the experiment goes to ``out/name-robust``.

    The directory is locked from before ``overwrite`` empties it until its ``config.json`` is
    written: a second process writing it meanwhile is refused (a ``ValueError`` naming it), and
    one refused changes nothing there.
    """
    specs = plan_for(name, seeds, profile, data_root)
    exp_dir = Path(out) / name
    if robust_defaults:
        from topofl.deployment_defaults import deployment_hyperparameters

        specs = [dataclasses.replace(s, hyperparameters=deployment_hyperparameters(s.method, s.hyperparameters)) for s in specs]
        exp_dir = Path(out) / f"{name}-robust"
    with results_lock(exp_dir):
        if overwrite:
            clear_directory(exp_dir)
        t0 = time.perf_counter()
        done = execute(specs, exp_dir, resume=resume, jobs=jobs, on_done=on_done) if specs else []
        manifest = EXPERIMENTS[name].analyse(exp_dir, done)
        manifest.write(exp_dir)
        config = {
            "experiment": name, "robust_defaults": robust_defaults, "profile": profile, "data_root": data_root, "seeds": list(seeds), "n_runs": len(specs),
            "seconds": time.perf_counter() - t0,
            "runs": distinct_runs(specs),
            "versions": versions(),
        }
        write_json_atomic(exp_dir / "config.json", config)
    return exp_dir


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


def distinct_runs(specs: Sequence[RunSpec]) -> list[dict[str, Any]]:
    """The runs of a plan less their seed, each once, in plan order (what the report lists as settings)."""
    seen: dict[str, dict[str, Any]] = {}
    for spec in specs:
        d = {k: v for k, v in spec.__dict__.items() if k != "seed"}
        seen.setdefault(json.dumps(d, sort_keys=True, default=str), d)
    return list(seen.values())


def total_runs(names: Sequence[str], seeds: Sequence[int], profile: str = "full", data_root: str | None = None) -> int:
    """Number of runs the experiments ``names`` plan for ``seeds``."""
    return sum(len(plan_for(n, seeds, profile, data_root)) for n in names)
