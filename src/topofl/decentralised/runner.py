"""The decentralised round loop, written once: iterate → account → evaluate → report.

One round is one iteration of every peer (one synchronous exchange phase per message type).
Per round it records the bits sent over every directed edge (all peers, not one node's traffic),
analytic FLOPs, storage (``map_storage_bytes``: the algorithm's state beyond the models, e.g.
restriction maps; ``storage_bytes``: that plus every node's model, the Sheaf-FMTL paper's Table 3
storage d_i + Σ_j d_ij·d_i per client) and, with ``track_memory``, peak traced memory; per client
it records test accuracy and loss (MSE for regression). Divergence (non-finite or exploding
iterates) stops the run with an error naming the step sizes.
"""
from __future__ import annotations

import logging
import time
import tracemalloc
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from topofl._validation import TrainingWarning, check_choice, check_int
from topofl.data.federation import ClientData, feature_scale_problem
from topofl.decentralised.protocol import MODEL_INITS, Peer, PeerAlgorithm
from topofl.decentralised.transport import InProcessTransport
from topofl.federation.history import Result, RoundSummary, nanmean, nanstd, regression_summary
from topofl.federation.messages import BYTES_PER_FLOAT
from topofl.limits import MAX_ROUNDS, MAX_SEED
from topofl.metrics import auc_score, pooled_scores, regression_scores
from topofl.models.linear import make_model

if TYPE_CHECKING:  # networkx is imported where a graph is built or checked (lazy: ~0.1 s)
    import networkx as nx

log = logging.getLogger(__name__)


def _divergence_error(algo: PeerAlgorithm, k: int, node: int, norm: float) -> FloatingPointError:
    c = algo.config
    sizes = ", ".join(f"{n}={getattr(c, n)}" for n in ("lr", "eta", "lam") if hasattr(c, n))
    return FloatingPointError(
        f"{algo.name} diverged at iteration {k}: ‖θ_{node}‖ = {norm:.3g} with {sizes}. Theorem 1 needs "
        "lr < 2/(N·L) and eta < 2/(lam·D²) (D bounds ‖θ‖); with the paper's N(0, 1) maps keep lr·lam·d_i and "
        "eta·lam·‖θ‖² well below 1 — lower the step sizes"
    )


def init_rng(seed: int, node: int) -> np.random.Generator:
    """The generator of node ``node``'s initial model (its own stream: the same in every runtime)."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), 0x1417, int(node)]))


def common_init_rng(seed: int) -> np.random.Generator:
    """The generator of the initial model every node shares with ``model_init="common"`` (a stream
    of its own, distinct from every node's :func:`init_rng`): each node draws it locally, no message.
    """
    return np.random.default_rng(np.random.SeedSequence([int(seed), 0xC0DE]))


def initial_theta(model: Any, seed: int, node: int, model_init: str = "independent") -> np.ndarray:
    """θ_i⁰ of node ``node`` (Algorithm 1, line 1, which the paper leaves open): ``"independent"``
    draws ``model.init(init_rng(seed, node))``, the node's own start (the authors' public code
    builds one network per client); ``"common"`` draws ``model.init(common_init_rng(seed))``, so
    every node with an equal model (the same architecture) starts from the same vector.
    """
    check_choice("model_init", model_init, MODEL_INITS)
    theta: np.ndarray = model.init(common_init_rng(seed) if model_init == "common" else init_rng(seed, node))
    return theta


def build_peers(
    clients: Sequence[ClientData], task: str, n_classes: int, l2: float, models: Sequence[Any] | None = None,
    server_node: bool = False, rng: np.random.Generator | None = None, seed: int = 0, model_init: str = "independent",
) -> list[Peer]:
    """Peers for the clients (node k = client k); ``server_node`` appends a data-less node.

    Default (linear) models start at zero; given models start at :func:`initial_theta` (each its own
    random start, or with ``model_init="common"`` one start per architecture).
    """
    peers = []
    for k, c in enumerate(clients):
        model = models[k] if models is not None else make_model(task, c.n_features, max(n_classes, 2), l2)
        if getattr(model, "n_features", c.n_features) != c.n_features:
            raise ValueError(f"client {k} has {c.n_features} features but its model expects {model.n_features}")
        peers.append(Peer(k, c, model,
                          initial_theta(model, seed, k, model_init) if models is not None else model.init()))
    if server_node:
        ref = peers[0]
        if len({p.dim for p in peers}) > 1:
            raise ValueError("a server node needs all clients to share one model size")
        peers.append(Peer(len(peers), None, ref.model, ref.model.init()))
    return peers


def run_decentralised(  # noqa: PLR0913 (the public entry point's keyword options, used as such by callers)
    clients: Sequence[ClientData],
    graph: nx.Graph,
    algorithm: PeerAlgorithm,
    rounds: int,
    seed: int = 0,
    *,
    task: str = "multiclass",
    n_classes: int = 10,
    models: Sequence[Any] | None = None,
    server_node: bool = False,
    eval_every: int = 1,
    track_memory: bool = False,
    divergence_norm: float = 1e6,
    on_round: Callable[[Result, dict[str, Any]], None] | None = None,
) -> Result:
    """Run ``rounds`` synchronous iterations of a decentralised algorithm on ``graph``.

    ``clients`` may have different feature counts (then each peer has its own model size, which
    only Sheaf-FMTL and Local accept). Node k of the graph is client k; with ``server_node`` the
    graph has one more node, a peer without data (f = 0).
    """
    check_int("rounds", rounds, 1, MAX_ROUNDS)
    check_int("seed", seed, 0, MAX_SEED)
    check_int("eval_every", eval_every, 1)
    problem = feature_scale_problem(clients)
    if problem:
        warnings.warn(TrainingWarning(problem), stacklevel=2)
    _check_graph(graph, len(clients), server_node)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0xDEC]))
    peers = build_peers(clients, task, n_classes, algorithm.config.l2, models, server_node, rng, seed=seed,
                        model_init=getattr(algorithm.config, "model_init", "independent"))
    algorithm.setup(peers, graph, rng)
    algorithm.before_run(rounds)
    transport = InProcessTransport(graph)
    history = Result(algorithm.name, seed, family="peer", graph=graph)
    start_norm = max(1.0, max(float(np.linalg.norm(p.theta)) for p in peers))
    cum_bits, cum_flops = 0, 0.0
    model_bytes = 8 * sum(p.dim for p in peers)  # every node's model θ_i, d_i float64 numbers
    if track_memory:
        tracemalloc.start()
    try:
        for k in range(1, rounds + 1):
            t0 = time.perf_counter()
            sent, received, bits = _iterate(algorithm, peers, transport, k, seed, divergence_norm, start_norm)
            cum_bits += bits
            cum_flops += algorithm.flops(algorithm.config.batch_size)
            row: dict[str, Any] = {
                "round": k, "bits": bits, "cumulative_bits": cum_bits, "cumulative_flops": cum_flops,
                "map_storage_bytes": algorithm.state_bytes(), "model_bytes": model_bytes,
                "storage_bytes": model_bytes + algorithm.state_bytes(),
                "seconds": time.perf_counter() - t0,
            }
            if track_memory:
                row["peak_traced_bytes"] = tracemalloc.get_traced_memory()[1]
            if k % eval_every == 0 or k == rounds:
                row.update(_evaluate(history, peers, k, sent, received))
                history.rounds.append(round_summary(row, history.round_records(k)))
            history.iterations.append(row)
            if algorithm.log():
                history.logs.append({"round": k, **algorithm.log()})
            if on_round is not None:
                on_round(history, row)
    finally:
        if track_memory:
            tracemalloc.stop()
    _keep_models(history, peers)
    history.keep_final_client_metrics()
    return history


def _check_graph(graph: nx.Graph, n_clients: int, server_node: bool) -> None:
    """Node k of ``graph`` must be client k (with ``server_node``, one more node), every one reachable."""
    n_nodes = n_clients + (1 if server_node else 0)
    if sorted(graph.nodes) != list(range(n_nodes)):
        raise ValueError(
            f"the graph must have nodes 0..{n_nodes - 1} (one per client{' plus the server' if server_node else ''}); "
            f"got {graph.number_of_nodes()} nodes"
        )
    import networkx as nx

    if not nx.is_connected(graph):
        raise ValueError("the communication graph is disconnected; every client must be reachable")


def _iterate(algorithm: PeerAlgorithm, peers: Sequence[Peer], transport: InProcessTransport, k: int, seed: int,
             divergence_norm: float, start_norm: float) -> tuple[dict[int, int], dict[int, int], int]:
    """Iteration ``k`` of every peer, checked for divergence: the numbers each node sent and received
    in it, and its bits.
    """
    rngs = [np.random.default_rng(np.random.SeedSequence([int(seed), k, p.node])) for p in peers]
    with np.errstate(over="ignore", invalid="ignore"):
        algorithm.iterate(k, transport, rngs)
    for p in peers:
        norm = float(np.linalg.norm(p.theta))
        if not np.isfinite(norm) or norm > divergence_norm * start_norm:
            raise _divergence_error(algorithm, k, p.node, norm)
    per_float = transport.bits_per_float
    sent = {i: b // per_float for i, b in transport.round_sent.items()}
    received = {i: b // per_float for i, b in transport.round_received.items()}
    return sent, received, transport.reset_round()


def _keep_models(history: Result, peers: Sequence[Peer]) -> None:
    """The clients' models and final parameters in ``history`` (``model`` when they share one)."""
    history.models = {p.node: p.model for p in peers if p.data is not None}
    shared = {id(m): m for m in history.models.values()}
    history.model = next(iter(shared.values())) if len(shared) == 1 else None
    history.client_models = {p.node: np.array(p.theta, dtype=np.float64, copy=True)
                             for p in peers if p.data is not None}


def peer_scores(p: Peer) -> tuple[dict[str, float], np.ndarray | None]:
    """One peer's test metrics — accuracy (NaN for regression), loss without the L2 penalty (half
    the MSE for least squares), ROC AUC (NaN for regression or a single-class test split) and, for
    regression, ``mse`` and ``r2`` (:func:`~topofl.metrics.regression_scores`) — and its test
    scores (``None`` when the model gives none).
    """
    assert p.data is not None, "a peer without data has no test metrics"
    X, y = p.data.X_test, p.data.y_test
    outputs = getattr(p.model, "outputs", None)
    if outputs is not None:   # a PyTorch model: loss, scores and predictions from one forward pass
        data_loss, scores, pred = outputs(p.theta, X, y)
        return {"accuracy": float(np.mean(pred == y)), "loss": float(data_loss),
                "auc": auc_score(p.model.task, y, scores)}, scores
    loss = (p.model.loss(p.theta, X, y) - p.model._penalty(p.theta) if hasattr(p.model, "_penalty")
            else p.model.loss(p.theta, X, y))
    acc = float(np.mean(p.model.predict(p.theta, X) == y)) if p.model.task != "regression" else float("nan")
    scores = p.model.predict_scores(p.theta, X) if hasattr(p.model, "predict_scores") else None
    auc = auc_score(p.model.task, y, scores) if scores is not None else float("nan")
    extra = regression_scores(y, scores) if p.model.task == "regression" and scores is not None else {}
    return {"accuracy": acc, "loss": float(loss), "auc": auc, **extra}, scores


def peer_metrics(p: Peer) -> dict[str, float]:
    """:func:`peer_scores` without the scores."""
    return peer_scores(p)[0]


def summarise_peers(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Mean and spread over clients of one iteration's per-client rows (and, for regression, the
    client means of ``mse``, ``rmse`` and ``r2``).
    """
    a = np.array([r["accuracy"] for r in rows], dtype=float)
    has = bool(np.any(~np.isnan(a)))
    return {"accuracy": float(np.nanmean(a)) if has else float("nan"),
            "accuracy_std": float(np.nanstd(a)) if has else float("nan"),
            "loss": float(np.mean([r["loss"] for r in rows])) if rows else float("nan"),
            **regression_summary(rows)}


def round_summary(row: dict[str, Any], records: Sequence[dict[str, Any]]) -> RoundSummary:
    """The :class:`RoundSummary` of an evaluated iteration ``row`` and its per-client ``records``
    (every payload counted as floats and, as for the server-based methods, 8 bytes per float; the
    Sheaf-FMTL experiments count float32 bits, as the paper does, in the iteration's ``bits``).
    """
    return RoundSummary(
        round=row["round"], auc=row["auc"], auc_std=row["auc_std"], accuracy=row["accuracy"],
        accuracy_std=row["accuracy_std"], loss=row["loss"], pooled_auc=row.get("pooled_auc", float("nan")),
        pooled_accuracy=row.get("pooled_accuracy", float("nan")), n_clients_auc=row["n_clients_auc"],
        bytes_up=sum(r["bytes_up"] for r in records), bytes_down=sum(r["bytes_down"] for r in records),
        **regression_summary(records),
    )


def _evaluate(history: Result, peers: Sequence[Peer], k: int, sent: dict[int, int],
              received: dict[int, int]) -> dict[str, float]:
    """Per-client rows (with the numbers each peer sent and received this iteration) and the
    iteration's summary: the means of :func:`summarise_peers`, and AUC over clients and pooled.
    """
    rows, ys, scores = [], [], []
    for p in peers:
        if p.data is None:
            continue
        metrics, s = peer_scores(p)
        up, down = sent.get(p.node, 0), received.get(p.node, 0)
        rows.append({"round": k, "client": p.node, **metrics, "dim": p.dim, "floats_up": up, "floats_down": down,
                     "bytes_up": up * BYTES_PER_FLOAT, "bytes_down": down * BYTES_PER_FLOAT})
        ys.append(p.data.y_test)
        scores.append(s)
    history.records.extend(rows)
    aucs = [r["auc"] for r in rows]
    summary = {**summarise_peers(rows), "auc": nanmean(aucs), "auc_std": nanstd(aucs),
               "n_clients_auc": int(np.sum(~np.isnan(aucs)))}
    task = peers[0].model.task
    complete = [s for s in scores if s is not None]
    if len(complete) == len(scores) and len({np.ndim(s) for s in complete}) == 1 and task != "regression":
        summary.update(pooled_scores(task, np.concatenate(ys), np.concatenate(complete)))
    return summary
