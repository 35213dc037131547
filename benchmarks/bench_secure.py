r"""Benchmark: what secure aggregation (SecAgg+, ``secure_aggregation=True``) costs against the plain mode,
per round: seconds (clients' and server's), bytes up and down per client, and the final metrics.

For 5, 20 and 50 clients, with the linear model on the healthcare scenario and ``cnn-small`` on
MNIST-10k (Dirichlet α = 0.5 split; one local epoch, batch 32, lr 0.05), FedAvg and pTopoFL each run
``--rounds`` rounds in process, plain and secure, on the same data and seed. Secure runs use the
default protocol: every member of a group is a neighbour (SecAgg), threshold 0.6, 40-bit fixed
point over ±64. pTopoFL's clusters below ``secure_min_group`` (3) are merged, as by default.

Printed per row:

* **s/round**: the median over rounds 2.. of the seconds per round.
* **client s**: the seconds the clients' side took. It is measured inside the pool, so it is the
  sum over the clients: they run one after another in process.
* **server s**: the rest.
* **KB up/down**: per client and round.
* **secure/plain**: the ratios.
* **final AUC (accuracy for cnn-small)**: with the secure−plain difference, the quantisation's
  effect. Where a pTopoFL cluster was smaller than ``secure_min_group`` and merged, the difference is
  the small-cluster policy's instead, and is marked so.

Where a group is larger than ``--neighbours`` + 1 (default 16), a third run uses SecAgg+'s sparse graph
(``secure_neighbours``): each client shares its secrets with that many neighbours instead of the
whole group.

Each (model, K) pair's plain and secure runs alternate in this one process; the machine's noise
is in the spread of rounds, not between columns. Run:
``python benchmarks/bench_secure.py [--rounds 4] [--clients 5,20,50] [--models linear,cnn-small] [--quick]``.
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import Any

import numpy as np
from round_timer import timed_run

from topofl.data.scenarios import make_scenario
from topofl.federation.pool import InProcessPool
from topofl.federation.runner import run_rounds
from topofl.methods import build_server


class TimedPool(InProcessPool):
    """An in-process pool that adds up the seconds spent in the clients' code (fit, the secure stages, evaluation)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.client_seconds: list[float] = []
        self._acc = 0.0

    def _timed(self, call: Any, *args: Any) -> Any:
        t = time.perf_counter()
        try:
            return call(*args)
        finally:
            self._acc += time.perf_counter() - t

    def fit(self, rnd, messages):
        return self._timed(super().fit, rnd, messages)

    def secure(self, rnd, stage, requests):
        return self._timed(super().secure, rnd, stage, requests)

    def evaluate(self, rnd, messages):
        out = self._timed(super().evaluate, rnd, messages)
        self.client_seconds.append(self._acc)   # evaluation closes a round
        self._acc = 0.0
        return out


def federation(model: str, k: int, seed: int) -> Any:
    if model == "linear":
        return make_scenario("healthcare", seed, n_clients=k, adversarial=tuple(a for a in (1, 5) if a < k))
    from topofl.data.loaders.mnist10k import mnist_federation

    return mnist_federation(k, seed=seed)


def one_run(fed: Any, method: str, model: str, secure: bool, rounds: int, seed: int, neighbours: int = 0
            ) -> dict[str, Any]:
    hp: dict[str, Any] = {"secure_aggregation": secure}
    if secure:
        hp["secure_neighbours"] = neighbours
    if model != "linear":
        hp.update(lr=0.05, batch_size=32, local_epochs=1)
    algorithm = build_server(method, hp)
    built = algorithm.build_model(None if model == "linear" else model, fed.task, fed.n_features, fed.n_classes)
    pool = TimedPool(fed, algorithm, built, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stamps, history = timed_run(run_rounds, pool, algorithm, built, rounds, seed)
    later = slice(1, None) if rounds > 1 else slice(None)
    per_round = statistics.median(stamps[later])
    clients = statistics.median(pool.client_seconds[later])
    k = len(fed.clients)
    last_round = [r for r in history.records if r["round"] == rounds]
    return {
        "s": per_round, "client": clients, "server": per_round - clients,
        "up": statistics.mean(r["bytes_up"] for r in last_round) / 1024,
        "down": statistics.mean(r["bytes_down"] for r in last_round) / 1024,
        "auc": history.rounds[-1].auc, "accuracy": history.rounds[-1].accuracy, "k": k,
        "failures": len(history.failures),
        "merged": sum(bool(e.get("secure_merged")) for e in history.server_logs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--clients", default="5,20,50")
    parser.add_argument("--models", default="linear,cnn-small")
    parser.add_argument("--methods", default="fedavg,ptopofl")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--neighbours", type=int, default=16,
                        help="also time SecAgg+ with this many neighbours per client where the group is larger")
    parser.add_argument("--quick", action="store_true", help="2 rounds, 5 and 20 clients, linear only")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.clients, args.models = 2, "5,20", "linear"
    try:
        import torch

        torch.set_num_threads(args.threads)
    except ImportError:
        pass
    print(f"{'model':10s} {'K':>3s} {'method':8s} {'mode':10s} {'s/round':>8s} {'client s':>9s} {'server s':>9s} "
          f"{'KB up':>8s} {'KB down':>8s} {'final':>7s}")
    ratios = []
    for model in args.models.split(","):
        for k in (int(x) for x in args.clients.split(",")):
            fed = federation(model, k, args.seed)
            for method in args.methods.split(","):
                modes = [("plain", False, 0), ("secure", True, 0)]
                if k > args.neighbours + 1:
                    modes.append((f"secure k={args.neighbours}", True, args.neighbours))
                rows = {}
                for label, secure, neighbours in modes:
                    r = one_run(fed, method, model, secure, args.rounds, args.seed, neighbours)
                    rows[label] = r
                    metric = r["auc"] if model == "linear" else r["accuracy"]
                    notes = [f"{r['failures']} failures"] if r["failures"] else []
                    notes += [f"clusters merged in {r['merged']} round(s)"] if r["merged"] else []
                    print(f"{model:10s} {k:3d} {method:8s} {label:10s} {r['s']:8.3f} {r['client']:9.3f} "
                          f"{r['server']:9.3f} {r['up']:8.2f} {r['down']:8.2f} {metric:7.4f}"
                          + (f"  ({'; '.join(notes)})" if notes else ""), flush=True)
                p = rows["plain"]
                key = "auc" if model == "linear" else "accuracy"
                for label, s_ in rows.items():
                    if label != "plain":
                        ratios.append((model, k, method, label, s_["s"] / p["s"], s_["client"] / p["client"],
                                       s_["server"] / max(p["server"], 1e-9), s_["up"] / p["up"], s_["down"] / p["down"],
                                       s_[key] - p[key], s_["merged"]))
    print("\nsecure / plain (same process, same data and seed)")
    print(f"{'model':10s} {'K':>3s} {'method':8s} {'mode':10s} {'time':>7s} {'client':>7s} {'server':>7s} {'up':>6s} "
          f"{'down':>6s} {'Δ final':>9s}")
    for model, k, method, label, t, c, sv, up, down, d, merged in ratios:
        print(f"{model:10s} {k:3d} {method:8s} {label:10s} {t:7.2f} {c:7.2f} {sv:7.2f} {up:6.2f} {down:6.2f} {d:+9.2e}"
              + ("  (merged clusters: the small-cluster policy, not quantisation)" if merged else ""))
    quantised = [abs(r[9]) for r in ratios if not r[10]]
    worst = max(quantised, default=float("nan"))
    print(f"\nlargest |secure − plain| of the final metric where no cluster was merged: {worst:.2e} (quantisation; AUC "
          "for linear, accuracy for cnn-small)")
    if np.isfinite(worst) and worst > 0.002:
        print("WARNING: above the 0.002 the issue allows")


if __name__ == "__main__":
    main()
