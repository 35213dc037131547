"""Benchmark: Sheaf-FMTL restriction-map memory and time at the paper's scale.

Part 1 (paper scale): 40 clients with the paper's same-size R-MNIST CNN (§4.2, Table 4: 34,826
parameters, ``cnn-same``; ``--dim 212146`` for Table 2's large CNN), γ = 0.03, Erdős–Rényi p = 0.15,
``--rounds`` iterations of Algorithm 1 (default 20; the paper runs 200) with exact compact maps. The
local gradient comes from a cheap stand-in objective of that dimension, f_i(θ) = ½‖θ − c_i‖² (the
maps' cost does not depend on the loss). Prints per-round time, the dense map storage computed
analytically, the compact storage measured after the run, the measured peak memory (peak RSS of
this process), and the map budget a 200-round run needs — exact, since compact maps grow by the
same bytes every iteration (Eq. 28 is rank one) — against the default ``memory_budget`` of 2 GB,
which refuses a run that would outgrow it before its first iteration, naming that number.

Part 2 (Vehicle size): 23 clients, multinomial logistic regression with d = 202 parameters
(100 features + bias, 2 classes), γ = 0.1, 300 rounds: per-round time with dense maps, compact
maps and the automatic choice.

Run: ``python benchmarks/bench_sheaf_memory.py`` (``--quick`` for a 5-round smoke run; ``--rounds 200``
for the paper's full run, a few minutes on one core).
"""
from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from topofl.data.federation import ClientData
from topofl.decentralised import make_graph, run_decentralised
from topofl.decentralised.sheaf.maps import FLOAT
from topofl.methods import build_peer as build

GB = 1e9


class StandIn:
    """f_i(θ) = ½‖θ − c_i‖²: the dimension of the paper's model at negligible cost."""

    task = "regression"
    n_features = 1

    def __init__(self, d: int, target: np.ndarray) -> None:
        self.n_params, self.target = d, target

    def init(self, rng=None, scale=0.0):
        return np.zeros(self.n_params)

    def grad(self, theta, X, y):
        return theta - self.target

    def loss(self, theta, X, y):
        return 0.5 * float(np.sum((theta - self.target) ** 2))

    def predict(self, theta, X):
        return np.zeros(X.shape[0])


def peak_rss() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def paper_scale(rounds: int, precision: str, d: int = 34_826, paper_rounds: int = 200) -> None:
    n, gamma = 40, 0.03
    g = make_graph("erdos_renyi", n, seed=0, p=0.15)
    rng = np.random.default_rng(0)
    dummy = np.zeros((3, 1))
    clients = [ClientData(dummy, np.zeros(3), dummy[:1], np.zeros(1), client_id=k) for k in range(n)]
    models = [StandIn(d, rng.normal(0, 1, d) * 0.01) for _ in range(n)]
    d_e = int(gamma * d)
    directed = 2 * g.number_of_edges()
    dense4, dense8 = directed * d_e * d * 4, directed * d_e * d * FLOAT
    hp = {"gamma": gamma, "map_init": "sparse_sign", "map_scale": 1.0 / np.sqrt(n), "maps": "compact", "lr": 0.05, "lam": 0.01, "eta": 0.01,
          "map_precision": precision}
    algo = build("sheaf", {**hp, "memory_budget": 1e12})
    before = peak_rss()
    times = []
    h = run_decentralised(clients, g, algo, rounds, seed=0, task="regression", models=models,
                          on_round=lambda hist, row: times.append(row["seconds"]))
    per_update = sum(m.bytes_per_update() for m in algo.maps.values())
    state = algo.state_bytes()
    start = state - rounds * per_update
    need = start + paper_rounds * per_update
    print(f"== paper scale: 40 clients x {d:,} parameters, gamma = 0.03, Erdos-Renyi p = 0.15, {precision} map factors")
    print(f"graph: {g.number_of_edges()} edges, {directed} restriction maps of {d_e} x {d}")
    print(f"dense restriction maps (analytic): {dense4 / 1e9:.1f} GB as float32, {dense8 / 1e9:.1f} GB as float64")
    print(f"per-round time: median {np.median(times):.2f} s (first {times[0]:.2f} s, last {times[-1]:.2f} s) over {rounds} rounds")
    print(f"compact map storage after {rounds} rounds (measured): {state / GB:.3f} GB (+{per_update / 1e6:.2f} MB per round)")
    print(f"measured peak memory (RSS): {peak_rss() / GB:.3f} GB (before the run: {before / GB:.3f} GB)")
    print(f"a {paper_rounds}-round run needs memory_budget >= {need:.4g} bytes ({need / GB:.2f} GB of maps); the default 2 GB "
          + ("suffices" if need <= 2 * GB else f"would be reached at round {int((2 * GB - start) // per_update) + 1}, so such a run is "
             "refused before its first iteration with that number (on_budget='error', the default; on_budget='recompress' "
             "truncates each node's history by SVD instead — approximate, reporting the discarded spectrum share)"))
    if need > 2 * GB:  # what the default budget answers, before any iteration
        try:
            run_decentralised(clients, g, build("sheaf", hp), paper_rounds, seed=0, task="regression", models=models)
        except MemoryError as exc:
            print(f"with the default budget: MemoryError: {exc}")
    print(f"transmitted: {h.final['cumulative_bits'] / 8e6:.1f} MB over {rounds} rounds (dFedU would send "
          f"{rounds * directed * d * 32 / 8e6:.0f} MB)")


def vehicle_size(rounds: int) -> None:
    n, feats = 23, 100
    rng = np.random.default_rng(1)
    clients = []
    for k in range(n):
        X = rng.standard_normal((80, feats))
        y = (X[:, :5].sum(axis=1) + rng.normal(0, 1, 80) > 0).astype(float)
        clients.append(ClientData(X[:60], y[:60], X[60:], y[60:], client_id=k))
    g = make_graph("erdos_renyi", n, seed=1, p=0.2)
    print("== Vehicle size: 23 clients, d = 202, gamma = 0.1, Erdos-Renyi p = 0.2")
    out = {}
    for maps in ("dense", "compact", "auto"):
        algo = build("sheaf", {"gamma": 0.1, "map_init": "sparse_sign", "maps": maps, "lam": 0.01, "eta": 0.01})
        t0 = time.perf_counter()
        run_decentralised(clients, g, algo, rounds, seed=0, n_classes=2, eval_every=rounds)
        out[maps] = (time.perf_counter() - t0) / rounds
        print(f"{maps:>8}: {out[maps] * 1e3:.2f} ms per round ({'compact' if algo.compact else 'dense'} maps, {algo.state_bytes() / 1e6:.2f} MB)")
    print(
        f"auto / dense time ratio: {out['auto'] / out['dense']:.2f} "
        f"(auto picks dense maps when they fit; compact / dense: {out['compact'] / out['dense']:.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 paper-scale rounds, 50 Vehicle-size rounds")
    parser.add_argument("--precision", choices=("float32", "float64"), default="float32",
                        help="storage of the compact map factors (float64 doubles the growth per round)")
    parser.add_argument("--rounds", type=int, default=20, help="paper-scale rounds run (the paper runs 200)")
    parser.add_argument("--dim", type=int, default=34_826, help="model size (34,826: the paper's same-size CNN; 212,146: Table 2's large)")
    args = parser.parse_args()
    vehicle_size(50 if args.quick else 300)
    paper_scale(5 if args.quick else args.rounds, args.precision, args.dim)


if __name__ == "__main__":
    main()
