r"""Benchmark: seconds and peak memory per FedAvg round of a CNN on MNIST-10k — topofl against the
bare PyTorch loop, and topofl on Flower against Flower's own FedAvg.

For 10 and 50 clients (MNIST-10k split IID, 75/25 train/test per client) and the models
``cnn-small`` (23,210 parameters), ``convnet2`` (LEAF's FEMNIST CNN, 6.5 M) and ``resnet18``
(ResNet-18 with GroupNorm, 11.2 M), one round is: every client starts from the global model, runs
``--epochs`` epochs of mini-batch SGD (batch 32, lr 0.05, L2 1e-3 on the weights), the server
averages with sample-size weights, and every client's test split is scored with the global model.

* **bare torch** — that round written by hand in PyTorch: one module, ``torch.nn.utils``
  vector/parameter copies, the same batches (the same ``numpy`` permutations as topofl draws),
  manual SGD steps, a weighted average of the flat float32 vectors, a forward pass per test split.
  The floor: no validation, no records, no abstraction.
* **topofl** — ``topofl.simulate(fed, "fedavg", model=...)``: messages, reply validation (schema,
  counts, norm bound), aggregation, evaluation with AUC, accuracy and loss per client, records.
* **topofl + pTopoFL** — the same with pTopoFL (descriptors of the learned representation,
  clustering, trust), for scale.
* **Flower: topofl** — the same FedAvg through Flower's Simulation Runtime (Ray, one virtual
  SuperNode per client, one CPU each), timed between the ServerApp's end-of-round records; FedAvg's
  mean, i.e. ``robust-defaults=false`` (``--deployment-defaults`` times the deployment defaults'
  guarded mean instead, which stacks the K replies for a coordinate-wise median), with the
  ServerApp's per-round results files and checkpoint as always.
* **Flower: Flower's FedAvg** — what a user would pick instead: ``benchmarks/flower_fedavg_app.py``,
  Flower's own ``FedAvg`` strategy with a ClientApp doing the same local epoch on the same data
  (per-layer ``ArrayRecord``\ s, no topofl in the loop), timed the same way. Both Flower columns
  skip start-up and the first round; skipped by ``--quick`` and ``--no-flower``.

Each contender's pass runs in a fresh process (so its **peak RSS** is its own: ``ru_maxrss`` of that
process; ``+rounds`` is the peak minus the resident size before its first round — what the rounds
themselves held, to compare with K received vectors). Prints the median seconds per round over
``--passes`` alternating passes of ``--repeats`` measured rounds each (after one warm-up round per
pass) and the ratios topofl / bare and topofl-on-Flower / Flower's FedAvg. Threads: the bare loop's torch and
topofl's torch and BLAS (``topofl.simulate(..., threads=)``) use ``--threads`` (default 2, this machine's cores); on
Flower each SuperNode is a Ray actor of one CPU, and Ray sets ``OMP_NUM_THREADS=1`` in it, which both Flower
contenders' clients then use (two nodes train at once on two cores). Run:
``python benchmarks/bench_deep_round.py [--quick] [--no-flower] [--models cnn-small,convnet2,resnet18]``.
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import torch
from round_timer import timed_rounds

import topofl
from topofl.data.loaders.mnist10k import mnist_federation
from topofl.models.registry import build_model
from topofl.threads import check_threads

LR, BATCH, L2 = 0.05, 32, 1e-3


def bare_round(model, clients, theta: np.ndarray, epochs: int, rnd: int, seed: int,
               keep: list | None = None) -> tuple[np.ndarray, list[float]]:
    """One FedAvg round by hand in PyTorch (see the module docstring); returns the new global model
    (``keep`` receives each client's float32 vector and weight, for :func:`accumulation_error`).
    """
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
        if keep is not None:
            keep.append((torch.nn.utils.parameters_to_vector(params).detach().numpy().copy(), c.n_train / n_all))
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


def accumulation_error(fed, name: str, epochs: int, seed: int = 0) -> float:
    """How far a float32 running sum of one round's replies lands from the float64 sum topofl takes:
    max |Σ_f32 − Σ_f64| over max |Σ_f64|, on the real replies of round 1.
    """
    model = build_model(name, task="multiclass", n_features=784, n_classes=10, l2=L2)
    kept: list = []
    bare_round(model, fed.clients, model.init(np.random.default_rng(seed)), epochs, 1, seed, kept)
    f32 = np.zeros_like(kept[0][0])
    f64 = np.zeros(kept[0][0].size)
    for v, w in kept:
        f32 += np.float32(w) * v
        f64 += w * v.astype(np.float64)
    return float(np.abs(f32 - f64).max() / np.abs(f64).max())


def time_topofl(fed, name: str, method: str, epochs: int, rounds: int, threads: int, seed: int = 0) -> list[float]:
    # ``threads``: the bare loop's number (topofl.simulate's own default is half the CPUs, at most 4)
    stamps = timed_rounds(topofl.simulate, fed, method, rounds=rounds + 1, seed=seed, model=name, lr=LR,
                          batch_size=BATCH, l2=L2, local_epochs=epochs, threads=threads)
    return stamps[1:]


def time_flower(n_clients: int, name: str, epochs: int, rounds: int, robust: bool = False) -> list[float]:
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
        # robust_defaults off: FedAvg's own mean, the work Flower's FedAvg does (the deployment defaults'
        # guarded mean stacks the K replies for a coordinate-wise median: --deployment-defaults times it)
        settings = FlowerSettings.from_flat(method="fedavg", scenario="mnist", rounds=rounds + 1, model=name,
                                  robust_defaults=robust,
                                  scenario_params={"n_clients": n_clients, "partition": "iid", "n_samples": 10_000, "min_size": 10},
                                  hyperparameters={"lr": LR, "batch_size": BATCH, "l2": L2, "local_epochs": epochs})
        simulate_flower(settings, n_clients)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    if len(stamps) != rounds + 1:
        raise RuntimeError(f"expected {rounds + 1} round records from the ServerApp, got {len(stamps)}")
    return [b - a for a, b in zip(stamps, stamps[1:], strict=False)]


def time_flower_own(n_clients: int, name: str, epochs: int, rounds: int) -> list[float]:
    """Seconds per round of Flower's own FedAvg app (``flower_fedavg_app``), the first round excluded."""
    if epochs != 1:
        raise ValueError("flower_fedavg_app runs one local epoch")
    import flower_fedavg_app

    stamps = flower_fedavg_app.run(name, n_clients, rounds + 1)
    return [b - a for a, b in zip(stamps, stamps[1:], strict=False)]


CONTENDERS = ("bare", "fedavg", "ptopofl", "flower", "flower-own")


def worker(args: argparse.Namespace) -> None:
    """One contender's pass in this (fresh) process; prints one JSON line: round times and memory."""
    import json
    import resource

    import psutil

    fed = mnist_federation(args.clients, partition_kind="iid", n_samples=10_000, seed=0, min_size=10)
    base = psutil.Process().memory_info().rss
    extra = {}
    if args.worker == "bare":
        times = time_bare(fed, args.model, args.epochs, args.repeats)
    elif args.worker in ("fedavg", "ptopofl"):
        times = time_topofl(fed, args.model, args.worker, args.epochs, args.repeats, args.threads)
    elif args.worker == "flower":
        times = time_flower(args.clients, args.model, args.epochs, args.repeats, args.deployment_defaults)
    else:
        times = time_flower_own(args.clients, args.model, args.epochs, args.repeats)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if args.worker == "bare":   # after the peak is read: it keeps every reply of a round
        extra["f32_error"] = accumulation_error(fed, args.model, args.epochs)
    print(json.dumps({"times": times, "peak": peak, "base": base, **extra}), flush=True)


def run_pass(contender: str, name: str, n: int, args: argparse.Namespace) -> dict:
    """One pass of ``contender`` in a fresh interpreter (its own peak RSS)."""
    import json
    import subprocess
    import sys

    cmd = [sys.executable, __file__, "--worker", contender, "--model", name, "--clients", str(n),
           "--repeats", str(args.repeats), "--epochs", str(args.epochs), "--threads", str(args.threads),
           *(["--deployment-defaults"] if args.deployment_defaults else [])]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{contender} {name} x{n} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _gb(b: float) -> str:
    return f"{b / 2**20:.0f}M" if b < 2**30 else f"{b / 2**30:.2f}G"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="10 clients, cnn-small, one measured round (a smoke run)")
    ap.add_argument("--no-flower", dest="flower", action="store_false", help="skip Flower's Simulation Runtime (slow to start)")
    ap.add_argument("--models", default="cnn-small,convnet2,resnet18", help="comma-separated registered model names")
    ap.add_argument("--clients-list", default="10,50", help="comma-separated client counts")
    ap.add_argument("--flower-models", default="cnn-small,convnet2", help="the models also timed on Flower")
    ap.add_argument("--repeats", type=int, default=0,
                    help="measured rounds per pass (default: 10 for a model under 1 M parameters, whose rounds take "
                         "well under a second, else 3)")
    ap.add_argument("--passes", type=int, default=2, help="alternating passes over the contenders")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--deployment-defaults", action="store_true",
                    help="topofl on Flower with the deployment defaults (robust-defaults: the guarded mean), "
                         "not FedAvg's mean: the cost of the defaults, not a like-for-like comparison")
    ap.add_argument("--worker", choices=CONTENDERS, help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--clients", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    try:   # before any pass: topofl refuses more threads than the usable CPUs
        check_threads(args.threads)
    except ValueError as exc:
        ap.error(f"--threads: {exc}")
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    if args.worker:
        worker(args)
        return
    args.flower = args.flower and not args.quick
    clients = (10,) if args.quick else tuple(int(c) for c in args.clients_list.split(","))
    models = ("cnn-small",) if args.quick else tuple(args.models.split(","))
    on_flower = set(args.flower_models.split(",")) if args.flower else set()
    repeats = args.repeats
    if args.quick:
        repeats, args.passes = 1, 1
    print(f"FedAvg rounds on MNIST-10k (IID, 75/25), {args.epochs} local epoch(s), batch {BATCH}, torch threads {args.threads}; "
          f"median of {args.passes} pass(es) x {repeats or '10 (< 1 M parameters) or 3'} round(s), each after a warm-up round; "
          "peak RSS of each contender's process (+rounds: above its size before round 1)")
    head = (f"{'model':<10} {'clients':>7} {'bare torch':>11} {'topofl':>9} {'ratio':>6} {'pTopoFL':>9} {'ratio':>6}"
            f"  {'peak RSS bare / topofl / pTopoFL (+rounds)':<46} {'K replies':>9}")
    print(head + ("  Flower: topofl  Flower's FedAvg  ratio" if on_flower else ""), flush=True)
    errors: list[str] = []
    for name in models:
        n_params = build_model(name, task="multiclass", n_features=784, n_classes=10, l2=L2).n_params
        args.repeats = repeats or (10 if n_params < 1_000_000 else 3)
        for n in clients:
            # alternate the contenders (bare, topofl, pTopoFL, bare, ...) so drifts in machine load hit them alike
            runs: dict[str, list[dict]] = {c: [] for c in ("bare", "fedavg", "ptopofl")}
            for _ in range(args.passes):
                for c in runs:
                    runs[c].append(run_pass(c, name, n, args))
            t = {c: statistics.median([x for r in rs for x in r["times"]]) for c, rs in runs.items()}
            peak = {c: max(r["peak"] for r in rs) for c, rs in runs.items()}
            grow = {c: max(r["peak"] - r["base"] for r in rs) for c, rs in runs.items()}
            mem = " / ".join(f"{_gb(peak[c])} (+{_gb(grow[c])})" for c in runs)
            line = (f"{name:<10} {n:>7} {t['bare']:>10.3f}s {t['fedavg']:>8.3f}s {t['fedavg'] / t['bare']:>6.2f} "
                    f"{t['ptopofl']:>8.3f}s {t['ptopofl'] / t['bare']:>6.2f}  {mem:<46} {_gb(n * n_params * 4):>9}")
            if name in on_flower:
                fl: list[float] = []
                own: list[float] = []
                for _ in range(args.passes):
                    fl += run_pass("flower", name, n, args)["times"]
                    own += run_pass("flower-own", name, n, args)["times"]
                a, b = statistics.median(fl), statistics.median(own)
                line += f"  {a:>13.2f}s {b:>15.2f}s {a / b:>6.2f}"
            print(line, flush=True)
            errors.append(f"{name} x{n}: {max(r['f32_error'] for r in runs['bare']):.1e}")
    print("float32 running sum of a round's replies against topofl's float64 sum (max |diff| / max |sum|): "
          + "; ".join(errors))


if __name__ == "__main__":
    main()
