"""The round loop, written once for every algorithm (DESIGN: "one round loop").

Per round: select clients → broadcast (``configure_fit``) → local work (``client_fit``) →
collect → aggregate (``aggregate_fit``) → evaluate every client with the model it would use →
account floats and bytes up/down per client → report (progress, ``on_round`` callback for writing results as rounds
finish).

Randomness: client k in round r draws from ``SeedSequence([seed, r, k])``, so its work does not
depend on which other clients ran or in which order (the same numbers in any runtime).
"""
from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np

from topofl._validation import check_int, check_range
from topofl.algorithms.base import Algorithm, ClientContext
from topofl.data.federation import Federation
from topofl.federation.history import History, RoundSummary, nanmean, nanstd
from topofl.federation.messages import BYTES_PER_FLOAT
from topofl.metrics import evaluate, pooled
from topofl.models.linear import make_model

log = logging.getLogger(__name__)

OnRound = Callable[[History, RoundSummary], None]


def client_rng(seed: int, rnd: int, client_id: int) -> np.random.Generator:
    """Generator of client ``client_id`` in round ``rnd`` of a run seeded with ``seed``."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(rnd), int(client_id)]))


def select_clients(rng: np.random.Generator, client_ids: list[int], fraction: float) -> list[int]:
    """A sorted random subset of ``max(1, round(fraction · K))`` clients (all when fraction = 1)."""
    if fraction >= 1.0:
        return list(client_ids)
    m = max(1, int(round(fraction * len(client_ids))))
    return sorted(rng.choice(client_ids, size=m, replace=False).tolist())


def run_federation(
    federation: Federation,
    algorithm: Algorithm,
    rounds: int,
    seed: int = 0,
    *,
    client_fraction: float = 1.0,
    on_round: OnRound | None = None,
    progress: bool = False,
) -> History:
    """Run ``rounds`` rounds of ``algorithm`` on ``federation`` in process and return the history.

    Parameters
    ----------
    federation : Federation
        Clients with their train/test splits (``at_round`` is consulted for dynamic data).
    algorithm : Algorithm
        A configured algorithm object (see :mod:`topofl.algorithms`).
    rounds : int
        Communication rounds (>= 1).
    seed : int
        Seed of every random choice of the run.
    client_fraction : float
        Fraction of clients selected per round, in (0, 1].
    on_round : callable, optional
        Called with ``(history, summary)`` after each round, e.g. to append results to disk.
    progress : bool
        Show a rich progress bar.
    """
    check_int("rounds", rounds, 1, 1_000_000)
    check_int("seed", seed, 0)
    check_range("client_fraction", client_fraction, 0.0, 1.0, low_open=True)
    model = make_model(federation.task, algorithm.input_dim(federation.n_features), max(federation.n_classes, 2), algorithm.config.l2)
    ids = federation.client_ids
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5E1EC7]))
    algorithm.setup(model, ids, rng)
    states: dict[int, dict[str, Any]] = {cid: {} for cid in ids}
    history = History(method=algorithm.name, seed=seed)
    bar = _progress(progress, f"{algorithm.name} seed {seed}", rounds)
    try:
        for rnd in range(1, rounds + 1):
            fed = federation.at_round(rnd)
            data = {c.client_id: c for c in fed}
            selected = select_clients(rng, ids, client_fraction)
            messages = algorithm.configure_fit(rnd, selected)
            updates, down, up = [], {}, {}
            for cid in selected:
                ctx = ClientContext(data[cid], states[cid], model, client_rng(seed, rnd, cid), rnd, seed)
                update = algorithm.client_fit(ctx, messages[cid])
                updates.append(update)
                down[cid] = messages[cid].n_floats()
                up[cid] = update.n_floats()
                if update.metrics:
                    history.client_metrics[cid] = dict(update.metrics)
            history.server_logs.append({"round": rnd, **algorithm.aggregate_fit(rnd, updates)})
            summary = _evaluate_round(history, algorithm, model, data, states, rnd, seed, up, down)
            history.rounds.append(summary)
            log.debug("round %d: auc=%.4f acc=%.4f", rnd, summary.auc, summary.accuracy)
            if on_round is not None:
                on_round(history, summary)
            if bar is not None:
                bar[0].update(bar[1], advance=1, description=f"{algorithm.name} seed {seed} auc={summary.auc:.3f}")
    finally:
        if bar is not None:
            bar[0].stop()
    return history


def _evaluate_round(history, algorithm, model, data, states, rnd, seed, up, down) -> RoundSummary:
    """Score each client on its test split with the model it would use now."""
    rows, ys, scores = [], [], []
    for cid, client in data.items():
        ctx = ClientContext(client, states[cid], model, client_rng(seed, rnd, cid), rnd, seed)
        theta = algorithm.client_params(ctx, algorithm.message_for(cid))
        m, s = evaluate(model, theta, algorithm.client_features(ctx, client.X_test), client.y_test)
        f_up, f_down = up.get(cid, 0), down.get(cid, 0)
        rows.append({
            "round": rnd, "client": cid, **m,
            "bytes_up": f_up * BYTES_PER_FLOAT, "bytes_down": f_down * BYTES_PER_FLOAT,
            "floats_up": f_up, "floats_down": f_down,
        })
        ys.append(client.y_test)
        scores.append(s)
    history.records.extend(rows)
    pool = pooled(model, np.concatenate(ys), np.concatenate(scores))
    aucs = [r["auc"] for r in rows]
    return RoundSummary(
        round=rnd,
        auc=nanmean(aucs),
        auc_std=nanstd(aucs),
        accuracy=nanmean(r["accuracy"] for r in rows),
        accuracy_std=nanstd(r["accuracy"] for r in rows),
        loss=nanmean(r["loss"] for r in rows),
        pooled_auc=pool.get("pooled_auc", float("nan")),
        pooled_accuracy=pool.get("pooled_accuracy", float("nan")),
        n_clients_auc=int(np.sum(~np.isnan(aucs))),
        bytes_up=int(sum(up.values())) * BYTES_PER_FLOAT,
        bytes_down=int(sum(down.values())) * BYTES_PER_FLOAT,
    )


def _progress(enabled: bool, description: str, total: int):
    if not enabled:
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True)
    p.start()
    return p, p.add_task(description, total=total)
