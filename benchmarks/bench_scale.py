"""Benchmark: linear cost in the number of clients, and linear models at the speed of a hand-written loop.

Data: the ``healthcare`` scenario (20 features, about 73 training rows per client, binary) with
``n_clients`` clients, logistic regression, the defaults of each method (FedAvg: 2 local epochs of
mini-batch SGD, batch 32, lr 0.1; pTopoFL: descriptors in round 1 and when a client's data changes,
clustering of the 48-d descriptors, Eq. 6 weights, trust and drift). One BLAS thread everywhere.

Two parts, each configuration in a fresh process:

* **Scale** — FedAvg and pTopoFL at 1,000 / 5,000 / 10,000 clients (``--clients``): the seconds of
  round 1 (it includes every client's persistent homology for pTopoFL), the median seconds of the
  later rounds, and the peak RSS of the process at the end of round 1 and of the run (``ru_maxrss``).
  For each method, the growth exponent of the later rounds from the fewest to the most clients,
  log(t_max / t_min) / log(K_max / K_min): 1 is linear in the number of clients, 2 quadratic.
* **Loop** — linear FedAvg against a hand-written NumPy loop at 8 and 1,000 clients (``--loop-clients``),
  on runs of the library's default 15 rounds and of 3 rounds (``--loop-rounds``; a run's setup —
  the configuration, the thread limits, the feature-scale check, the final models — weighs five times
  more per round in the short one; from the two lengths, each contender's run is also split into the
  cost of a round and that of its setup):
  the same rounds written by hand — every client from the global model, the same mini-batches (the
  permutations topofl's client generators draw), the logistic gradient with the L2 term and a plain
  SGD step on ``w`` and ``b``, the sample-size weighted average, and every client's test split scored
  with the global model (log-loss, accuracy, AUC from average ranks: by one sort and two binary searches,
  the tightest floor, and again with ``scipy.stats.rankdata``, ten times slower, as a hand-written loop
  commonly calls it). No messages, no reply checks, no records: the floor. The three, on runs of every
  length, run in the same process (one per client count), alternately (``--passes`` passes, after a warm-up
  pass; a pass runs each contender's run of each length as many times as fill about 0.25 s, so
  that the 8-client runs of a few milliseconds are timed over dozens of runs); the medians of the
  wall and of the CPU seconds per round (the CPU ones are steadier on a shared machine: one thread,
  this process) and their ratios are printed, with the largest gap between topofl's global model and the
  hand loops' (they see the same batches: it is rounding, about 1e-16; above 1e-9 the benchmark fails).
  The split prints each contender's round and setup (medians over the passes) and the setup gap, topofl's
  setup less the hand loop's in the same pass: its median and the sign test's 95 % interval of it
  (``round_timer.median_interval``, from 6 passes on), ``unresolved`` where the interval includes 0 or there is
  none.

``--quick`` runs small sizes (scale 100 / 300 / 1,000; loop 8 / 100, 3 passes) for a smoke check.
Run: ``python benchmarks/bench_scale.py [--quick] [--clients 1000,5000,10000] [--rounds 3]
[--methods fedavg,ptopofl] [--loop-clients 8,1000] [--loop-rounds 15,3] [--passes 10] [--no-scale] [--no-loop]``.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
import time
from typing import Any

from round_timer import alternating_passes, interval_text, median_interval, passes_text, run_worker

QUICK_CLIENTS, QUICK_LOOP = "100,300,1000", "8,100"


def _peak() -> int:
    """Peak resident set size of this process so far, in bytes."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def scale_worker(method: str, n_clients: int, rounds: int) -> None:
    """One run in this process; prints a JSON line with the seconds and the peak RSS after every round."""
    import warnings

    import topofl

    warnings.simplefilter("ignore")
    fed = topofl.make_scenario("healthcare", 0, n_clients=n_clients)
    stamps: list[float] = []
    peaks: list[int] = []
    last = [time.perf_counter()]

    def tick(history: Any, summary: Any) -> None:
        now = time.perf_counter()
        stamps.append(now - last[0])
        peaks.append(_peak())
        last[0] = now

    topofl.simulate(fed, method, rounds=rounds, seed=0, on_round=tick, threads=1)
    print(json.dumps({"times": stamps, "peaks": peaks}), flush=True)


def hand_written_fedavg(clients: list[Any], rounds: int, seed: int, epochs: int, lr: float, batch_size: int,
                        l2: float, ranks: str = "sort") -> Any:
    """FedAvg with logistic regression written by hand in NumPy (see the module docstring); the global model.

    ``ranks``: how the AUC's average ranks are taken — ``"sort"`` (one sort and two binary searches, about
    4 µs a client: the tightest floor) or ``"scipy"`` (``scipy.stats.rankdata``, about 45 µs: what a
    hand-written loop commonly calls).
    """
    import numpy as np
    from scipy.special import expit, log_expit
    from scipy.stats import rankdata

    d = clients[0].X_train.shape[1]
    w, b = np.zeros(d), 0.0
    n = np.array([c.X_train.shape[0] for c in clients], dtype=float)
    share = n / n.sum()
    for rnd in range(1, rounds + 1):
        w_sum, b_sum = np.zeros(d), 0.0
        for c, s in zip(clients, share, strict=True):
            X, y = c.X_train, c.y_train
            m = X.shape[0]
            bs = max(1, min(batch_size, m))
            rng = np.random.default_rng(np.random.SeedSequence([seed, rnd, c.client_id]))  # topofl's batches
            wk, bk = w.copy(), b
            for _ in range(epochs):
                order = rng.permutation(m)
                for start in range(0, m, bs):
                    idx = order[start:start + bs]
                    Xb = X[idx]
                    r = expit(Xb @ wk + bk) - y[idx]
                    gw = Xb.T @ r / len(idx) + l2 * wk
                    bk -= lr * r.mean()
                    wk -= lr * gw
            w_sum += s * wk
            b_sum += s * bk
        w, b = w_sum, b_sum
        for c in clients:  # every client's test split, with the global model
            y = c.y_test
            z = c.X_test @ w + b
            p = expit(z)
            _loss = -float(np.mean(y * log_expit(z) + (1.0 - y) * log_expit(-z)))
            _accuracy = float(np.mean((p >= 0.5) == y))
            pos = y == 1
            n_pos, n_neg = int(pos.sum()), int((~pos).sum())
            if ranks == "sort":  # average ranks: one sort, two binary searches (ties share their mean rank)
                ordered = np.sort(p)
                r = (np.searchsorted(ordered, p, "left") + np.searchsorted(ordered, p, "right") + 1) / 2
            else:
                r = rankdata(p)
            _auc = ((r[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg) if n_pos and n_neg
                    else float("nan"))
    return np.append(w, b)


def hand_options() -> dict[str, Any]:
    """FedAvg's defaults as :func:`hand_written_fedavg`'s keywords: local epochs, learning rate, batch size, L2."""
    from topofl.methods import build_server

    cfg = build_server("fedavg", {}).config
    return {"epochs": cfg.local_epochs, "lr": cfg.lr, "batch_size": cfg.batch_size, "l2": cfg.l2}


def loop_worker(n_clients: int, lengths: list[int], passes: int) -> None:
    """Run topofl's FedAvg and the hand-written loops alternately in this process, each on runs of every length in
    ``lengths``; print a JSON line.

    Each pass runs each contender's run of each length ``repeats`` times in a row (chosen after the warm-up so that
    it takes about 0.25 s: dozens of runs at 8 clients, one at 1,000) and records its wall and CPU seconds per round;
    the three contenders run one length after the other, the lengths in an order that turns from pass to pass
    (:func:`round_timer.alternating_passes`).
    """
    import warnings

    import numpy as np

    import topofl

    warnings.simplefilter("ignore")
    fed = topofl.make_scenario("healthcare", 0, n_clients=n_clients)
    hand_kw = hand_options()
    runs = {
        "topofl": lambda r: topofl.simulate(fed, "fedavg", rounds=r, seed=0, threads=1).server_params,
        "hand": lambda r: hand_written_fedavg(list(fed.clients), r, 0, **hand_kw),
        "hand-scipy": lambda r: hand_written_fedavg(list(fed.clients), r, 0, ranks="scipy", **hand_kw),
    }
    rounds_of = {f"{name}@{r}": r for r in lengths for name in runs}
    groups = [{f"{name}@{r}": functools.partial(run, r) for name, run in runs.items()} for r in lengths]
    per_run, models, repeats = alternating_passes(groups, passes)
    times = {key: {clock: [t / rounds_of[key] for t in values] for clock, values in clocks.items()}
             for key, clocks in per_run.items()}   # seconds per round
    gaps = {}
    for r in lengths:
        gaps[r] = float(max(np.max(np.abs(models[f"topofl@{r}"] - models[f"{k}@{r}"])) for k in ("hand", "hand-scipy")))
        if not gaps[r] <= 1e-9:  # the same batches and steps: anything beyond rounding means they did different work
            raise RuntimeError(f"topofl's global model and the hand loop's differ by {gaps[r]:.3g} after {r} rounds: "
                               "not the same rounds")
    print(json.dumps({"times": times, "gaps": gaps, "repeats": dict(zip(lengths, repeats, strict=True))}), flush=True)


def scale(methods: list[str], sizes: list[int], rounds: int) -> None:
    """The scale table and each method's growth exponent."""
    print(f"\nscale: healthcare, logistic regression, {rounds} rounds per run, one fresh process per run")
    print(f"{'method':<8} {'clients':>7} {'round 1':>9} {'later rounds':>13} {'RSS round 1':>12} {'peak RSS':>9}")
    for method in methods:
        later: dict[int, float] = {}
        for n in sizes:
            r = run_worker(__file__, ["--scale-worker", method, str(n), str(rounds)])
            later[n] = statistics.median(r["times"][1:])
            print(f"{method:<8} {n:>7} {r['times'][0]:>8.2f}s {later[n]:>12.3f}s {r['peaks'][0] / 2**30:>11.2f}G "
                  f"{r['peaks'][-1] / 2**30:>8.2f}G", flush=True)
        if len(sizes) > 1:
            lo, hi = sizes[0], sizes[-1]
            print(f"{method}: later-round growth exponent {lo} -> {hi} clients: "
                  f"{math.log(later[hi] / later[lo]) / math.log(hi / lo):.2f}", flush=True)


def loop(sizes: list[int], lengths: list[int], passes: int) -> None:
    """Linear FedAvg against the hand-written NumPy loop: seconds per round (wall and CPU) and their ratios, a table per
    run length; with two or more lengths, each contender's cost split into a run's setup and a round's.
    """
    results = {}
    for n in sizes:   # the tables need every client count: say where the run is meanwhile
        print(f"loop: {n} clients, runs of {', '.join(map(str, lengths))} rounds ...", file=sys.stderr, flush=True)
        results[n] = run_worker(__file__, ["--loop-worker", str(n), ",".join(map(str, lengths)), str(passes)])
    med = {n: {k: {m: statistics.median(v) for m, v in t.items()} for k, t in r["times"].items()}
           for n, r in results.items()}
    for rounds in lengths:
        print(f"\nloop: linear FedAvg vs a hand-written NumPy loop, {rounds}-round runs, {passes_text(passes)} "
              "in one process (after a warm-up pass), medians per round; CPU seconds are this process's (one thread)")
        print("(hand loop: AUC ranks by one sort, the tightest floor; 'SciPy ranks': the same loop with "
              "scipy.stats.rankdata)")
        print(f"{'clients':>7} {'runs/pass':>9} {'topofl':>10} {'hand loop':>10} {'ratio':>6} {'CPU ratio':>9} "
              f"{'SciPy ranks':>11} {'ratio':>6} {'CPU ratio':>9} {'max |model gap|':>16}")
        for n in sizes:
            ours, hand, scipy_ranks = (med[n][f"{k}@{rounds}"] for k in ("topofl", "hand", "hand-scipy"))
            print(f"{n:>7} {results[n]['repeats'][str(rounds)]:>9} {ours['wall']:>9.4f}s {hand['wall']:>9.4f}s "
                  f"{ours['wall'] / hand['wall']:>5.2f}x {ours['cpu'] / hand['cpu']:>8.2f}x "
                  f"{scipy_ranks['wall']:>10.4f}s {ours['wall'] / scipy_ranks['wall']:>5.2f}x "
                  f"{ours['cpu'] / scipy_ranks['cpu']:>8.2f}x {results[n]['gaps'][str(rounds)]:>16.2e}", flush=True)
    if len(lengths) < 2:
        return
    short, long = min(lengths), max(lengths)
    print(f"\nloop: a run's cost split into its setup and its rounds, pass by pass from the {short}- and {long}-round "
          f"runs above (wall): a round = (run_{long} - run_{short}) / {long - short}, the setup = run_{short} - "
          f"{short} rounds; medians over the passes, and the setup gap, topofl's setup less the hand loop's in the "
          "same pass: its median and the sign test's 95 % interval of it (from 6 passes on; 'unresolved' where the "
          "interval includes 0 or there is none)")
    print(f"{'clients':>7} {'topofl round':>13} {'hand round':>11} {'ratio':>6} {'topofl setup':>13} "
          f"{'hand setup':>11}  setup gap [95 % interval]")
    for n in sizes:
        r = split_setup(results[n]["times"], short, long)
        print(f"{n:>7} {r['round']['topofl'] * 1e3:>11.3f}ms {r['round']['hand'] * 1e3:>9.3f}ms "
              f"{r['round']['topofl'] / r['round']['hand']:>5.2f}x {r['setup']['topofl'] * 1e3:>11.3f}ms "
              f"{r['setup']['hand'] * 1e3:>9.3f}ms  {interval_text(r['gap'])}", flush=True)


def split_setup(times: dict[str, dict[str, list[float]]], short: int, long: int) -> dict[str, Any]:
    """Each contender's run split into a round and a setup, pass by pass, from its wall seconds per round on runs of
    ``short`` and ``long`` rounds (``times["topofl@3"]["wall"]``: one value a pass, the passes aligned across keys).

    In each pass a run of r rounds takes ``t_r · r`` seconds; a round is ``(run_long − run_short) / (long − short)``
    and the setup ``run_short − short · round``. Returns the medians over the passes of each contender's round and
    setup (``"round"``, ``"setup"``: ``{"topofl": s, "hand": s}``) and, in ``"gap"``, the paired setup gaps' (topofl's
    setup less the hand loop's in the same pass) median and 95 % interval (:func:`round_timer.median_interval`).
    """
    rounds: dict[str, list[float]] = {}
    setups: dict[str, list[float]] = {}
    for k in ("topofl", "hand"):
        runs_short, runs_long = ([t * r for t in times[f"{k}@{r}"]["wall"]] for r in (short, long))
        rounds[k] = [(b - a) / (long - short) for a, b in zip(runs_short, runs_long, strict=True)]
        setups[k] = [a - short * x for a, x in zip(runs_short, rounds[k], strict=True)]
    gaps = [a - b for a, b in zip(setups["topofl"], setups["hand"], strict=True)]
    return {"round": {k: statistics.median(v) for k, v in rounds.items()},
            "setup": {k: statistics.median(v) for k, v in setups.items()}, "gap": median_interval(gaps)}


def main() -> None:
    from topofl.limits import MAX_ROUNDS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", default="1000,5000,10000", help="scale: comma-separated client counts (ascending)")
    ap.add_argument("--rounds", type=int, default=3, help="scale: rounds per run (the first is reported apart)")
    ap.add_argument("--methods", default="fedavg,ptopofl")
    ap.add_argument("--loop-clients", default="8,1000", help="loop: comma-separated client counts")
    ap.add_argument("--loop-rounds", default="15,3",
                    help="loop: comma-separated run lengths (15: the library's default run; 3: setup weighs more)")
    ap.add_argument("--passes", type=int, default=10,
                    help="loop: measured passes of each contender (6 or more for the split's interval)")
    ap.add_argument("--quick", action="store_true", help=f"small sizes: scale {QUICK_CLIENTS}, loop {QUICK_LOOP}")
    ap.add_argument("--no-scale", action="store_true", help="skip the scale part")
    ap.add_argument("--no-loop", action="store_true", help="skip the loop part")
    ap.add_argument("--scale-worker", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--loop-worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.scale_worker:
        scale_worker(args.scale_worker[0], int(args.scale_worker[1]), int(args.scale_worker[2]))
        return
    if args.loop_worker:
        loop_worker(int(args.loop_worker[0]), [int(r) for r in args.loop_worker[1].split(",")],
                    int(args.loop_worker[2]))
        return
    if args.rounds < 2:
        ap.error("--rounds must be at least 2 (round 1 is reported apart)")
    try:   # distinct run lengths, in the order given
        lengths = list(dict.fromkeys(int(r) for r in args.loop_rounds.split(",") if r.strip().isascii()))
    except ValueError:
        lengths = []
    if (not lengths or len(lengths) != len(args.loop_rounds.split(",")) or min(lengths) < 1
            or max(lengths) > MAX_ROUNDS):
        ap.error(f"--loop-rounds must be distinct comma-separated run lengths of 1 to {MAX_ROUNDS} rounds; "
                 f"got {args.loop_rounds!r}")
    if not 1 <= args.passes <= 1000:
        ap.error(f"--passes must be from 1 to 1000; got {args.passes}")
    if args.quick:
        args.clients, args.loop_clients, args.passes = QUICK_CLIENTS, QUICK_LOOP, min(args.passes, 3)
    if not args.no_scale:
        scale(args.methods.split(","), [int(c) for c in args.clients.split(",")], args.rounds)
    if not args.no_loop:
        loop([int(c) for c in args.loop_clients.split(",")], lengths, args.passes)


if __name__ == "__main__":
    main()
