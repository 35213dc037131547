"""Flower's Simulation Runtime from Python: ``simulate_flower`` runs a topofl job on N virtual SuperNodes.

It is the in-process entry point (tests, notebooks, ``topofl flower simulate``); ``flwr run``
on ``examples/flower-app`` is the user-facing one. Both run the same ServerApp and ClientApp.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import warnings
from typing import Any

from topofl.flower.settings import FlowerSettings

log = logging.getLogger(__name__)


class FlowerRunFailed(RuntimeError):
    """A Flower run ended without a result; the message says why (the ServerApp's error)."""


def simulate_flower(
    settings: FlowerSettings | None = None,
    n_nodes: int | None = None,
    *,
    cpus_per_node: float = 1.0,
    verbose: bool = False,
    results_root: str | os.PathLike[str] | None = None,
    **run_config: Any,
) -> Any:
    """Run a topofl job on Flower's Simulation Runtime (Ray) and return its history.

    Parameters
    ----------
    settings : FlowerSettings, optional
        The job; or give run-config keys as keywords with underscores (``method="ptopofl",
        num_server_rounds=3, scenario_params="n_clients=4"``).
    n_nodes : int, optional
        Virtual SuperNodes; default: the scenario's number of clients.
    cpus_per_node : float
        Ray CPUs per ClientApp (1 lets two run at once on 2 cores).
    results_root : path, optional
        Root that the settings' ``out_dir`` is resolved in (default: ``$TOPOFL_RESULTS_ROOT`` or
        ``./results``); the run writes into a fresh ``run-<id>`` directory there (``history.out_dir``).

    Returns
    -------
    Result
        As :func:`topofl.simulate` / :func:`topofl.simulate_decentralised` return, so the two
        runtimes can be compared number for number.
    """
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    from flwr.simulation import run_simulation

    from topofl.flower.client_app import app as client_app
    from topofl.flower.server_app import make_server_app

    if settings is None:
        settings = FlowerSettings.from_run_config({k.replace("_", "-"): v for k, v in run_config.items()})
    elif run_config:
        raise ValueError("pass either settings or run-config keywords, not both")
    if n_nodes is None:
        from topofl.data.scenarios import make_scenario

        run = settings
        if settings.resume_dir:  # the nodes the checkpointed run had
            from topofl.flower.checkpoint import checkpoint_settings
            from topofl.flower.outputs import resume_run_dir

            root = results_root if results_root is not None else os.environ.get("TOPOFL_RESULTS_ROOT") or "results"
            saved = checkpoint_settings(resume_run_dir(settings.resume_dir, root))
            try:
                run = FlowerSettings.from_saved(saved)
            except TypeError as exc:
                raise ValueError(f"resume-dir={settings.resume_dir!r}: checkpoint.json's settings are not valid "
                                 f"settings ({exc})") from None
        n_nodes = len(make_scenario(run.job.data, run.job.seed, **dict(run.job.data_params)))
    if settings.min_nodes < n_nodes:
        settings = dataclasses.replace(settings, min_nodes=n_nodes)
    results: list[Any] = []
    errors: list[BaseException] = []
    backend: dict[str, dict[str, Any]] = {
        "client_resources": {"num_cpus": cpus_per_node, "num_gpus": 0.0},
        "init_args": {"logging_level": "error", "log_to_driver": verbose, "include_dashboard": False},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # run_simulation's own deprecation notice
        try:
            run_simulation(make_server_app(settings, results.append, results_root, errors.append), client_app,
                           num_supernodes=n_nodes, backend_config=backend, verbose_logging=verbose)
        except ValueError:
            raise  # bad input (settings, a checkpoint that does not verify): the caller's error, with its message
        except Exception as exc:
            raise FlowerRunFailed(f"the Flower run failed: {type(exc).__name__}: {exc}") from exc
    if errors:
        raise FlowerRunFailed(f"the Flower run failed: {type(errors[0]).__name__}: {errors[0]}")
    if not results:
        raise FlowerRunFailed("the Flower simulation ended without a result; see the log above")
    return results[0]
