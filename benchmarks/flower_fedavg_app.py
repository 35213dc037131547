"""Flower's own FedAvg on the job of ``bench_deep_round.py``: what a user would run instead of topofl.

A minimal Flower app, written as Flower's documentation writes one (Flower 1.41's Message API, no
topofl in the loop): the ServerApp runs ``flwr.serverapp.strategy.FedAvg`` (sample-size weights,
every node trains and evaluates every round); the ClientApp loads its MNIST-10k partition once per
process, receives the model as Flower's per-layer ``ArrayRecord``, runs the benchmark's local
epoch (the same batches, learning rate and L2 penalty as the bare PyTorch loop and topofl) and
replies with its layers and ``num-examples``; evaluation scores the global model on the node's
test split (accuracy and loss). The only addition is a timestamp as each round's evaluation is
aggregated (``StampedFedAvg``), read by the benchmark.

Run by :func:`run` through ``flwr.simulation.run_simulation`` in the benchmark's process; the
ClientApp is imported by module name in Ray's workers (the benchmark puts this folder on
``PYTHONPATH``).
"""
from __future__ import annotations

import os
import time
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from topofl.data.scenarios import make_scenario
from topofl.models.registry import build_model

LR, BATCH, L2 = 0.05, 32, 1e-3


@lru_cache(maxsize=2)
def _job(name: str, n_clients: int) -> tuple[Any, Any]:
    """The federation (topofl's ``mnist`` scenario, the data of the topofl runs) and the torch module."""
    fed = make_scenario("mnist", 0, n_clients=n_clients, partition="iid", n_samples=10_000, min_size=10)
    model = build_model(name, task="multiclass", n_features=784, n_classes=10, l2=L2)
    return fed, model


def _client(context: Context, msg: Message) -> tuple[Any, Any, torch.nn.Module]:
    cfg = msg.content["config"]
    fed, model = _job(str(cfg["model"]), int(cfg["n-clients"]))
    data = fed.clients[int(context.node_config["partition-id"])]
    module = model._rt.module
    module.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    return data, model, module


client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """One local epoch of mini-batch SGD (the bare loop's steps), replying with the module's layers."""
    data, model, module = _client(context, msg)
    rnd, seed = int(msg.content["config"]["server-round"]), 0
    params = list(module.parameters())
    weights = {id(p) for p in params if p.ndim > 1}
    X = torch.from_numpy(data.X_train).to(torch.float32).reshape(-1, *model.input_shape)
    y = torch.from_numpy(data.y_train.astype(np.int64))
    rng = np.random.default_rng(np.random.SeedSequence([seed, rnd, data.client_id]))
    order = rng.permutation(X.shape[0])
    for s in range(0, X.shape[0], BATCH):
        idx = torch.from_numpy(order[s : s + BATCH])
        loss = torch.nn.functional.cross_entropy(module(X[idx]), y[idx])
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p.sub_(g + L2 * p if id(p) in weights else g, alpha=LR)
    content = RecordDict({"arrays": ArrayRecord(module.state_dict()),
                          "metrics": MetricRecord({"num-examples": int(data.n_train)})})
    return Message(content=content, reply_to=msg)


@client_app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Accuracy and loss of the global model on this node's test split."""
    data, model, module = _client(context, msg)
    with torch.no_grad():
        logits = module(torch.from_numpy(data.X_test).to(torch.float32).reshape(-1, *model.input_shape))
        y = torch.from_numpy(data.y_test.astype(np.int64))
        metrics = {"accuracy": float((logits.argmax(1) == y).float().mean()),
                   "loss": float(torch.nn.functional.cross_entropy(logits, y)),
                   "num-examples": int(data.X_test.shape[0])}
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)


class StampedFedAvg(FedAvg):
    """Flower's FedAvg, timestamping the end of every round (its evaluation aggregated)."""

    stamps: list[float] = []

    def aggregate_evaluate(self, server_round: int, replies: Any) -> Any:
        out = super().aggregate_evaluate(server_round, replies)
        StampedFedAvg.stamps.append(time.perf_counter())
        return out


def server_app(name: str, n_clients: int, rounds: int) -> ServerApp:
    """The ServerApp: FedAvg from the module's initial layers for ``rounds`` rounds on every node."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        _, model = _job(name, n_clients)
        init = model.init(np.random.default_rng(0))
        model._rt.load(init)
        strategy = StampedFedAvg(min_train_nodes=n_clients, min_evaluate_nodes=n_clients,
                                 min_available_nodes=n_clients)
        strategy.start(grid=grid, initial_arrays=ArrayRecord(model._rt.module.state_dict()), num_rounds=rounds,
                       train_config=ConfigRecord({"model": name, "n-clients": n_clients}),
                       evaluate_config=ConfigRecord({"model": name, "n-clients": n_clients}))

    return app


def run(name: str, n_clients: int, rounds: int, cpus_per_node: float = 1.0) -> list[float]:
    """Run Flower's FedAvg on the Simulation Runtime; the end-of-round timestamps (perf_counter)."""
    import warnings

    from flwr.simulation import run_simulation

    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    StampedFedAvg.stamps = []
    backend = {"client_resources": {"num_cpus": cpus_per_node, "num_gpus": 0.0},
               "init_args": {"logging_level": "error", "log_to_driver": False, "include_dashboard": False}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run_simulation(server_app(name, n_clients, rounds), client_app, num_supernodes=n_clients,
                       backend_config=backend)
    if len(StampedFedAvg.stamps) != rounds:
        raise RuntimeError(f"Flower's FedAvg finished {len(StampedFedAvg.stamps)} of {rounds} rounds")
    return list(StampedFedAvg.stamps)
