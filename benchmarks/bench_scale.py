"""Benchmark: a round of pTopoFL (and FedAvg) with 1,000 and 5,000 linear-model clients.

Data: the ``healthcare`` scenario (20 features, about 73 training rows per client, binary) with
``n_clients`` clients, logistic regression, the defaults of each method (pTopoFL: descriptors
in round 1 and when a client's data changes, clustering of the 48-d descriptors, Eq. 6 weights,
trust and drift). Each configuration runs in a fresh process: seconds of each round (round 1
includes every client's persistent homology) and the peak RSS of that process; the growth
exponent of the later rounds' seconds, log(t_5000 / t_1000) / log 5 (1 = linear in the number of
clients, 2 = quadratic), is printed for each method.

Run: ``python benchmarks/bench_scale.py [--clients 1000,5000] [--rounds 3] [--methods ptopofl,fedavg]``.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys


def worker(method: str, n_clients: int, rounds: int) -> None:
    """One run in this process; prints a JSON line with the seconds of every round and the peak RSS."""
    import resource
    import warnings

    import topofl

    warnings.simplefilter("ignore")
    from round_timer import timed_rounds

    fed = topofl.make_scenario("healthcare", 0, n_clients=n_clients)
    stamps = timed_rounds(topofl.simulate, fed, method, rounds=rounds, seed=0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"times": stamps, "peak": peak}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", default="1000,5000", help="comma-separated client counts (ascending)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per run (the first is reported apart)")
    ap.add_argument("--methods", default="ptopofl,fedavg")
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), int(args.worker[2]))
        return
    if args.rounds < 2:
        ap.error("--rounds must be at least 2 (round 1 is reported apart)")
    sizes = [int(c) for c in args.clients.split(",")]
    print(f"healthcare, logistic regression, {args.rounds} rounds per run, one fresh process per run")
    print(f"{'method':<8} {'clients':>7} {'round 1':>9} {'later rounds':>13} {'peak RSS':>9}")
    for method in args.methods.split(","):
        later: dict[int, float] = {}
        for n in sizes:
            out = subprocess.run([sys.executable, __file__, "--worker", method, str(n), str(args.rounds)],
                                 capture_output=True, text=True, check=False)
            if out.returncode != 0:
                raise RuntimeError(f"{method} x{n} failed:\n{out.stderr[-3000:]}")
            r = json.loads(out.stdout.strip().splitlines()[-1])
            later[n] = statistics.median(r["times"][1:])
            print(f"{method:<8} {n:>7} {r['times'][0]:>8.2f}s {later[n]:>12.3f}s {r['peak'] / 2**30:>8.2f}G", flush=True)
        if len(sizes) > 1:
            lo, hi = sizes[0], sizes[-1]
            print(f"{method}: later-round growth exponent {lo} -> {hi} clients: "
                  f"{math.log(later[hi] / later[lo]) / math.log(hi / lo):.2f}", flush=True)


if __name__ == "__main__":
    main()
