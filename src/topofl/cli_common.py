"""Shared pieces of the ``topofl`` command line (:mod:`topofl.cli`): the consoles, one-line errors,
option declarations, TOML config files, the :class:`~topofl.job.Job` a command's options describe,
and what the listing and summary commands print. Light on purpose: the methods and scenarios are
imported inside the functions that need them, never at module level.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import logging
import os
import re
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperCommand

from topofl.atomic import LOCK_NAME

if TYPE_CHECKING:  # pragma: no cover
    from topofl.job import Job

def parse_seeds(text: str) -> tuple[int, ...]:
    """:func:`topofl.config.parse_seeds`, imported when called (``topofl --help`` loads no NumPy)."""
    from topofl.config import parse_seeds as parse

    return parse(text)


def parse_assignments(items: Any, field: str) -> dict[str, Any]:
    """:func:`topofl.config.parse_assignments`, imported when called (``topofl --help`` loads no NumPy)."""
    from topofl.config import parse_assignments as parse

    return parse(items, field)


if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

console = Console()
err_console = Console(stderr=True)


def progress(*, remaining: bool = True, transient: bool = False, terminal_only: bool = False) -> Any:
    """The commands' progress bar on stderr: description, bar, done/total, elapsed (and, with
    ``remaining``, the time left); ``transient`` clears it when done, ``terminal_only`` hides it
    when stderr is not a terminal.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    if remaining:
        columns.append(TimeRemainingColumn())
    return Progress(*columns, console=err_console, transient=transient,
                    disable=terminal_only and not err_console.is_terminal)


def hyperparameter_epilog() -> str:
    """Every method's hyper-parameters with their defaults, for the end of ``run``/``compare --help``
    (markup escaped).
    """
    from topofl.methods import REGISTRY

    lines = ["Hyper-parameters (-p KEY=VALUE, or -p METHOD.KEY=VALUE for one method); `topofl methods` explains each:"]
    for name, m in REGISTRY.items():
        lines.append(f"{name} ({m.family}): " + ", ".join(f"{k}={v[0]}" for k, v in m.config.field_help().items()))
    return escape("\n\n".join(lines))


class WithHyperparameters(TyperCommand):
    """A command whose ``--help`` ends with every method's hyper-parameters, looked up only when
    that help is shown (the registry imports every method).
    """

    # ctx, formatter: click's Context and HelpFormatter (typer vendors click from 0.2x)
    def format_help(self, ctx: Any, formatter: Any) -> None:
        if not self.epilog:
            self.epilog = hyperparameter_epilog()
        super().format_help(ctx, formatter)


#: exit codes: bad input (a value, a file, a missing extra), a run that failed (training diverged, memory
#: ran out), an interruption (Ctrl-C: 128 + SIGINT)
EXIT_BAD_INPUT, EXIT_RUN_FAILED, EXIT_INTERRUPTED = 2, 1, 130


class Interrupted(KeyboardInterrupt):
    """An interruption (Ctrl-C, SIGTERM) that says what the user can do next (``hint``)."""

    def __init__(self, hint: str) -> None:
        super().__init__(hint)
        self.hint = hint


@contextlib.contextmanager
def on_interrupt(hint: str) -> Iterator[None]:
    """Let an interruption of the ``with`` block tell the user ``hint`` (e.g. how to ``--resume``)."""
    try:
        yield
    except Interrupted:
        raise
    except KeyboardInterrupt:
        raise Interrupted(hint) from None


def _terminate_as_interrupt(signum: int, frame: Any) -> None:
    """SIGTERM (a scheduler's, ``kill``) handled as Ctrl-C: the command stops its workers and exits 130.
    Further SIGTERMs are ignored from here on: the command is already shutting down, and one of them
    must not kill it (exit -15) before it has stopped its workers and said how to resume.
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM raises ``KeyboardInterrupt`` (in the main thread; elsewhere nothing
    changes). After one has, SIGTERM stays ignored (the process is ending: :func:`_terminate_as_interrupt`);
    otherwise the earlier handler is restored when the block ends.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is _terminate_as_interrupt:
            signal.signal(signal.SIGTERM, previous)


def friendly_errors(fn: Callable) -> Callable:
    """Turn an error into a one-line message, never a traceback, and an exit code that says what
    happened: :data:`EXIT_BAD_INPUT` (2) for bad input, :data:`EXIT_RUN_FAILED` (1) for a run that
    failed on valid input (training diverged: ``FloatingPointError``; out of memory), and
    :data:`EXIT_INTERRUPTED` (130) for Ctrl-C or SIGTERM (which the command receives as Ctrl-C: its
    worker processes are stopped, and :func:`on_interrupt`'s hint says how to continue). The message
    is printed verbatim (rich markup escaped: ``topofl[flower]`` keeps its brackets).
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        made = len(_made_run_dirs)
        try:
            with _sigterm_interrupts():
                return fn(*args, **kwargs)
        except (FloatingPointError, MemoryError) as exc:
            _drop_unfinished_run_dirs(made)
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            err_console.print(f"[bold red]Error:[/] the run failed: {escape(msg)}", markup=True, highlight=False,
                              soft_wrap=True)
            raise typer.Exit(EXIT_RUN_FAILED) from None
        except (ValueError, OSError, ImportError) as exc:
            _drop_unfinished_run_dirs(made)
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            err_console.print(f"[bold red]Error:[/] {escape(msg)}", markup=True, highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except KeyboardInterrupt as exc:
            hint = exc.hint if isinstance(exc, Interrupted) else "results of finished rounds are already on disk."
            err_console.print(f"[yellow]Interrupted[/]: {escape(hint)}", highlight=False, soft_wrap=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None

    return wrapper


def with_options(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the shared options ``names`` of :data:`SHARED_OPTIONS`, declared once there:
    they are added to the command's signature (where typer reads its options) and reach the
    function in its ``**options``; :class:`Options` reads them with their types.
    """
    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)
        own = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        extra = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=SHARED_OPTIONS[n][1],
                                   annotation=SHARED_OPTIONS[n][0])
                 for n in names]
        fn.__signature__ = sig.replace(parameters=[*own, *extra])  # type: ignore[attr-defined]
        return fn

    return deco


def setup_logging(verbose: bool) -> None:
    """Log warnings (debug messages with ``--verbose``) as one line each."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")


ScenarioOpt = typer.Option(None, "--scenario",
                           help="Scenario (default: healthcare); `topofl scenarios` lists them all.")
RoundsOpt = typer.Option(None, "--rounds", "-r", help="Communication rounds (default 15; peer-to-peer methods: 100 "
                         "iterations, each one mini-batch step).")
OutOpt = typer.Option(
    None, "--out", "-o",
    help="Directory for rounds.csv, curves.csv, summary.csv, server_log.jsonl, config.json (compare's default: a new "
    "results/compare-SCENARIO/run-NNNN per comparison); a given DIR must be new or empty unless --overwrite.",
)
OverwriteOpt = typer.Option(
    False, "--overwrite",
    help="Write into a non-empty --out directory, replacing the results of an earlier run there (other files are left "
    "alone).",
)
ParamOpt = typer.Option(None, "--param", "-p",
                        help="Hyper-parameter KEY=VALUE (repeatable); METHOD.KEY=VALUE targets one method.")
ScenParamOpt = typer.Option(
    None, "--scenario-param", "-s",
    help="Scenario parameter KEY=VALUE (repeatable), e.g. flip_rate=0.5; `topofl scenarios` lists them."
)
ConfigOpt = typer.Option(
    None, "--config", "-c",
    help=escape("TOML file with any of: scenario, method(s), seed(s), rounds, client_fraction, model, graph, "
                "[scenario_params], [graph_params], [hyperparameters]; flags override it, and its settings of methods "
                "not selected are ignored."),
)
FractionOpt = typer.Option(None, "--client-fraction",
                           help="Fraction of clients selected per round, in (0, 1] (default 1).")
RobustOpt = typer.Option(
    None, "--robust-defaults/--papers-rules", help="Give every method the deployments' Byzantine-robust defaults "
    "(topofl.deployment_defaults.DEPLOYMENT_DEFAULTS: the guarded mean, shares capped at 0.3) wherever no -p sets the "
    "field, or the papers' rules (the default of run, compare and experiment; flower, like a deployment, defaults to "
    "the robust ones)."
)
SecureOpt = typer.Option(
    False, "--secure-aggregation", help="Secure aggregation (SecAgg+): the server learns only weighted sums of the "
    "models (per cluster for ptopofl), never one client's model; for fedavg, fedprox, ditto, perfedavg and ptopofl "
    "(sets their secure_aggregation; the secure_* -p fields tune it; docs/secure-aggregation.md)."
)
VerboseOpt = typer.Option(False, "--verbose", "-v",
                          help="Log debug messages (and the config file's settings that were ignored).")
GraphOpt = typer.Option(
    None, "--graph",
    help="Communication graph of peer-to-peer methods (sheaf, dfedu, dpsgd, local-peers): "
    "erdos_renyi (default), watts_strogatz, barabasi_albert, complete, ring, star.",
)
GraphParamOpt = typer.Option(None, "--graph-param", "-g",
                             help="Graph parameter KEY=VALUE (repeatable), e.g. p=0.3 for erdos_renyi.")
ModelOpt = typer.Option(
    None, "--model",
    help="Model every client trains: linear (default), cnn-small, cnn-same, cnn-medium, cnn-large, convnet2, resnet18, "
    "mlp, or package.module:factory (a torch.nn.Module); `topofl models` lists them.",
)
InputShapeOpt = typer.Option(
    None, "--input-shape",
    help="Shape each row is reshaped to for a torch model, e.g. 1,8,8 (C,H,W) for your own CNN on 64 features "
    "(default: flat rows; a registered CNN infers a square image).",
)
DataOpt = typer.Option(
    None, "--data",
    help="Your own data: a CSV file with a site column (one client per site), or a directory with one CSV or NPZ "
    "(X, y) per site.",
)
SiteColumnOpt = typer.Option(None, "--site-column", help="--data: the column naming each row's site (default: site).")
LabelColumnOpt = typer.Option(None, "--label-column", help="--data: the label column (default: y).")
SaveModelsOpt = typer.Option(
    None, "--save-models",
    help="Directory for the trained models: DIR/METHOD-seedK.npz with every client's final model and the server's "
    "(topofl.load_models).",
)
FlowerParamOpt = typer.Option(None, "--param", "-p", help="Hyper-parameter KEY=VALUE (repeatable).")
FlowerOutOpt = typer.Option(
    None, "--out", "-o", help="Directory; the run writes rounds.csv, curves.csv, failures.jsonl and result.json into a "
    "fresh DIR/run-<id>/."
)
FlowerResumeOpt = typer.Option(
    None, "--resume", help="Continue the unfinished run in RUN_DIR (DIR/run-<id> of an earlier --out DIR) after its "
    "last checkpointed round, with its own settings (the options above are then ignored)."
)
ReferenceOpt = typer.Option(None, "--reference",
                            help="The method every other one is compared with (default ptopofl, else the first).")
TuneOutOpt = typer.Option(None, "--out", "-o", help="Directory (default: a new results/tune-SCENARIO/run-NNNN; with "
                          "--resume the latest one); a given DIR must be new or empty unless --resume or --overwrite.")
TrialsOpt = typer.Option(None, "--trials", help="Tuning: trials per method and setting, the same for every method "
                         "(default 30; trial 0 = the defaults).")
TuneParamsOpt = typer.Option(
    None, "--tune-params",
    help="Tuning: comma-separated hyper-parameters to tune (default: each method's declared search space, less what "
    "the experiment varies between its settings; `topofl methods`).",
)
TuneSeedsOpt = typer.Option(None, "--tune-seeds",
                            help="Tuning: seeds the trials are scored on (default: the same seeds; docs/tuning.md).")
ValidationOpt = typer.Option(None, "--validation-fraction", help="Tuning: share of each client's training data held "
                             "out for validation (default 0.25).")
SamplerSeedOpt = typer.Option(None, "--sampler-seed", help="Tuning: seed of the TPE sampler (default 0); another seed "
                              "gives another equally fair tuning.")
TuneMetricOpt = typer.Option(None, "--tune-metric", help="Tuning: the validation metric trials are scored by "
                             "(auto, auc, accuracy, pooled_auc, mse, r2).")
DataRootOpt = typer.Option(None, "--data-root", help="Real CIFAR-10 pickles or LEAF FEMNIST JSON (experiment deep): "
                           "the paper's protocol.")
ExperimentsOutOpt = typer.Option(None, "--out", "-o",
                                 help="Directory; each experiment writes into DIR/NAME/ (default: a new "
                                 "results/experiments/run-NNNN; with --resume the latest one).")
ReportDirArg = typer.Argument(None, help="Experiments directory (as given to --out; default, and for a directory of "
                              "run-NNNN: its latest run).")
#: where ``experiment`` and ``report`` find their runs when no directory is given
EXPERIMENTS_ROOT = Path("results/experiments")


def p_text(p: float) -> str:
    """A p-value as tables print it: ``p=0.012``, ``p<0.001``, or ``–`` when there is none."""
    if p != p:
        return "–"
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


SeedsOpt = typer.Option(None, "--seeds", "--seed",
                        help="Seeds: 0-9, 0,3,7, or 0-4,10 (compare's default 0-9; run: one seed, default 0).")
MethodsOpt = typer.Option(
    None, "--methods", "--method", "-m",
    help="Comma-separated methods (compare's default: every server-based method; run: one, default ptopofl); "
    "`topofl methods` lists them.",
)
TrackOpt = typer.Option(
    None, "--track",
    help="Also log the parameters, every round's metrics per method and seed, and the result files to mlflow or "
    "tensorboard (extras topofl[mlflow], topofl[tensorboard]; docs/tracking.md).",
)
TrackUriOpt = typer.Option(
    None, "--track-uri",
    help="--track: where to log: a directory, or an MLflow tracking URI (default: MLFLOW_TRACKING_URI for mlflow, "
    "else DIR/mlflow or DIR/tensorboard in the results directory; results/tracking for run without --out).",
)
ThreadsOpt = typer.Option(
    None, "--threads",
    help="Compute threads (BLAS and torch) of each process running training; default: half the CPUs shared "
    "among the processes, at most 4 each (docs/running.md).",
)


def apply_threads(threads: int | None, jobs: int = 1) -> None:
    """The thread policy of a command (:mod:`topofl.threads`): ``--threads N`` for this process and its
    workers; without it, the default of one process when the command trains here (``jobs`` 1), while
    ``jobs`` workers take theirs when they start.
    """
    from topofl.threads import check_threads, set_threads

    if threads is not None:
        set_threads(check_threads(threads, "--threads"))
    elif jobs <= 1:
        set_threads(None)


@contextlib.contextmanager
def tracking(o: Any, out: Path | None, command: str, subject: str) -> Iterator[Any]:
    """A command's ``--track``/``--track-uri``: the tracker (:func:`topofl.tracking.make_tracker`, at
    :func:`topofl.tracking.default_location` under ``out`` unless ``--track-uri``) tracking the block
    as job ``command subject`` of MLflow experiment ``topofl command``; ``None`` without ``--track``.
    An unknown tracker, a missing extra or a store that cannot be opened is bad input, raised on
    entering; once the job runs, a tracker failure is only a warning. Prints where the job went.
    """
    check_tracking(o)
    if o.track is None:
        yield None
        return
    from topofl.tracking import default_location, make_tracker, tracked

    tracker = make_tracker(o.track, o.track_uri or default_location(o.track, out))
    tags = {"topofl.command": command, "topofl.results": str(Path(out).resolve()) if out is not None else ""}
    with tracked(tracker, f"topofl {command}", f"{command} {subject}", tags) as t:
        yield t
    console.print(f"[dim]tracked: {escape(tracker.view_hint())}[/]", highlight=False, soft_wrap=True)


def check_tracking(o: Any) -> None:
    """Check ``--track``/``--track-uri`` before anything runs or is written: the tracker and its extra
    (:func:`topofl.tracking.check_tracker`) and its location — ``--track-uri``, or MLflow's
    ``MLFLOW_TRACKING_URI`` (a server must answer) — (:func:`topofl.tracking.make_tracker`, which writes nothing).
    """
    if o.track is None and o.track_uri is not None:
        raise ValueError(f"--track-uri {o.track_uri!r} goes with --track (mlflow or tensorboard)")
    if o.track is not None:
        from topofl.tracking import check_tracker, default_location, make_tracker

        check_tracker(o.track)
        make_tracker(o.track, o.track_uri or default_location(o.track, None))


def track_results(tracker: Any, directory: Path | None, under: str = "", history: Any = None,
                  params: Mapping[str, Any] | None = None) -> None:
    """Log results directory ``directory`` to ``tracker`` (:func:`topofl.tracking.log_results`), or,
    with no directory, the run ``history`` with its job's ``params`` (:func:`topofl.tracking.log_history`);
    nothing without ``--track``.
    """
    if tracker is None:
        return
    from topofl.tracking import log_history, log_results

    if directory is not None:
        log_results(tracker, directory, under)
    elif history is not None:
        log_history(tracker, history, params or {})


#: options several commands take, declared once: name -> (type, typer option); see :func:`with_options`
SHARED_OPTIONS: dict[str, tuple[Any, Any]] = {
    "methods": (Optional[str], MethodsOpt),
    "scenario": (Optional[str], ScenarioOpt), "data": (Optional[Path], DataOpt),
    "site_column": (Optional[str], SiteColumnOpt), "label_column": (Optional[str], LabelColumnOpt),
    "seeds": (Optional[str], SeedsOpt), "rounds": (Optional[int], RoundsOpt),
    "param": (Optional[list[str]], ParamOpt), "scenario_param": (Optional[list[str]], ScenParamOpt),
    "config": (Optional[Path], ConfigOpt), "model": (Optional[str], ModelOpt),
    "input_shape": (Optional[str], InputShapeOpt),
    "client_fraction": (Optional[float], FractionOpt), "graph": (Optional[str], GraphOpt),
    "graph_param": (Optional[list[str]], GraphParamOpt), "overwrite": (bool, OverwriteOpt),
    "verbose": (bool, VerboseOpt), "robust_defaults": (Optional[bool], RobustOpt),
    "secure_aggregation": (bool, SecureOpt),
    "trials": (Optional[int], TrialsOpt), "tune_params": (Optional[str], TuneParamsOpt),
    "tune_seeds": (Optional[str], TuneSeedsOpt),
    "validation_fraction": (Optional[float], ValidationOpt), "tune_metric": (Optional[str], TuneMetricOpt),
    "sampler_seed": (Optional[int], SamplerSeedOpt),
    "threads": (Optional[int], ThreadsOpt),
    "track": (Optional[str], TrackOpt), "track_uri": (Optional[str], TrackUriOpt),
}
#: the options of experiment tracking (run, compare, experiment, tune): :func:`tracking`
TRACKING_OPTIONS = ("track", "track_uri")
#: the options of a tuning (tune, experiment --tuned), as a [tuning] table of --config names them too
TUNING_OPTIONS = ("trials", "tune_params", "tune_seeds", "validation_fraction", "tune_metric", "sampler_seed")


def _tuning_flags(self: Any) -> list[str]:
    """The tuning options given on the command line, as flags (``--trials``, ...)."""
    return ["--" + k.replace("_", "-") for k in TUNING_OPTIONS if getattr(self, k) is not None]


#: the shared options a command received, by name (those it does not take keep their defaults):
#: a frozen dataclass built from :data:`SHARED_OPTIONS`, so that each option is declared once
Options: Any = dataclasses.make_dataclass(
    "Options", [(name, typ, dataclasses.field(default=opt.default)) for name, (typ, opt) in SHARED_OPTIONS.items()],
    frozen=True,
    namespace={"tuning_flags": _tuning_flags,
               "__doc__": "The shared options a command received (see :func:`with_options`)."},
)
#: the options of a run on a scenario or the user's data (run, compare, tune, flower, experiment)
DATA_OPTIONS = ("scenario", "data", "site_column", "label_column", "rounds", "param", "scenario_param", "config",
                "model")
#: the options that describe jobs, the same for ``run`` and ``compare`` (and, but for --overwrite, ``flower``)
JOB_OPTIONS = ("methods", "seeds", *DATA_OPTIONS, "client_fraction", "graph", "graph_param", "robust_defaults",
               "secure_aggregation")


def paired_cell(r: dict[str, Any], metric: str = "auc") -> str:
    """``+0.018 ±0.008 10/0 p=0.004*``: the method's ``metric`` minus FedAvg's, paired over seeds
    (± half the 95 % t-interval; seeds won/lost — for MSE a win is a lower value; the
    Holm-adjusted p over every method's comparison with FedAvg, ``*`` when below 0.05).
    """
    d = r.get(f"{metric}_vs_fedavg_mean", float("nan"))
    if d != d:
        return "–"
    half = (r[f"{metric}_vs_fedavg_ci_high"] - r[f"{metric}_vs_fedavg_ci_low"]) / 2
    ci = f" ±{half:.3f}" if half == half else ""
    p = r.get(f"{metric}_vs_fedavg_p_holm", float("nan"))
    star = "*" if p == p and p < 0.05 else ""
    return f"{d:+.3f}{ci} {r[f'{metric}_vs_fedavg_wins']}/{r[f'{metric}_vs_fedavg_losses']} {p_text(p)}{star}"


def summary_table(rows: list[dict[str, Any]], title: str) -> Table:
    """The table ``topofl compare`` prints: one row per method of ``summary.csv``, the best in bold
    (highest AUC; for a regression task, whose rows carry MSE, RMSE and R², the lowest MSE).
    """
    regression = bool(rows) and "mse_mean" in rows[0]
    key_p = f"{'mse' if regression else 'auc'}_vs_fedavg_p"
    # finite p-values (NaN != NaN)
    n_cmp = sum(1 for r in rows if r.get(key_p, float("nan")) == r.get(key_p, float("nan")))
    caption = ("Δ vs FedAvg: paired over seeds (± half the 95 % t-interval, seeds won/lost); p: paired t-test, "
               f"Holm-adjusted over the {n_cmp} comparisons with FedAvg; * p < 0.05" if n_cmp else None)
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    cols = (("method", "MSE (mean ± std)", "RMSE", "R² (mean ± std)", "ΔMSE vs FedAvg (Holm p)", "conv. round", "s/run")
            if regression else
            ("method", "AUC (mean ± std)", "accuracy (mean ± std)", "ΔAUC vs FedAvg (Holm p)", "pooled AUC",
             "conv. round", "s/run"))
    for col in cols:
        table.add_column(col, justify="right" if col != "method" else "left")
    key = "mse_mean" if regression else "auc_mean"
    finite = [r for r in rows if r[key] == r[key]]
    best = ((min if regression else max)(finite, key=lambda r: r[key])["method"]) if finite else None
    for r in rows:
        name = f"[bold]{r['method']}[/]" if r["method"] == best and len(rows) > 1 else r["method"]
        if regression:
            cells = (f"{r['mse_mean']:.4g} ± {r['mse_std']:.2g}", f"{r['rmse_mean']:.4g}",
                     f"{r['r2_mean']:.3f} ± {r['r2_std']:.3f}", paired_cell(r, "mse"))
        else:
            cells = (f"{r['auc_mean']:.3f} ± {r['auc_std']:.3f}", f"{r['accuracy_mean']:.3f} ± {r['accuracy_std']:.3f}",
                     paired_cell(r), f"{r['pooled_auc_mean']:.3f}")
        table.add_row(name, *cells, f"{r['convergence_round_mean']:.1f}", f"{r['seconds_per_run']:.2f}")
    return table


def text_width() -> int:
    """Width to wrap listings to: the terminal's, between 40 and 100 columns."""
    return max(40, min(console.width, 100))


def print_wrapped(text: str, width: int, indent: str, subsequent: str | None = None) -> None:
    """Print ``text`` as one paragraph wrapped at ``width`` columns, verbatim (no markup)."""
    import textwrap

    wrapped = textwrap.fill(" ".join(text.split()), width, initial_indent=indent,
                            subsequent_indent=subsequent or indent, break_on_hyphens=False)
    console.print(wrapped, markup=False, highlight=False, soft_wrap=True)


def as_typed(value: Any) -> str:
    """A default as one would type it after ``-s``/``-p KEY=``: ``1,5`` for a tuple, ``true`` for True."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    if value == "":
        return '""'
    return str(value)


def print_methods() -> None:
    """Every method: its family, what it is, and each hyper-parameter with its default and meaning."""
    from topofl.methods import REGISTRY

    width = text_width()
    print_wrapped("Methods (server: a server aggregates; peer: neighbours on a --graph, no server), each "
                  "hyper-parameter with its default; set one with -p KEY=VALUE, or -p METHOD.KEY=VALUE for one method. "
                  "[tune: ...] is the search space `topofl tune` explores (tune on request: only with --tune-params).",
                  width, "")
    for name, m in REGISTRY.items():
        console.print()
        console.print(f"[bold]{escape(name)}[/] ({m.family})", highlight=False)
        print_wrapped(m.summary, width, "  ")
        spaces = m.config.search_space(list(m.config.search_space_names()))
        for key, (default, help_text) in m.config.field_help().items():
            space = spaces.get(key)
            tune = f" [tune: {space.describe()}{'' if space.tuned else ', on request'}]" if space is not None else ""
            print_wrapped(f"{key}={as_typed(default)}: {help_text}{tune}", width, "    ", "      ")


def print_models() -> None:
    """The registered models, in a table."""
    from topofl.models.registry import MODELS

    table = Table(title=escape("models (PyTorch ones need the torch extra: pip install 'topofl[torch]')"),
                  title_justify="left")
    table.add_column("model")
    table.add_column("what it is")
    for name, text in MODELS.items():
        table.add_row(name, escape(text))
    console.print(table)


def print_scenarios() -> None:
    """Every built-in scenario: what it is, and its parameters with their defaults."""
    import dataclasses

    from topofl.data.scenarios import DESCRIPTIONS, SCENARIOS

    width = text_width()
    print_wrapped("Scenarios (--scenario NAME), each with its parameters and their defaults; override one with "
                  "-s KEY=VALUE.", width, "")
    for name, (_, cfg) in SCENARIOS.items():
        console.print()
        console.print(f"[bold]{escape(name)}[/]", highlight=False)
        print_wrapped(DESCRIPTIONS[name], width, "  ")
        print_wrapped(", ".join(f"{f.name}={as_typed(f.default)}" for f in dataclasses.fields(cfg)), width, "  -s ",
                      "     ")
    from topofl.data.sources import SOURCES

    console.print()
    print_wrapped("Data sets of the Sheaf-FMTL experiments (--scenario NAME too; feature counts may differ between "
                  "clients, which only the peer-to-peer methods take):", width, "")
    for name, source in SOURCES.items():
        if name not in SCENARIOS:
            console.print(f"[bold]{escape(name)}[/]", highlight=False)
            print_wrapped(source.description, width, "  ")


def as_dict(row: Any) -> dict[str, Any]:
    """A Flower history row as a dict (rows are dicts or objects with ``as_dict``)."""
    return row if isinstance(row, dict) else row.as_dict()


class RoundTable:
    """What ``topofl run`` prints: one row per round as it finishes, then the final scores."""

    def __init__(self, title: str) -> None:
        self.table = Table(title=title, title_justify="left")
        for col in ("round", "AUC", "accuracy", "pooled AUC", "KB up", "KB down"):
            self.table.add_column(col, justify="right")
        self.history: Any = None

    def add(self, history: Any, s: Any) -> None:
        """``on_round`` callback: one row of a round's summary."""
        self.table.add_row(str(s.round), f"{s.auc:.3f}", f"{s.accuracy:.3f}", f"{s.pooled_auc:.3f}",
                           f"{s.bytes_up / 1024:.1f}", f"{s.bytes_down / 1024:.1f}")

    def done(self, method: str, seed: int, history: Any) -> None:
        """``on_run_done`` callback: keep the run's history."""
        self.history = history

    def print(self) -> Any:
        """Print the table, pTopoFL's clusters if any and the final scores; return the history."""
        console.print(self.table)
        log = self.history.server_logs[-1] if self.history.server_logs else {}  # peer methods may log nothing
        if "clusters" in log:
            console.print(f"clusters: {log['clusters']}  flagged: {log.get('flagged', [])}  "
                          f"re-clustered: {log.get('reclustered', [])}")
        f = self.history.final
        console.print(f"[bold]final[/] AUC {f['auc']:.3f} ± {f['auc_std']:.3f} (mean ± std over clients), "
                      f"accuracy {f['accuracy']:.3f}, pooled AUC {f['pooled_auc']:.3f}")
        return self.history


def print_flower(history: Any, title: str, seconds: float) -> None:
    """The per-round table of a Flower run, its failed or dropped replies and wall time."""
    table = Table(title=title, title_justify="left")
    rows = history.iterations or history.rounds  # a relayed peer run: every iteration, with its bits
    keys = [k for k in ("accuracy", "auc", "loss", "bits") if k in as_dict(rows[0])]
    for col in ("round", *keys):
        table.add_column(col, justify="right")
    for r in rows:
        d = as_dict(r)
        table.add_row(str(d["round"]), *(f"{d[k]:.4g}" for k in keys))
    console.print(table)
    failures = getattr(history, "failures", [])
    console.print(f"{len(failures)} failed or dropped repl{'y' if len(failures) == 1 else 'ies'}; {seconds:.1f} s wall"
                  + (f"; results in {history.out_dir}/" if history.out_dir else ""))


#: the columns of tuning_summary.csv shown under headings of their own (any other column leads each row)
_SUMMARY_COLUMNS = ("method", "trials", "failed", "metric", "validation_default", "validation_best", "best_trial",
                    "chosen", "defaults", "space", "seconds_per_trial", "tuning_seeds")
#: the columns of tuned_vs_default.csv and paired.csv shown under headings of their own (any other column, and
#: ``tuning`` and ``geometry``, leads each row)
_PAIRED_COLUMNS = ("method", "reference", "metric", "tuned", "n_seeds", "diff_mean", "ci_low", "ci_high", "tuned_wins",
                   "tuned_losses", "reference_wins", "other_wins", "p_value", "p_holm", "n_comparisons")
#: the paired tables :func:`print_tuning` prints where their file exists: (file stem, title, method column's heading)
_PAIRED_TABLES = (("tuned_vs_default", "Tuned − default on the test splits (paired over seeds)", "method"),
                  ("paired", "Reference − method on the test splits (paired over seeds)", "method"))


def _number(v: str, fmt: str = ".3f") -> str:
    """A CSV cell formatted as a number with ``fmt``: ``–`` for NaN or an empty cell, other text as it is."""
    try:
        x = float(v)
    except ValueError:
        return v or "–"
    return "–" if x != x else format(x, fmt)


def _star(p: str) -> str:
    """``*`` for a p-value cell below 0.05, else nothing."""
    try:
        return "*" if float(p) < 0.05 else ""
    except ValueError:
        return ""


def _tuning_summary_table(summary: list[dict[str, str]]) -> Table:
    """The table of each setting's chosen values and validation scores (the rows of tuning_summary.csv)."""
    extra = [c for c in (summary[0] if summary else {}) if c not in _SUMMARY_COLUMNS]
    table = Table(title="Tuning (validation splits; trial 0 = defaults)", title_justify="left")
    for col in (*extra, "method", "default", "best", "trial", "chosen values", "s/trial"):
        table.add_column(col, justify="left" if col in (*extra, "method", "chosen values") else "right")
    for r in summary:
        table.add_row(*(r[c] for c in extra), r["method"], _number(r["validation_default"]),
                      _number(r["validation_best"]), r["best_trial"], escape(r["chosen"]),
                      _number(r["seconds_per_trial"], ".2f"))
    return table


def _warn_failed_tunings(summary: list[dict[str, str]]) -> None:
    """Warn (on stderr) about the settings whose every trial failed."""
    doomed = [r for r in summary if r["trials"] == r["failed"]]
    if doomed:
        err_console.print(f"[bold red]Warning:[/] every trial failed for {len(doomed)} setting(s) "
                          f"({escape(', '.join(r['method'] for r in doomed[:4]))}): "
                          "their 'tuned' runs are the defaults, untested; trials.csv says why.", highlight=False)


def _paired_table(rows: list[dict[str, str]], title: str, sign: str) -> Table:
    """The table of paired differences on the test splits (the rows of tuned_vs_default.csv or paired.csv)."""
    lead = [c for c in (rows[0] if rows else {}) if c in ("tuning", "geometry") or c not in _PAIRED_COLUMNS]
    t = Table(title=title, title_justify="left", caption="p: paired t-test; Holm: adjusted over the comparisons of "
              "one family; * Holm p < 0.05", caption_justify="left")
    for col in (*lead, sign, "metric", "difference (95 % CI)", "won/lost", "p", "Holm p"):
        t.add_column(col, justify="left" if col in (*lead, sign, "metric") else "right")
    for r in rows:
        won = f"{r.get('tuned_wins', r.get('reference_wins'))}/{r.get('tuned_losses', r.get('other_wins'))}"
        name = r["method"] + (" (defaults kept)" if r.get("tuned") == "defaults kept" else "")
        t.add_row(*(r[c] for c in lead), name, r["metric"],
                  f"{_number(r['diff_mean'], '+.3f')} ({_number(r['ci_low'], '+.3f')}, "
                  f"{_number(r['ci_high'], '+.3f')})", won, _number(r["p_value"]),
                  _number(r["p_holm"]) + _star(r["p_holm"]))
    return t


def print_tuning(out: Path) -> None:
    """What ``topofl tune`` and ``experiment --tuned`` print: each setting's chosen values and
    validation scores, then tuned − default and (``tune``) reference − method on the test splits,
    with Holm-adjusted p (``*`` below 0.05).
    """
    from topofl.experiments.results import read_csv

    summary = read_csv(out / "tuning_summary.csv") if (out / "tuning_summary.csv").exists() else []
    console.print(_tuning_summary_table(summary))
    _warn_failed_tunings(summary)
    for stem, title, sign in _PAIRED_TABLES:
        path = out / f"{stem}.csv"
        if not path.exists():
            continue
        console.print(_paired_table(read_csv(path), title, sign))


log = logging.getLogger(__name__)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def method_hyperparameters(methods: Sequence[str], flat: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Route hyper-parameters to methods: ``"ptopofl.beta"`` to one method, a bare ``"lr"`` to every
    selected method that has it. A name no selected method knows is an error listing the known ones.
    """
    from topofl.methods import get as get_method

    out: dict[str, dict[str, Any]] = {m: {} for m in methods}
    for key, value in flat.items():
        if "." in key:
            method, name = key.split(".", 1)
            if method not in out:
                raise ValueError(f"hyper-parameter {key!r} names method {method!r}, which is not selected "
                                 f"({', '.join(methods)})")
            out[method][name] = value
            continue
        targets = [m for m in methods if key in get_method(m).config.field_help()]
        if not targets:
            known = sorted({f for m in methods for f in get_method(m).config.field_help()})
            raise ValueError(f"unknown hyper-parameter {key!r} for {', '.join(methods)}; known: {', '.join(known)}")
        for m in targets:
            out[m].setdefault(key, value)
    return out


#: Largest config file :func:`load_toml` reads (a run/compare file is a few hundred bytes).
MAX_CONFIG_BYTES = 1_000_000
#: Deepest nesting of tables and arrays a config file may have (the layout needs 3: ``[hyperparameters.METHOD]``
#: with a list value).
MAX_CONFIG_DEPTH = 16


def load_toml(path: Path) -> dict[str, Any]:
    """Read a run/compare TOML file (layout in docs/cli.md); every key's type is checked
    (:data:`CONFIG_KEYS`) and a wrong one is a ``ValueError`` naming the file and the key.

    Parameters
    ----------
    path : Path
        A UTF-8 TOML file (a leading byte-order mark is ignored) of at most
        :data:`MAX_CONFIG_BYTES` bytes, nesting tables and arrays at most
        :data:`MAX_CONFIG_DEPTH` levels deep.

    Raises
    ------
    ValueError
        One line naming the file: missing or unreadable, too large, not UTF-8, not TOML, nested
        too deeply, an unknown key or a value of the wrong type.
    """
    path = Path(path)
    where = f"config file {str(path)!r}"
    if not path.is_file():
        raise ValueError(f"{where} does not exist")
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ValueError(f"{where} is larger than {MAX_CONFIG_BYTES:,} bytes ({size:,}); "
                             "a run/compare config is a few lines")
        with path.open("rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"{where} cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_CONFIG_BYTES:  # grew since stat
        raise ValueError(f"{where} is larger than {MAX_CONFIG_BYTES:,} bytes; a run/compare config is a few lines")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{where} is not UTF-8 text (byte {exc.start} is {raw[exc.start:exc.start + 1]!r}); "
                         "save it as UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{where} is not valid TOML: {str(exc).splitlines()[0] if str(exc) else exc!r}") from None
    except RecursionError:
        raise ValueError(f"{where} nests deeper than TOML can be read here; "
                         f"at most {MAX_CONFIG_DEPTH} levels of tables and arrays") from None
    depth = _nesting(data) - 1  # the document itself is no level
    if depth > MAX_CONFIG_DEPTH:
        raise ValueError(f"{where} nests {depth} levels deep; at most {MAX_CONFIG_DEPTH} levels of tables and arrays")
    unknown = sorted(set(data) - set(CONFIG_KEYS))
    if unknown:
        shown = (", ".join(k if len(k) <= 40 else k[:30] + "..." for k in unknown[:12])
                 + (" ..." if len(unknown) > 12 else ""))
        raise ValueError(f"{where} has unknown key(s) {shown}; known: {', '.join(sorted(CONFIG_KEYS))}")
    for key, value in data.items():
        expected, ok = CONFIG_KEYS[key]
        if not ok(value):
            raise ValueError(f"{where}: {key} must be {expected}; got {_short(value)}")
    return data


def _nesting(value: Any) -> int:
    """How many tables and arrays ``value`` nests (a scalar: 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, Mapping):
            children: Any = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((c, depth + 1) for c in children)
    return deepest


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to about ``limit`` characters with its full length said."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 20]}... ({len(text)} characters)"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


#: the keys of a TOML file's [tuning] table (topofl tune), as the flags --trials, --tune-params, ... name them
TUNING_KEYS = ("trials", "params", "seeds", "validation_fraction", "metric", "sampler_seed")
#: the keys a run/compare TOML file may hold: (what the value must be, its check)
CONFIG_KEYS: dict[str, tuple[str, Any]] = {
    "scenario": ("a string, e.g. scenario = \"healthcare\"", lambda v: isinstance(v, str)),
    "method": ("a string, e.g. method = \"ptopofl\"", lambda v: isinstance(v, str)),
    "methods": ("a list of method names, e.g. methods = [\"ptopofl\", \"fedavg\"]",
                lambda v: isinstance(v, list) and bool(v) and all(isinstance(m, str) for m in v)),
    "seed": ("an integer", _is_int),
    "model": ("a model name such as \"cnn-small\" or \"package.module:factory\"",
              lambda v: isinstance(v, str) and bool(v)),
    "seeds": ("a string such as \"0-9\", an integer or a list of integers",
              lambda v: isinstance(v, str) or _is_int(v)
              or (isinstance(v, list) and bool(v) and all(_is_int(x) for x in v))),
    "rounds": ("an integer", _is_int),
    "client_fraction": ("a number in (0, 1]", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
    "graph": ("a graph kind, e.g. graph = \"ring\"", lambda v: isinstance(v, str) and bool(v)),
    "graph_params": ("a table ([graph_params] with KEY = VALUE lines)", lambda v: isinstance(v, Mapping)),
    "scenario_params": ("a table ([scenario_params] with KEY = VALUE lines)", lambda v: isinstance(v, Mapping)),
    "hyperparameters": ("a table ([hyperparameters] with KEY = VALUE lines, [hyperparameters.METHOD] for one method)",
                        lambda v: isinstance(v, Mapping)),
    "tuning": ("a table ([tuning] with any of " + ", ".join(TUNING_KEYS) + "; topofl tune)",
               lambda v: isinstance(v, Mapping) and set(v) <= set(TUNING_KEYS)),
}


def flatten_hyperparameters(table: Mapping[str, Any]) -> dict[str, Any]:
    """TOML ``[hyperparameters]`` (bare keys, and sub-tables per method) → ``{"lr": .., "ptopofl.beta": ..}``."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, Mapping):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return flat


def _drop_unselected(methods: Sequence[str], flat: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The file's hyper-parameters less those meant only for registered methods that are not
    selected (each dropped one logged); names of no registered method are kept, to fail later.
    """
    from topofl.methods import REGISTRY, available

    kept: dict[str, Any] = {}
    for key, value in flat.items():
        method, dot, name = key.partition(".")
        if not dot:
            method, name = "", key
        if method:
            if method not in REGISTRY:
                raise ValueError(f"{source}: hyper-parameter {key!r} names unknown method {method!r}; "
                                 f"available: {', '.join(available())}")
            if method not in methods:
                log.info("%s: %s ignored (method %s is not selected)", source, key, method)
                continue
        elif not any(name in REGISTRY[m].config.field_help() for m in methods) and any(
                name in m.config.field_help() for m in REGISTRY.values()):
            log.info("%s: %s ignored (no selected method has it)", source, key)
            continue
        kept[key] = value
    return kept


def route_hyperparameters(methods: Sequence[str], from_file: Mapping[str, Any], from_flags: Mapping[str, Any],
                          source: str = "config file") -> dict[str, dict[str, Any]]:
    """Route a config file's and the flags' hyper-parameters to ``methods``; a flag's value wins
    over the file's for the same method and name.

    One file may serve several commands, so the file's settings of registered methods that are not
    selected (``ptopofl.n_clusters`` with ``--methods fedavg``, or a bare ``n_clusters`` no
    selected method has) are ignored, each with a logged note (``--verbose`` shows it). A flag naming
    a method that is not selected, and a name no method knows, stay errors (:func:`method_hyperparameters`).
    """
    file_part = method_hyperparameters(methods, _drop_unselected(methods, from_file, source))
    flag_part = method_hyperparameters(methods, from_flags)
    return {m: {**file_part[m], **flag_part[m]} for m in methods}


def resolve(flag: Any, file: Mapping[str, Any], key: str, default: Any) -> Any:
    """A flag's value if given, else the config file's ``key``, else ``default``."""
    return flag if flag is not None else file.get(key, default)


def data_scenario(scenario: str | None, data: Path | None, site_column: str | None, label_column: str | None,
                  scenario_param: list[str] | None) -> tuple[str | None, list[str] | None]:
    """``--data PATH`` is the ``table`` scenario with ``path``/``site_column``/``label_column`` set."""
    if data is None:
        if site_column is not None or label_column is not None:
            raise ValueError("--site-column and --label-column go with --data")
        return scenario, scenario_param
    if scenario not in (None, "table"):
        raise ValueError(f"--data and --scenario {scenario!r} exclude each other")
    extra = [f"path={data}"] + ([f"site_column={site_column}"] if site_column is not None else []) + (
        [f"label_column={label_column}"] if label_column is not None else [])
    return "table", extra + list(scenario_param or [])


def jobs_from_options(o: Any, file: Mapping[str, Any], methods: Sequence[str], seeds: Any) -> list[Job]:
    """The jobs a ``run``/``compare``/``tune``/``flower`` command asks for: its shared options over
    the config ``file``'s values over the defaults of :class:`~topofl.job.Job`, for every method of
    ``methods`` on every seed of ``seeds`` (seed-major).
    """
    from topofl.data.sources import available as sources
    from topofl.experiments.compare import plan_compare
    from topofl.job import DEFAULT_DATA, DEFAULT_GRAPH, DEFAULT_ROUNDS, Job
    from topofl.methods import REGISTRY, available

    scenario, scenario_param = data_scenario(o.scenario, o.data, o.site_column, o.label_column, o.scenario_param)
    data = resolve(scenario, file, "scenario", DEFAULT_DATA)
    if data not in sources():
        raise ValueError(f"unknown scenario {data!r}; available: {', '.join(sources())}")
    scen = dict(file.get("scenario_params", {}))
    scen.update(parse_assignments(scenario_param or [], "--scenario-param"))
    chosen = tuple(dict.fromkeys(m.strip().lower() for m in methods if m.strip()))
    if not chosen:
        raise ValueError("--methods must name at least one method")
    for m in chosen:
        if m not in REGISTRY:
            raise ValueError(f"unknown method {m!r}; available: {', '.join(available())}")
    if isinstance(seeds, (list, tuple)):
        seeds = ",".join(map(str, seeds))
    hyperparameters = route_hyperparameters(chosen, flatten_hyperparameters(file.get("hyperparameters", {})),
                                            parse_assignments(o.param or [], "--param"))
    if o.secure_aggregation:
        if o.robust_defaults:
            raise ValueError("--secure-aggregation cannot be combined with --robust-defaults: the guarded mean reads "
                             "each client's model, which secure aggregation hides")
        hyperparameters = {m: secure_hyperparameters(m, hyperparameters[m]) for m in chosen}
    if o.robust_defaults:
        from topofl.deployment_defaults import deployment_hyperparameters

        hyperparameters = {m: deployment_hyperparameters(m, hyperparameters[m]) for m in chosen}
    graph_params = dict(file.get("graph_params", {}))
    graph_params.update(parse_assignments(o.graph_param or [], "--graph-param"))
    rounds = resolve(o.rounds, file, "rounds", DEFAULT_ROUNDS)
    template = Job(
        method=chosen[0], data=data, data_params=scen, rounds=rounds,
        client_fraction=float(resolve(o.client_fraction, file, "client_fraction", 1.0)),
        graph=resolve(o.graph, file, "graph", DEFAULT_GRAPH), graph_params=graph_params,
        model=resolve(o.model, file, "model", "linear"), input_shape=_input_shape(o.input_shape),
    )
    jobs = plan_compare(template, chosen, parse_seeds(seeds), hyperparameters)
    if o.rounds is None and "rounds" not in file:  # a peer iteration is one mini-batch step, not a round of epochs
        jobs = [j.with_(rounds=DEFAULT_PEER_ITERATIONS) if REGISTRY[j.method].family == "peer" else j for j in jobs]
    return jobs


#: iterations a peer-to-peer method runs when no --rounds is given: each is one mini-batch step (Sheaf-FMTL,
#: Algorithm 1), so the 15 rounds of the server-based methods (each several local epochs) would leave it
#: untrained — 15 steps gave Sheaf-FMTL accuracy 0.26 on digits, still rising; 100 steps are about the
#: gradient steps of 15 server rounds there (2 local epochs of a few mini-batches each)
DEFAULT_PEER_ITERATIONS = 100


def prediction_scores_table(scores: list[dict[str, Any]], title: str) -> Table:
    """``topofl predict``'s scores per site: rows, then accuracy and AUC (MSE and R² for regression)."""
    metrics = [m for m in ("accuracy", "auc", "mse", "r2") if any(m in r for r in scores)]
    table = Table(title=title)
    for col in ("site", "client", "rows", *metrics):
        table.add_column(col, justify="left" if col == "site" else "right")
    for r in scores:
        table.add_row(escape(str(r["site"])) or "–", str(r["client"]) if r["client"] != "" else "server",
                      str(r["rows"]), *(_number(str(r.get(m, float("nan")))) for m in metrics))
    return table


def _input_shape(text: str | None) -> tuple[int, ...] | None:
    """``--input-shape 1,8,8`` as a tuple (``ValueError`` naming the flag)."""
    if text is None:
        return None
    from topofl.models.registry import checked_input_shape

    try:
        return checked_input_shape(text)
    except ValueError as exc:
        raise ValueError(f"--input-shape: {exc}") from None


def secure_hyperparameters(method: str, hyperparameters: dict[str, Any]) -> dict[str, Any]:
    """``hyperparameters`` of ``method`` with ``secure_aggregation`` on, validated now: ``ValueError``
    naming the method when it cannot aggregate securely (its server reads each reply) or when another
    field (a robust rule, DP of the updates) contradicts it.
    """
    from topofl.methods import build, get

    if "secure_aggregation" not in {f.name for f in dataclasses.fields(get(method).config)}:
        raise ValueError(f"--secure-aggregation: {method} has no server to aggregate (secure aggregation is "
                         "implemented for fedavg, fedprox, ditto, perfedavg and ptopofl)")
    out = {**hyperparameters, "secure_aggregation": True}
    try:
        build(method, out)
    except ValueError as exc:
        raise ValueError(f"--secure-aggregation with {method}: {exc} (choose the methods, e.g. --methods "
                         "ptopofl,fedavg,fedprox,ditto,perfedavg)") from None
    return out


def experiment_overrides(o: Any) -> tuple[dict[str, Any], Callable[[list[Job]], list[Job]] | None]:
    """What ``topofl experiment``'s data, model and hyper-parameter options (over its ``--config``
    file) change in every planned job, and the function that changes them (``None``: nothing).

    ``--scenario``/``--data`` replace the data source (with ``-s``'s parameters), ``-s`` alone adds
    parameters to each job's own; ``-p`` is routed to the plan's methods as for ``compare`` (a
    bare name to every method that has it); ``--rounds``, ``--model``, ``--client-fraction``,
    ``--graph``/``-g`` replace the job's value. The experiment keeps its own methods.
    """
    file = load_toml(o.config) if o.config else {}
    for key in ("method", "methods", "seed", "seeds", "tuning"):
        if key in file:
            log.info("config file: %s ignored (an experiment plans its own methods and seeds; --seeds sets them)", key)
    scenario, scenario_param = data_scenario(o.scenario, o.data, o.site_column, o.label_column, o.scenario_param)
    changes: dict[str, Any] = {}
    data = resolve(scenario, file, "scenario", None)
    if data is not None:
        changes["data"] = data
    params = {**dict(file.get("scenario_params", {})), **parse_assignments(scenario_param or [], "--scenario-param")}
    for name, flag, key in (("rounds", o.rounds, "rounds"), ("model", o.model, "model"),
                            ("client_fraction", o.client_fraction, "client_fraction"), ("graph", o.graph, "graph")):
        value = resolve(flag, file, key, None)
        if value is not None:
            changes[name] = value
    graph_params = {**dict(file.get("graph_params", {})), **parse_assignments(o.graph_param or [], "--graph-param")}
    flat = {**flatten_hyperparameters(file.get("hyperparameters", {})), **parse_assignments(o.param or [], "--param")}
    said = {**changes, **({"data_params": params} if params else {}),
            **({"graph_params": graph_params} if graph_params else {}), **({"hyperparameters": flat} if flat else {})}
    if not said:
        return {}, None

    def adjust(jobs: list[Job]) -> list[Job]:
        methods = [m for m in dict.fromkeys(j.method for j in jobs) if not m.startswith("paper:")]
        routed = route_hyperparameters(methods, {}, flat, "--param") if flat else {}
        out = []
        for j in jobs:
            new = dict(changes)
            if params:
                new["data_params"] = params if "data" in changes else {**j.data_params, **params}
            elif "data" in changes:
                new["data_params"] = {}
            if graph_params:
                new["graph_params"] = {**({} if "graph" in changes else j.graph_params), **graph_params}
            if routed.get(j.method):
                new["hyperparameters"] = {**j.hyperparameters, **routed[j.method]}
            out.append(j.with_(**new))
        return out

    return said, adjust


def check_resume_overwrite(resume: bool, overwrite: bool) -> None:
    """``--resume`` and ``--overwrite`` exclude each other (a one-line ``ValueError``): the one continues
    the finished runs, the other deletes them, and an interruption's hint (``--resume``) must never wipe them.
    """
    if resume and overwrite:
        raise ValueError("--resume and --overwrite exclude each other: --resume continues the finished runs, "
                         "--overwrite deletes them first")


def check_out_is_free(path: Path, overwrite: bool, flag: str = "--out") -> None:
    """Refuse (one-line ``ValueError``) to write into a directory that already holds files, unless
    ``overwrite``: results of an earlier run are never replaced by surprise.
    """
    path = Path(path)
    if overwrite or not path.is_dir():
        return
    # a lock file left by a finished run holds no results
    entries = sorted(p.name for p in path.iterdir() if p.name != LOCK_NAME)
    if entries:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise ValueError(f"{flag} {str(path)!r} already holds files ({shown}); "
                         "pass --overwrite to replace the results in it, or choose another directory")


def prepare_out(path: Path, flag: str = "--out") -> Path:
    """Create output directory ``path`` (with its parents) or raise a one-line ``ValueError``
    naming the flag and what is wrong (a file in the way, no permission, ...).
    """
    path = Path(path)
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.is_dir():
            raise ValueError(f"{flag} {str(path)!r}: {str(parent)!r} is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{flag} {str(path)!r}: cannot create the directory ({exc.strerror or exc})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {str(path)!r}: the directory is not writable")
    return path


#: A command's default output is a fresh ROOT/run-NNNN per invocation (as Flower's run directories): the
#: counter is zero-padded to sort by name up to 9999 and ordered by its number beyond.
RUN_DIR_PREFIX = "run-"


_RUN_DIR_NAME = re.compile(rf"{RUN_DIR_PREFIX}([0-9]+)")
#: the run directories :func:`new_run_dir` made in this process, oldest first (what an error may remove)
_made_run_dirs: list[Path] = []


def run_dirs(root: Path) -> list[Path]:
    """The run directories ``root/run-NNNN`` (see :func:`new_run_dir`), oldest (lowest number) first;
    other entries of ``root`` are ignored.
    """
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir()
             if (m := _RUN_DIR_NAME.fullmatch(p.name)) is not None and p.is_dir()]
    return [p for _, p in sorted(found)]


def new_run_dir(root: Path, flag: str = "--out") -> Path:
    """Create and return a new, empty run directory ``root/run-NNNN``, one past the highest number there.

    ``mkdir`` is the claim: a directory another process made meanwhile is skipped for the next
    number, so concurrent commands never share one. ``root`` and its parents are created
    (:func:`prepare_out`: a one-line ``ValueError`` naming ``flag`` when that fails). A command
    that then ends with an error removes the directory again unless it holds finished runs
    (:func:`friendly_errors`).
    """
    root = prepare_out(root, flag)
    numbers = [int(p.name[len(RUN_DIR_PREFIX):]) for p in run_dirs(root)]
    n = max(numbers, default=0) + 1
    while True:
        candidate = root / f"{RUN_DIR_PREFIX}{n:04d}"
        try:
            candidate.mkdir()
        except FileExistsError:
            n += 1
            continue
        except OSError as exc:
            reason = exc.strerror or exc
            raise ValueError(f"{flag} {str(candidate)!r}: cannot create the directory ({reason})") from None
        _made_run_dirs.append(candidate)
        return candidate


def _drop_unfinished_run_dirs(keep: int) -> None:
    """Remove the run directories this process made after its first ``keep`` ones (:func:`new_run_dir`)
    that hold no finished run (no done-record, ``*.done.json``): a command that ended with an error
    leaves no empty run to become "the latest" of ``--resume`` or ``topofl report``.
    """
    while len(_made_run_dirs) > keep:
        run = _made_run_dirs.pop()
        if run.is_dir() and not any(run.rglob("*.done.json")):
            shutil.rmtree(run, ignore_errors=True)
            log.info("removed %s: the command ended with an error before any run finished", run)


def holds(run: Path, patterns: Sequence[str]) -> bool:
    """Whether run directory ``run`` holds an entry matching one of the glob ``patterns`` (relative to it)."""
    return any(next(iter(run.glob(p)), None) is not None for p in patterns)


def latest_run_dir(root: Path, holding: Sequence[str] = (), what: str = "") -> Path:
    """The highest-numbered run directory of ``root`` (what ``--resume`` without ``--out`` continues)
    holding an entry that matches one of the glob patterns ``holding`` (any run when empty); a
    one-line ``ValueError`` when there is none (``what`` names what was looked for: "of comparison").
    """
    dirs = [d for d in run_dirs(root) if not holding or holds(d, holding)]
    if not dirs:
        of = f" {what}" if what else ""
        raise ValueError(f"--resume: no earlier run{of} in {str(root)!r} (runs without --out go to "
                         f"{Path(root) / (RUN_DIR_PREFIX + 'NNNN')}); pass --out DIR to name the run to continue")
    return dirs[-1]


def default_out(out: Path | None, root: Path, resume: bool = False, holding: Sequence[str] = (),
                what: str = "") -> Path:
    """The directory a command writes into: ``out`` when given; else, with ``resume``, the latest
    run of ``root`` holding ``holding`` (:func:`latest_run_dir`), or else a new one (:func:`new_run_dir`).
    Says which on the console when it is not ``out``.
    """
    if out is not None:
        return Path(out)
    if resume:
        chosen = latest_run_dir(root, holding, what)
        console.print(f"resuming the latest run{' ' + what if what else ''}, {chosen}/ (--out DIR names another)",
                      highlight=False)
    else:
        chosen = new_run_dir(root)
        console.print(f"results go to {chosen}/ (a new run directory; --out DIR chooses another)", highlight=False)
    return chosen
