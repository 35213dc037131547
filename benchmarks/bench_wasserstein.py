"""Benchmark: exact (assignment) vs approximate (Hera) 2-Wasserstein distance between diagrams.

For pairs of H0 and H1 diagrams of Vietoris–Rips filtrations of n Gaussian points in R^20 — n = 80
(pTopoFL's subsample for linear models, Table 3), 200 (deep models, §4.1) and 1000 — times
``topofl.tda.distances.wasserstein`` exact (``rel_error=0``, scipy's ``linear_sum_assignment``)
and with Hera at ``rel_error=0.01`` (Hera's default, used before) and ``1e-6``, and prints the
median times and the largest absolute and relative differences from the exact value.

Run: ``python benchmarks/bench_wasserstein.py`` (``--quick`` for fewer repetitions).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from topofl.tda.diagrams import diagrams
from topofl.tda.distances import wasserstein

SIZES = {80: 20, 200: 10, 1000: 3}
REL_ERRORS = (0.0, 0.01, 1e-6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (CI smoke run)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'n':>5} {'dim':>3} {'points':>9} " + " ".join(f"{f'ms rel={r:g}':>14}" for r in REL_ERRORS)
          + f" {'max abs diff 1%':>16} {'max rel diff 1%':>16}")
    for n, reps in SIZES.items():
        reps = max(2, reps // 5) if args.quick else reps
        pairs = [(diagrams(rng.standard_normal((n, 20))), diagrams(rng.standard_normal((n, 20)))) for _ in range(reps)]
        for dim in (0, 1):
            times: dict[float, list[float]] = {r: [] for r in REL_ERRORS}
            vals: dict[float, list[float]] = {r: [] for r in REL_ERRORS}
            for a, b in pairs:
                for r in REL_ERRORS:
                    t = time.perf_counter()
                    vals[r].append(wasserstein(a[dim], b[dim], 2.0, rel_error=r))
                    times[r].append(time.perf_counter() - t)
            exact, approx = np.array(vals[0.0]), np.array(vals[0.01])
            size = f"{len(pairs[0][0][dim])}+{len(pairs[0][1][dim])}"
            print(f"{n:>5} {dim:>3} {size:>9} " + " ".join(f"{np.median(times[r]) * 1e3:>14.2f}" for r in REL_ERRORS)
                  + f" {np.abs(approx - exact).max():>16.2e} {(np.abs(approx - exact) / exact).max():>16.2e}")


if __name__ == "__main__":
    main()
