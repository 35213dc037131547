"""Benchmark: seconds per Flower round for topofl, next to a bare Flower app and the other runtimes.

In one run, on loopback, with ``--nodes`` nodes (default 4) and ``--rounds`` rounds (default 4):

(a) **topofl deployment** — ``examples/flower-app`` on a :class:`~topofl.deploy.LocalDeployment`
    (a SuperLink and N SuperNodes; Flower starts a fresh ``flwr-clientapp`` process per message):
    FedAvg on ``healthcare`` with ``scenario-params="n_clients=N,adversarial=(1,)"``;
(b) **bare Flower app** — ``benchmarks/bare_flower_app`` on the same deployment (same isolation):
    per round one train and one evaluate message to every node through ``grid.send_and_receive``,
    carrying a 21-float ArrayRecord (the healthcare model's size) that the ClientApp sends back;
(c) **Flower Simulation Runtime** — :func:`topofl.flower.simulate_flower`, the job of (a);
(d) **in process** — :func:`topofl.simulate`, the same federation and method.

Per-round time: every runtime leaves a timestamp as each round ends — the row of ``curves.csv`` that
topofl's ServerApp appends (its appearance is polled every 10 ms), the line the bare ServerApp
appends to its stamps file (polled the same way), ``on_round`` in process — and a round costs
(t_R − t_1) / (R − 1): startup, node discovery and round 1 are left out (``to round 1`` shows them).
Needs ``--rounds`` >= 2.

It also times the import of the ClientApp in fresh interpreters (median of ``--import-runs``):
``import flwr.app, flwr.clientapp`` is the floor of any Flower ClientApp; topofl's own share is
measured inside the interpreter after Flower is imported. ``--compare DIR`` times an old copy of
``src/`` (e.g. ``cp -r src /tmp/before``) interleaved with the current code, under the same load.

Before issue 14 item 4 (SciPy and networkx imported at module level; measured on the 2-core
machine, median of 7 fresh interpreters, load ~2): ``import topofl.flower.client_app`` took 0.98 s,
of which Flower's own ``import flwr.app, flwr.clientapp`` 0.37 s (``-X importtime``: topofl's share
0.41 s, SciPy's special functions 0.14 s and networkx 0.10 s of it). With ``--compare`` on a copy of
the old code, under load 4: 1.68 s before, 0.83 s after (Flower alone 0.48 s). A ClientApp process
also stopped importing scipy.stats (average ranks in NumPy) when it evaluates (~0.3 s per message);
a node that builds a built-in scenario (trials) still imports scipy.optimize for Brent's method,
which a real site with its own ``data-path`` never does. Timings depend on the machine
and its load (other work shares it); nothing here is asserted.

Run: ``python benchmarks/bench_flower_round.py [--rounds 4] [--nodes 4] [--import-runs 7] [--compare DIR]
[--skip-simulation]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")

ROOT = Path(__file__).resolve().parent.parent
TOPOFL_APP = ROOT / "examples" / "flower-app"
BARE_APP = Path(__file__).resolve().parent / "bare_flower_app"

IMPORT_CASES = {
    "python -c pass": "pass",
    "flwr.app + flwr.clientapp (floor)": "import flwr.app, flwr.clientapp",
    "bare ClientApp": "import bare_flower_app.client_app",
    "topofl ClientApp": "import topofl.flower.client_app",
}
OWN_SHARE = (
    "import time\nimport flwr.app, flwr.clientapp\nt = time.perf_counter()\nimport topofl.flower.client_app\n"
    "print(time.perf_counter() - t)"
)


# ------------------------------------------------------------------------------------------- imports


def _env(pythonpath: str | None) -> dict[str, str]:
    env = dict(os.environ)
    parts = [p for p in (pythonpath, str(BARE_APP), env.get("PYTHONPATH")) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def import_times(runs: int, compare: str | None) -> dict[str, dict[str, float]]:
    """Median seconds of each import case (and topofl's share after Flower), current code and ``compare``."""
    variants = {"now": None} if compare is None else {"now": None, "compare": compare}
    times: dict[str, dict[str, list[float]]] = {v: {c: [] for c in [*IMPORT_CASES, "topofl share"]} for v in variants}
    for _ in range(runs + 1):  # the first pass warms the file cache and is dropped
        for variant, path in variants.items():
            env = _env(path)
            for case, code in IMPORT_CASES.items():
                t = time.perf_counter()
                subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
                times[variant][case].append(time.perf_counter() - t)
            out = subprocess.run([sys.executable, "-c", OWN_SHARE], env=env, check=True, capture_output=True, text=True)
            times[variant]["topofl share"].append(float(out.stdout.strip().splitlines()[-1]))
    return {v: {c: statistics.median(ts[1:]) for c, ts in cases.items()} for v, cases in times.items()}


# -------------------------------------------------------------------------------------------- rounds


class RowWatcher(threading.Thread):
    """Polls the files matching ``pattern`` under ``root`` and stamps (time.time()) each new line."""

    def __init__(self, root: Path, pattern: str, header_lines: int, interval: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.root, self.pattern, self.header_lines, self.interval = root, pattern, header_lines, interval
        self.stamps: list[float] = []
        self._stop_event = threading.Event()

    def _rows(self) -> int:
        total = 0
        for path in self.root.glob(self.pattern):
            try:
                text = path.read_text()
            except OSError:
                continue
            total += max(0, sum(1 for line in text.splitlines() if line.strip()) - self.header_lines)
        return total

    def run(self) -> None:
        while not self._stop_event.is_set():
            rows = self._rows()
            now = time.time()
            self.stamps.extend([now] * (rows - len(self.stamps)))
            self._stop_event.wait(self.interval)

    def finish(self) -> list[float]:
        self._stop_event.set()
        self.join()
        rows = self._rows()
        self.stamps.extend([time.time()] * (rows - len(self.stamps)))
        return self.stamps


def per_round(start: float, stamps: list[float], rounds: int) -> dict[str, float]:
    if len(stamps) != rounds:
        raise RuntimeError(f"expected {rounds} round timestamps, got {len(stamps)}")
    return {"round": (stamps[-1] - stamps[0]) / (rounds - 1), "first": stamps[0] - start, "wall": stamps[-1] - start}


def timed_deployment_run(dep, app: Path, config: dict, watch_root: Path, pattern: str, header: int, rounds: int) -> dict[str, float]:
    watcher = RowWatcher(watch_root, pattern, header)
    watcher.start()
    start = time.time()
    try:
        result = dep.run(app, config, timeout=900)
    finally:
        stamps = watcher.finish()
    if not result.ok:
        raise RuntimeError(f"{app.name}: run {result.run_id} ended {result.status} (exit {result.returncode}):\n{result.stdout[-3000:]}")
    return {**per_round(start, stamps, rounds), "total": time.time() - start}


def deployment(nodes: int, rounds: int, work: Path) -> tuple[dict[str, float], dict[str, float], float]:
    """(a) and (b) on one LocalDeployment; returns their timings and the deployment's startup seconds."""
    from topofl.deploy import LocalDeployment

    t = time.perf_counter()
    with LocalDeployment(nodes, log_dir=work / "deployment") as dep:
        startup = time.perf_counter() - t
        stamps = work / "bare-stamps.txt"
        bare = timed_deployment_run(dep, BARE_APP, {"num-server-rounds": rounds, "min-nodes": nodes, "stamps-file": str(stamps)},
                                    work, stamps.name, 0, rounds)
        config = {"method": "fedavg", "scenario": "healthcare", "scenario-params": f"n_clients={nodes},adversarial=(1,)",
                  "num-server-rounds": rounds, "min-nodes": nodes, "out-dir": "bench"}
        topo = timed_deployment_run(dep, TOPOFL_APP, config, dep.results_root / "bench", "run-*/curves.csv", 1, rounds)
    return topo, bare, startup


def flower_simulation(nodes: int, rounds: int, work: Path) -> dict[str, float]:
    """(c): topofl's job on Flower's Simulation Runtime, timed from the curves.csv it writes."""
    from topofl.flower import simulate_flower

    root = work / "simulation"
    watcher = RowWatcher(root / "bench", "run-*/curves.csv", 1)
    watcher.start()
    start = time.time()
    try:
        simulate_flower(method="fedavg", scenario="healthcare", scenario_params=f"n_clients={nodes},adversarial=(1,)",
                        num_server_rounds=rounds, out_dir="bench", results_root=root, n_nodes=nodes)
    finally:
        stamps = watcher.finish()
    return {**per_round(start, stamps, rounds), "total": time.time() - start}


def in_process(nodes: int, rounds: int) -> dict[str, float]:
    """(d): topofl.simulate on the same federation, timed by ``on_round``."""
    import topofl

    stamps: list[float] = []
    start = time.time()
    fed = topofl.make_scenario("healthcare", 0, n_clients=nodes, adversarial=(1,))
    topofl.simulate(fed, "fedavg", rounds=rounds, seed=0, on_round=lambda history, summary: stamps.append(time.time()))
    return {**per_round(start, stamps, rounds), "total": time.time() - start}


# ---------------------------------------------------------------------------------------------- main


def _row(name: str, t: dict[str, float]) -> str:
    return f"  {name:<36} {t['round']:8.3f} s/round   to round 1 {t['first']:6.2f} s   run {t['total']:6.2f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4, help="rounds of every run (>= 2; default 4)")
    ap.add_argument("--nodes", type=int, default=4, help="SuperNodes / clients (>= 2; default 4)")
    ap.add_argument("--import-runs", type=int, default=7, help="fresh interpreters per import case (median; default 7)")
    ap.add_argument("--compare", metavar="DIR", help="also time the imports of an old copy of src/ (PYTHONPATH=DIR)")
    ap.add_argument("--skip-simulation", action="store_true", help="leave out (c), Flower's Simulation Runtime (Ray)")
    args = ap.parse_args()
    if args.rounds < 2 or args.nodes < 2:
        ap.error("--rounds and --nodes must be >= 2")

    print(f"{sys.executable}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    print(f"import of the ClientApp, median of {args.import_runs} fresh interpreters:")
    imports = import_times(args.import_runs, args.compare)
    now = imports["now"]
    for case in IMPORT_CASES:
        line = f"  {case:<36} {now[case]:6.3f} s"
        if args.compare:
            line += f"   (--compare copy: {imports['compare'][case]:6.3f} s)"
        print(line)
    share = f"  {'topofl share (after Flower)':<36} {now['topofl share']:6.3f} s"
    if args.compare:
        before = imports["compare"]
        share += f"   (--compare copy: {before['topofl share']:6.3f} s)"
    print(share)
    floor = now["flwr.app + flwr.clientapp (floor)"]
    print(f"  topofl ClientApp / bare ClientApp: {now['topofl ClientApp'] / now['bare ClientApp']:.2f}x; "
          f"topofl ClientApp − Flower floor: {now['topofl ClientApp'] - floor:.3f} s")
    if args.compare:
        gain = before["topofl ClientApp"] - now["topofl ClientApp"]
        print(f"  import gain: {before['topofl ClientApp']:.3f} s → {now['topofl ClientApp']:.3f} s (−{gain:.3f} s, "
              f"{before['topofl ClientApp'] / now['topofl ClientApp']:.2f}x), per ClientApp process")

    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-flower-round-") as tmp:
        work = Path(tmp)
        print(f"\n{args.nodes} nodes, {args.rounds} rounds; s/round = (t_R − t_1) / (R − 1) from per-round timestamps")
        steps: list[tuple[str, Callable[[], dict[str, float]]]] = [("(d) in process: topofl.simulate", lambda: in_process(args.nodes, args.rounds))]
        if not args.skip_simulation:
            steps.append(("(c) Flower Simulation Runtime", lambda: flower_simulation(args.nodes, args.rounds, work)))
        for name, step in steps:
            results[name] = step()
            print(_row(name, results[name]), flush=True)
        topo, bare, startup = deployment(args.nodes, args.rounds, work)
        print(f"  LocalDeployment startup (SuperLink + {args.nodes} SuperNodes): {startup:.2f} s; every process stopped")
        results["(b) bare Flower app, deployment"], results["(a) topofl, deployment"] = bare, topo
        print(_row("(b) bare Flower app, deployment", bare))
        print(_row("(a) topofl, deployment", topo))
    ratio = topo["round"] / bare["round"]
    print(f"\ntopofl deployment / bare Flower app: {ratio:.2f}x per round (target <= 1.5: {'met' if ratio <= 1.5 else 'MISSED'})")
    for name in ("(c) Flower Simulation Runtime", "(d) in process: topofl.simulate"):
        if name in results:
            print(f"topofl deployment / {name[4:]}: {topo['round'] / results[name]['round']:.1f}x per round")


if __name__ == "__main__":
    main()
