"""The ``topofl`` command line (typer + rich). ``topofl --help`` lists the commands.

Only typer, rich and the light helpers of :mod:`topofl.cli_common` are imported here; each command
imports the methods, the scenarios and SciPy/scikit-learn when it
runs, so that ``topofl --help`` answers at once (``benchmarks/bench_import.py`` measures it;
``tests/test_import_weight.py`` keeps the heavy packages out of ``import topofl.cli``).
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from topofl import cli_common as ui
from topofl.cli_common import check_out_is_free, jobs_from_options, load_toml, parse_seeds, prepare_out, resolve
from topofl.limits import MAX_JOBS

if TYPE_CHECKING:  # the comparison and the tuner (and Optuna) load only when a command runs
    from topofl.experiments.tuning import TuneSettings

app = typer.Typer(
    help="topofl: topological federated learning (pTopoFL, baselines) on synthetic scenarios or your data.",
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        from topofl._version import __version__

        typer.echo(f"topofl {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", help="Print topofl's version and exit.",
                                       callback=_print_version, is_eager=True)) -> None:
    """topofl: topological federated learning (pTopoFL, baselines) on synthetic scenarios or your data."""


@app.command(cls=ui.WithHyperparameters,
             short_help="Compare methods over seeds on a scenario: a table of scores, results in a directory.")
@ui.friendly_errors
@ui.with_options(*ui.JOB_OPTIONS, "input_shape", "overwrite", "verbose", "threads", *ui.TRACKING_OPTIONS)
def compare(out: Optional[Path] = ui.OutOpt, **options: Any) -> None:
    """Compare methods over seeds on a scenario: a table of final AUC and accuracy (mean ± std over
    seeds; each seed's value is the mean over clients of each client's score with the model it
    would use), pooled AUC and convergence round; writes DIR/rounds.csv and DIR/summary.csv.

    With no flags: the healthcare comparison of every server-based method, seeds 0-9, 15 rounds, \
into a new results/compare-healthcare/run-NNNN/.

    Peer-to-peer methods (sheaf, dfedu, dpsgd, local-peers) run on --graph and join the same table.

    --robust-defaults runs every method with the deployments' Byzantine-robust defaults \
(what a Flower deployment applies).

    Without --out each comparison writes into a new results/compare-SCENARIO/run-NNNN/ (the directory used is \
printed). A given DIR must be new or empty: a second comparison into the same DIR needs --overwrite (or another \
--out); so does starting an interrupted one again.
    """
    o = ui.Options(**options)
    ui.setup_logging(o.verbose)
    ui.apply_threads(o.threads)
    from topofl.experiments.compare import run_compare, validate_jobs

    jobs = jobs_from_options(o, *_methods_and_seeds(o, "0-9", every_server_method=True))
    first = jobs[0]
    validate_jobs(jobs)   # before a run directory is made: a refused comparison leaves none
    ui.check_tracking(o)
    out = ui.default_out(out, Path("results") / f"compare-{first.data_name}")
    check_out_is_free(out, o.overwrite)
    out = prepare_out(out)
    n_seeds = len({j.seed for j in jobs})
    t0 = time.perf_counter()
    with ui.tracking(o, out, "compare", first.data_name) as tracker, \
            ui.progress(transient=True, terminal_only=True) as bar:
        task = bar.add_task("comparing", total=sum(j.rounds for j in jobs))

        def tick(history, summary) -> None:
            bar.update(task, advance=1, description=f"{history.method} seed {history.seed} round {summary.round}")

        rows = run_compare(jobs, out, on_round=tick)
        ui.track_results(tracker, out)
    lengths = " / ".join(f"{r} rounds" for r in dict.fromkeys(j.rounds for j in jobs))
    ui.console.print(ui.summary_table(rows, f"{first.data_name}: {n_seeds} seeds × {lengths}"))
    ui.console.print(f"[dim]{time.perf_counter() - t0:.1f} s · results in {out}/ "
                     "(rounds.csv, curves.csv, summary.csv, server_log.jsonl, config.json)[/]")


def _methods_and_seeds(o: Any, default_seeds: str, every_server_method: bool = False,
                       one: bool = False) -> tuple[dict, list[str], Any]:
    """The config file, the methods and the seeds a command's options (over its ``--config`` file) select.

    ``one``: a command that runs one method with one seed (``run``, ``flower``); a list is then an error.
    """
    from topofl.methods import available

    file = load_toml(o.config) if o.config else {}
    # a file may serve several commands: a one-run command reads method and seed first, a comparison methods and seeds
    first, second = ("method", "methods") if one else ("methods", "method")
    if o.methods is not None:
        methods = o.methods.split(",")
    elif first in file or second in file:
        value = file.get(first, file.get(second))
        methods = [value] if isinstance(value, str) else list(value or [])
    else:
        methods = available("server") if every_server_method else ["ptopofl"]
    seeds = o.seeds if o.seeds is not None else file.get("seed" if one else "seeds", default_seeds)
    if one:
        if len([m for m in methods if m.strip()]) > 1:
            source = "--methods" if o.methods is not None else f"config file {str(o.config)!r}"
            raise ValueError(f"{source} lists methods {', '.join(methods)}; this command runs one: pass --method")
        if len(parse_seeds(",".join(map(str, seeds)) if isinstance(seeds, list) else str(seeds))) > 1:
            raise ValueError(f"this command runs one seed; got seeds {seeds!r}: pass --seed")
    return file, methods, seeds


def tune_settings(o: Any, file: dict | None = None) -> TuneSettings:
    """The :class:`~topofl.experiments.tuning.TuneSettings` of the tuning flags (over a config file's
    ``[tuning]`` table).
    """
    from topofl.experiments.tuning import DEFAULT_TRIALS, DEFAULT_VALIDATION, TuneSettings

    table = dict((file or {}).get("tuning", {}))
    seeds = resolve(o.tune_seeds, table, "seeds", None)
    if isinstance(seeds, (list, tuple)):
        seeds = ",".join(map(str, seeds))
    elif isinstance(seeds, int) and not isinstance(seeds, bool):
        seeds = str(seeds)
    params = resolve(o.tune_params, table, "params", None)
    if isinstance(params, str):
        params = [p.strip() for p in params.split(",") if p.strip()]
    return TuneSettings(
        trials=resolve(o.trials, table, "trials", DEFAULT_TRIALS),
        validation=resolve(o.validation_fraction, table, "validation_fraction", DEFAULT_VALIDATION),
        metric=resolve(o.tune_metric, table, "metric", "auto"),
        seeds=tuple(parse_seeds(seeds)) if seeds is not None else None,
        params=tuple(params) if params is not None else None,
        sampler_seed=resolve(o.sampler_seed, table, "sampler_seed", 0),
    )


@app.command(cls=ui.WithHyperparameters,
             short_help="Tune every method with the same budget on validation splits, then compare tuned and "
             "default.")
@ui.friendly_errors
@ui.with_options("methods", "seeds", *ui.DATA_OPTIONS, *ui.TUNING_OPTIONS, "verbose", "threads",
                 *ui.TRACKING_OPTIONS)
def tune(
    reference: Optional[str] = ui.ReferenceOpt,
    out: Optional[Path] = ui.TuneOutOpt,
    jobs: int = typer.Option(min(2, os.cpu_count() or 1), "--jobs", "-j",
                             help="Runs executed in parallel (processes)."),
    resume: bool = typer.Option(False, "--resume",
                                help="Continue an interrupted tuning (in --out, else the latest run directory): "
                                "finished runs are reused, the trials come out the same."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete the results in --out first and start again."),
    **options: Any,
) -> None:
    """Tune every method with the same number of trials (Optuna's TPE; trial 0 = the method's defaults)
    on validation splits carved from each client's training data, never the test data; then run
    every method with its defaults and with its chosen values on the test splits over the seeds.

    Writes DIR/tuning_summary.csv (chosen values, validation scores, seconds per trial), DIR/trials.csv,
    DIR/summary.csv, DIR/paired.csv (reference − each method, defaults and tuned, raw and
    Holm-adjusted p), DIR/tuned_vs_default.csv, a figure of the trials and DIR/report.html.
    -p sets where a hyper-parameter's search starts (trial 0's value); --tune-params names exactly what to tune.
    """
    o = ui.Options(**options)
    ui.setup_logging(o.verbose)
    from topofl._validation import check_int
    from topofl.experiments.compare import validate_jobs
    from topofl.experiments.driver import clear_directory
    from topofl.experiments.report import build_report
    from topofl.experiments.store import results_lock
    from topofl.experiments.tuning import total_runs, tune_comparison
    from topofl.methods import family

    check_int("--jobs", jobs, 1, MAX_JOBS)
    ui.check_resume_overwrite(resume, overwrite)
    ui.apply_threads(o.threads, jobs)
    file, method_list, seeds = _methods_and_seeds(o, "0-9", every_server_method=True)
    specs = [j.with_(experiment="tune") for j in jobs_from_options(o, file, method_list, seeds)]
    if specs[0].client_fraction != 1.0:
        raise ValueError("topofl tune runs every client every round; the config file sets "
                         f"client_fraction={specs[0].client_fraction}")
    chosen = list(dict.fromkeys(j.method for j in specs))
    peers = [m for m in chosen if family(m) == "peer"]
    if peers:
        raise ValueError(f"topofl tune compares server-based methods on a scenario; {', '.join(peers)} "
                         "is peer-to-peer: tune it through its experiment, e.g. topofl experiment sheaf-digits --tuned")
    validate_jobs(specs)
    settings = tune_settings(o, file)
    ui.check_tracking(o)
    ref = reference or ("ptopofl" if "ptopofl" in chosen else chosen[0])
    out = prepare_out(ui.default_out(out, Path("results") / f"tune-{specs[0].data_name}", resume))
    t0 = time.perf_counter()
    with results_lock(out):  # held from the clearing on: a second writer is refused before anything is deleted
        if overwrite:
            clear_directory(out)
        with ui.tracking(o, out, "tune", specs[0].data_name) as tracker, ui.progress(terminal_only=True) as bar, \
                ui.on_interrupt(_resume_hint(out)):
            task = bar.add_task("tuning", total=total_runs(specs, settings))
            tune_comparison(specs, out, settings, reference=ref, resume=resume, jobs=jobs,
                            on_run=lambda what: bar.update(task, advance=1, description=what))
            report_path = build_report(out)   # inside the tracked job, which logs it
            for directory, under in ((out / "default", "default"), (out / "tuned", "tuned"), (out, "")):
                ui.track_results(tracker, directory, under)
    ui.print_tuning(out)
    ui.console.print(f"report: {report_path}")
    ui.console.print(f"[dim]{time.perf_counter() - t0:.1f} s · results in {out}/[/]")


@app.command(cls=ui.WithHyperparameters, short_help="Run one method with one seed and print its per-round metrics.")
@ui.friendly_errors
@ui.with_options(*ui.JOB_OPTIONS, "input_shape", "overwrite", "verbose", "threads", *ui.TRACKING_OPTIONS)
def run(out: Optional[Path] = ui.OutOpt, save_models: Optional[Path] = ui.SaveModelsOpt, **options: Any) -> None:
    """Run one method with one seed and print its per-round metrics; with --out, write results
    (DIR new or empty, or --overwrite). Takes the options of compare, with one method and one seed.

    Peer-to-peer methods (sheaf, dfedu, dpsgd, local-peers) run on --graph.
    """
    o = ui.Options(**options)
    ui.setup_logging(o.verbose)
    ui.apply_threads(o.threads)
    from topofl.experiments.compare import run_compare

    (job,) = jobs_from_options(o, *_methods_and_seeds(o, "0", one=True))
    ui.check_tracking(o)
    if out is not None:
        check_out_is_free(out, o.overwrite)
        prepare_out(out)
    if save_models is not None:
        prepare_out(save_models, "--save-models")
    table = ui.RoundTable(f"{job.method} on {job.data_name}, seed {job.seed}")
    with ui.tracking(o, out, "run", f"{job.method} {job.data_name} seed {job.seed}") as tracker:
        run_compare([job], out, on_round=table.add, on_run_done=table.done)
        history = table.print()
        ui.track_results(tracker, out, history=history, params=job.file_dict())
    if save_models is not None:
        from topofl.models.io import save_models as save

        path = save(history, save_models / f"{job.method}-seed{job.seed}.npz")
        ui.console.print(f"models of {len(history.client_models)} client(s) saved to {path}")
    if out:
        ui.console.print(f"[dim]results in {out}/[/]")


@app.command(short_help="Run one of the papers' experiments, or all of them and the report.")
@ui.friendly_errors
@ui.with_options(*ui.TUNING_OPTIONS, *ui.DATA_OPTIONS, "client_fraction", "graph", "graph_param", "robust_defaults",
                 "threads", *ui.TRACKING_OPTIONS)
def experiment(  # noqa: PLR0913 (a typer command: its parameters are the command's options)
    name: str = typer.Argument(
        ...,
        help="pTopoFL: comparison, robustness, continual, privacy, ablation, diagrams, deep (CNNs, Table 2), all "
        "(the paper's, controls, heart-disease and secure-aggregation, + report). Controls and real data: controls, "
        "heart-disease; the paper's own protocol (Table 1 exactly, and its control): paper-protocol. Security and "
        "privacy: attacks, privacy-attacks, privacy-dp, secure-aggregation (SecAgg+: cost, attacks, dropouts). "
        "Sheaf-FMTL: sheaf-digits, sheaf-school (real data), sheaf-centralised, sheaf-hetero, sheaf-topology, "
        "sheaf-init, sheaf-mnist (CNNs), sheaf-all.",
    ),
    seeds: Optional[str] = typer.Option(
        None, "--seeds", help="Seeds: 0-9, 0,3,7, or 0-4,10 (default: 0-9 for pTopoFL experiments, 0-4 — the "
                              "paper's five runs — for Sheaf-FMTL ones; 0-2 for deep, sheaf-mnist and attacks --quick)."
    ),
    out: Optional[Path] = ui.ExperimentsOutOpt,
    resume: bool = typer.Option(False, "--resume",
                                help="Continue an interrupted experiment (in --out, else the latest run directory): "
                                "skip finished runs, redo partial ones."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete earlier results of this experiment first."),
    jobs: int = typer.Option(min(2, os.cpu_count() or 1), "--jobs", "-j",
                             help="Runs executed in parallel (processes)."),
    quick: bool = typer.Option(False, "--quick",
                               help="The budget that fits about 15 minutes on 2 cores (experiments deep, sheaf-mnist, "
                               "attacks)."),
    smoke: bool = typer.Option(
        False, "--smoke", help="A smoke-test budget, offered by every experiment (a few rounds, fewer methods and "
        "settings; well under a minute each): its tables and figures are labelled as below the paper's budget."
    ),
    data_root: Optional[Path] = ui.DataRootOpt,
    tuned: bool = typer.Option(
        False, "--tuned", help="Also tune every setting with the same budget on validation splits and re-run the "
        "experiment with the chosen values into DIR/NAME-tuned (tuned − default paired, Holm-adjusted); the defaults "
        "go to DIR/NAME as usual."
    ),
    verbose: bool = ui.VerboseOpt,
    **options: Any,
) -> None:
    """Run one of the pTopoFL paper's experiments (or all of them and the report), writing tidy
    results as runs finish; --resume continues an interrupted one with identical final results.
    With --tuned, every setting is also tuned on validation splits and the experiment re-run tuned.

    The data, model and hyper-parameter options of run and compare change every planned run (the
    experiment keeps its methods): the results then go to DIR/NAME-custom, and config.json says what changed.
    """
    ui.setup_logging(verbose)
    from topofl._validation import check_int
    from topofl.experiments.driver import GROUPS, default_seeds, experiment_names, run_experiment, total_runs
    from topofl.experiments.report import build_report

    if name not in experiment_names():
        raise ValueError(f"unknown experiment {name!r}; available: {', '.join(experiment_names())}")
    check_int("--jobs", jobs, 1, MAX_JOBS)
    ui.check_resume_overwrite(resume, overwrite)
    if quick and smoke:
        raise ValueError("--quick and --smoke exclude each other")
    profile = "smoke" if smoke else "quick" if quick else "full"
    root = str(data_root) if data_root is not None else None
    seed_list = parse_seeds(seeds) if seeds is not None else default_seeds(name, profile)
    names = list(GROUPS.get(name, (name,)))
    o = ui.Options(**options)
    ui.apply_threads(o.threads, jobs)
    if o.tuning_flags() and not tuned:
        raise ValueError(f"{', '.join(o.tuning_flags())} go with --tuned")
    if tuned and o.robust_defaults:
        raise ValueError("--robust-defaults and --tuned exclude each other "
                         "(tune with -p aggregator=guarded_mean instead)")
    overrides, adjust = _experiment_overrides(o, names, seed_list, profile, root, tuned)
    settings = tune_settings(o) if tuned else None
    if tuned and name in GROUPS:
        raise ValueError(f"--tuned tunes one experiment; {name!r} is a group")
    ui.check_tracking(o)
    n_runs = total_runs(names, seed_list, profile, root)   # plans every run (a budget it lacks is refused) ...
    out = ui.default_out(out, ui.EXPERIMENTS_ROOT, resume,   # ... before a run directory is made
                         [f"{n}{end}" for n in names for end in EXPERIMENT_DIR_ENDINGS], f"of {name}")
    if settings is not None:
        _run_tuned(name, seed_list, out, settings, resume, overwrite, jobs, profile, root, o)
        return
    prepare_out(out)
    t0 = time.perf_counter()
    report_path = None
    with ui.tracking(o, out, "experiment", name) as tracker, ui.progress() as bar, \
            ui.on_interrupt(_resume_hint(out)):
        task = bar.add_task("runs", total=max(1, n_runs))
        for n in names:
            bar.update(task, description=f"{n}")

            def tick(spec, done) -> None:
                bar.update(task, advance=1,
                           description=f"{spec.experiment}: {spec.label or spec.method} seed {spec.seed}")

            exp_dir = run_experiment(n, seed_list, out, resume=resume, overwrite=overwrite, jobs=jobs, on_done=tick,
                                     profile=profile, data_root=root, robust_defaults=bool(o.robust_defaults),
                                     adjust=adjust, overrides=overrides)
            ui.track_results(tracker, exp_dir, exp_dir.name if name in GROUPS else "")
            ui.console.print(f"[green]✓[/] {n}: results in {exp_dir}/")
            # the experiment's headline numbers
            for line in json.loads((exp_dir / "manifest.json").read_text()).get("console", []):
                ui.console.print(line, markup=False, highlight=False, soft_wrap=True)
        if name in GROUPS:   # built inside the tracked job, which logs it
            report_path = build_report(out)
            ui.track_results(tracker, out)
    if report_path is not None:
        ui.console.print(f"report: {report_path}")
    ui.console.print(f"[dim]{time.perf_counter() - t0:.1f} s[/]")


#: what ``topofl experiment NAME`` names its directory in a run: NAME, NAME-robust, NAME-custom, NAME-tuned, ...
EXPERIMENT_DIR_ENDINGS = ("", "-robust", "-custom", "-robust-custom", "-tuned")


def _resume_hint(out: Path) -> str:
    """What an interrupted ``experiment`` or ``tune`` tells the user: where its finished runs are, how to go on."""
    return f"finished runs are kept in {out}/; to continue, run the same command with --resume --out {out}"


def _experiment_overrides(o: Any, names: Sequence[str], seeds: Sequence[int], profile: str, root: str | None,
                          tuned: bool) -> tuple[dict[str, Any], Any]:
    """``experiment``'s data, model and hyper-parameter options as changes of its planned jobs
    (:func:`topofl.cli_common.experiment_overrides`), every changed job checked before the first run starts.
    """
    overrides, adjust = ui.experiment_overrides(o)
    if adjust is None:
        return overrides, None
    if tuned:
        raise ValueError(f"--tuned tunes the experiment as planned; leave out {', '.join(sorted(overrides))} "
                         "(or tune without them)")
    from topofl.experiments.driver import plan_for

    for n in names:
        _check_jobs(adjust(plan_for(n, seeds, profile, root)))
    return overrides, adjust


def _check_jobs(jobs: Sequence[Any]) -> None:
    """Build every method of ``jobs`` with its hyper-parameters and load every data source they name (first
    seed): a bad value is a ``ValueError`` naming it before anything runs.
    """
    from topofl.api import load_job_data
    from topofl.methods import build

    seen: set[str] = set()
    for job in jobs:
        if job.family == "paper":
            continue
        key = repr((job.method, sorted(job.hyperparameters.items()), job.data, sorted(job.data_params.items())))
        if key not in seen:
            seen.add(key)
            build(job.method, job.hyperparameters)
            data = load_job_data(job)
            first = data.clients[0]
            if isinstance(job.model, str):  # a model that does not exist, or does not fit the data
                from topofl.api import per_client
                from topofl.models.registry import build_model

                for spec in dict.fromkeys(per_client(job.model, len(data.clients))):
                    build_model(spec, task=data.task, n_features=first.n_features, n_classes=max(data.n_classes, 2))


def _run_tuned(name: str, seeds: Sequence[int], out: Path, settings: TuneSettings, resume: bool, overwrite: bool,
               jobs: int, profile: str, root: str | None, o: Any) -> None:
    """``topofl experiment NAME --tuned``: the defaults into OUT/NAME, the tuned experiment into OUT/NAME-tuned,
    then the report (all tracked with ``o``'s ``--track``).
    """
    from topofl.experiments.driver import clear_directory, plan_for
    from topofl.experiments.report import build_report
    from topofl.experiments.store import results_lock
    from topofl.experiments.tuning import run_tuned_experiment, total_runs

    prepare_out(out)
    t0 = time.perf_counter()
    specs = plan_for(name, seeds, profile, root)
    with results_lock(out / name), results_lock(out / f"{name}-tuned"):  # held from the clearing on
        if overwrite:
            for d in (out / name, out / f"{name}-tuned"):
                clear_directory(d)
        with ui.tracking(o, out, "experiment", f"{name}-tuned") as tracker, ui.progress() as bar, \
                ui.on_interrupt(_resume_hint(out)):
            task = bar.add_task(name, total=total_runs(specs, settings))
            tuned_dir = run_tuned_experiment(name, seeds, out, settings, resume=resume, jobs=jobs, profile=profile,
                                             data_root=root,
                                             on_run=lambda what: bar.update(task, advance=1, description=what))
            report_path = build_report(out)   # inside the tracked job, which logs it
            for directory, under in ((out / name, "default"), (tuned_dir, "tuned"), (out, "")):
                ui.track_results(tracker, directory, under)
    ui.console.print(f"[green]✓[/] {name}: defaults in {out / name}/, tuned in {tuned_dir}/")
    ui.print_tuning(tuned_dir)
    ui.console.print(f"report: {report_path}")
    ui.console.print(f"[dim]{time.perf_counter() - t0:.1f} s[/]")


@app.command(short_help="Rebuild DIR/report.html from an experiments directory.")
@ui.friendly_errors
def report(out: Optional[Path] = ui.ReportDirArg) -> None:
    """Write DIR/report.html (self-contained: every table and figure, configuration, versions).

    DIR defaults to results/experiments; a DIR whose results are in run directories (DIR/run-NNNN, what
    commands write without --out) reports its latest run.
    """
    from topofl.experiments.report import build_report

    target = Path(out) if out is not None else ui.EXPERIMENTS_ROOT
    runs = ui.run_dirs(target)
    own = target.is_dir() and ((target / "manifest.json").exists()   # results of its own, beside any runs
                               or any((d / "manifest.json").exists() for d in target.iterdir() if d not in runs))
    if runs and not own:
        finished = [d for d in runs if ui.holds(d, ("manifest.json", "*/manifest.json"))]
        if not finished:
            raise ValueError(f"report: no run in {str(target)!r} holds finished results yet (a manifest.json); "
                             "run an experiment first")
        target = finished[-1]
        ui.console.print(f"reporting the latest run, {target}/", highlight=False)
    ui.console.print(f"report: {build_report(target)}")


@app.command(short_help="List every method, what it is, and its hyper-parameters.")
def methods() -> None:
    """List every method of both families and each hyper-parameter with its default and meaning."""
    ui.print_methods()


@app.command(short_help="List the registered models (--model NAME).")
def models() -> None:
    """List the registered models (--model NAME); any torch.nn.Module works too (package.module:factory)."""
    ui.print_models()


@app.command(short_help="List the built-in scenarios, what each is, and its parameters.")
def scenarios() -> None:
    """List the built-in scenarios, what each one is, and its parameters with their defaults
    (override one with -s KEY=VALUE).
    """
    ui.print_scenarios()


@app.command("flower", cls=ui.WithHyperparameters,
             short_help="Run a method on Flower's Simulation Runtime (Ray); needs the flower extra.")
@ui.friendly_errors
@ui.with_options(*ui.JOB_OPTIONS, "threads")
def flower(
    nodes: Optional[int] = typer.Option(None, "--nodes", help="Virtual SuperNodes (default: the scenario's clients)."),
    out: Optional[Path] = ui.FlowerOutOpt,
    pooled_metrics: bool = typer.Option(False, "--pooled-metrics",
                                        help="Clients also send test labels and scores (pooled AUC)."),
    cpus_per_node: float = typer.Option(1.0, "--cpus-per-node",
                                        help="Ray CPUs per ClientApp (1 runs two at once on 2 cores)."),
    resume: Optional[Path] = ui.FlowerResumeOpt,
    verbose: bool = ui.VerboseOpt,
    **options: Any,
) -> None:
    """Run a method on Flower's Simulation Runtime (Ray), with the ServerApp and ClientApp `flwr run` uses.

    Takes the options of run (one method, one seed; peer-to-peer methods are relayed between the nodes).
    The server checkpoints its state after every round into the run's directory; --resume RUN_DIR
    continues a run that was killed. Like a deployment, the run uses the Byzantine-robust defaults
    (the guarded mean, shares capped at 0.3) unless --param sets the field or --papers-rules is given. \
Exits 1 with the reason when the run fails.
    Needs the flower extra: pip install "topofl[flower]". For real sites see examples/flower-app.
    """
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not verbose:  # Flower logs its own DEBUG lines through the root handler: keep topofl's INFO, others' WARNING+
        for handler in logging.getLogger().handlers:
            handler.addFilter(lambda r: r.name.startswith("topofl") or r.levelno >= logging.WARNING)
    from dataclasses import replace

    from topofl.flower import FlowerSettings, simulate_flower
    from topofl.flower.simulation import FlowerRunFailed

    o = ui.Options(**options)
    if o.threads is not None:   # this process's and, through the thread variables, the Ray workers' (else Ray's)
        ui.apply_threads(o.threads)
    if resume is not None:
        given = [f"--{k.replace('_', '-')}" for k, v in options.items()   # a flag left at its default; not --threads
                 if k != "threads" and v not in (None, []) and v != ui.SHARED_OPTIONS[k][1].default]
        given += [flag for flag, value in (("--out", out), ("--pooled-metrics", pooled_metrics or None))
                  if value is not None]
        if given:
            raise ValueError("--resume continues a run in its own directory with its own settings; "
                             f"leave out {', '.join(given)}")
        run_dir = resume.resolve()
        settings, out = FlowerSettings(resume_dir=run_dir.name), run_dir.parent
    else:
        robust = True if o.robust_defaults is None else bool(o.robust_defaults)   # the mean, under --secure-aggregation
        (job,) = jobs_from_options(replace(o, robust_defaults=False), *_methods_and_seeds(o, "0", one=True))
        if out is not None:
            prepare_out(out)
        settings = FlowerSettings(job=job, pooled_metrics=pooled_metrics, out_dir="." if out else "",
                                  robust_defaults=robust)
    started = time.perf_counter()
    try:
        history = simulate_flower(settings, nodes, cpus_per_node=cpus_per_node, verbose=verbose, results_root=out)
    except FlowerRunFailed as exc:
        ui.err_console.print(f"[bold red]Error:[/] {ui.escape(str(exc).splitlines()[0])}", soft_wrap=True)
        raise typer.Exit(1) from None
    where = f", resumed in {history.out_dir}" if resume else f", {settings.job.data_name}, seed {settings.job.seed}"
    ui.print_flower(history, f"{history.method} on Flower's Simulation Runtime" + where, time.perf_counter() - started)


_PredictModelsArg = typer.Argument(..., help="A models file written by --save-models (DIR/METHOD-seedK.npz).")
_PredictDataArg = typer.Argument(..., help="A CSV file with a header holding the models' feature columns (any order).")
_PredictSiteOpt = typer.Option(None, "--site-column",
                               help="Column naming each row's site: its rows go to that site's model "
                               "(default: site, where the file has it; a column named here must be there).")
_PredictLabelOpt = typer.Option(None, "--label-column",
                                help="Label column; with it, the scores per site are printed (default: the label "
                                "column the models were trained on, else y, where the file has it).")
_PredictClientOpt = typer.Option(None, "--client",
                                 help="Predict every row with this client's model (an id or a site name).")
_PredictOutOpt = typer.Option(None, "--out", "-o",
                              help="Write the predictions to this CSV file (default: standard output).")
_PredictOverwriteOpt = typer.Option(False, "--overwrite", help="Replace an existing --out file.")
_PredictModelOpt = typer.Option(None, "--model",
                                help="package.module:factory of your own torch module, if the models use one.")


@app.command(short_help="Predict with saved models (run --save-models) on the raw rows of a CSV file.")
@ui.friendly_errors
def predict(  # noqa: PLR0913 (a typer command: its parameters are the command's options)
    models: Path = _PredictModelsArg,
    data: Path = _PredictDataArg,
    site_column: Optional[str] = _PredictSiteOpt,
    label_column: Optional[str] = _PredictLabelOpt,
    client: Optional[str] = _PredictClientOpt,
    out: Optional[Path] = _PredictOutOpt,
    model: Optional[str] = _PredictModelOpt,
    overwrite: bool = _PredictOverwriteOpt,
) -> None:
    """Predict the raw rows of a CSV file with saved models: each row with its site's model (the site
    column), or every row with --client's, or with the server's. The federation's preprocessing
    (standardisation, imputation, label classes) travels in the models file and is applied here, so a
    site's held-out rows score as the run reported. Writes line, site, client, the class probabilities
    (or the value) and the predicted label per row; with a label column, prints each site's scores.
    """
    import warnings

    from topofl.data.prediction import predict_table
    from topofl.models.io import load_models

    if out is not None:
        _check_predict_out(out, overwrite, {"MODELS": models, "DATA": data})
    if model is not None and ":" in model:  # a user's module: name the flag where it does not import
        from topofl.models.registry import import_factory

        try:
            import_factory(model)
        except ValueError as exc:
            raise ValueError(f"--model {model!r}: {exc}") from None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trained = load_models(models, model=model)
    for w in caught:
        ui.err_console.print(f"[yellow]Warning:[/] {ui.escape(str(w.message))}", soft_wrap=True)
    result = predict_table(trained, data, site_column=site_column or "site", label_column=label_column,
                           client=client, site_required=site_column is not None)
    shown = ui.console if out is not None else ui.err_console
    if trained.preprocessing is None:
        shown.print(f"[dim]model inputs, in file order: {ui.escape(', '.join(result.features[:12]))}"
                    f"{' ...' if len(result.features) > 12 else ''}[/]", soft_wrap=True)
    if result.ignored:
        shown.print(f"[dim]columns not read by the models: {ui.escape(', '.join(result.ignored[:12]))}"
                    f"{' ...' if len(result.ignored) > 12 else ''}[/]")
    if out is not None:
        from topofl.atomic import write_text_atomic

        prepare_out(out.parent, "--out")
        write_text_atomic(out, result.to_csv())
        shown.print(f"{len(result.rows)} prediction(s) written to {out}")
    else:
        typer.echo(result.to_csv(), nl=False)
    if result.scores:
        shown.print(ui.prediction_scores_table(result.scores, f"{trained.method} (seed {trained.seed}) on {data.name}"))


def _check_predict_out(out: Path, overwrite: bool, inputs: dict[str, Path]) -> None:
    """Refuse a ``--out`` of ``topofl predict`` that is a directory, one of its ``inputs`` (always), or an
    existing file (unless ``overwrite``).
    """
    for what, path in inputs.items():
        if out.exists() and path.exists() and out.samefile(path):  # a link or another spelling of it too
            raise ValueError(f"--out {str(out)!r} is the {what} file; name another file to write")
    if out.is_dir():
        raise ValueError(f"--out {str(out)!r} is a directory; name the CSV file to write")
    if out.exists() and not overwrite:
        raise ValueError(f"--out {str(out)!r} exists; pass --overwrite to replace it")


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
