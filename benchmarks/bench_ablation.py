"""Benchmark (ablation): what topofl's thread policy, job checks and reply checks cost in a short linear FedAvg run.

``bench_scale.py``'s loop finds topofl's linear FedAvg at 8 clients 1.2x the hand-written loop a round, and its run's
setup longer than the loop's (medians of 0.14-0.30 ms over its runs, not always resolved): on 3-round runs (about
4 ms) the ratio comes to about 1.3. This script measures what three parts of topofl's run cost inside the run, by
knocking them out of topofl's own runs one at a time, the rest of each run as shipped:

* **topofl as shipped** - ``topofl.simulate(fed, "fedavg", rounds=R, seed=0, threads=1)``, as ``bench_scale.py``;
* **no thread policy** (a run's setup) - ``topofl.api.limited_threads`` replaced by a block that sets nothing:
  neither the thread variables (set for the run and put back after) nor the BLAS pools (the process's pools are at
  one thread already: the worker starts with ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and ``MKL_NUM_THREADS``
  at 1 and checks the pools before and after timing). With those three set, a shipped run writes and puts back the
  other three of ``topofl.threads.THREAD_VARIABLES``; in an environment with none of them set it would write six;
* **no job checks** (a run's setup) - ``topofl.api.Job`` replaced by the job built once before timing, from the
  arguments that ``simulate`` gives it: the job's fields and the method's configuration are not validated again;
* **neither of the two** (a run's setup, as far as it can be knocked out);
* **no reply checks** (every round) - the round loop's ``screen_updates`` and ``_screen_evaluations`` replaced by
  ones that accept every reply and every evaluation unread (the honest clients' replies pass them anyway; the
  round's summary then joins the evaluations' predictions itself, as after a round judged reply by reply, so this
  knock-out saves a little less than the checks cost);
* **none of the three**;
* **hand loop** - ``bench_scale.hand_written_fedavg`` (the tightest floor).

The knock-outs are for measurement only: the project's standards require all three (a run's threads are set and put
back, issue 24; every value and every reply is validated where it enters). The patching itself (a few attribute
writes and a ``try``) is counted in the knock-outs' runs. Every contender runs in one process, alternately
(``round_timer.alternating_passes``: ``--passes`` passes after a warm-up, each contender's runs filling about 0.25 s,
the contenders' order turning from pass to pass). Printed: the medians of the wall seconds per run, each contender's
ratio to the hand loop's median (wall, and CPU: steadier on a busy machine), and per pass what a knock-out saves
against the shipped run of the same pass: the median and the sign test's 95 % interval of it
(``round_timer.median_interval``; from 6 passes on), marked ``unresolved`` where the interval includes 0 or there is
none. Savings do not add up (each is the median of its own noisy paired differences). Every knock-out's
run must equal the shipped run's (the global model bit for bit; each round's summary, records, failures and server
log as printed), and the hand loop's model must agree with topofl's to 1e-9, or the benchmark fails.

Run: ``python benchmarks/bench_ablation.py [--clients 8] [--rounds 3] [--passes 10] [--quick]``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from collections.abc import Callable, Iterator
from typing import Any

from bench_scale import hand_options, hand_written_fedavg
from round_timer import alternating_passes, interval_text, median_interval, passes_text, run_worker

SHIPPED, HAND = "topofl as shipped", "hand loop"
#: the knock-outs: name → (thread policy out, job checks out, reply checks out)
KNOCKOUTS = {"no thread policy": (True, False, False), "no job checks": (False, True, False),
             "neither of the two": (True, True, False), "no reply checks": (False, False, True),
             "none of the three": (True, True, True)}
CONTENDERS = (SHIPPED, *KNOCKOUTS, HAND)


def _parts() -> tuple[Any, ...]:
    """What the knock-outs replace, as topofl has them now: the thread policy, the job, the two reply checks."""
    from topofl import api
    from topofl.federation import runner

    return api.limited_threads, api.Job, runner.screen_updates, runner._screen_evaluations


def _put(parts: tuple[Any, ...]) -> None:
    """Put ``parts`` (in :func:`_parts`' order) in place in topofl."""
    from topofl import api
    from topofl.federation import runner

    api.limited_threads, api.Job, runner.screen_updates, runner._screen_evaluations = parts


def contenders(n_clients: int, rounds: int) -> dict[str, Callable[[], Any]]:
    """The contenders of the module docstring, by name: each a call that runs one run and returns topofl's result (the
    hand loop: its global model). Each is called once here (its imports and caches made before any timing).
    """
    import topofl

    fed = topofl.make_scenario("healthcare", 0, n_clients=n_clients)
    real = _parts()
    given: list[dict[str, Any]] = []

    def recording_job(**kwargs: Any) -> Any:
        given.append(kwargs)
        return real[1](**kwargs)

    def simulate() -> Any:
        return topofl.simulate(fed, "fedavg", rounds=rounds, seed=0, threads=1)

    _put((real[0], recording_job, *real[2:]))
    try:
        simulate()
    finally:
        _put(real)
    built = real[1](**given[0])   # the job simulate builds, built once

    def no_limits(*args: Any, **kwargs: Any) -> contextlib.AbstractContextManager[int]:
        return contextlib.nullcontext(1)

    def all_updates(algorithm: Any, updates: Any, messages: Any, infos: Any) -> tuple[list[Any], list[Any]]:
        return list(updates), []

    def all_evaluations(evaluations: Any, *args: Any) -> tuple[list[Any], None]:
        return list(evaluations), None

    def knocked_out(threads: bool, job: bool, replies: bool) -> Callable[[], Any]:
        parts = (no_limits if threads else real[0], (lambda **kwargs: built) if job else real[1],
                 *((all_updates, all_evaluations) if replies else real[2:]))

        def call() -> Any:
            _put(parts)
            try:
                return simulate()
            finally:
                _put(real)
        return call

    hand_kw = hand_options()
    calls = {SHIPPED: simulate, **{name: knocked_out(*out) for name, out in KNOCKOUTS.items()},
             HAND: lambda: hand_written_fedavg(list(fed.clients), rounds, 0, **hand_kw)}
    # its first call imports SciPy's statistics (a new module renews topofl's view of the BLAS pools): made here, so
    # that the pool check before timing sees every library the runs load
    calls[HAND]()
    return calls


@contextlib.contextmanager
def _library_intact() -> Iterator[None]:
    """Fail unless topofl has its own thread policy, job and reply checks back after the block."""
    before = _parts()
    yield
    if _parts() != before:
        raise RuntimeError("a knock-out was left in place in topofl")


def _one_thread(when: str) -> None:
    """``RuntimeError`` unless every BLAS pool loaded is at one thread (the thread policy's knock-out sets none)."""
    from topofl.threads import thread_info

    pools = [p["num_threads"] for p in thread_info()["blas"]]
    if any(n != 1 for n in pools):
        raise RuntimeError(f"the BLAS pools must be at one thread {when} (OMP_NUM_THREADS=1); got {pools}")


def _run_as_printed(result: Any) -> str:
    """A topofl run's rounds, per-client records, failures and server log, as printed (floats by their repr: exact)."""
    return repr((result.rounds, result.records, result.failures, result.server_logs))


def worker(n_clients: int, rounds: int, passes: int, fill: float = 0.25) -> dict[str, Any]:
    """Time the contenders alternately in this process (one BLAS thread, checked before and after); what
    :func:`report` prints.

    Raises
    ------
    RuntimeError
        A BLAS pool is not at one thread, a knock-out changed the run (its model or what it printed) or was left in
        place, or the hand loop's model differs from topofl's by more than 1e-9.
    """
    import warnings

    import numpy as np

    warnings.simplefilter("ignore")
    with _library_intact():
        calls = contenders(n_clients, rounds)
        _one_thread("before timing")
        times, last, repeats = alternating_passes([{name: calls[name]} for name in CONTENDERS], passes, fill)
        _one_thread("after timing")
    shipped = last[SHIPPED]
    for name in KNOCKOUTS:
        if not (np.array_equal(last[name].server_params, shipped.server_params)
                and _run_as_printed(last[name]) == _run_as_printed(shipped)):
            raise RuntimeError(f"{name!r} changed the run: it knocked out more than its checks")
    gap = float(np.max(np.abs(shipped.server_params - last[HAND])))
    if not gap <= 1e-9:
        raise RuntimeError(f"topofl's global model and the hand loop's differ by {gap:.3g}: not the same rounds")
    return {"clients": n_clients, "rounds": rounds, "passes": passes, "times": times,
            "repeats": dict(zip(CONTENDERS, repeats, strict=True)), "hand_gap": gap}


def report(result: dict[str, Any]) -> None:
    """Print the ablation table of :func:`worker`'s result."""
    times = result["times"]
    med = {name: {clock: statistics.median(v) for clock, v in times[name].items()} for name in CONTENDERS}
    print(f"\nablation: linear FedAvg, healthcare, {result['clients']} clients, {result['rounds']}-round runs, "
          f"{passes_text(result['passes'])} in one process (after a warm-up pass); medians of "
          "the wall seconds per run, ratios of medians to the hand loop's (wall, CPU), and what each knock-out saves "
          "against topofl as shipped in the same pass: median [the sign test's 95 % interval, from 6 passes on] "
          "('unresolved' where the interval includes 0 or there is none; savings do not add up)")
    print(f"{'contender':<18} {'runs/pass':>9} {'per run':>9} {'ratio':>6} {'CPU ratio':>9}  saves a run [95 % interval]")
    for name in CONTENDERS:
        line = (f"{name:<18} {result['repeats'][name]:>9} {med[name]['wall'] * 1e3:>7.3f}ms "
                f"{med[name]['wall'] / med[HAND]['wall']:>5.3f}x {med[name]['cpu'] / med[HAND]['cpu']:>8.3f}x")
        if name in KNOCKOUTS:
            saved = [a - b for a, b in zip(times[SHIPPED]["wall"], times[name]["wall"], strict=True)]
            line += f"  {interval_text(median_interval(saved))}"
        print(line, flush=True)
    print(f"runs: each knock-out's equal to the shipped run (global model bit for bit; rounds, records, failures and "
          f"server log as printed); the hand loop's global model within {result['hand_gap']:.2e} of topofl's")


def main(argv: list[str] | None = None) -> None:
    from topofl.limits import MAX_CLIENTS, MAX_ROUNDS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=8, help="clients of the healthcare scenario")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per run (3: the short runs of bench_scale's loop)")
    ap.add_argument("--passes", type=int, default=10, help="measured passes of each contender (6 or more for an "
                                                             "interval)")
    ap.add_argument("--quick", action="store_true", help="2 passes (a smoke check: no intervals)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for name, low, high in (("clients", 2, MAX_CLIENTS), ("rounds", 1, MAX_ROUNDS), ("passes", 1, 1000)):
        if not low <= getattr(args, name) <= high:
            ap.error(f"--{name} must be from {low} to {high}; got {getattr(args, name)}")
    if args.quick:
        args.passes = min(args.passes, 2)
    if args.worker:
        print(json.dumps(worker(args.clients, args.rounds, args.passes)), flush=True)
        return
    print(f"ablation: {args.clients} clients, {args.rounds}-round runs ...", file=sys.stderr, flush=True)
    report(run_worker(__file__, ["--worker", f"--clients={args.clients}", f"--rounds={args.rounds}",
                                 f"--passes={args.passes}"]))


if __name__ == "__main__":
    main()
