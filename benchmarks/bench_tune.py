"""Benchmark: the default tuning budget of ``topofl tune`` against its target.

Runs the healthcare comparison of every server-based method with the default budget (30 trials
per method on validation splits, seeds 0-9, 15 rounds, 2 worker processes), then both test-split
comparisons, and prints the wall time against the target, the runs executed and the run time of a
trial per method.

Target (issue 19): the healthcare comparison of all server methods, tuned with the default
budget, in under 10 minutes on 2 cores.

Run: ``python benchmarks/bench_tune.py`` (``--quick``: 3 trials, seeds 0-1, 3 rounds, no target).
"""
from __future__ import annotations

import argparse
import csv
import tempfile
import time
from pathlib import Path

from topofl.experiments.tuning import DEFAULT_TRIALS, TuneSettings, total_runs, tune_comparison
from topofl.job import Job
from topofl.methods import available

TARGET_S = 600.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 trials, seeds 0-1, 3 rounds (a smoke run; the target is not judged)")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    trials, seeds, rounds = (3, range(2), 3) if args.quick else (DEFAULT_TRIALS, range(10), 15)
    specs = [Job(experiment="tune", data="healthcare", method=m, seed=s, rounds=rounds) for s in seeds for m in available("server")]
    settings = TuneSettings(trials=trials)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "tune"
        t0 = time.perf_counter()
        tune_comparison(specs, out, settings, reference="ptopofl", jobs=args.jobs)
        wall = time.perf_counter() - t0
        with (out / "tuning_summary.csv").open() as fh:
            rows = list(csv.DictReader(fh))
    print(f"topofl tune, healthcare, {len(available('server'))} server methods x {trials} trials, seeds {seeds.start}-{seeds.stop - 1}, "
          f"{rounds} rounds, --jobs {args.jobs}: {total_runs(specs, settings)} runs")
    print(f"{'method':<10} {'s per trial':>12} {'failed':>7}")
    for r in rows:
        print(f"{r['method']:<10} {float(r['seconds_per_trial']):>12.2f} {r['failed']:>7}")
    verdict = "" if args.quick else (f"  target < {TARGET_S:.0f} s: " + ("met" if wall < TARGET_S else "NOT met"))
    print(f"wall {wall:.1f} s{verdict}")


if __name__ == "__main__":
    main()
