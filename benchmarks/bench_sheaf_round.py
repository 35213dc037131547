"""Benchmark: time per Sheaf-FMTL iteration in the ``sheaf-digits`` setting.

40 clients of rotated digits (``rotated_digits(n_clients=40, seed=0)``), multinomial logistic
regression (d_i = 650), Erdős–Rényi p = 0.15 (seed 0), the experiment's hyper-parameters
(``SHEAF_HP``: lr 0.5, λ 0.001, η 0.05, batch 32; dense N(0, 1) maps) at γ = 0.1 and 0.3.
Prints the median milliseconds per iteration (all 40 nodes, both message phases).

``--compare DIR`` also times another copy of the Sheaf-FMTL package — ``maps.py``, ``maths.py`` and
``algorithm.py`` of ``src/topofl/decentralised/sheaf/`` (e.g. the code before a change, copied to
DIR) — interleaved with the installed code in the same run, so that the two are measured under the
same machine load.

Run: ``python benchmarks/bench_sheaf_round.py [--iters 30] [--repeats 5] [--threads 1] [--compare /tmp/old]``.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import topofl.decentralised.sheaf as sheaf_package
from topofl.data.loaders import rotated_digits
from topofl.decentralised import make_graph
from topofl.decentralised.runner import build_peers
from topofl.decentralised.sheaf import SheafFMTL
from topofl.decentralised.transport import InProcessTransport
from topofl.experiments.sheaf.digits import SHEAF_HP


def load_variant(directory: Path):
    """The SheafFMTL class of ``directory/algorithm.py``, with the ``initial.py`` (if any),
    ``maths.py`` and ``maps.py`` of ``directory`` standing in for the installed ones while it is imported.
    """
    names = [n for n in ("initial", "maths", "maps") if (directory / f"{n}.py").exists()]  # dependency order
    current = {n: sys.modules[f"topofl.decentralised.sheaf.{n}"] for n in names}

    def load(name: str, path: Path):
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # dataclasses look their module up there
        spec.loader.exec_module(mod)
        return mod

    try:
        for n in names:  # the variant's algorithm.py imports these by their installed names
            variant = load(f"bench_variant_{n}", directory / f"{n}.py")
            sys.modules[f"topofl.decentralised.sheaf.{n}"] = variant
            setattr(sheaf_package, n, variant)
        algorithm = load("bench_variant_algorithm", directory / "algorithm.py")
    finally:
        for n, mod in current.items():
            sys.modules[f"topofl.decentralised.sheaf.{n}"] = mod
            setattr(sheaf_package, n, mod)
    return algorithm.SheafFMTL


def time_variant(cls, gamma: float, iters: int, warmup: int, data, graph) -> float:
    """One measurement: ms per iteration over ``iters`` iterations after ``warmup``."""
    algo = cls(cls.Config.from_dict({**SHEAF_HP, "gamma": gamma}))
    rng = np.random.default_rng(np.random.SeedSequence([0, 0xDEC]))
    peers = build_peers(data.clients, data.task, data.n_classes, algo.config.l2, None, False, rng)
    algo.setup(peers, graph, rng)
    transport = InProcessTransport(graph)
    t0 = 0.0
    for k in range(1, warmup + iters + 1):
        if k == warmup + 1:
            t0 = time.perf_counter()
        rngs = [np.random.default_rng(np.random.SeedSequence([0, k, p.node])) for p in peers]
        algo.iterate(k, transport, rngs)
        transport.reset_round()
    return (time.perf_counter() - t0) / iters * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gammas", type=float, nargs="+", default=[0.1, 0.3])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="limit BLAS threads (threadpoolctl), e.g. 1 as in a parallel experiment worker")
    ap.add_argument(
        "--compare", type=Path, default=None,
        help="directory with another maps.py, maths.py and algorithm.py (of decentralised/sheaf/) to time alongside",
    )
    args = ap.parse_args()

    if args.threads is not None:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.threads)
    data = rotated_digits(n_clients=40, seed=0)
    graph = make_graph("erdos_renyi", 40, seed=0, p=0.15)
    variants = {"current": SheafFMTL}
    if args.compare is not None:
        variants = {f"compare ({args.compare})": load_variant(args.compare), **variants}
    deg = np.mean([d for _, d in graph.degree()])
    print(f"sheaf-digits setting: 40 clients, d_i = 650, mean degree {deg:.2f}, {args.iters} timed iterations x {args.repeats} repeats "
          f"(interleaved), BLAS threads: {args.threads or 'default'}")
    for gamma in args.gammas:
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.repeats):
            for name, cls in variants.items():
                times[name].append(time_variant(cls, gamma, args.iters, args.warmup, data, graph))
        for name, ts in times.items():
            print(f"gamma={gamma:<4g} {name:>40}: median {statistics.median(ts):8.2f} ms/iter   (all: {', '.join(f'{t:.1f}' for t in ts)})")


if __name__ == "__main__":
    main()
