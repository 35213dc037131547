"""The topofl ServerApp: federated methods through the one round loop, decentralised ones through a relay.

``flwr run`` loads :data:`app`; its settings come from the run config (:mod:`topofl.flower.settings`).
For a federated method the server discovers the SuperNodes (a query message: partition id, data
sizes, task), builds the same algorithm object as the in-process runner and runs
:func:`topofl.federation.runner.run_rounds` with a :class:`~topofl.flower.pool.FlowerPool`.
Sheaf-FMTL, dFedU and D-PSGD go through :func:`topofl.flower.relay.relay_main`, which only
forwards each node's messages to its graph neighbours and never aggregates.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from topofl.federation.history import ROUND_FIELDS, History, RoundSummary
from topofl.federation.runner import run_rounds
from topofl.federation.validation import client_info
from topofl.flower.discovery import discover, new_run_id, reconcile
from topofl.flower.outputs import RunOutputs, resolve_run_dir, results_root
from topofl.flower.pool import FlowerPool
from topofl.flower.relay import relay_main
from topofl.flower.settings import FlowerSettings
from topofl.methods import build_server

log = logging.getLogger(__name__)

CURVE_FIELDS = ("round", "auc", "auc_std", "accuracy", "accuracy_std", "loss", "pooled_auc", "pooled_accuracy",
                "n_clients_auc", "bytes_up", "bytes_down", "n_clients", "n_failures")


def federated_main(grid: Grid, settings: FlowerSettings, run_id: Any = None, root: str | os.PathLike[str] | None = None) -> History:
    """Run a federated (server-based) topofl method on the connected SuperNodes.

    Results go to a fresh directory under the results root (:func:`topofl.flower.outputs.resolve_run_dir`),
    checked before any node is contacted; ``history.out_dir`` names it.
    """
    run_dir = resolve_run_dir(settings.out_dir, root if root is not None else results_root(), run_id if run_id is not None else new_run_id())
    nodes, infos, failures = discover(grid, settings)
    task, n_classes, n_features, left_out = reconcile(nodes, infos, settings, shared_features=True)
    failures.extend(left_out)
    algorithm = build_server(settings.method, dict(settings.hyperparameters))
    model = algorithm.build_model(settings.model, task, n_features, n_classes)
    job = {**settings.job(), "task": task, "n_classes": n_classes, "n_features": n_features}
    log.info("%s on %d SuperNode(s) (clients %s), %d round(s)", settings.method, len(nodes), sorted(nodes), settings.rounds)
    out = RunOutputs(run_dir, ROUND_FIELDS, CURVE_FIELDS)
    out.failures.extend(failures)

    def on_round(history: History, summary: RoundSummary) -> None:
        rows = [r for r in history.records if r["round"] == summary.round]
        fails = [f for f in history.failures if f.round == summary.round]
        out.round(rows, {**summary.as_dict(), "n_clients": len(rows), "n_failures": len(fails)}, history.server_logs[-1], fails)
        log.info("round %d: accuracy %.4f, auc %.4f over %d client(s); %d failure(s)", summary.round, summary.accuracy, summary.auc, len(rows), len(fails))

    pool = FlowerPool(grid, nodes, job, settings.round_timeout, {cid: client_info(cid, i) for cid, i in infos.items()})
    history = run_rounds(pool, algorithm, model, settings.rounds, settings.seed, min_replies=settings.min_replies, on_round=on_round)
    history.failures[:0] = failures
    history.out_dir = str(run_dir) if run_dir is not None else None
    out.finish(settings.method, settings.as_dict())
    return history


def run(grid: Grid, settings: FlowerSettings, run_id: Any = None, root: str | os.PathLike[str] | None = None) -> Any:
    """Dispatch to the federated loop or the decentralised relay."""
    if settings.decentralised:
        return relay_main(grid, settings, run_id, root)
    return federated_main(grid, settings, run_id, root)


def make_server_app(
    settings: FlowerSettings | None = None,
    on_result: Callable[[Any], None] | None = None,
    results_root: str | os.PathLike[str] | None = None,
) -> ServerApp:
    """A ServerApp running ``settings`` (default: read from the run config); ``on_result`` receives
    the run's history (used by :func:`topofl.flower.simulation.simulate_flower`). ``results_root``
    overrides this host's results root (for a local, trusted caller such as ``topofl flower``).
    """
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        s = settings if settings is not None else FlowerSettings.from_run_config(dict(context.run_config))
        result = run(grid, s, context.run_id, results_root)
        if on_result is not None:
            on_result(result)

    return server_app


app = make_server_app()
