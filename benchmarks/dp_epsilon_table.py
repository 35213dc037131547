"""Measurement: the (ε, δ) of client-level DP-FedAvg at pTopoFL's default scale, from dp-accounting.

pTopoFL's experiments run 15 rounds over 8 hospitals with full participation (q = 1), so there is
no privacy amplification by sampling and the noise on the mean update is z·C / 8: the table shows
how much noise a small ε costs there. Columns:

* ``std/C`` — noise standard deviation per coordinate of the mean update, over the clip norm (z / N);
* ``|noise|/C`` — expected norm of that noise over C for a model of p parameters (≈ z·√p / N; a
  clipped client delta has norm ≤ C, so above 1 the noise outweighs any one client's whole update);
* ``eps RDP`` / ``eps PLD`` — add/remove-one-client (DP-FedAvg's statement), by the RDP and PLD
  accountants of dp-accounting;
* ``eps PLD repl.`` — the set of hospitals is public and one hospital's data are replaced: the sum
  moves by up to 2C, so the noise multiplier is effectively z / 2 (PLD).

Then the z that the PLD accountant calibrates for a few target ε.

Run: ``python benchmarks/dp_epsilon_table.py`` (``--rounds``, ``--clients``, ``--delta``,
``--params``; needs ``pip install 'topofl[privacy]'``).
"""
from __future__ import annotations

import argparse
import math
import time

from topofl.privacy.accounting import dp_fedavg_epsilon, noise_for_epsilon

NOISE_MULTIPLIERS = (0.5, 1.0, 2.0, 4.0, 8.0)
TARGETS = (1.0, 3.0, 8.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15, help="rounds (pTopoFL's experiments: 15)")
    ap.add_argument("--clients", type=int, default=8, help="clients, all taking part every round (healthcare: 8 hospitals)")
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--params", type=int, default=21, help="model size p for the noise-norm column (logistic regression on 20 features: 21)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    T, N, delta, p = args.rounds, args.clients, args.delta, args.params
    print(f"DP-FedAvg, {T} rounds, {N} clients, q = 1, delta = {delta:g}, p = {p}")
    print(f"{'z':>5} {'std/C':>7} {'|noise|/C':>10} {'eps RDP':>9} {'eps PLD':>9} {'eps PLD repl.':>14}")
    for z in NOISE_MULTIPLIERS:
        rdp = dp_fedavg_epsilon(z, 1.0, T, delta, "rdp")
        pld = dp_fedavg_epsilon(z, 1.0, T, delta, "pld")
        rep = dp_fedavg_epsilon(z, 1.0, T, delta, "pld", adjacency="replace")
        print(f"{z:>5g} {z / N:>7.3f} {z * math.sqrt(p) / N:>10.2f} {rdp:>9.2f} {pld:>9.2f} {rep:>14.2f}")
    print()
    print(f"{'target eps':>10} {'z (PLD)':>9} {'std/C':>7} {'|noise|/C':>10}")
    for eps in TARGETS:
        z = noise_for_epsilon(eps, delta, T, 1.0, "pld")
        print(f"{eps:>10g} {z:>9.2f} {z / N:>7.3f} {z * math.sqrt(p) / N:>10.2f}")
    print(f"\n({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
