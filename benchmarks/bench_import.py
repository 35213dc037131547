"""Benchmark: start-up cost of ``import topofl``, ``import topofl.cli`` and ``topofl --help``.

Each figure is the median wall time of N fresh interpreters (subprocesses), next to a bare
``python -c pass`` for reference; ``--importtime`` also prints the heaviest modules that
``import topofl.cli`` loads (from ``python -X importtime``).

Target (issue 12, item 7): ``topofl --help`` under 0.5 s. ``tests/test_import_weight.py`` keeps
SciPy's statistics and optimisers, scikit-learn, matplotlib, torch and Flower out of these imports
(deterministically); the times here depend on the machine and its load.

Run: ``python benchmarks/bench_import.py`` (``--runs N``, default 7; ``--quick`` for 3).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

TARGET_HELP_S = 0.5

CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "import topofl": [sys.executable, "-c", "import topofl"],
    "import topofl.cli": [sys.executable, "-c", "import topofl.cli"],
    "topofl --help": [sys.executable, "-c", "import sys; sys.argv = ['topofl', '--help']; from topofl.cli import main; main()"],
    "topofl compare --help": [sys.executable, "-c", "import sys; sys.argv = ['topofl', 'compare', '--help']; from topofl.cli import main; main()"],
}


def median_s(cmd: list[str], runs: int) -> float:
    subprocess.run(cmd, capture_output=True, check=False)  # warm the file cache
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, check=False)
        times.append(time.perf_counter() - t)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.decode()[-500:]}")
    return statistics.median(times)


def heaviest_imports(module: str, top: int = 12) -> list[tuple[int, str]]:
    """(cumulative µs, name) of the ``top`` heaviest modules of ``import module``, by ``-X importtime``."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True, text=True, check=True)
    rows = []
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    return sorted(rows, reverse=True)[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="3 runs per case")
    parser.add_argument("--importtime", action="store_true", help="also list the heaviest imports of topofl.cli")
    args = parser.parse_args()
    runs = 3 if args.quick else args.runs
    print(f"median wall time of {runs} fresh interpreters ({sys.executable})")
    results = {}
    for name, cmd in CASES.items():
        results[name] = median_s(cmd, runs)
        print(f"  {name:<24} {results[name]:6.3f} s")
    verdict = "meets" if results["topofl --help"] < TARGET_HELP_S else "MISSES"
    print(f"topofl --help {verdict} the {TARGET_HELP_S} s target")
    if args.importtime:
        print("heaviest imports of topofl.cli (cumulative, one run):")
        for us, name in heaviest_imports("topofl.cli"):
            print(f"  {us / 1e3:8.1f} ms  {name}")


if __name__ == "__main__":
    main()
