"""Benchmark: pTopoFL descriptor time vs the bare PH-library call it wraps.

For n = 80, 500 and 2000 uniform-Gaussian points in R^20, times ``topofl.tda.descriptor`` (with
``n_sub = n``, so the whole cloud goes through PH) and the bare ``gph.ripser_parallel(X, maxdim=1)``
call, interleaved in the same run, and prints the median times and their ratio.

Targets (issue 2): under 10 ms at n = 80 and at most 1.3x the bare call at every size.

Run: ``python benchmarks/bench_descriptor.py`` (``--quick`` for fewer repetitions).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from topofl.tda import descriptor
from topofl.tda.diagrams import raw_ripser

SIZES = {80: 200, 500: 15, 2000: 3}


def median_ms(samples: list[float]) -> float:
    return float(np.median(samples) * 1e3)


def bench(n: int, reps: int, rng: np.random.Generator) -> tuple[float, float]:
    X = rng.standard_normal((n, 20))
    descriptor(X, n_sub=n)  # warm-up (imports, caches)
    raw_ripser(X)
    ours, bare = [], []
    for _ in range(reps):
        t = time.perf_counter()
        descriptor(X, n_sub=n)
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        raw_ripser(X)
        bare.append(time.perf_counter() - t)
    return median_ms(ours), median_ms(bare)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (CI smoke run)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'n':>6} {'descriptor ms':>14} {'bare gph ms':>12} {'ratio':>7}  target")
    for n, reps in SIZES.items():
        reps = max(2, reps // 5) if args.quick else reps
        ours, bare = bench(n, reps, rng)
        target = "< 10 ms and <= 1.3x" if n == 80 else "<= 1.3x"
        ok = (ours < 10 if n == 80 else True) and ours / bare <= 1.3
        print(f"{n:>6} {ours:>14.2f} {bare:>12.2f} {ours / bare:>7.3f}  {target}: {'met' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
