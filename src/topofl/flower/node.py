"""What a Flower SuperNode does for topofl, as plain functions of (node config, state, content).

The ClientApp (:mod:`topofl.flower.client_app`) only wires these to Flower's decorators; each node
calls the algorithm's own client-side methods, so there is no second implementation of any algorithm.
See docs/internals.md#topofl.flower.node for where a node's data come from and the ``attack`` key.
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, RecordDict

from topofl.data.federation import ClientData, Federation, _validated_client, feature_scale_problem, resolve_labels
from topofl.federation.pool import ClientEvaluation, client_context, evaluate_client
from topofl.flower.records import (
    decode_server_message,
    encode_evaluation,
    encode_update,
    load_round_state,
    message_seq,
    save_round_state,
    state_dir,
)
from topofl.methods import build_server

log = logging.getLogger(__name__)


def job_key(job: Mapping[str, Any]) -> str:
    """A short fingerprint of the job (method, hyper-parameters, data, seed): state of another job is ignored."""
    keys = ("method", "hyperparameters", "scenario", "scenario_params", "seed", "classes", "model", "attack", "lineage")
    return hashlib.blake2b(json.dumps({k: job.get(k) for k in keys}, sort_keys=True).encode(),
                           digest_size=8).hexdigest()


@lru_cache(maxsize=4)
def _scenario(name: str, seed: int, params_json: str) -> Federation:
    from topofl.data.scenarios import make_scenario

    return make_scenario(name, seed, **json.loads(params_json))


@lru_cache(maxsize=4)
def _npz(path: str, partition: int) -> ClientData:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"node config data-path={path!r} is not a file")
    with np.load(p, allow_pickle=False) as z:
        missing = [k for k in ("X_train", "y_train", "X_test", "y_test") if k not in z]
        if missing:
            raise ValueError(f"data-path={path!r} lacks array(s) {', '.join(missing)}")
        client = _validated_client(partition, (z["X_train"], z["y_train"], z["X_test"], z["y_test"]))
    from topofl.data.loaders.tables import check_values

    for split, X, y in (("train", client.X_train, client.y_train), ("test", client.X_test, client.y_test)):
        check_values(f"data-path={path!r} ({split} split)", X, y)  # finite, |value| <= 1e15, as for CSV/NPZ site files
    return client


def partition_id(node_config: Mapping[str, Any]) -> int:
    """The node config's ``partition-id``: a non-negative integer, else ``ValueError``."""
    pid = node_config.get("partition-id")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid < 0:
        raise ValueError(f"node config partition-id must be a non-negative integer; got {pid!r}")
    return pid


def node_data(node_config: Mapping[str, Any], job: Mapping[str, Any], rnd: int = 1) -> tuple[ClientData, str, int]:
    """The data of this node at round ``rnd``, with the task and number of classes it implies."""
    pid = partition_id(node_config)
    if node_config.get("data-path"):
        data = _npz(str(node_config["data-path"]), pid)
        classes = [float(v) for v in str(job.get("classes") or "").split(",") if v.strip()] or None
        try:  # labels are never guessed: 0..C-1, or the run config's task / classes
            task, n_classes, mapping = resolve_labels([data.y_train, data.y_test], job.get("task") or None, classes)
        except ValueError as exc:
            raise ValueError(f"data-path={node_config['data-path']!r}: {exc} "
                             "(in the run config: task=..., classes='a,b')") from None
        if mapping is not None:
            data = ClientData(data.X_train, mapping(data.y_train), data.X_test, mapping(data.y_test), data.client_id,
                              data.meta)
        return data, task, n_classes
    fed = _scenario(str(job["scenario"]), int(job["seed"]), str(job.get("scenario_params", "{}")))
    ids = fed.client_ids
    if pid not in ids:
        raise ValueError(
            f"partition-id={pid} but scenario {job['scenario']!r} has clients {ids[0]}..{ids[-1]}; "
            "use as many SuperNodes as clients (or set scenario-params n_clients)"
        )
    current = fed.at_round(rnd)
    return current.clients[ids.index(pid)], fed.task, fed.n_classes


@lru_cache(maxsize=8)
def _algorithm(method: str, hyperparameters: str):
    return build_server(method, json.loads(hyperparameters))


@lru_cache(maxsize=4)
def _model(method: str, hyperparameters: str, spec: str, task: str, n_features: int, n_classes: int,
           device: str) -> Any:
    """The job's model on this node, built once per node process (a torch model is costly to build)."""
    return _algorithm(method, hyperparameters).build_model(spec, task, n_features, n_classes, device=device)


def client_ids(node_config: Mapping[str, Any], job: Mapping[str, Any]) -> list[int]:
    """Every client id of the run, as this node can know it without asking anyone: the
    scenario's clients, or — for nodes with their own ``data-path`` — partitions
    ``0..num-partitions−1`` of the node config.
    """
    if node_config.get("data-path"):
        n = node_config.get("num-partitions")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError("an attack on nodes with their own data-path needs num-partitions (>= 1) in the node "
                             f"config; got {n!r}")
        return list(range(n))
    return _scenario(str(job["scenario"]), int(job["seed"]), str(job.get("scenario_params", "{}"))).client_ids


@lru_cache(maxsize=8)
def _attacked(method: str, hyperparameters: str, spec: str, ids: tuple[int, ...]) -> Any:
    from topofl.robustness.attacks import attacked, parse_attack

    attack = parse_attack(spec)
    return attacked(_algorithm(method, hyperparameters), attack, attack.adversaries(ids))


def job_algorithm(node_config: Mapping[str, Any], job: Mapping[str, Any]) -> Any:
    """The job's algorithm on this node, wrapped by the run's attack (:mod:`topofl.robustness.attacks`)
    when there is one: every node picks the same adversaries from the client ids and the
    attack's seed, as :func:`topofl.simulate` does with ``attack=``, and an honest node's calls go
    to the method unchanged.
    """
    method, hyperparameters, spec = str(job["method"]), str(job["hyperparameters"]), str(job.get("attack") or "")
    if not spec:
        return _algorithm(method, hyperparameters)
    return _attacked(method, hyperparameters, spec, tuple(client_ids(node_config, job)))


def describe(node_config: Mapping[str, Any], content: RecordDict) -> RecordDict:
    """Reply to the server's discovery query: partition id, data sizes, task."""
    job = dict(content["config"])
    data, task, n_classes = node_data(node_config, job)
    problem = feature_scale_problem([data])
    if problem:
        log.warning("%s", problem)
    return RecordDict({"info": ConfigRecord({
        "client": data.client_id, "n_train": data.n_train, "n_test": int(data.X_test.shape[0]),
        "n_features": data.n_features, "task": task, "n_classes": int(n_classes),
    })})


def _context(node_config, state: RecordDict, content: RecordDict, stage: str):
    message, config = decode_server_message(content)
    algorithm, ctx, key = _job_context(node_config, state, config, stage)
    return algorithm, ctx, message, config, key


def _job_context(node_config: Mapping[str, Any], state: RecordDict, config: Mapping[str, Any], stage: str
                 ) -> tuple[Any, Any, str]:
    """The job's algorithm, this client's context (its state as it was before this message) and the job key."""
    rnd = int(config["round"])
    data, _, _ = node_data(node_config, config, rnd)
    if data.n_features != int(config["n_features"]):
        raise ValueError(f"this node has {data.n_features} features but the run's model expects {config['n_features']}")
    algorithm = job_algorithm(node_config, config)
    model = _model(str(config["method"]), str(config["hyperparameters"]), str(config.get("model", "linear")),
                   str(config["task"]), data.n_features, int(config["n_classes"]), str(config.get("device", "cpu")))
    key = job_key(config)
    st, had = load_round_state(state, key, message_seq(rnd, stage), state_dir(node_config))
    recovery = algorithm.state_recovery()
    if not had and rnd > 1 and recovery:
        log.warning("client %d has no state of this job before round %d %s (selected for the first time, or its state "
                    "was lost: the SuperNode restarted, or a resumed run reached new SuperNodes); %s: %s",
                    data.client_id, rnd, stage, algorithm.name, recovery)
    return algorithm, client_context(data, st, model, rnd, int(config["seed"])), key


def fit(node_config: Mapping[str, Any], state: RecordDict, content: RecordDict) -> RecordDict:
    """Local work of one round: ``algorithm.client_fit`` on this node's data and state."""
    algorithm, ctx, message, _, key = _context(node_config, state, content, "fit")
    update = algorithm.client_fit(ctx, message)
    save_round_state(state, key, message_seq(ctx.round, "fit"), ctx.state, state_dir(node_config))
    return encode_update(update, getattr(ctx.model, "layout", None))   # a torch model's reply: layer by layer


def evaluate(node_config: Mapping[str, Any], state: RecordDict, content: RecordDict) -> RecordDict:
    """Test metrics with the model this client would use; predictions only if the run asks for pooled metrics."""
    algorithm, ctx, message, config, key = _context(node_config, state, content, "evaluate")
    metrics, scores = evaluate_client(algorithm, ctx, message)
    save_round_state(state, key, message_seq(ctx.round, "evaluate"), ctx.state, state_dir(node_config))
    share = bool(config.get("pooled", False))
    ev = ClientEvaluation(ctx.client_id, metrics, ctx.data.y_test if share else None, scores if share else None)
    return encode_evaluation(ev)


#: the node's record of the unmask request it answered last (outside the state snapshots, which a
#: message sent again starts from): a second request of that round must name the same survivors
_REVEALED = "topofl.secagg.revealed"


def secure(node_config: Mapping[str, Any], state: RecordDict, content: RecordDict) -> RecordDict:
    """One stage of secure aggregation (:func:`topofl.federation.secure_client.client_step`) on this node's
    data and state. An unmask request that the node already answered for this round with other
    survivors or dropped clients is refused (answering it could reveal both shares of one client).
    """
    from topofl.federation.secure_client import MaskInput, ShareKeys, Unmask, client_step
    from topofl.flower.secure_records import decode_request, encode_reply

    request, config = decode_request(content)
    stage = {ShareKeys: "share", MaskInput: "mask", Unmask: "unmask"}.get(type(request), "fit")
    algorithm, ctx, key = _job_context(node_config, state, config, stage)
    if isinstance(request, Unmask):
        asked = ConfigRecord({"job": key, "round": int(request.round), "survivors": sorted(request.survivors),
                              "dropped": sorted(request.dropped)})
        before = state[_REVEALED] if _REVEALED in state else None
        if (before is not None and before.get("job") == key and before.get("round") == int(request.round)
                and dict(before) != dict(asked)):
            raise ValueError("secure aggregation: a second unmask request for this round with other survivors")
        state[_REVEALED] = asked
    reply = client_step(algorithm, ctx, request)
    save_round_state(state, key, message_seq(ctx.round, stage), ctx.state, state_dir(node_config))
    return encode_reply(reply, getattr(ctx.model, "layout", None))
