"""Benchmark: the exact 2-Wasserstein distance between diagrams on its two solvers, and Hera's approximation.

For pairs of H0 and H1 diagrams of Vietoris–Rips filtrations of n Gaussian points in R^20 — n = 80
(pTopoFL's subsample for linear models, Table 3), 200 (deep models, §4.1) and 1000 — times the exact
distance ``topofl.tda.distances.wasserstein_exact`` on SciPy's ``linear_sum_assignment``
(``solver="assignment"``) and on POT's network simplex (``solver="pot"``, gudhi's formulation), and
``wasserstein`` with Hera at ``rel_error=0.01`` (Hera's default, used before) and ``1e-6``; prints the
median milliseconds, the ratio assignment / POT (``solver="auto"`` takes POT from
``POT_MIN_POINTS`` points in all), the largest relative gap between the two exact solvers, and the
largest absolute and relative differences of Hera at 1 % from the exact value.

Run: ``python benchmarks/bench_wasserstein.py`` (``--quick`` for fewer repetitions).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from topofl.tda.diagrams import diagrams
from topofl.tda.distances import wasserstein, wasserstein_exact

SIZES = {80: 20, 200: 10, 1000: 3}
REL_ERRORS = (0.0, 0.01, 1e-6)
SOLVERS = ("assignment", "pot")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (CI smoke run)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'n':>5} {'dim':>3} {'points':>9} " + " ".join(f"{f'ms {s}':>14}" for s in SOLVERS)
          + f" {'assign/pot':>10} {'max rel gap':>11} " + " ".join(f"{f'ms Hera {r:g}':>14}" for r in REL_ERRORS[1:])
          + f" {'max abs diff 1%':>16} {'max rel diff 1%':>16}")
    for n, reps in SIZES.items():
        reps = max(2, reps // 5) if args.quick else reps
        pairs = [(diagrams(rng.standard_normal((n, 20))), diagrams(rng.standard_normal((n, 20)))) for _ in range(reps)]
        for dim in (0, 1):
            times: dict[object, list[float]] = {k: [] for k in (*SOLVERS, *REL_ERRORS[1:])}
            vals: dict[object, list[float]] = {k: [] for k in (*SOLVERS, *REL_ERRORS[1:])}
            for a, b in pairs:
                for key in times:
                    t = time.perf_counter()
                    value = (wasserstein_exact(a[dim], b[dim], 2.0, solver=key) if isinstance(key, str)
                             else wasserstein(a[dim], b[dim], 2.0, rel_error=key))
                    times[key].append(time.perf_counter() - t)
                    vals[key].append(value)
            exact, pot, approx = (np.array(vals[k]) for k in ("assignment", "pot", 0.01))
            size = f"{len(pairs[0][0][dim])}+{len(pairs[0][1][dim])}"
            ms = {k: np.median(v) * 1e3 for k, v in times.items()}
            print(f"{n:>5} {dim:>3} {size:>9} " + " ".join(f"{ms[s]:>14.2f}" for s in SOLVERS)
                  + f" {ms['assignment'] / ms['pot']:>10.2f} {(np.abs(pot - exact) / exact).max():>11.1e} "
                  + " ".join(f"{ms[r]:>14.2f}" for r in REL_ERRORS[1:])
                  + f" {np.abs(approx - exact).max():>16.2e} {(np.abs(approx - exact) / exact).max():>16.2e}")


if __name__ == "__main__":
    main()
