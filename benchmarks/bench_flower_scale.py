"""Benchmark: Flower's Simulation Runtime at scale — 200 virtual SuperNodes, and a 40-node relay.

Cases (healthcare scenario, seed 0):

* pTopoFL and FedAvg on 200 virtual SuperNodes with partial participation
  (``client-fraction``, default 0.25: 50 clients train per round; every client is evaluated);
* Sheaf-FMTL through the relay on 40 virtual SuperNodes (ring graph, γ = 0.3).

Each case runs in a fresh child process (its own Ray). The per-round time is measured between the
ServerApp's own "round r" (relay: "iteration r") log records: ``(t_R − t_1) / (R − 1)``, free of
Ray's and the discovery's start-up, which the total wall time includes. Peak memory is the largest sum of the resident set sizes of the child and all its
descendants (Ray's workers included), sampled every 0.2 s with psutil. Each run's final metrics
are checked against the in-process runner (``topofl.simulate`` /
``topofl.simulate_decentralised``) and the largest difference is printed.

Run: ``python benchmarks/bench_flower_scale.py`` (``--nodes``, ``--relay-nodes``, ``--rounds``,
``--fraction``). Needs the flower extra (``flwr[simulation]``, ``psutil``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import psutil

CHILD = r"""
import json, logging, sys, time, warnings
warnings.simplefilter("ignore")
stamps = []
class Stamp(logging.Handler):
    def emit(self, record):
        msg = record.getMessage()
        if msg.startswith(("round ", "iteration ")):
            stamps.append(time.perf_counter())
logging.getLogger("topofl.flower").addHandler(Stamp())
logging.getLogger("topofl.flower").setLevel(logging.INFO)
import topofl
from topofl.flower import simulate_flower
from topofl.flower.settings import FlowerSettings
case = json.loads(sys.argv[1])
s = FlowerSettings.from_flat(**case["settings"])
t = time.perf_counter()
h = simulate_flower(s, case["nodes"], cpus_per_node=1.0)
wall = time.perf_counter() - t
fed = topofl.make_scenario(s.job.data, s.job.seed, **dict(s.job.data_params))
if s.decentralised:
    ref = topofl.simulate_decentralised(fed, s.job.method, rounds=s.job.rounds, seed=s.job.seed, graph=s.job.graph, **dict(s.job.hyperparameters))
    keys = ("accuracy", "loss")
else:
    ref = topofl.simulate(fed, s.job.method, rounds=s.job.rounds, seed=s.job.seed, client_fraction=s.job.client_fraction, **dict(s.job.hyperparameters))
    keys = ("auc", "accuracy", "loss")
a = {(r["round"], r["client"]): [r[k] for k in keys] for r in h.records}
b = {(r["round"], r["client"]): [r[k] for k in keys] for r in ref.records}
diff = max(abs(x - y) for key in b for x, y in zip(a.get(key, [float("nan")] * len(keys)), b[key])) if a.keys() == b.keys() else float("inf")
last = h.rounds[-1]
final = {k: (last[k] if isinstance(last, dict) else getattr(last, k)) for k in keys}
per_round = (stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 1 else float("nan")
print("RESULT " + json.dumps({"wall": wall, "per_round": per_round, "final": final, "max_diff": diff, "failures": len(h.failures)}))
"""


def run_case(case: dict) -> dict:
    """Run one case in a child process; its result with the peak summed RSS of the process tree."""
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "RAY_TMPDIR": tempfile.mkdtemp(prefix="ray-")}
    t = time.perf_counter()
    err = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(case)], stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    root, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            procs = [root, *root.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in procs if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.2)
    out = proc.stdout.read() if proc.stdout else ""
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        err.seek(0)
        raise SystemExit(f"case {case['label']} failed (exit {proc.returncode}):\n{out[-1000:]}\n{err.read()[-2000:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    result.update(total=time.perf_counter() - t, peak_mb=peak / 2**20)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=200, help="virtual SuperNodes of the federated cases")
    ap.add_argument("--relay-nodes", type=int, default=40, help="virtual SuperNodes of the Sheaf-FMTL relay case")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fraction", type=float, default=0.25, help="client-fraction of the federated cases")
    args = ap.parse_args()
    n, m = args.nodes, args.relay_nodes
    cases = [
        {"label": f"pTopoFL, {n} nodes, client-fraction {args.fraction:g}", "nodes": n,
         "settings": {"method": "ptopofl", "scenario_params": {"n_clients": n}, "client_fraction": args.fraction}},
        {"label": f"FedAvg, {n} nodes, client-fraction {args.fraction:g}", "nodes": n,
         "settings": {"method": "fedavg", "scenario_params": {"n_clients": n}, "client_fraction": args.fraction}},
        {"label": f"Sheaf-FMTL relay, {m} nodes, ring", "nodes": m,
         "settings": {"method": "sheaf", "scenario_params": {"n_clients": m, "adversarial": (1,)}, "graph": "ring",
                      "hyperparameters": {"gamma": 0.3, "lam": 0.01}}},
    ]
    print(f"Flower Simulation Runtime at scale: {os.cpu_count()} CPUs, Ray 1 CPU per ClientApp, {args.rounds} rounds, "
          "each case in a fresh process.")
    print(f"{'case':44s} {'wall s':>7s} {'s/round':>8s} {'peak MB':>8s} {'max |Δ| vs in process':>22s}")
    for case in cases:
        case["settings"].update(rounds=args.rounds, seed=0, min_nodes=case["nodes"], node_wait=600.0, round_timeout=600.0)
        r = run_case(case)
        print(f"{case['label']:44s} {r['total']:7.1f} {r['per_round']:8.2f} {r['peak_mb']:8.0f} {r['max_diff']:22.2e}   "
              f"final {json.dumps({k: round(v, 4) for k, v in r['final'].items()})}, {r['failures']} failure(s)")


if __name__ == "__main__":
    main()
