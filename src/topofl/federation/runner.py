"""The round loop, written once for every algorithm (DESIGN: "one round loop").

Per round: select clients → broadcast (``configure_fit``) → local work (a :class:`ClientPool`:
in process, or Flower SuperNodes) → validate and collect → aggregate (``aggregate_fit``) →
evaluate every client with the model it would use → account floats and bytes up/down per client
→ report (progress, ``on_round`` callback for writing results as rounds finish).

Randomness: client k in round r draws from ``SeedSequence([seed, r, k])``, so its work does not
depend on which other clients ran or in which order (the same numbers in any runtime).
"""
from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from topofl._validation import TrainingWarning, check_int, check_range
from topofl.data.federation import Federation
from topofl.federation.algorithm import Algorithm
from topofl.federation.history import History, RoundSummary, nanmean, nanmean_std_columns, regression_summary
from topofl.federation.messages import ClientUpdate, ServerMessage, as_sent
from topofl.federation.pool import ClientEvaluation, ClientPool, Failure, InProcessPool, client_rng  # noqa: F401 (re-export)
from topofl.federation.secure import secure_config, secure_fit
from topofl.federation.validation import (
    ClientInfo,
    _evaluation_problem,
    pooled_values_sound,
    screen_updates,
    sound_round_pooled,
)
from topofl.limits import MAX_ROUNDS, MAX_SEED
from topofl.metrics import pooled
from topofl.models.base import Model, param_dtype

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

__all__ = ["RoundState", "TrainingWarning", "run_federation", "run_rounds", "select_clients"]

log = logging.getLogger(__name__)

OnRound = Callable[[History, RoundSummary], None]


@dataclass
class RoundState:
    """The server side of a run after round ``round``: what :func:`run_rounds` needs to continue
    exactly as if it had never stopped (a checkpoint, :mod:`topofl.flower.checkpoint`).

    ``algorithm`` holds the server state (global model, clusters, trust, accountant, ...);
    ``rng_state`` is the round loop's generator state (client selection); ``watch`` the divergence
    warnings already given. Client state is not here: it stays with the clients.
    """

    round: int
    algorithm: Algorithm
    rng_state: Mapping[str, Any]
    history: History
    watch: Any


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
    model: Any = None,
    device: str = "cpu",
    input_shape: tuple[int, ...] | None = None,
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
    model : str, torch.nn.Module, callable or model object, optional
        The model every client trains (:func:`topofl.models.registry.build_model`): the task's
        linear model by default, a registered PyTorch name (``"cnn-small"``, ``"convnet2"``,
        ``"resnet18"``, ``"mlp"``, ...), a user's ``torch.nn.Module`` or a factory of one.
    device : str
        Where a PyTorch model computes: ``"cpu"`` (default), ``"cuda"`` or ``"auto"``.
    input_shape : tuple of int, optional
        The shape of one input of a PyTorch model, e.g. ``(1, 8, 8)``: each row is reshaped to it
        (a user's CNN needs it; default: flat rows, or the image a registered CNN infers).
    """
    check_int("rounds", rounds, 1, MAX_ROUNDS)
    check_int("seed", seed, 0, MAX_SEED)
    problem = federation.scale_problem()
    if problem:
        warnings.warn(TrainingWarning(problem), stacklevel=2)
    built = algorithm.build_model(model, federation.task, federation.n_features, federation.n_classes, device=device,
                                  **({"input_shape": tuple(input_shape)} if input_shape else {}))
    pool = InProcessPool(federation, algorithm, built, seed)
    history = run_rounds(pool, algorithm, built, rounds, seed, client_fraction=client_fraction, on_round=on_round,
                         progress=progress)
    history.preprocessing = getattr(federation, "preprocessing", None)
    return history


def run_rounds(  # noqa: PLR0913 (public keyword options of the round loop that every runtime drives)
    pool: ClientPool,
    algorithm: Algorithm,
    model: Model,
    rounds: int,
    seed: int = 0,
    *,
    client_fraction: float = 1.0,
    min_replies: int = 1,
    on_round: OnRound | None = None,
    progress: bool = False,
    start: RoundState | None = None,
    on_checkpoint: Callable[[RoundState], None] | None = None,
) -> History:
    """The round loop of every runtime: select → broadcast → local work (``pool.fit``) → validate
    → aggregate → evaluate (``pool.evaluate``) → validate → account → report.

    ``start`` continues a run from a :class:`RoundState` (its algorithm, history and generator;
    ``algorithm`` is then ignored) with round ``start.round + 1``; ``on_checkpoint`` receives the
    state after every round, once ``on_round`` has run.

    Every reply is screened before anything reads it (:func:`topofl.federation.validation.screen_updates`,
    :func:`~topofl.federation.validation.evaluation_problem`): a client that fails or sends an
    invalid payload is left out of the round — never aggregated, never averaged — and recorded in
    ``history.failures`` with the reason. When fewer than ``min_replies`` valid updates arrive,
    the server state is left unchanged for that round (logged as ``skipped`` in the server log)
    and the run goes on. A diverging loss raises one :class:`TrainingWarning`.
    """
    check_int("rounds", rounds, 1, MAX_ROUNDS)
    check_int("seed", seed, 0, MAX_SEED)
    check_range("client_fraction", client_fraction, 0.0, 1.0, low_open=True)
    check_int("min_replies", min_replies, 0)
    ids = list(pool.client_ids)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5E1EC7]))
    algorithm, history, watch, first = _begin(algorithm, model, ids, rng, seed, rounds, start)
    bar = _progress(progress, f"{algorithm.name} seed {seed}", rounds)
    try:
        for rnd in range(first, rounds + 1):
            selected = select_clients(rng, ids, client_fraction)
            messages = as_sent(algorithm.configure_fit(rnd, selected), param_dtype(model))
            if secure_config(algorithm) is not None:
                failures: list[Failure] = []
                up, down = secure_fit(pool, algorithm, rnd, messages, history, min_replies, seed, failures)
            else:
                up, down, failures = _fit(pool, algorithm, history, rnd, messages, min_replies, watch)
            del messages   # not kept: the replies are released before evaluation and the next round
            evaluations, joined = _evaluate(pool, algorithm, model, history, ids, rnd, failures)
            summary = _summarise_round(history, model, evaluations, rnd, up, down, joined)
            history.rounds.append(summary)
            log.debug("round %d: auc=%.4f acc=%.4f", rnd, summary.auc, summary.accuracy)
            watch(summary)
            if on_round is not None:
                on_round(history, summary)
            if on_checkpoint is not None:
                on_checkpoint(RoundState(rnd, algorithm, rng.bit_generator.state, history, watch))
            if bar is not None:
                bar[0].update(bar[1], advance=1,
                              description=f"{algorithm.name} seed {seed} auc={summary.auc:.3f}")
    finally:
        if bar is not None:
            bar[0].stop()
    history.model = model
    history.server_params = algorithm.server_params()
    history.client_models, history.client_feature_states = pool.final_models(
        rounds, as_sent({cid: algorithm.message_for(cid) for cid in ids}, param_dtype(model)))
    history.keep_final_client_metrics()
    return history


def _begin(algorithm: Algorithm, model: Model, ids: list[int], rng: np.random.Generator, seed: int, rounds: int,
           start: RoundState | None) -> tuple[Algorithm, History, _DivergenceWatch, int]:
    """The algorithm, history and divergence watch a run starts (or, from ``start``, continues) with, and
    its first round; a continued run's generator state is restored into ``rng``.
    """
    if start is None:
        algorithm.setup(model, ids, rng)
        return algorithm, History(method=algorithm.name, seed=seed), _DivergenceWatch(model), 1
    if not 1 <= start.round < rounds:
        raise ValueError(f"a run of {rounds} round(s) cannot continue after round {start.round}")
    rng.bit_generator.state = start.rng_state
    return start.algorithm, start.history, start.watch, start.round + 1


def _fit(pool: ClientPool, algorithm: Algorithm, history: History, rnd: int, messages: dict[int, ServerMessage],
         min_replies: int, watch: _DivergenceWatch) -> tuple[dict[int, tuple[int, int]], dict[int, tuple[int, int]],
                                                             list[Failure]]:
    """The fit step in the clear: local work, screening, aggregation; each client's (numbers, bytes) up and
    down, and the round's failures so far.
    """
    updates, failures = pool.fit(rnd, messages)
    valid, rejected = screen_updates(algorithm, updates, messages, pool.infos)
    failures.extend(Failure(rnd, cid, "fit", f"invalid payload: {reason}") for cid, reason in rejected)
    if rejected and not valid and all(r.startswith("update norm") for _, r in rejected):
        watch.all_refused(rnd, len(rejected))
    up = _reply_sizes(valid)
    down = _message_sizes(messages)
    _aggregate(algorithm, history, rnd, valid, min_replies)
    return up, down, failures


def _reply_sizes(replies: list[ClientUpdate]) -> dict[int, tuple[int, int]]:
    """Each reply's (numbers, bytes): ``(u.n_floats(), u.n_bytes())``, read off the array itself for a reply that is a
    model alone (what those methods count for it).
    """
    sizes = {}
    for u in replies:
        p = u.params
        if type(u) is ClientUpdate and type(p) is np.ndarray and u.descriptor is None and type(u.extras) is dict \
                and not u.extras:
            sizes[u.client_id] = (p.size, p.nbytes)
        else:
            sizes[u.client_id] = (u.n_floats(), u.n_bytes())
    return sizes


def _message_sizes(messages: Mapping[int, ServerMessage]) -> dict[int, tuple[int, int]]:
    """Each message's (numbers, bytes): ``(m.n_floats(), m.n_bytes())``, counted once per parameter array for the
    messages that carry only one, shared (a global model's broadcast: one count, not one per client).
    """
    counted: dict[int, tuple[int, int]] = {}
    sizes = {}
    for cid, m in messages.items():
        if type(m) is ServerMessage and not m.extras:
            size = counted.get(id(m.params))   # the messages are alive: an id names one array here
            if size is None:
                size = counted[id(m.params)] = (m.n_floats(), m.n_bytes())
        else:
            size = (m.n_floats(), m.n_bytes())
        sizes[cid] = size
    return sizes


def _aggregate(algorithm: Algorithm, history: History, rnd: int, valid: list[ClientUpdate], min_replies: int) -> None:
    """Record the valid updates' client metrics and aggregate them, unless fewer than ``min_replies``
    arrived (the server state is then left unchanged); the server log of the round goes to ``history``.
    """
    for u in valid:
        if u.metrics:
            history.client_metrics[u.client_id] = dict(u.metrics)
    if len(valid) >= min_replies:
        log_entry = algorithm.aggregate_fit(rnd, valid)
    else:
        log_entry = {"skipped": f"{len(valid)} valid update(s) < min_replies={min_replies}"}
        log.warning("round %d: %s; server state unchanged", rnd, log_entry["skipped"])
    history.server_logs.append({"round": rnd, **log_entry})


#: a round's pooled test labels and scores, every client's concatenated in order
Pooled = tuple[np.ndarray, np.ndarray]


def _evaluate(pool: ClientPool, algorithm: Algorithm, model: Model, history: History, ids: list[int], rnd: int,
              failures: list[Failure]) -> tuple[list[ClientEvaluation], Pooled | None]:
    """Every client's evaluation with the model it would use, screened, and the round's pooled labels and scores
    when the screening joined them (:func:`_screen_evaluations`); the round's ``failures`` (fit and evaluate) are
    logged and recorded in ``history``.
    """
    eval_messages = as_sent({cid: algorithm.message_for(cid) for cid in ids}, param_dtype(model))
    evaluations, eval_failures = pool.evaluate(rnd, eval_messages)
    evaluations, joined = _screen_evaluations(evaluations, eval_messages, pool.infos, model, rnd, eval_failures)
    failures.extend(eval_failures)
    for f in failures:
        log.warning("round %d: client %s (node %s) failed in %s: %s", f.round, f.client, f.node_id, f.stage,
                    f.reason)
    history.failures.extend(failures)
    return evaluations, joined


def _n_classes(model: Model) -> int:
    return {"regression": 0, "binary": 2}.get(model.task, model.n_outputs)


def _screen_evaluations(
    evaluations: list[ClientEvaluation], asked: Mapping[int, object], infos: dict[int, ClientInfo], model: Model,
    rnd: int, failures: list[Failure],
) -> tuple[list[ClientEvaluation], Pooled | None]:
    """The evaluations fit to average: from clients that were asked, once each, and sound
    (:func:`~topofl.federation.validation.evaluation_problem`); the others become failures. With them, the round's
    pooled labels and scores when every evaluation passed at once
    (:func:`~topofl.federation.validation.sound_round_pooled`), else ``None``.
    """
    evaluations = list(evaluations)   # read twice below (a pool may hand over any iterable)
    try:   # the whole round at once, when nothing in it is to be refused (most rounds)
        joined = sound_round_pooled(evaluations, ClientEvaluation, asked, infos, model.task, _n_classes(model))
        if joined is not None:
            return evaluations, joined
    except Exception:  # noqa: BLE001 - something unreadable: judged one by one below, with its reason
        pass
    try:   # the pooled predictions' values of the whole round in one pass (each evaluation's own checks below)
        # (of the runtimes' own evaluation objects only: a subclass could show this pass other arrays than the next)
        checked = (all(type(ev) is ClientEvaluation for ev in evaluations)
                   and pooled_values_sound(evaluations, model.task, _n_classes(model)))
    except Exception:  # noqa: BLE001 - something unreadable: every evaluation is judged whole, below
        checked = False
    good, seen = [], set()
    for ev in evaluations:
        cid = getattr(ev, "client_id", None)
        if (not isinstance(ev, ClientEvaluation)
                or (type(cid) is not int and (isinstance(cid, bool) or not isinstance(cid, (int, np.integer))))
                or cid not in asked):
            failures.append(Failure(rnd, None, "evaluate",
                                    f"invalid payload: an evaluation from {cid!r}, which was not asked"))
            continue
        try:
            reason = ("a second evaluation from the same client" if cid in seen
                      else _evaluation_problem(ev, infos[int(cid)], model.task, _n_classes(model), checked))
        except Exception as exc:  # noqa: BLE001 - a malformed evaluation is refused, never a crash
            reason = f"malformed evaluation ({type(exc).__name__}: {exc})"[:300]
        seen.add(cid)
        if reason:
            failures.append(Failure(rnd, int(cid), "evaluate", f"invalid payload: {reason}"))
        else:
            good.append(ev)
    return good, None


class _DivergenceWatch:
    """Warns once when the clients' mean test loss shows training diverging: above 10 × the loss
    of an uninformed classifier (log C), or, for regression, 100 × the first round's loss; and
    once when every update of a round is refused by the norm bound.
    """

    def __init__(self, model: Model) -> None:
        self.task = model.task
        self.reference = math.log(max(_n_classes(model), 2)) * 10.0 if model.task != "regression" else None
        self.warned = self.bound_warned = False

    def all_refused(self, rnd: int, n: int) -> None:
        """Every update of a round exceeded the norm bound: warn once (honest clients on unscaled
        features look like this, and then the model never moves).
        """
        if self.bound_warned:
            return
        self.bound_warned = True
        warnings.warn(TrainingWarning(
            f"round {rnd}: all {n} update(s) exceeded the update-norm bound and were refused, so the server model "
            "does not move. If the clients are honest, standardise the features (Federation.from_arrays(..., "
            "standardise='per_client' or 'federated')) or raise max_update_ratio / update_norm_floor"
        ), stacklevel=3)

    def __call__(self, summary: RoundSummary) -> None:
        if self.warned or not math.isfinite(summary.loss):
            return
        if self.reference is None:
            self.reference = 100.0 * max(summary.loss, 1e-12)
            return
        if summary.loss > self.reference:
            self.warned = True
            warnings.warn(TrainingWarning(
                f"round {summary.round}: the clients' mean test loss is {summary.loss:.4g}, "
                f"above {self.reference:.4g}: training diverges. Lower lr, or standardise the features "
                "(Federation.from_arrays(..., standardise='per_client' or 'federated'))"
            ), stacklevel=3)


def _summarise_round(
    history: History, model: Model, evaluations: list[ClientEvaluation], rnd: int, up: Mapping[int, tuple[int, int]],
    down: Mapping[int, tuple[int, int]], joined: Pooled | None = None,
) -> RoundSummary:
    """Per-client rows (each client scored on its own test split) and the round's summary; ``up`` and
    ``down`` give each client's payload as (numbers, bytes); ``joined``: the evaluations' labels and scores already
    concatenated (by the screening), else they are concatenated here.
    """
    rows = []
    for ev in evaluations:
        (f_up, b_up), (f_down, b_down) = up.get(ev.client_id, (0, 0)), down.get(ev.client_id, (0, 0))
        rows.append({
            "round": rnd, "client": ev.client_id, **ev.metrics,
            "bytes_up": b_up, "bytes_down": b_down,
            "floats_up": f_up, "floats_down": f_down,
        })
    history.records.extend(rows)
    pool = {}
    if joined is not None:
        pool = pooled(model, *joined)
    else:
        shared = [ev for ev in evaluations if ev.scores is not None and ev.y_true is not None]
        if shared and len(shared) == len(evaluations):
            pool = pooled(model, np.concatenate([ev.y_true for ev in shared]),
                          np.concatenate([ev.scores for ev in shared]))
    aucs = [r["auc"] for r in rows]
    (auc, auc_std), (accuracy, accuracy_std) = nanmean_std_columns(aucs, [r["accuracy"] for r in rows])
    return RoundSummary(
        round=rnd,
        auc=auc,
        auc_std=auc_std,
        accuracy=accuracy,
        accuracy_std=accuracy_std,
        loss=nanmean(r["loss"] for r in rows),
        pooled_auc=pool.get("pooled_auc", float("nan")),
        pooled_accuracy=pool.get("pooled_accuracy", float("nan")),
        n_clients_auc=sum(1 for a in aucs if not math.isnan(a)),   # np.isnan's count: each a checked number
        bytes_up=int(sum(b for _, b in up.values())),
        bytes_down=int(sum(b for _, b in down.values())),
        **regression_summary(rows),
    )


def _progress(enabled: bool, description: str, total: int) -> tuple[Progress, TaskID] | None:
    if not enabled:
        return None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                 transient=True)
    p.start()
    return p, p.add_task(description, total=total)
