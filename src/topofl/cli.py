"""The ``topofl`` command line (typer + rich). ``topofl --help`` lists the commands."""
from __future__ import annotations

import functools
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from topofl._validation import check_int
from topofl.cli_parsing import (
    flatten_hyperparameters,
    load_toml,
    method_hyperparameters,
    parse_assignments,
    parse_seeds,
)
from topofl.limits import MAX_JOBS, MAX_ROUNDS
from topofl.methods import REGISTRY, available

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

console = Console()
err_console = Console(stderr=True)


def _hyperparameter_epilog() -> str:
    lines = ["Hyper-parameters (-p KEY=VALUE, or -p METHOD.KEY=VALUE for one method); `topofl methods` explains each:"]
    for name, m in REGISTRY.items():
        lines.append(f"{name} ({m.family}): " + ", ".join(f"{k}={v[0]}" for k, v in m.config.field_help().items()))
    return escape("\n\n".join(lines))


app = typer.Typer(
    help="topofl: topological federated learning (pTopoFL, baselines) on synthetic scenarios or your data.",
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    add_completion=False,
)


def friendly_errors(fn: Callable) -> Callable:
    """Turn bad input into a one-line message and exit code 2, never a traceback. The message is
    printed verbatim (rich markup escaped: ``topofl[flower]`` keeps its brackets).
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ValueError, FloatingPointError, OSError, ImportError, MemoryError) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            err_console.print(f"[bold red]Error:[/] {escape(msg)}", markup=True, highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err_console.print("[yellow]Interrupted[/]: results of finished rounds are already on disk.")
            raise typer.Exit(130) from None

    return wrapper


ScenarioOpt = typer.Option(None, "--scenario", help="Scenario: healthcare (default), benchmark or continual.")
RoundsOpt = typer.Option(None, "--rounds", "-r", help="Communication rounds (default 15).")
OutOpt = typer.Option(None, "--out", "-o", help="Directory for rounds.csv, curves.csv, summary.csv, config.json.")
ParamOpt = typer.Option(None, "--param", "-p", help="Hyper-parameter KEY=VALUE (repeatable); METHOD.KEY=VALUE targets one method.")
ScenParamOpt = typer.Option(
    None, "--scenario-param", "-s", help="Scenario parameter KEY=VALUE (repeatable), e.g. flip_rate=0.5; `topofl scenarios` lists them."
)
ConfigOpt = typer.Option(
    None, "--config", "-c",
    help=escape("TOML file with any of: scenario, method(s), seed(s), rounds, client_fraction, [scenario_params], [hyperparameters]; flags override it."),
)
FractionOpt = typer.Option(None, "--client-fraction", help="Fraction of clients selected per round, in (0, 1] (default 1).")
VerboseOpt = typer.Option(False, "--verbose", "-v", help="Log debug messages.")


def _resolve(flag: Any, file: dict[str, Any], key: str, default: Any) -> Any:
    return flag if flag is not None else file.get(key, default)


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


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


GraphOpt = typer.Option(
    None, "--graph",
    help="Communication graph of peer-to-peer methods (sheaf, dfedu, dpsgd, local-peers): "
    "erdos_renyi (default), watts_strogatz, barabasi_albert, complete, ring, star.",
)
GraphParamOpt = typer.Option(None, "--graph-param", "-g", help="Graph parameter KEY=VALUE (repeatable), e.g. p=0.3 for erdos_renyi.")
ModelOpt = typer.Option(
    None, "--model",
    help="Model every client trains: linear (default), cnn-small, cnn-medium, cnn-large, convnet2, resnet18, mlp, "
    "or package.module:factory (a torch.nn.Module); `topofl models` lists them.",
)
DataOpt = typer.Option(
    None, "--data",
    help="Your own data: a CSV file with a site column (one client per site), or a directory with one CSV or NPZ (X, y) per site.",
)
SiteColumnOpt = typer.Option(None, "--site-column", help="--data: the column naming each row's site (default: site).")
LabelColumnOpt = typer.Option(None, "--label-column", help="--data: the label column (default: y).")
SaveModelsOpt = typer.Option(
    None, "--save-models",
    help="Directory for the trained models: DIR/METHOD-seedK.npz with every client's final model and the server's (topofl.load_models).",
)


def _data_scenario(scenario: str | None, data: Path | None, site_column: str | None, label_column: str | None,
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


def _build_spec(scenario, methods, seeds, rounds, params, scenario_params, config, client_fraction, graph=None, graph_param=None,
                model=None):
    from topofl.experiments.compare import CompareSpec

    file = load_toml(config) if config else {}
    flat = flatten_hyperparameters(file.get("hyperparameters", {}))
    flat.update(parse_assignments(params or [], "--param"))
    scen = dict(file.get("scenario_params", {}))
    scen.update(parse_assignments(scenario_params or [], "--scenario-param"))
    methods = tuple(m.strip().lower() for m in methods if m.strip())
    if not methods:
        raise ValueError("--methods must name at least one method")
    for m in methods:
        if m not in REGISTRY:
            raise ValueError(f"unknown method {m!r}; available: {', '.join(available())}")
    if isinstance(seeds, (list, tuple)):
        seeds = ",".join(map(str, seeds))
    check_int("rounds", rounds, 1, MAX_ROUNDS)
    return CompareSpec(
        scenario=scenario,
        methods=methods,
        seeds=parse_seeds(seeds),
        rounds=rounds,
        client_fraction=float(client_fraction),
        scenario_params=scen,
        hyperparameters=method_hyperparameters(methods, flat),
        graph=graph or "erdos_renyi",
        graph_params=parse_assignments(graph_param or [], "--graph-param"),
        model=model or file.get("model", "linear"),
    )


def _paired_cell(r: dict[str, Any]) -> str:
    """``+0.018 ±0.008 10/0``: the method's AUC minus FedAvg's, paired over seeds (± half the 95 % t-interval; seeds won/lost)."""
    d = r.get("auc_vs_fedavg_mean", float("nan"))
    if d != d:
        return "–"
    half = (r["auc_vs_fedavg_ci_high"] - r["auc_vs_fedavg_ci_low"]) / 2
    ci = f" ±{half:.3f}" if half == half else ""
    return f"{d:+.3f}{ci} {r['auc_vs_fedavg_wins']}/{r['auc_vs_fedavg_losses']}"


def _summary_table(rows: list[dict[str, Any]], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("method", "AUC (mean ± std)", "accuracy (mean ± std)", "ΔAUC vs FedAvg", "pooled AUC", "conv. round", "s/run"):
        table.add_column(col, justify="right" if col != "method" else "left")
    best = max(rows, key=lambda r: r["auc_mean"] if r["auc_mean"] == r["auc_mean"] else -1)["method"]
    for r in rows:
        name = f"[bold]{r['method']}[/]" if r["method"] == best and len(rows) > 1 else r["method"]
        table.add_row(
            name,
            f"{r['auc_mean']:.3f} ± {r['auc_std']:.3f}",
            f"{r['accuracy_mean']:.3f} ± {r['accuracy_std']:.3f}",
            _paired_cell(r),
            f"{r['pooled_auc_mean']:.3f}",
            f"{r['convergence_round_mean']:.1f}",
            f"{r['seconds_per_run']:.2f}",
        )
    return table


@app.command()
@friendly_errors
def compare(
    scenario: Optional[str] = ScenarioOpt,
    data: Optional[Path] = DataOpt,
    site_column: Optional[str] = SiteColumnOpt,
    label_column: Optional[str] = LabelColumnOpt,
    methods: Optional[str] = typer.Option(None, "--methods", "-m", help="Comma-separated methods (default: all available)."),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="Seeds: 0-9 (default), 0,3,7, or 0-4,10."),
    rounds: Optional[int] = RoundsOpt,
    out: Optional[Path] = OutOpt,
    param: Optional[list[str]] = ParamOpt,
    scenario_param: Optional[list[str]] = ScenParamOpt,
    config: Optional[Path] = ConfigOpt,
    client_fraction: Optional[float] = FractionOpt,
    graph: Optional[str] = GraphOpt,
    graph_param: Optional[list[str]] = GraphParamOpt,
    model: Optional[str] = ModelOpt,
    verbose: bool = VerboseOpt,
) -> None:
    """Compare methods over seeds on a scenario: a table of final AUC and accuracy (mean ± std over
    seeds; each seed's value is the mean over clients of each client's score with the model it
    would use), pooled AUC and convergence round; writes DIR/rounds.csv and DIR/summary.csv.

    With no flags: the healthcare comparison of every server-based method, seeds 0-9, 15 rounds.
    Peer-to-peer methods (sheaf, dfedu, dpsgd, local-peers) run on --graph and join the same table.
    """
    _setup_logging(verbose)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from topofl.experiments.compare import run_compare

    file = load_toml(config) if config else {}
    scenario, scenario_param = _data_scenario(scenario, data, site_column, label_column, scenario_param)
    scenario = _resolve(scenario, file, "scenario", "healthcare")
    method_list = (methods.split(",") if methods is not None else file.get("methods", available("server")))
    spec = _build_spec(
        scenario, method_list, _resolve(seeds, file, "seeds", "0-9"), _resolve(rounds, file, "rounds", 15),
        param, scenario_param, config, _resolve(client_fraction, file, "client_fraction", 1.0), graph, graph_param, model,
    )
    out = prepare_out(out or Path("results") / f"compare-{spec.scenario}")
    total = len(spec.methods) * len(spec.seeds) * spec.rounds
    t0 = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=True, disable=not err_console.is_terminal) as bar:
        task = bar.add_task("comparing", total=total)

        def tick(history, summary) -> None:
            bar.update(task, advance=1, description=f"{history.method} seed {history.seed} round {summary.round}")

        rows = run_compare(spec, out, on_round=tick)
    console.print(_summary_table(rows, f"{spec.scenario}: {len(spec.seeds)} seeds × {spec.rounds} rounds"))
    console.print(f"[dim]{time.perf_counter() - t0:.1f} s · results in {out}/ (rounds.csv, curves.csv, summary.csv, server_log.jsonl, config.json)[/]")


compare.__doc__ = (compare.__doc__ or "") + "\n\n" + _hyperparameter_epilog()


@app.command()
@friendly_errors
def run(
    scenario: Optional[str] = ScenarioOpt,
    data: Optional[Path] = DataOpt,
    site_column: Optional[str] = SiteColumnOpt,
    label_column: Optional[str] = LabelColumnOpt,
    method: Optional[str] = typer.Option(None, "--method", "-m", help="Method to run (default ptopofl); `topofl methods` lists them."),
    rounds: Optional[int] = RoundsOpt,
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of every random choice (default 0)."),
    out: Optional[Path] = OutOpt,
    param: Optional[list[str]] = ParamOpt,
    scenario_param: Optional[list[str]] = ScenParamOpt,
    config: Optional[Path] = ConfigOpt,
    client_fraction: Optional[float] = FractionOpt,
    graph: Optional[str] = GraphOpt,
    graph_param: Optional[list[str]] = GraphParamOpt,
    model: Optional[str] = ModelOpt,
    save_models: Optional[Path] = SaveModelsOpt,
    verbose: bool = VerboseOpt,
) -> None:
    """Run one method with one seed and print its per-round metrics; with --out, write results.
    Peer-to-peer methods (sheaf, dfedu, dpsgd, local-peers) run on --graph.
    """
    _setup_logging(verbose)
    from topofl.experiments.compare import run_compare

    file = load_toml(config) if config else {}
    scenario, scenario_param = _data_scenario(scenario, data, site_column, label_column, scenario_param)
    spec = _build_spec(
        _resolve(scenario, file, "scenario", "healthcare"), [_resolve(method, file, "method", "ptopofl")],
        str(_resolve(seed, file, "seed", 0)), _resolve(rounds, file, "rounds", 15), param, scenario_param, config,
        _resolve(client_fraction, file, "client_fraction", 1.0), graph, graph_param, model,
    )
    if out is not None:
        prepare_out(out)
    if save_models is not None:
        prepare_out(save_models, "--save-models")
    table = Table(title=f"{spec.methods[0]} on {spec.scenario}, seed {spec.seeds[0]}", title_justify="left")
    for col in ("round", "AUC", "accuracy", "pooled AUC", "KB up", "KB down"):
        table.add_column(col, justify="right")
    result: dict[str, Any] = {}

    def row(history, s) -> None:
        table.add_row(str(s.round), f"{s.auc:.3f}", f"{s.accuracy:.3f}", f"{s.pooled_auc:.3f}", f"{s.bytes_up / 1024:.1f}", f"{s.bytes_down / 1024:.1f}")

    def done(method, seed, history) -> None:
        result["history"] = history

    run_compare(spec, out, on_round=row, on_run_done=done)
    console.print(table)
    history = result["history"]
    log = history.server_logs[-1]
    if "clusters" in log:
        console.print(f"clusters: {log['clusters']}  flagged: {log['flagged']}  re-clustered: {log['reclustered']}")
    f = history.final
    console.print(
        f"[bold]final[/] AUC {f['auc']:.3f} ± {f['auc_std']:.3f} (mean ± std over clients), accuracy {f['accuracy']:.3f}, pooled AUC {f['pooled_auc']:.3f}"
    )
    if save_models is not None:
        from topofl.models.io import save_models as save

        path = save(history, save_models / f"{spec.methods[0]}-seed{spec.seeds[0]}.npz")
        console.print(f"models of {len(history.client_models)} client(s) saved to {path}")
    if out:
        console.print(f"[dim]results in {out}/[/]")


run.__doc__ = (run.__doc__ or "") + "\n\n" + _hyperparameter_epilog()

DataRootOpt = typer.Option(None, "--data-root", help="Real CIFAR-10 pickles or LEAF FEMNIST JSON (experiment deep): the paper's protocol.")
ExperimentsOutOpt = typer.Option(Path("results/experiments"), "--out", "-o", help="Directory; each experiment writes into DIR/NAME/.")


@app.command()
@friendly_errors
def experiment(
    name: str = typer.Argument(
        ...,
        help="pTopoFL: comparison, robustness, continual, privacy, ablation, diagrams, deep (CNNs, Table 2), all (all of them + report). "
        "Sheaf-FMTL: sheaf-digits, sheaf-hetero, sheaf-topology, sheaf-init, sheaf-mnist (CNNs), sheaf-all.",
    ),
    seeds: Optional[str] = typer.Option(
        None, "--seeds", help="Seeds: 0-9, 0,3,7, or 0-4,10 (default: 0-9 for pTopoFL experiments, 0-4 — the paper's five runs — for Sheaf-FMTL ones)."
    ),
    out: Path = ExperimentsOutOpt,
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted experiment: skip finished runs, redo partial ones."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Delete earlier results of this experiment first."),
    jobs: int = typer.Option(min(2, os.cpu_count() or 1), "--jobs", "-j", help="Runs executed in parallel (processes)."),
    quick: bool = typer.Option(False, "--quick", help="The budget that fits about 15 minutes on 2 cores (experiments deep, sheaf-mnist)."),
    smoke: bool = typer.Option(False, "--smoke", help="A smoke-test budget (a few rounds on a few hundred digits)."),
    data_root: Optional[Path] = DataRootOpt,
    verbose: bool = VerboseOpt,
) -> None:
    """Run one of the pTopoFL paper's experiments (or all of them and the report), writing tidy
    results as runs finish; --resume continues an interrupted one with identical final results.
    """
    _setup_logging(verbose)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from topofl.experiments.driver import GROUPS, default_seeds, experiment_names, run_experiment, total_runs
    from topofl.experiments.report import build_report

    if name not in experiment_names():
        raise ValueError(f"unknown experiment {name!r}; available: {', '.join(experiment_names())}")
    check_int("--jobs", jobs, 1, MAX_JOBS)
    if quick and smoke:
        raise ValueError("--quick and --smoke exclude each other")
    profile = "smoke" if smoke else "quick" if quick else "full"
    root = str(data_root) if data_root is not None else None
    seed_list = parse_seeds(seeds) if seeds is not None else default_seeds(name)
    names = list(GROUPS.get(name, (name,)))
    prepare_out(out)
    t0 = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                  console=err_console, transient=False) as bar:
        task = bar.add_task("runs", total=max(1, total_runs(names, seed_list, profile, root)))
        for n in names:
            bar.update(task, description=f"{n}")

            def tick(spec, done) -> None:
                bar.update(task, advance=1, description=f"{spec.experiment}: {spec.label or spec.method} seed {spec.seed}")

            exp_dir = run_experiment(n, seed_list, out, resume=resume, overwrite=overwrite, jobs=jobs, on_done=tick, profile=profile,
                                     data_root=root)
            console.print(f"[green]✓[/] {n}: results in {exp_dir}/")
    if name in GROUPS:
        console.print(f"report: {build_report(out)}")
    console.print(f"[dim]{time.perf_counter() - t0:.1f} s[/]")


ReportDirArg = typer.Argument(Path("results/experiments"), help="Experiments directory (as given to --out).")


@app.command()
@friendly_errors
def report(out: Path = ReportDirArg) -> None:
    """Write DIR/report.html (self-contained: every table and figure, configuration, versions)."""
    from topofl.experiments.report import build_report

    console.print(f"report: {build_report(out)}")


@app.command()
def methods() -> None:
    """List every method of both families and each hyper-parameter with its default and meaning."""
    overview = Table(title="methods (server: a server aggregates; peer: neighbours on a graph, no server)", title_justify="left")
    for col in ("method", "family", "what it is"):
        overview.add_column(col)
    for name, m in REGISTRY.items():
        overview.add_row(name, m.family, escape(m.summary))
    console.print(overview)
    for name, m in REGISTRY.items():
        table = Table(title=f"{name} ({m.family}) — {escape(m.summary)}", title_justify="left")
        table.add_column("hyper-parameter")
        table.add_column("default", justify="right")
        table.add_column("meaning")
        for key, (default, help_text) in m.config.field_help().items():
            table.add_row(key, escape(str(default)), escape(help_text))
        console.print(table)


@app.command()
def models() -> None:
    """List the registered models (--model NAME); any torch.nn.Module works too (package.module:factory)."""
    from topofl.models.registry import MODELS

    table = Table(title=escape("models (PyTorch ones need the torch extra: pip install 'topofl[torch]')"), title_justify="left")
    table.add_column("model")
    table.add_column("what it is")
    for name, text in MODELS.items():
        table.add_row(name, escape(text))
    console.print(table)


@app.command()
def scenarios() -> None:
    """List the built-in scenarios and their parameters (override with -s KEY=VALUE)."""
    import dataclasses

    from topofl.data.scenarios import SCENARIOS

    for name, (fn, cfg) in SCENARIOS.items():
        doc = (sys.modules[fn.__module__].__doc__ or "").strip().splitlines()[0]
        table = Table(title=f"{name} — {doc}", title_justify="left")
        table.add_column("parameter")
        table.add_column("default", justify="right")
        for f in dataclasses.fields(cfg):
            table.add_row(f.name, str(f.default))
        console.print(table)


FlowerParamOpt = typer.Option(None, "--param", "-p", help="Hyper-parameter KEY=VALUE (repeatable).")
FlowerOutOpt = typer.Option(
    None, "--out", "-o", help="Directory; the run writes rounds.csv, curves.csv, failures.jsonl and result.json into a fresh DIR/run-<id>/."
)


@app.command("flower")
@friendly_errors
def flower(
    method: str = typer.Option("ptopofl", "--method", "-m", help="A federated method, or sheaf / dfedu / dpsgd / local-peers (relayed)."),
    scenario: str = typer.Option("healthcare", "--scenario", help="Built-in scenario the virtual SuperNodes take their partitions from."),
    rounds: int = typer.Option(3, "--rounds", "-r", help="Rounds (iterations for decentralised methods)."),
    seed: int = typer.Option(0, "--seed", help="Seed of every random choice."),
    nodes: Optional[int] = typer.Option(None, "--nodes", help="Virtual SuperNodes (default: the scenario's clients)."),
    param: Optional[list[str]] = FlowerParamOpt,
    scenario_param: Optional[list[str]] = ScenParamOpt,
    graph: str = typer.Option("ring", "--graph", help="Communication graph of decentralised methods."),
    out: Optional[Path] = FlowerOutOpt,
    pooled_metrics: bool = typer.Option(False, "--pooled-metrics", help="Clients also send test labels and scores (pooled AUC)."),
    cpus_per_node: float = typer.Option(1.0, "--cpus-per-node", help="Ray CPUs per ClientApp (1 runs two at once on 2 cores)."),
    verbose: bool = VerboseOpt,
) -> None:
    """Run a method on Flower's Simulation Runtime (Ray), with the ServerApp and ClientApp `flwr run` uses.

    Needs the flower extra: pip install "topofl[flower]". For real sites see examples/flower-app.
    """
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not verbose:  # Flower logs its own DEBUG lines through the root handler: keep topofl's INFO, others' WARNING+
        for handler in logging.getLogger().handlers:
            handler.addFilter(lambda r: r.name.startswith("topofl") or r.levelno >= logging.WARNING)
    from topofl.flower import FlowerSettings, simulate_flower

    if out is not None:
        prepare_out(out)
    settings = FlowerSettings(
        method=method, scenario=scenario, rounds=rounds, seed=seed, graph=graph, pooled_metrics=pooled_metrics,
        hyperparameters=parse_assignments(param or [], "--param"),
        scenario_params=parse_assignments(scenario_param or [], "--scenario-param"), out_dir="." if out else "",
    )
    started = time.perf_counter()
    history = simulate_flower(settings, nodes, cpus_per_node=cpus_per_node, verbose=verbose, results_root=out)
    table = Table(title=f"{method} on Flower's Simulation Runtime, {scenario}, seed {seed}", title_justify="left")
    keys = [k for k in ("accuracy", "auc", "loss", "bits") if k in _as_dict(history.rounds[0])]
    for col in ("round", *keys):
        table.add_column(col, justify="right")
    for r in history.rounds:
        d = _as_dict(r)
        table.add_row(str(d["round"]), *(f"{d[k]:.4g}" for k in keys))
    console.print(table)
    failures = getattr(history, "failures", [])
    console.print(f"{len(failures)} failed or dropped repl{'y' if len(failures) == 1 else 'ies'}; {time.perf_counter() - started:.1f} s wall"
                  + (f"; results in {history.out_dir}/" if history.out_dir else ""))


def _as_dict(row: Any) -> dict[str, Any]:
    return row if isinstance(row, dict) else row.as_dict()


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
