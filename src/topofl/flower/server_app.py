"""The topofl ServerApp: federated methods through the one round loop, decentralised ones through a relay.

``flwr run`` loads :data:`app`; its settings come from the run config (:mod:`topofl.flower.settings`).
For a federated method the server discovers the SuperNodes (a query message: partition id, data
sizes, task), builds the same algorithm object as the in-process runner and runs
:func:`topofl.federation.runner.run_rounds` with a :class:`~topofl.flower.pool.FlowerPool`.
Sheaf-FMTL, dFedU and D-PSGD go through :func:`topofl.flower.relay.relay_main`, which only
forwards each node's messages to its graph neighbours and never aggregates.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from topofl.federation.history import ROUND_FIELDS, History, RoundSummary
from topofl.federation.pool import Failure
from topofl.federation.runner import RoundState, run_rounds
from topofl.federation.validation import client_info
from topofl.flower.checkpoint import load_checkpoint, remove_checkpoint, run_lock, save_checkpoint
from topofl.flower.discovery import discover, new_run_id, reconcile
from topofl.flower.outputs import (
    SERVER_CURVE_FIELDS,
    RunOutputs,
    resolve_run_dir,
    results_root,
    resume_run_dir,
    run_status,
)
from topofl.flower.pool import FlowerPool
from topofl.flower.relay import relay_main
from topofl.flower.settings import FlowerSettings
from topofl.methods import build_server

log = logging.getLogger(__name__)



def federated_main(grid: Grid, settings: FlowerSettings, run_id: Any = None,
                   root: str | os.PathLike[str] | None = None) -> History:
    """Run a federated (server-based) topofl method on the connected SuperNodes.

    Results go to a fresh directory under the results root (:func:`topofl.flower.outputs.resolve_run_dir`),
    checked before any node is contacted; ``history.out_dir`` names it. After every round the
    server's state is checkpointed there (:mod:`topofl.flower.checkpoint`); with ``resume-dir``
    the run continues the checkpointed run in its own directory, with that run's settings and
    clients. One ServerApp at a time writes a run directory
    (:func:`~topofl.flower.checkpoint.run_lock`).
    """
    root = root if root is not None else results_root()
    run_id = run_id if run_id is not None else new_run_id()
    if settings.resume_dir:
        run_dir: Path | None = resume_run_dir(settings.resume_dir, root)
        key = "resume-dir"
    else:
        run_dir = resolve_run_dir(settings.out_dir, root, run_id)
        key = "out-dir"
    with run_lock(run_dir, key) if run_dir is not None else contextlib.nullcontext():
        return _federated(grid, settings, run_dir, str(run_id))


def _federated(grid: Grid, settings: FlowerSettings, run_dir: Path | None, run_id: str) -> History:
    ckpt = None
    if settings.resume_dir:
        assert run_dir is not None  # resume_run_dir returned it
        if (run_dir / "result.json").is_file():
            raise ValueError(f"resume-dir={settings.resume_dir!r}: that run finished ({run_dir / 'result.json'}); "
                             "nothing to resume")
        ckpt = load_checkpoint(run_dir)
        settings = resumed_settings(settings, ckpt.settings)
        log.info("resuming %s in %s after round %d of %d", settings.job.method, run_dir, ckpt.round,
                 settings.job.rounds)
    nodes, infos, failures = discover(grid, settings)
    task, n_classes, n_features, left_out = reconcile(nodes, infos, settings, shared_features=True)
    failures.extend(left_out)
    algorithm = build_server(settings.job.method, dict(settings.job.hyperparameters))
    model = algorithm.build_model(settings.job.model, task, n_features, n_classes)
    # ``lineage``: the first run's id, kept by its resumptions, so nodes that keep state on disk
    # (node config state-dir) take it up again, and never from another run with the same settings
    job = {**settings.node_config(), "task": task, "n_classes": n_classes, "n_features": n_features, "lineage": run_id}
    clients = sorted(nodes)
    if ckpt is not None:
        job["lineage"] = ckpt.payload["job"]["lineage"]
        clients, infos, failures = _resumed_clients(settings, ckpt.payload, job, nodes, infos, failures)
        ckpt.cut_files()  # everything checked: now drop the rows written after the checkpoint
    log.info("%s on %d SuperNode(s) (clients %s), %d round(s)", settings.job.method, len(nodes), sorted(nodes),
             settings.job.rounds)
    out = RunOutputs(run_dir, ROUND_FIELDS, SERVER_CURVE_FIELDS)
    if ckpt is not None:
        out.restore(ckpt.payload["outputs"])
    out.failures.extend(failures)

    def on_round(history: History, summary: RoundSummary) -> None:
        rows = history.round_records(summary.round)
        fails = [f for f in history.failures if f.round == summary.round]
        out.round(rows, {**summary.as_dict(), "n_clients": len(rows), "n_failures": len(fails)},
                  history.server_logs[-1], fails)
        log.info("round %d: accuracy %.4f, auc %.4f over %d client(s); %d failure(s)", summary.round, summary.accuracy,
                 summary.auc, len(rows), len(fails))

    def on_checkpoint(state: RoundState) -> None:
        if run_dir is not None and state.round < settings.job.rounds:  # the last round's record is result.json
            save_checkpoint(run_dir, state.round, settings.as_dict(),
                            {"state": state, "outputs": out.state(), "job": job,
                             "clients": {c: infos[c] for c in clients}})

    declared = {cid: client_info(cid, infos[cid]) for cid in clients}
    server = ckpt.payload["state"].algorithm if ckpt is not None else algorithm  # the object run_rounds drives

    def schema(cid: int, message: Any) -> Any:
        return server.reply_schema(cid, message, declared[cid])

    pool = FlowerPool(grid, nodes, job, settings.round_timeout, declared, clients, schema=schema)
    history = run_rounds(pool, algorithm, model, settings.job.rounds, settings.job.seed,
                         client_fraction=settings.job.client_fraction, min_replies=settings.min_replies,
                         on_round=on_round, start=ckpt.payload["state"] if ckpt else None, on_checkpoint=on_checkpoint)
    history.failures[:0] = failures
    history.out_dir = str(run_dir) if run_dir is not None else None
    out.finish(settings.job.method, settings.as_dict(), run_status(out.failures, "round"))
    if run_dir is not None:
        remove_checkpoint(run_dir)  # result.json now records the run; a finished run is not resumed
    return history


def _resumed_clients(settings: FlowerSettings, payload: dict[str, Any], job: dict[str, Any], nodes: dict[int, int],
                     infos: dict[int, Any], failures: list[Failure]) -> tuple[list[int], dict[int, Any], list[Failure]]:
    """The checkpointed run's clients and their declarations, checked against the nodes found now.

    The resumed run has exactly the checkpointed clients, weighted by what they declared then (so
    selection and weights continue as if the run had never stopped): a node of another client, or
    one that now declares other data, is left out (a failure of stage ``resume-discover``); a
    checkpointed client with no node now fails in each round, as an absent node does. Other data
    for the whole federation (task, features, classes) is refused.
    """
    was = payload["job"]
    if was != job:
        diff = ", ".join(f"{k}: {was.get(k)!r} → {job[k]!r}" for k in sorted(job) if was.get(k) != job[k])
        raise ValueError(f"resume-dir={settings.resume_dir!r}: the SuperNodes now declare other data than the "
                         f"checkpointed run ({diff}); not resuming")
    declared: dict[int, Any] = payload["clients"]
    renamed = [dataclasses.replace(f, stage="resume-discover") for f in failures]
    for cid in sorted(nodes):
        reason = ("not a client of the checkpointed run" if cid not in declared else
                  "declares other data than in the checkpointed run" if infos[cid] != declared[cid] else None)
        if reason is not None:
            renamed.append(Failure(0, cid, "resume-discover", f"{reason}: left out", nodes.pop(cid)))
            log.warning("resume: client %d %s; left out", cid, reason)
    missing = sorted(set(declared) - set(nodes))
    if missing:
        log.warning("resume: client(s) %s of the checkpointed run have no SuperNode now; they fail in each round until "
                    "one joins", missing)
    return sorted(declared), dict(declared), renamed


def resumed_settings(given: FlowerSettings, saved: dict[str, Any]) -> FlowerSettings:
    """The checkpointed run's settings, with ``resume-dir`` and the operational keys (how long to
    wait for nodes and replies, which node holds which partition) of the resuming run; other keys of the resuming run
    that differ are ignored, with a warning naming them.
    """
    operational = ("resume_dir", "min_nodes", "node_wait", "round_timeout", "partition_nodes")
    try:
        base = FlowerSettings.from_saved({**{k: v for k, v in saved.items() if k not in operational},
                                          **{k: getattr(given, k) for k in operational}})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"resume-dir={given.resume_dir!r}: the checkpoint's settings are not valid settings "
                         f"({exc})") from None
    defaults, kept = FlowerSettings().as_dict(), base.as_dict()
    # the hyper-parameters the resuming run would have had without setting any (its method's deployment defaults)
    defaults["hyperparameters"] = dict(FlowerSettings.from_flat(method=given.job.method,
                                                                 robust_defaults=given.robust_defaults).job.hyperparameters)
    ignored = sorted(k for k, v in given.as_dict().items()
                     if k not in operational and v != defaults[k] and v != kept[k])
    if ignored:
        log.warning("resume-dir: the resumed run keeps its own settings; ignored: %s", ", ".join(ignored))
    return base


def run(grid: Grid, settings: FlowerSettings, run_id: Any = None, root: str | os.PathLike[str] | None = None) -> Any:
    """Dispatch to the federated loop or the decentralised relay."""
    if settings.decentralised:
        if settings.resume_dir:
            raise ValueError(f"resume-dir={settings.resume_dir!r}: a decentralised run keeps its state (models, "
                             "restriction maps) on the nodes, not on the relay, so it cannot be resumed; start it "
                             "again")
        return relay_main(grid, settings, run_id, root)
    return federated_main(grid, settings, run_id, root)


def make_server_app(
    settings: FlowerSettings | None = None,
    on_result: Callable[[Any], None] | None = None,
    results_root: str | os.PathLike[str] | None = None,
    on_error: Callable[[BaseException], None] | None = None,
) -> ServerApp:
    """A ServerApp running ``settings`` (default: read from the run config); ``on_result`` receives
    the run's history and ``on_error`` the exception that ended it (used by
    :func:`topofl.flower.simulation.simulate_flower`, which turns it into a failed exit).
    ``results_root`` overrides this host's results root (for a local, trusted caller such as
    ``topofl flower``).
    """
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        try:
            s = settings if settings is not None else FlowerSettings.from_run_config(dict(context.run_config))
            result = run(grid, s, context.run_id, results_root)
        except Exception as exc:
            log.error("the run failed: %s: %s", type(exc).__name__, exc)
            if on_error is not None:
                on_error(exc)
            raise
        if on_result is not None:
            on_result(result)

    return server_app


app = make_server_app()
