"""Benchmark (ablation): what topofl's thread policy, job checks and reply checks cost in a short linear FedAvg run.

``bench_scale.py``'s loop finds topofl's linear FedAvg at 8 clients 1.2x the hand-written loop a round, and its run's
setup 0.2-0.3 ms longer: on 3-round runs (about 4 ms) the ratio comes to about 1.3. Timed on their own, the parts of
that excess cost a fraction of what they cost inside a run, after the rounds' arithmetic (code and data no longer in
the caches). So this script knocks parts out of topofl's own runs, the rest of each run as shipped:

* **topofl as shipped** - ``topofl.simulate(fed, "fedavg", rounds=R, seed=0, threads=1)``, as ``bench_scale.py``;
* **no thread policy** (a run's setup) - ``topofl.api.limited_threads`` replaced by a block that sets nothing:
  neither the thread variables (set for the run and put back after) nor the BLAS pools (the process's pools are at
  one thread already: the worker starts with ``OMP_NUM_THREADS=1`` and checks them before timing);
* **no job checks** (a run's setup) - ``topofl.api.Job`` replaced by the job built once before timing, from the
  arguments that ``simulate`` gives it: the job's fields and the method's configuration are not validated again;
* **no reply checks** (every round) - the round loop's ``screen_updates`` and ``_screen_evaluations`` replaced by
  ones that accept every reply and every evaluation unread (the honest clients' replies pass them anyway; the
  round's summary then joins the evaluations' predictions itself, as after a round judged reply by reply, so this
  knock-out saves a little less than the checks cost);
* **neither of the two** (no thread policy, no job checks: a run's setup as far as it can be knocked out);
* **none of the three**;
* **hand loop** - ``bench_scale.hand_written_fedavg`` (the tightest floor).

The knock-outs are for measurement only: the project's standards require all three (a run's threads are set and put
back, issue 24; every value and every reply is validated where it enters). The patching itself (a few attribute
writes and a ``try``) is counted in the knock-outs' runs. Every contender runs in one process, alternately
(``round_timer.alternating_passes``: ``--passes`` passes after a warm-up, each contender's runs filling about 0.25 s,
the contenders' order turning from pass to pass); printed are the medians of the wall seconds per run, each one's
ratio to the hand loop's median, and per pass what a knock-out saves against the shipped run in the same pass, with
the quartiles (the min and max under 4 passes), marked ``unresolved`` where that spread includes 0 or is wider than
the saving. Every knock-out's global model must equal the shipped run's bit for bit, and the hand loop's must agree
to 1e-9, or the benchmark fails.

Run: ``python benchmarks/bench_ablation.py [--clients 8] [--rounds 3] [--passes 7] [--quick]``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from collections.abc import Callable, Iterator
from typing import Any

from bench_scale import _run, hand_written_fedavg, paired_spread

CONTENDERS = ("topofl as shipped", "no thread policy", "no job checks", "neither of the two", "no reply checks",
              "none of the three", "hand loop")


def contenders(n_clients: int, rounds: int) -> dict[str, Callable[[], Any]]:
    """The contenders of the module docstring: each a call that runs one run and returns its global model."""
    import numpy as np

    import topofl
    from topofl import api
    from topofl.federation import runner
    from topofl.methods import build_server

    fed = topofl.make_scenario("healthcare", 0, n_clients=n_clients)
    real = (api.limited_threads, api.Job, runner.screen_updates, runner._screen_evaluations)
    real_job = real[1]
    given: list[dict[str, Any]] = []

    def recording_job(**kwargs: Any) -> Any:
        given.append(kwargs)
        return real_job(**kwargs)

    def simulate() -> np.ndarray:
        return topofl.simulate(fed, "fedavg", rounds=rounds, seed=0, threads=1).server_params

    api.Job = recording_job
    try:
        simulate()
    finally:
        api.Job = real_job
    built = real_job(**given[0])   # the job simulate builds, built once

    def no_limits(*args: Any, **kwargs: Any) -> contextlib.AbstractContextManager[int]:
        return contextlib.nullcontext(1)

    def all_updates(algorithm: Any, updates: Any, messages: Any, infos: Any) -> tuple[list[Any], list[Any]]:
        return list(updates), []

    def all_evaluations(evaluations: Any, *args: Any) -> tuple[list[Any], None]:
        return list(evaluations), None

    def knocked_out(threads: bool, job: bool, replies: bool) -> Callable[[], np.ndarray]:
        def call() -> np.ndarray:
            if threads:
                api.limited_threads = no_limits
            if job:
                api.Job = lambda **kwargs: built
            if replies:
                runner.screen_updates, runner._screen_evaluations = all_updates, all_evaluations
            try:
                return simulate()
            finally:
                api.limited_threads, api.Job, runner.screen_updates, runner._screen_evaluations = real
        return call

    cfg = build_server("fedavg", {}).config
    hand_kw = dict(epochs=cfg.local_epochs, lr=cfg.lr, batch_size=cfg.batch_size, l2=cfg.l2)
    return {"topofl as shipped": simulate, "no thread policy": knocked_out(True, False, False),
            "no job checks": knocked_out(False, True, False), "neither of the two": knocked_out(True, True, False),
            "no reply checks": knocked_out(False, False, True),
            "none of the three": knocked_out(True, True, True),
            "hand loop": lambda: hand_written_fedavg(list(fed.clients), rounds, 0, **hand_kw)}


@contextlib.contextmanager
def _library_intact() -> Iterator[None]:
    """Fail unless topofl has its own thread policy, job and reply checks back after the block."""
    from topofl import api
    from topofl.federation import runner

    def parts() -> tuple[Any, ...]:
        return api.limited_threads, api.Job, runner.screen_updates, runner._screen_evaluations

    before = parts()
    yield
    if parts() != before:
        raise RuntimeError("a knock-out was left in place in topofl")


def worker(n_clients: int, rounds: int, passes: int, fill: float = 0.25) -> dict[str, Any]:
    """Time the contenders alternately in this process (one BLAS thread, checked); what :func:`report` prints."""
    import warnings

    import numpy as np
    from round_timer import alternating_passes

    from topofl.threads import thread_info

    warnings.simplefilter("ignore")
    with _library_intact():
        calls = contenders(n_clients, rounds)
        pools = [p["num_threads"] for p in thread_info()["blas"]]
        if any(n != 1 for n in pools):   # the knock-out of the thread policy leaves the pools as they are
            raise RuntimeError(f"the BLAS pools must be at one thread before timing (OMP_NUM_THREADS=1); got {pools}")
        times, models, repeats = alternating_passes([{name: calls[name]} for name in CONTENDERS], passes, fill)
    shipped = models["topofl as shipped"]
    for name in CONTENDERS[1:-1]:
        if not np.array_equal(models[name], shipped):   # the knock-outs must leave the run's arithmetic alone
            raise RuntimeError(f"{name!r} changed the global model: it knocked out more than the setup")
    gap = float(np.max(np.abs(shipped - models["hand loop"])))
    if not gap <= 1e-9:
        raise RuntimeError(f"topofl's global model and the hand loop's differ by {gap:.3g}: not the same rounds")
    return {"clients": n_clients, "rounds": rounds, "passes": passes, "wall": {k: v["wall"] for k, v in times.items()},
            "repeats": dict(zip(CONTENDERS, repeats, strict=True)), "hand_gap": gap}


def report(result: dict[str, Any]) -> None:
    """Print the ablation table of :func:`worker`'s result."""
    wall = result["wall"]
    med = {name: statistics.median(wall[name]) for name in CONTENDERS}
    spread = "quartiles" if result["passes"] >= 4 else "min, max"
    print(f"\nablation: linear FedAvg, healthcare, {result['clients']} clients, {result['rounds']}-round runs, "
          f"{result['passes']} alternating passes in one process (after a warm-up pass); medians of the wall seconds "
          f"per run, and what each knock-out saves against topofl as shipped in the same pass [{spread}] "
          "('unresolved' where that spread includes 0 or is wider than the saving)")
    print(f"{'contender':<18} {'runs/pass':>9} {'per run':>9} {'ratio to hand loop':>18}  saves a run [{spread}]")
    for name in CONTENDERS:
        line = (f"{name:<18} {result['repeats'][name]:>9} {med[name] * 1e3:>7.3f}ms "
                f"{med[name] / med['hand loop']:>17.3f}x")
        if name not in ("topofl as shipped", "hand loop"):
            s = paired_spread([a - b for a, b in zip(wall["topofl as shipped"], wall[name], strict=True)])
            line += (f"  {s['gap'] * 1e3:.3f}ms [{s['low'] * 1e3:.3f}, {s['high'] * 1e3:.3f}]"
                     + (" unresolved" if s["unresolved"] else ""))
        print(line, flush=True)
    print(f"models: each knock-out's global model equal to the shipped run's, bit for bit; the hand loop's within "
          f"{result['hand_gap']:.2e}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=8, help="clients of the healthcare scenario")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per run (3: the short runs of bench_scale's loop)")
    ap.add_argument("--passes", type=int, default=7, help="measured passes of each contender")
    ap.add_argument("--quick", action="store_true", help="2 passes (a smoke check)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for name, low in (("clients", 2), ("rounds", 1), ("passes", 1)):
        if getattr(args, name) < low:
            ap.error(f"--{name} must be at least {low}; got {getattr(args, name)}")
    if args.quick:
        args.passes = min(args.passes, 2)
    if args.worker:
        print(json.dumps(worker(args.clients, args.rounds, args.passes)), flush=True)
        return
    print(f"ablation: {args.clients} clients, {args.rounds}-round runs ...", file=sys.stderr, flush=True)
    report(_run(["--worker", f"--clients={args.clients}", f"--rounds={args.rounds}", f"--passes={args.passes}"],
                script=__file__))


if __name__ == "__main__":
    main()
