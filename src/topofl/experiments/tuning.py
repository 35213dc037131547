"""Equal-budget hyper-parameter tuning on validation splits, then the tuned comparison on the test splits.

Each setting (a run less its seed) gets one study of ``trials`` trials: trial 0 its defaults, then Optuna's TPE
proposals (:func:`propose`) over the method's declared search space, scored on validation splits carved from
the training data (never the test split); the best trial is re-run on the test splits beside the defaults
(tuned − default, paired over seeds, Holm-adjusted). Deterministic and resumable (:mod:`topofl.experiments.runs`).
See docs/internals.md#topofl.experiments.tuning for the protocol.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from topofl._validation import check_int, check_range
from topofl.config import Space
from topofl.experiments.analysis import add_holm, num, paired_differences
from topofl.experiments.pool import stop_workers, worker_pool
from topofl.experiments.results import write_csv
from topofl.experiments.store import holds_results, results_lock, run_paths, verified_done
from topofl.job import Job
from topofl.limits import MAX_JOBS

log = logging.getLogger(__name__)

#: metrics a trial may be scored by, and whether higher is better
METRICS = {"auc": True, "accuracy": True, "pooled_auc": True, "r2": True, "mse": False, "rmse": False, "loss": False}
#: the default budget: trials per setting (the healthcare comparison of every server method fits 10 minutes on 2 cores)
DEFAULT_TRIALS = 30
DEFAULT_VALIDATION = 0.25


@dataclass(frozen=True)
class TuneSettings:
    """How to tune.

    Attributes
    ----------
    trials : int
        Trials per setting, the same for every method (trial 0 is the defaults).
    validation : float
        Fraction of every client's training split held out for validation, in (0, 0.5].
    metric : str
        What a trial is scored by: ``"auto"`` (AUC for a binary task run by a server-based method,
        accuracy for other classification, MSE for regression) or one of :data:`METRICS` that
        the task's runs report (:func:`allowed_metrics`).
    seeds : tuple of int, optional
        Tuning seeds. ``None`` (the default): the plan's own seeds, each trial's validation split
        carved from that seed's training split — one study per setting over all of them when
        the data are drawn afresh for every seed (synthetic scenarios), one study per setting
        *and seed* when the seeds re-split the same rows (real data: a row tested under one seed
        is a training row under another, so a choice made on another seed's split would have
        seen it; :data:`topofl.data.scenarios.DRAWN_PER_SEED` lists the sources drawn afresh).
        Given seeds are refused on data that re-split fixed rows (they would train on an
        evaluation seed's test rows).
    params : tuple of str, optional
        The hyper-parameters to tune; ``None``: every one whose space is tuned by default, less
        those that define the plan's settings (:func:`defining`). A method that lacks a named one
        tunes the rest.
    sampler_seed : int
        Seed of the TPE sampler.
    startup_trials : int
        Trials drawn at random from the space before TPE models it (0: ``min(10, trials // 3)``).
    """

    trials: int = DEFAULT_TRIALS
    validation: float = DEFAULT_VALIDATION
    metric: str = "auto"
    seeds: tuple[int, ...] | None = None
    params: tuple[str, ...] | None = None
    sampler_seed: int = 0
    startup_trials: int = 0

    def __post_init__(self) -> None:
        check_int("trials (--trials)", self.trials, 1, 10_000)
        check_range("validation (--validation-fraction)", self.validation, 0.0, 0.5, low_open=True)
        if self.metric != "auto" and self.metric not in METRICS:
            raise ValueError(f"metric (--tune-metric) must be auto or one of {', '.join(METRICS)}; got {self.metric!r}")
        if self.seeds is not None and not self.seeds:
            raise ValueError("seeds (--tune-seeds), when given, must hold at least one seed")
        if self.params is not None and not self.params:
            raise ValueError("params (--tune-params), when given, must name at least one hyper-parameter")
        check_int("sampler_seed (--sampler-seed)", self.sampler_seed, 0, 2**32 - 1)
        check_int("startup_trials", self.startup_trials, 0, 10_000)

    @property
    def n_startup(self) -> int:
        """Random trials before TPE: ``startup_trials``, or ``min(10, trials // 3)``."""
        return self.startup_trials or min(10, self.trials // 3)


def setting_of(spec: Job) -> Job:
    """A run less its seed (seed 0 stands for every seed): what one study tunes."""
    return replace(spec, seed=0)


def setting_name(spec: Job, for_seed: int | None = None) -> str:
    """A readable, file-name-safe and unique name of a run's setting (of the setting on one seed,
    with ``for_seed``); it ends with a hexadecimal hash that also seeds the study's sampler.
    """
    base = setting_of(spec)
    text = json.dumps(base.spec_dict(), sort_keys=True, default=str) + ("" if for_seed is None else f"|seed {for_seed}")
    items = "_".join(f"{k}{v}" for k, v in spec.setting.items())
    seed = "" if for_seed is None else f"_s{for_seed}"
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-",
                  f"{spec.key['scenario']}_{spec.label or spec.method}_{items}{seed}").strip("-_")
    return f"{slug}_{hashlib.sha1(text.encode()).hexdigest()[:8]}"


@dataclass
class Study:
    """One setting's tuning (one setting on one seed, with ``for_seed``): its runs' template, tuning
    seeds, search space, the metric it is scored by and its trial history.
    """

    name: str
    base: Job
    seeds: tuple[int, ...]
    space: dict[str, Space]
    defaults: dict[str, Any]
    metric: str = "auc"
    for_seed: int | None = None
    trials: list[dict[str, Any]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.base.label or self.base.method

    @property
    def maximise(self) -> bool:
        return METRICS[self.metric]


def defining(specs: Sequence[Job]) -> dict[str, set[str]]:
    """Per setting (:func:`setting_name`), the hyper-parameters that define it, which are never tuned
    unless named: one the experiment names as a setting column (a λ grid), and one the setting
    sets to another value than most settings of its method do (an ablation's variant, one row's
    own step size). When a method's settings split evenly, the value most settings of the whole
    plan use decides (the experiment's common step size); when that ties too, the parameter
    defines every one of them. A value most settings share (the paper's λ, a CNN's step size) is
    a default like the config's, tuned from there. The answer does not depend on the plan's order.
    """
    settings: dict[str, Job] = {}
    for spec in specs:
        settings.setdefault(setting_name(spec), spec)
    by_method: dict[str, list[str]] = {}
    for name, spec in settings.items():
        by_method.setdefault(spec.method, []).append(name)

    def value(name: str, k: str) -> str:
        return json.dumps(settings[name].hyperparameters.get(k, "<default>"), sort_keys=True, default=str)

    def counts(names: Sequence[str], k: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in names:
            out[value(n, k)] = out.get(value(n, k), 0) + 1
        return out

    out: dict[str, set[str]] = {name: {k for k in spec.setting if k in spec.hyperparameters}
                                for name, spec in settings.items()}
    for names in by_method.values():
        for k in {k for n in names for k in settings[n].hyperparameters}:
            mine = counts(names, k)
            top = max(mine.values())
            modes = [v for v, c in mine.items() if c == top]
            if len(modes) > 1:  # an even split: the plan-wide most common of those values decides
                everyone = counts(list(settings), k)
                best = max(everyone[v] for v in modes)
                modes = [v for v in modes if everyone[v] == best]
            for n in names:
                if len(modes) > 1 or value(n, k) != modes[0]:
                    out[n].add(k)
    return out


def search_space(spec: Job, params: Sequence[str] | None,
                 fixed: set[str] | frozenset[str] = frozenset()) -> tuple[dict[str, Space], dict[str, Any]]:
    """The space a setting is tuned over and the values trial 0 takes there (the setting's own).

    Without ``params``: every hyper-parameter of the method whose space is tuned by default, less
    the ``fixed`` ones (those that define the setting, :func:`defining`). With ``params``: those
    of them the method has (a method that lacks one tunes the rest), whatever the plan sets.
    """
    import dataclasses

    from topofl.methods import get

    config = get(spec.method).config
    if params is None:
        space = {k: v for k, v in config.search_space().items() if k not in fixed}
    else:
        known = {f.name for f in dataclasses.fields(config)}
        space = config.search_space([p for p in params if p in known])
    built = config.from_dict(dict(spec.hyperparameters))
    return space, {k: getattr(built, k) for k in space}


def allowed_metrics(peer: bool, task: str) -> tuple[str, ...]:
    """The final metrics the runs of a family report for a task (what a trial may be scored by)."""
    if task == "regression":
        return ("mse", "rmse", "r2", "loss")
    return ("accuracy", "loss") if peer else ("auc", "accuracy", "pooled_auc", "loss")


def auto_metric(peer: bool, task: str) -> str:
    """``metric="auto"``: AUC for a binary task of a server-based method (the papers' headline
    metric there), accuracy for other classification (deep models, peer methods), MSE for regression.
    """
    if task == "regression":
        return "mse"
    return "auc" if task == "binary" and not peer else "accuracy"


@dataclass(frozen=True)
class DataFacts:
    """What a data source is, for tuning: its task, whether peer methods run it, and whether it is
    drawn afresh for every seed (no row shared between seeds) or re-splits fixed rows.
    """

    task: str
    peer: bool
    fresh: bool


def data_facts(spec: Job, seeds: Sequence[int], validation: float) -> DataFacts:
    """Build ``spec``'s data on every seed of ``seeds`` and carve its validation split there, before
    any trial: data that cannot be split (a client with too few rows, a federation that drifts)
    stop the tuning at once with the reason. Returns the task and whether the data are drawn
    afresh for every seed (:attr:`topofl.data.sources.DataSource.drawn_per_seed`).
    """
    from topofl.methods import family

    peer = family(spec.method) == "peer"
    task = "binary"
    for seed in dict.fromkeys(seeds):
        try:
            from topofl.api import load_job_data

            task = load_job_data(spec.with_(seed=seed, validation=validation)).task
        except ValueError as exc:
            raise ValueError(f"cannot tune on {spec.data!r} (seed {seed}): {exc}") from None
    from topofl.data.sources import SOURCES

    return DataFacts(task, peer, isinstance(spec.data, str) and SOURCES[spec.data].drawn_per_seed)


def plan_studies(specs: Sequence[Job], settings: TuneSettings) -> list[Study]:
    """The studies of a plan (in plan order): one per setting, or one per setting and seed where the
    seeds re-split the same rows (see :class:`TuneSettings`), each with its tuning seeds, space and
    metric. ``ValueError`` when a named parameter is tunable in none of the methods, the metric is
    not one the runs report, the data cannot be split for validation, or given tuning seeds would
    train on an evaluation seed's test rows.
    """
    from topofl.methods import family

    fixed = defining(specs)
    eval_seeds: dict[str, list[int]] = {}
    for spec in specs:
        eval_seeds.setdefault(setting_name(spec), []).append(spec.seed)
    facts: dict[str, DataFacts] = {}
    facts_seeds: dict[str, set[int]] = {}
    studies: list[Study] = []
    seen: set[str] = set()
    for spec in specs:
        name = setting_name(spec)
        if name in seen:
            continue
        seen.add(name)
        data_key = json.dumps([spec.data, dict(spec.data_params), family(spec.method)], sort_keys=True, default=str)
        wanted = sorted({*eval_seeds[name], *(settings.seeds or ())})
        checked = facts_seeds.setdefault(data_key, set())
        if data_key not in facts or not set(wanted) <= checked:
            facts[data_key] = data_facts(spec, [w for w in wanted if w not in checked], settings.validation)
            checked.update(wanted)
        have = facts[data_key]
        metric = _study_metric(spec, settings.metric, have)
        space, defaults = search_space(spec, settings.params, fixed[name])
        studies += _setting_studies(spec, name, settings.seeds, eval_seeds[name], have.fresh, space, defaults, metric)
    if settings.params is not None:
        tuned = {p for s in studies for p in s.space}
        missing = [p for p in settings.params if p not in tuned]
        if missing:
            raise ValueError(f"no method of the plan has a search space for {', '.join(missing)}; see `topofl methods`")
    return studies


def _study_metric(spec: Job, metric: str, have: DataFacts) -> str:
    """The metric a setting's study is scored by (``metric``, or the task's for ``"auto"``); ``ValueError``
    when its runs do not report it.
    """
    metric = auto_metric(have.peer, have.task) if metric == "auto" else metric
    if metric not in allowed_metrics(have.peer, have.task):
        kind = "peer-to-peer" if have.peer else "server-based"
        raise ValueError(f"metric (--tune-metric) {metric!r} is not reported by {kind} runs of a {have.task} task "
                         f"on {spec.data!r}; choose one of {', '.join(allowed_metrics(have.peer, have.task))}")
    return metric


def _setting_studies(spec: Job, name: str, seeds: tuple[int, ...] | None, eval_seeds: Sequence[int], fresh: bool,
                     space: dict[str, Space], defaults: dict[str, Any], metric: str) -> list[Study]:
    """The studies of one setting: one over the given tuning ``seeds``, one per evaluation seed on data
    that re-split fixed rows, else one over the evaluation seeds (see :class:`TuneSettings`).
    """
    if seeds is not None:
        one_seed = set(seeds) == set(eval_seeds) and len(set(seeds)) == 1
        if not fresh and not one_seed:
            raise ValueError(f"{spec.data!r} re-splits one set of rows by seed, so tuning seeds {list(seeds)} would "
                             f"train on test rows of the evaluation seeds {sorted(set(eval_seeds))}: leave out "
                             "--tune-seeds to tune every seed on its own training split")
        return [Study(name, setting_of(spec), tuple(seeds), space, defaults, metric)]
    if not fresh:
        return [Study(setting_name(spec, s), setting_of(spec), (s,), space, defaults, metric, for_seed=s)
                for s in eval_seeds]
    return [Study(name, setting_of(spec), tuple(eval_seeds), space, defaults, metric)]


def import_optuna() -> Any:
    """The ``optuna`` module, or an ``ImportError`` saying how to install it."""
    try:
        import optuna
    except ImportError:
        raise ImportError("tuning needs Optuna: pip install 'topofl[tune]'") from None
    return optuna


def _distributions(space: Mapping[str, Space]) -> dict[str, Any]:
    optuna = import_optuna()

    out: dict[str, Any] = {}
    for k, s in space.items():
        if s.kind == "choice":
            out[k] = optuna.distributions.CategoricalDistribution(list(s.choices))
        elif s.kind == "int":
            out[k] = optuna.distributions.IntDistribution(int(s.low), int(s.high), log=s.log)
        else:
            out[k] = optuna.distributions.FloatDistribution(s.low, s.high, log=s.log)
    return out


def propose(study: Study, trial: int, settings: TuneSettings) -> dict[str, Any]:
    """The values trial ``trial`` of ``study`` runs: the defaults for trial 0, else TPE's proposal
    (Bergstra et al. 2011; Optuna's ``TPESampler``, Akiba et al. 2019) from the finished trials
    0..trial−1 by a sampler seeded from (sampler seed, setting, trial) — the same proposal whether or
    not the tuning was interrupted in between.
    """
    if trial == 0 or not study.space:
        return dict(study.defaults)
    optuna = import_optuna()

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists = _distributions(study.space)
    seed = int(np.random.SeedSequence([settings.sampler_seed, int(study.name.rsplit("_", 1)[-1], 16),
                                       trial]).generate_state(1)[0])
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=settings.n_startup)
    opt = optuna.create_study(direction="maximize" if study.maximise else "minimize", sampler=sampler)
    for t in study.trials[:trial]:
        params = {k: t["params"][k] for k in dists}
        if not all(study.space[k].contains(v) for k, v in params.items()):
            continue  # a pinned default outside the declared range: run, but not a point TPE can model
        value = t["value"]
        state = optuna.trial.TrialState.COMPLETE if value is not None else optuna.trial.TrialState.FAIL
        opt.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=value, state=state))
    return dict(opt.ask(dists).params)


def trial_value(metric: str, finals: Sequence[Mapping[str, Any]]) -> float | None:
    """Mean over the tuning seeds of the final ``metric`` (NaN seeds left out); ``None`` when no seed has one."""
    vals = np.array([num(f.get(metric)) for f in finals], dtype=float)
    vals = vals[np.isfinite(vals)]
    return float(vals.mean()) if vals.size else None


def best_trial(trials: Sequence[Mapping[str, Any]], maximise: bool) -> dict[str, Any]:
    """The trial with the best value (the earliest among equals, so the defaults win ties); the
    defaults (trial 0) when every trial failed.
    """
    ok = [t for t in trials if t["value"] is not None]
    if not ok:
        return dict(trials[0])
    sign = -1.0 if maximise else 1.0
    return dict(min(ok, key=lambda t: (sign * t["value"], t["trial"])))


def _run_quietly(spec: Job, run_dir: str) -> dict[str, Any]:
    """Execute one tuning run, in a worker process or in this process (``jobs=1``) alike with the compute
    threads of :func:`topofl.threads.limited_threads` (a worker's :func:`topofl.threads.run_threads` of the
    pool, else this process's number), as the experiment runner does — without its training warnings and
    the round loop's warnings about the clients it refuses: a trial far out in the space (a step
    size of 1) is expected to diverge, and its score (a failed trial) says so.
    """
    import warnings

    from topofl._validation import TrainingWarning
    from topofl.experiments.runs import _worker

    loud = logging.getLogger("topofl")
    level = loud.level
    loud.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TrainingWarning)
            warnings.simplefilter("ignore", RuntimeWarning)  # numpy's overflow of a diverging trial
            return _worker(spec, run_dir)
    finally:
        loud.setLevel(level)


class _Inline:
    """An executor that runs each submitted call at once (``jobs=1``), with the pool's interface."""

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(*args))
        except Exception as exc:  # noqa: BLE001 - a failed trial run is recorded, never fatal
            fut.set_exception(exc)
        return fut

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        return None


@dataclass
class _Open:
    """A study's trial in flight: its values, its runs, and the results received so far."""

    trial: int
    params: dict[str, Any]
    specs: list[Job]
    results: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def trial_specs(study: Study, params: Mapping[str, Any], validation: float) -> list[Job]:
    """The runs of one trial: the setting with ``params`` on every tuning seed, scored on validation."""
    hyper = {**study.base.hyperparameters, **params}
    return [replace(study.base, seed=s, hyperparameters=hyper, validation=validation) for s in study.seeds]


def _trial_runs(study: Study, t: int, params: Mapping[str, Any], validation: float) -> _Open:
    """Trial ``t`` of ``study`` with its runs; a trial whose values the method's config refuses has none
    and fails with the reason, as each of its runs would have.
    """
    try:
        return _Open(t, dict(params), trial_specs(study, params, validation))
    except ValueError as exc:
        return _Open(t, dict(params), [], errors=[str(exc).splitlines()[0] if str(exc) else "ValueError"])


def run_studies(
    studies: Sequence[Study],
    settings: TuneSettings,
    run_dir: Path,
    *,
    jobs: int = 1,
    on_run: Callable[[Study, int], None] | None = None,
    on_trial: Callable[[Study, dict[str, Any]], None] | None = None,
) -> None:
    """Run every study's trials (filling ``study.trials``), reusing verified finished runs in ``run_dir``.

    Studies advance concurrently; the runs of their current trials share a pool of ``jobs``
    processes. ``on_run(study, trial)`` is called as each run finishes (reused ones included),
    ``on_trial(study, record)`` as each trial finishes.
    """
    check_int("jobs", jobs, 1, MAX_JOBS)
    run_dir.mkdir(parents=True, exist_ok=True)
    pool: Any = worker_pool(jobs) if jobs > 1 else _Inline()   # workers: SIGINT ignored, stopped at once below
    inflight: dict[Future, tuple[Study, Job]] = {}
    current: dict[str, _Open] = {}

    def finish(study: Study, open_: _Open) -> None:
        finals = [r["final"] for r in open_.results.values() if r is not None]
        metric = study.metric
        value = trial_value(metric, finals) if open_.specs and len(finals) == len(open_.specs) else None
        record = {"trial": open_.trial, "params": open_.params, "metric": metric, "value": value,
                  "n_seeds": len(finals),
                  "seconds": float(sum(r["seconds"] for r in open_.results.values() if r is not None)),
                  "state": "complete" if value is not None else "failed",
                  "error": "; ".join(sorted(set(open_.errors)))[:500]}
        if value is None and not open_.errors:
            record["error"] = f"no finite {metric} on any tuning seed"
        study.trials.append(record)
        del current[study.name]
        if on_trial is not None:
            on_trial(study, record)
        start(study)

    def start(study: Study) -> None:
        t = len(study.trials)
        if t >= settings.trials:
            return
        params = propose(study, t, settings)
        open_ = _trial_runs(study, t, params, settings.validation)  # no runs: refused, it finishes failed below
        current[study.name] = open_
        for spec in open_.specs:
            record, problem = verified_done(run_paths(run_dir, spec))
            if problem is not None:  # torn, edited or unsealed: redone, and said so
                log.warning("trial run %s: %s; redoing the run", spec.run_id, problem)
            if record is not None:
                open_.results[spec.run_id] = record
                if on_run is not None:
                    on_run(study, t)
            else:
                inflight[pool.submit(_run_quietly, spec, str(run_dir))] = (study, spec)
        if len(open_.results) == len(open_.specs):
            finish(study, open_)

    try:
        for study in studies:
            if study.trials:  # a study handed in with trials already done continues after them
                continue
            start(study)
        while inflight:
            done_now, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
            for fut in done_now:
                study, spec = inflight.pop(fut)
                open_ = current[study.name]
                exc = fut.exception()
                if exc is not None:
                    if not isinstance(exc, (ValueError, FloatingPointError, ArithmeticError)):
                        raise exc
                    log.info("tuning %s trial %d seed %d failed: %s", study.name, open_.trial, spec.seed, exc)
                    open_.results[spec.run_id] = None
                    open_.errors.append(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                else:
                    open_.results[spec.run_id] = fut.result()
                if on_run is not None:
                    on_run(study, open_.trial)
                if len(open_.results) == len(open_.specs):
                    finish(study, open_)
    except BaseException:
        stop_workers(pool)   # Ctrl-C, SIGTERM or an error: the workers end now, finished runs stay sealed
        raise
    pool.shutdown()


def chosen(study: Study) -> dict[str, Any]:
    """The values a finished study selected (its best trial's; the defaults when it has none)."""
    return dict(best_trial(study.trials, study.maximise)["params"]) if study.trials else dict(study.defaults)


def study_of(spec: Job, studies: Sequence[Study]) -> Study:
    """The study that chose ``spec``'s values: its setting's, or its setting's on its seed."""
    by_name = {s.name: s for s in studies}
    return by_name.get(setting_name(spec, spec.seed)) or by_name[setting_name(spec)]


def tuned_plan(specs: Sequence[Job], studies: Sequence[Study]) -> list[Job]:
    """The plan with every run's hyper-parameters replaced by its study's chosen values."""
    return [replace(spec, hyperparameters={**spec.hyperparameters, **chosen(study_of(spec, studies))})
            for spec in specs]


# ------------------------------------------------------------------ tables and figure
def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def setting_keys(studies: Sequence[Study]) -> tuple[str, ...]:
    """The columns that tell the studies' settings apart in tables: the scenario when there are
    several, the experiment's own setting columns, and the seed of per-seed studies.
    """
    keys: list[str] = ["scenario"] if len({s.base.key["scenario"] for s in studies}) > 1 else []
    keys += list(dict.fromkeys(k for s in studies for k in s.base.setting))
    return tuple(keys) + (("seed",) if any(s.for_seed is not None for s in studies) else ())


def _setting_columns(study: Study, keys: Sequence[str]) -> dict[str, Any]:
    values = {"scenario": study.base.key["scenario"], "seed": study.for_seed if study.for_seed is not None else "",
              **study.base.setting}
    return {**{k: values.get(k, "") for k in keys if k != "seed"}, "method": study.label,
            **({"seed": values["seed"]} if "seed" in keys else {})}


def trial_rows(studies: Sequence[Study]) -> list[dict[str, Any]]:
    """Every trial of every study: values tried, validation score, best so far, seconds, state."""
    keys = setting_keys(studies)
    rows = []
    for s in studies:
        best: float | None = None
        for t in s.trials:
            v = t["value"]
            if v is not None and (best is None or (v > best if s.maximise else v < best)):
                best = v
            rows.append({**_setting_columns(s, keys), "trial": t["trial"],
                         "params": ", ".join(f"{k}={_fmt(x)}" for k, x in t["params"].items()),
                         "metric": t["metric"], "validation": v if v is not None else float("nan"),
                         "best_so_far": best if best is not None else float("nan"), "seconds": t["seconds"],
                         "state": t["state"], "error": t.get("error", "")})
    return rows


def summary_rows(studies: Sequence[Study]) -> list[dict[str, Any]]:
    """Per study: the space, defaults' and best validation score, the chosen values, budget used."""
    keys = setting_keys(studies)
    rows = []
    for s in studies:
        if not s.trials:
            continue
        best = best_trial(s.trials, s.maximise)
        default = s.trials[0]["value"]
        rows.append({
            **_setting_columns(s, keys), "trials": len(s.trials), "failed": sum(t["value"] is None for t in s.trials),
            "metric": s.metric, "validation_default": default if default is not None else float("nan"),
            "validation_best": best["value"] if best["value"] is not None else float("nan"),
            "best_trial": best["trial"],
            "chosen": ", ".join(f"{k}={_fmt(v)}" for k, v in best["params"].items()) or "(nothing to tune)",
            "defaults": ", ".join(f"{k}={_fmt(v)}" for k, v in s.defaults.items()),
            "space": "; ".join(f"{k}: {v.describe()}" for k, v in s.space.items()),
            "seconds_per_trial": float(np.mean([t["seconds"] for t in s.trials])), "tuning_seeds": len(s.seeds),
        })
    return rows


#: metrics where a lower value is better (a "win" is a lower value)
LOWER_IS_BETTER = frozenset(m for m, higher in METRICS.items() if not higher)


def orient_wins(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Make ``reference_wins``/``other_wins`` of :func:`~topofl.experiments.analysis.paired_differences`
    rows count seeds where each is *better*: swapped for a lower-is-better metric (MSE, loss).
    """
    for r in rows:
        if r.get("metric") in LOWER_IS_BETTER:
            r["reference_wins"], r["other_wins"] = r["other_wins"], r["reference_wins"]
    return rows


def unchanged_settings(studies: Sequence[Study], group: Sequence[str]) -> set[tuple[Any, ...]]:
    """The settings (``group`` values and method label) whose tuning kept the defaults on every seed:
    their tuned runs are the default runs, not a second configuration to test.
    """
    by: dict[tuple[Any, ...], list[bool]] = {}
    for s in studies:
        values = {"scenario": s.base.key["scenario"], **s.base.setting}
        key = (*(str(values.get(g, "")) for g in group), s.label)
        by.setdefault(key, []).append(chosen(s) == s.defaults)
    return {k for k, kept in by.items() if all(kept)}


def tuned_vs_default(default_done: Sequence[Mapping[str, Any]], tuned_done: Sequence[Mapping[str, Any]],
                     group: Sequence[str], metrics: Sequence[str],
                     unchanged: set[tuple[Any, ...]] = frozenset()) -> list[dict[str, Any]]:  # type: ignore[assignment]
    """Tuned minus default on the test splits, per setting (``group`` columns and ``method``),
    paired over seeds: mean, 95 % t-interval, seeds where tuned is better / worse (for MSE and
    loss: lower), raw p and Holm's adjustment over the settings of each group and metric. A setting
    in ``unchanged`` (its tuning kept the defaults: the same runs twice) is marked ``tuned="defaults
    kept"`` and is no test: its p is empty and it does not count in the family.
    """
    def tag(done: Sequence[Mapping[str, Any]], which: str) -> list[dict[str, Any]]:
        return [{**d, "setting_method": d["method"], "method": which} for d in done]

    rows: list[dict[str, Any]] = []
    both = tag(default_done, "default") + tag(tuned_done, "tuned")
    for metric in metrics:
        if not any(math.isfinite(num(d["final"].get(metric))) for d in both):
            continue
        for r in orient_wins(paired_differences(both, (*group, "setting_method"), "tuned", metric)):
            kept = (*(str(r[c]) for c in group), r["setting_method"]) in unchanged
            rows.append({**{c: r[c] for c in group}, "method": r["setting_method"], "metric": metric,
                         "tuned": "defaults kept" if kept else "changed", "n_seeds": r["n_seeds"],
                         "diff_mean": r["diff_mean"], "ci_low": r["ci_low"], "ci_high": r["ci_high"],
                         "tuned_wins": r["reference_wins"], "tuned_losses": r["other_wins"],
                         "p_value": float("nan") if kept else r["p_value"]})
    return add_holm(rows, (*group, "metric"))


def trials_figure(studies: Sequence[Study], out: Path, stem: str = "tuning") -> dict[str, str] | None:
    """Validation score of every trial (dots) and the best so far (steps), one line per method, one
    panel per setting group (the setting columns other than the method). Per-seed studies are drawn
    as the mean over their seeds of the best so far.
    """
    from topofl.experiments.figures import colour, pyplot, save

    keys = [k for k in setting_keys(studies) if k != "seed"]
    groups: dict[str, dict[str, list[Study]]] = {}
    for s in studies:
        if s.trials:
            values = {"scenario": s.base.key["scenario"], **s.base.setting}
            title = ", ".join(f"{k}={values.get(k, '')}" for k in keys) or "every method"
            groups.setdefault(title, {}).setdefault(s.label, []).append(s)
    if not groups:
        return None
    plt = pyplot()
    panels = list(groups.items())[:6]
    fig, axes = plt.subplots(1, len(panels), figsize=(min(4.2 * len(panels), 14), 3.6), squeeze=False)
    for ax, (title, by_label) in zip(axes[0], panels, strict=True):
        for i, (label, members) in enumerate(by_label.items()):
            curves = []
            for s in members:
                y = np.array([t["value"] if t["value"] is not None else np.nan for t in s.trials], dtype=float)
                if len(members) == 1:
                    ok = np.isfinite(y)
                    ax.scatter(np.flatnonzero(ok), y[ok], s=8, alpha=0.35, color=colour(label, i))
                filled = np.where(np.isfinite(y), y, -np.inf if s.maximise else np.inf)
                curves.append(np.maximum.accumulate(filled) if s.maximise else np.minimum.accumulate(filled))
            best = np.mean(np.vstack(curves), axis=0)
            ok = np.isfinite(best)
            if ok.any():
                ax.step(np.flatnonzero(ok), best[ok], where="post", color=colour(label, i), label=label)
        ax.set_title(title if len(next(iter(by_label.values()))) == 1 else f"{title} (mean over seeds)", fontsize=9)
        ax.set_xlabel("trial")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylabel(f"validation {next(iter(by_label.values()))[0].metric}")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return save(fig, out, stem)


def write_tuning(out: Path, studies: Sequence[Study]) -> None:
    """``trials.csv`` and ``tuning_summary.csv`` (atomically): what the tuning tried and chose so far."""
    write_csv(out / "trials.csv", trial_rows(studies))
    write_csv(out / "tuning_summary.csv", summary_rows(studies))


def elapsed(t0: float) -> float:
    """Seconds since ``t0`` (``time.perf_counter``)."""
    return time.perf_counter() - t0


# ------------------------------------------------------------------ the two entry points
def _metrics_of(done: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The final metrics to compare: AUC and accuracy (where reported) for classification, MSE for regression."""
    finals = [d["final"] for d in done]
    if any(math.isfinite(num(f.get("mse"))) for f in finals):
        return ("mse",)
    return tuple(m for m in ("auc", "accuracy") if any(math.isfinite(num(f.get(m))) for f in finals))


def guard_settings(path: Path, settings: TuneSettings, specs: Sequence[Job]) -> None:
    """Record the tuning's settings and plan in ``path`` — or, when a resumed tuning finds them
    there, refuse different ones (``ValueError`` naming what differs): a directory holds one tuning.
    """
    from topofl.experiments.results import write_json_atomic

    record = {"settings": json.loads(json.dumps(asdict(settings), default=list)),
              "plan": hashlib.sha1(json.dumps([s.spec_dict() for s in specs], sort_keys=True,
                                              default=str).encode()).hexdigest()}
    if path.is_file():
        try:
            old = json.loads(path.read_text())
        except ValueError:
            old = {}
        if old != record:
            was, now = old.get("settings", {}), record["settings"]
            diff = [f"{k}={was.get(k)!r} (now {v!r})" for k, v in now.items() if was.get(k) != v]
            if old.get("plan") != record["plan"]:
                diff.append("the methods, seeds, rounds or data")
            raise ValueError(f"{path.parent.parent} holds a tuning with other settings: "
                             f"{'; '.join(diff) or 'unreadable record'}; "
                             "use another --out, or --overwrite to start again")
        return
    write_json_atomic(path, record)


def doomed(studies: Sequence[Study]) -> list[Study]:
    """The studies every trial of which failed (their "choice" is the defaults, untested)."""
    return [s for s in studies if s.trials and all(t["value"] is None for t in s.trials)]


def _tuning_section(man: Any, out: Path, studies: Sequence[Study], settings: TuneSettings,
                    default_done: Sequence[Mapping[str, Any]], tuned_done: Sequence[Mapping[str, Any]],
                    seconds: float) -> None:
    """Append the tuning's tables, figure and notes to ``man`` (a :class:`~topofl.experiments.base.Manifest`)."""
    write_tuning(out, studies)
    keys = setting_keys(studies)
    group = tuple(k for k in keys if k != "seed")
    per_seed = "seed" in keys
    _tuning_summary_table(man, out, studies, settings, keys, per_seed)
    paired = tuned_vs_default(default_done, tuned_done, group, _metrics_of(tuned_done),
                              unchanged_settings(studies, group))
    fam = " and ".join([*group, "metric"])
    man.table(out, "tuned_vs_default", "Tuned minus default on the test splits, paired over seeds (mean, 95 % "
              "t-interval, seeds tuned is better/worse; p: paired t-test, Holm-adjusted over the settings of one "
              f"{fam} whose tuning changed something)", paired)
    fig = trials_figure(studies, out)
    if fig is not None:
        man.figure(fig, "Validation score of every trial (dots) and the best so far (steps), per method: the same "
                        "number of trials for every method, trial 0 being its defaults.")
    man.notes.append(_budget_note(studies, settings, seconds, per_seed))
    lost = doomed(studies)
    if lost:
        man.notes.append(f"WARNING: every trial failed for {len(lost)} stud{'y' if len(lost) == 1 else 'ies'} ("
                         + "; ".join(f"{s.label}: {s.trials[-1].get('error', '')}" for s in lost[:3])
                         + "): their 'tuned' runs are the defaults, untested.")
    wins = [r for r in paired if r["p_holm"] < 0.05]
    if wins:
        man.notes.append("Holm-significant tuned − default differences: " + "; ".join(
            f"{r['method']} {r['metric']} {r['diff_mean']:+.3f} ({r['ci_low']:+.3f}, {r['ci_high']:+.3f})"
            + "".join(f", {g}={r[g]}" for g in group) for r in wins) + ".")


def _tuning_summary_table(man: Any, out: Path, studies: Sequence[Study], settings: TuneSettings, keys: Sequence[str],
                          per_seed: bool) -> None:
    """The ``tuning_summary`` table of :func:`_tuning_section`: per study, what it tried and chose."""
    rows = summary_rows(studies)
    what = "per setting and seed (the seeds re-split the same rows)" if per_seed else "per setting"
    man.table(out, "tuning_summary", f"Tuning {what}: {settings.trials} trials each (trial 0 = the defaults), "
              f"scored on validation splits ({settings.validation:g} of each client's training data); the chosen "
              "values are re-run on the test splits",
              rows, show=[c for c in (*keys, "method", "trials", "failed", "metric", "validation_default",
                                      "validation_best", "best_trial", "chosen", "seconds_per_trial")
                          if not rows or c in rows[0]])


def _budget_note(studies: Sequence[Study], settings: TuneSettings, seconds: float, per_seed: bool) -> str:
    """The note of :func:`_tuning_section` on the tuning's budget, sampler, cost and splits."""
    n_trials = sum(len(s.trials) for s in studies)
    per = float(np.mean([t["seconds"] for s in studies for t in s.trials])) if n_trials else float("nan")
    return (f"Equal-budget tuning: {len(studies)} stud{'y' if len(studies) == 1 else 'ies'} × {settings.trials} trials "
            f"({n_trials} trials, {sum(t['n_seeds'] for s in studies for t in s.trials)} runs), TPE (Optuna) after "
            f"{settings.n_startup} random trials, sampler seed {settings.sampler_seed}; a trial costs {per:.2f} s of "
            f"run time on average; the whole tuning and both comparisons took {seconds:.0f} s. Selection used "
            "validation splits only"
            + (", each seed's own (its seeds re-split one set of rows, so one choice for all seeds would have seen "
               "test rows)" if per_seed else "") + "; the test splits were read only by the final runs.")


def tune_comparison(
    specs: Sequence[Job],
    out: Path,
    settings: TuneSettings,
    *,
    reference: str,
    resume: bool = False,
    jobs: int = 1,
    on_run: Callable[[str], None] | None = None,
) -> Path:
    """``topofl tune``: tune every method of a comparison plan, then run the defaults and the tuned
    values on the test splits and write the tables (``out/manifest.json``, CSV files, figure).

    ``out/tuning/runs`` holds the trial runs, ``out/default`` and ``out/tuned`` the two
    comparisons. ``reference`` is the method every other one is compared with. ``out`` is locked
    throughout (:func:`~topofl.experiments.store.results_lock`): a second process tuning into it
    is refused with a ``ValueError`` naming it.
    """
    out = Path(out)
    with results_lock(out):  # the whole tuning: its trial runs, both comparisons, the tables
        return _tune_comparison(specs, out, settings, reference, resume, jobs, on_run)


def _tune_comparison(specs: Sequence[Job], out: Path, settings: TuneSettings, reference: str, resume: bool, jobs: int,
                     on_run: Callable[[str], None] | None) -> Path:
    """:func:`tune_comparison`, with ``out`` locked."""
    from topofl.experiments.base import Manifest
    from topofl.experiments.results import write_json_atomic
    from topofl.experiments.runs import execute

    t0 = time.perf_counter()
    if not resume and holds_results(out):
        raise ValueError(f"{out} already holds results; pass --resume to continue them or --overwrite to start again")
    if reference not in {s.label or s.method for s in specs}:
        raise ValueError(f"reference {reference!r} is not one of the methods compared")
    studies = plan_studies(specs, settings)
    guard_settings(out / "tuning" / "settings.json", settings, specs)
    run_studies(studies, settings, out / "tuning" / "runs", jobs=jobs,
                on_run=(lambda s, t: on_run(f"tuning {s.label} trial {t}")) if on_run else None,
                on_trial=lambda s, r: write_tuning(out, studies))
    report = (lambda spec, d: on_run(f"{spec.label or spec.method} seed {spec.seed}")) if on_run else None
    default_done = execute(specs, out / "default", resume=True, jobs=jobs, on_done=report)
    tuned_done = execute(tuned_plan(specs, studies), out / "tuned", resume=True, jobs=jobs, on_done=report)
    scenario = specs[0].key["scenario"]
    man = Manifest("tune", f"Tuned comparison on {scenario}",
                   f"Every method tuned with the same budget on validation splits carved from the clients' training "
                   f"data, then run on the test splits over {len({s.seed for s in specs})} seeds with its defaults and "
                   "with its tuned values.")
    both = [{**d, "tuning": "default"} for d in default_done] + [{**d, "tuning": "tuned"} for d in tuned_done]
    paired = _comparison_tables(man, out, both, reference)
    _tuning_section(man, out, studies, settings, default_done, tuned_done, elapsed(t0))
    for tuning in ("default", "tuned"):
        sig = [r for r in paired if r["tuning"] == tuning and r["p_holm"] < 0.05]
        man.notes.append(f"{tuning}: {reference} − method, Holm-significant: " + (
            "; ".join(f"{r['method']} {r['metric']} {r['diff_mean']:+.3f} ({r['ci_low']:+.3f}, {r['ci_high']:+.3f}), "
                      f"p_Holm {r['p_holm']:.3f}" for r in sig) if sig else "none") + ".")
    man.write(out)
    write_json_atomic(out / "config.json", _tune_config(specs, studies, settings, reference, t0))
    return out


def _comparison_tables(man: Any, out: Path, both: Sequence[Mapping[str, Any]], reference: str) -> list[dict[str, Any]]:
    """The ``summary`` and ``paired`` tables of a tuned comparison (``both``: the default and the tuned
    runs' done-records, tagged with their ``tuning``); returns the paired rows.
    """
    from topofl.experiments.analysis import final_table

    metrics = _metrics_of(both)
    man.table(out, "summary", "Final test scores per method, defaults and tuned (mean ± std over seeds)",
              final_table(both, ("tuning", "method"), metrics=metrics + (("pooled_auc",) if "auc" in metrics else ())))
    paired = orient_wins([r for m in metrics for r in paired_differences(both, ("tuning",), reference, m)])
    man.table(out, "paired", f"{reference} minus each method, defaults and tuned, paired over seeds (95 % t-interval, "
              f"seeds {reference} is better/worse; p: paired t-test, Holm-adjusted over the comparisons of one tuning "
              "and metric)", paired)
    return paired


def _tune_config(specs: Sequence[Job], studies: Sequence[Study], settings: TuneSettings, reference: str,
                 t0: float) -> dict[str, Any]:
    """The ``config.json`` of a tuned comparison begun at ``t0`` (``time.perf_counter``)."""
    from topofl.experiments.compare import versions

    return {
        "experiment": "tune", "seeds": sorted({s.seed for s in specs}),
        "n_runs": 2 * len(specs) + sum(t["n_seeds"] for s in studies for t in s.trials),
        "seconds": elapsed(t0), "tuning": asdict(settings), "reference": reference,
        "runs": [json.loads(json.dumps({k: v for k, v in s.spec_dict().items() if k != "seed"}, default=str))
                 for s in specs if s.seed == specs[0].seed],
        "versions": versions(),
    }


def run_tuned_experiment(
    name: str,
    seeds: Sequence[int],
    out: Path,
    settings: TuneSettings,
    *,
    resume: bool = False,
    jobs: int = 1,
    profile: str = "full",
    data_root: str | None = None,
    on_run: Callable[[str], None] | None = None,
) -> Path:
    """``topofl experiment NAME --tuned``: the experiment with its defaults (``out/NAME``, reused
    when complete) and tuned (``out/NAME-tuned``: every setting tuned on validation with the same
    budget, then the experiment's own analysis of the tuned runs, plus the tuning's tables and
    tuned − default paired differences). Returns the tuned directory. Both directories are locked
    throughout (:func:`~topofl.experiments.store.results_lock`).
    """
    from topofl.experiments.driver import EXPERIMENTS

    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}")
    if not EXPERIMENTS[name].tunable:
        tunable = [n for n, e in EXPERIMENTS.items() if e.tunable]
        raise ValueError(f"experiment {name!r} cannot be tuned (--tuned); tunable: {', '.join(tunable)}")
    # both directories, throughout: the tuned analysis reads the defaults' runs
    with results_lock(Path(out) / name), results_lock(Path(out) / f"{name}-tuned"):
        return _run_tuned_experiment(name, seeds, Path(out), settings, resume, jobs, profile, data_root, on_run)


def _run_tuned_experiment(name: str, seeds: Sequence[int], out: Path, settings: TuneSettings, resume: bool, jobs: int,
                          profile: str, data_root: str | None, on_run: Callable[[str], None] | None) -> Path:
    """:func:`run_tuned_experiment`, with ``out/NAME`` and ``out/NAME-tuned`` locked."""
    from topofl.experiments.compare import versions
    from topofl.experiments.driver import distinct_runs, plan_for, run_experiment
    from topofl.experiments.results import write_json_atomic
    from topofl.experiments.runs import execute

    t0 = time.perf_counter()
    specs = plan_for(name, seeds, profile, data_root)
    tuned_dir = out / f"{name}-tuned"
    if not resume and holds_results(tuned_dir):
        raise ValueError(f"{tuned_dir} already holds results; "
                         "pass --resume to continue them or --overwrite to start again")
    report = (lambda spec, d: on_run(f"{name}: {spec.label or spec.method} seed {spec.seed}")) if on_run else None
    # the defaults are the untuned experiment, run by the same deterministic executor: its verified runs are reused
    default_dir = run_experiment(name, seeds, out, resume=True, jobs=jobs, on_done=report, profile=profile,
                                 data_root=data_root)
    default_done = [json.loads((default_dir / "runs" / f"{s.run_id}.done.json").read_text()) for s in specs]
    studies = plan_studies(specs, settings)
    guard_settings(tuned_dir / "tuning" / "settings.json", settings, specs)
    run_studies(studies, settings, tuned_dir / "tuning" / "runs", jobs=jobs,
                on_run=(lambda s, t: on_run(f"{name} tuning: {s.label} trial {t}")) if on_run else None,
                on_trial=lambda s, r: write_tuning(tuned_dir, studies))
    tuned_specs = tuned_plan(specs, studies)
    tuned_done = execute(tuned_specs, tuned_dir, resume=True, jobs=jobs, on_done=report)
    from topofl.experiments.driver import analyse_for

    man = analyse_for(name, tuned_dir, tuned_done, profile)
    man.name, man.title = f"{name}-tuned", f"{man.title} — tuned"
    man.description = (f"The experiment '{name}' with every setting tuned on validation splits ({settings.trials} "
                       f"trials each), then re-run on the test splits. {man.description}")
    _tuning_section(man, tuned_dir, studies, settings, default_done, tuned_done, elapsed(t0))
    man.write(tuned_dir)
    write_json_atomic(tuned_dir / "config.json", {
        "experiment": f"{name}-tuned", "profile": profile, "data_root": data_root, "seeds": list(seeds),
        "n_runs": len(specs) + sum(t["n_seeds"] for s in studies for t in s.trials), "seconds": elapsed(t0),
        "tuning": asdict(settings), "runs": distinct_runs(tuned_specs), "versions": versions(),
    })
    return tuned_dir


def total_runs(specs: Sequence[Job], settings: TuneSettings, final_passes: int = 2) -> int:
    """How many runs a tuned comparison of ``specs`` executes: every trial's seeds plus the final passes."""
    studies = plan_studies(specs, settings)
    return sum(settings.trials * len(s.seeds) for s in studies) + final_passes * len(specs)
