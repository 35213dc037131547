"""What a SuperNode does for a decentralised method behind the relay.

The node runs the algorithm's own node-local protocol (:class:`topofl.decentralised.PeerNode`) for
Sheaf-FMTL, dFedU, D-PSGD or Local; its model and maps stay on the node, and its randomness is the
in-process runner's. See docs/internals.md#topofl.flower.peer.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, MetricRecord, RecordDict

from topofl.decentralised import NodeSpec, Peer
from topofl.decentralised.runner import initial_theta, peer_metrics
from topofl.flower.node import job_key, node_data
from topofl.flower.records import arrays_record, load_round_state, record_arrays, save_round_state
from topofl.methods import build_peer
from topofl.models.registry import build_model, is_deep


@lru_cache(maxsize=8)
def peer_algorithm(method: str, hyperparameters: str, attack: str = "", n_nodes: int = 0):
    """The decentralised algorithm object of a job (configuration only; nodes hold the state).

    With an ``attack`` spec (the run config's ``attack``) the algorithm is
    :func:`~topofl.robustness.peer_attacks.attacked_peers` with the adversaries
    ``attack.adversaries(range(n_nodes))`` — the graph nodes :func:`topofl.simulate_decentralised`
    picks with ``attack=`` — so an adversary's :meth:`make_node` wraps its node; the relay never
    builds an attacked algorithm.
    """
    algorithm = build_peer(method, json.loads(hyperparameters))
    if not attack:
        return algorithm
    from topofl.robustness.attacks import parse_attack
    from topofl.robustness.peer_attacks import attacked_peers

    config = parse_attack(attack)
    return attacked_peers(algorithm, config, config.adversaries(range(n_nodes)))


@lru_cache(maxsize=8)
def peer_model(task: str, n_features: int, n_classes: int, l2: float, spec: str = "linear") -> Any:
    """The model of a node with ``n_features`` features (sizes may differ between nodes)."""
    return build_model(spec or "linear", task=task, n_features=n_features, n_classes=max(int(n_classes), 2), l2=l2)


def _reply(node, client: int, report: Mapping[str, float],
           outbox: Mapping[int, np.ndarray] | None = None) -> RecordDict:
    rd = RecordDict({
        "report": MetricRecord({"norm": float(np.linalg.norm(node.peer.theta)), "state_bytes": int(node.state_bytes()),
                                **report}),
        "meta": ConfigRecord({"client": int(client)}),
    })
    if outbox is not None:
        rd["outbox"] = arrays_record({str(j): v for j, v in outbox.items()})
    return rd


def setup(node_config: Mapping[str, Any], state: RecordDict, content: RecordDict) -> RecordDict:
    """Build this node's peer (data, model, initial θ) and its algorithm state from the relay's spec."""
    config: dict[str, Any] = dict(content["config"])  # the relay's values: str()/int() convert them
    data, _, _ = node_data(node_config, config)
    spec = NodeSpec.from_dict(json.loads(str(config["spec"])))
    n_nodes = config.get("n_nodes")
    if isinstance(n_nodes, bool) or not isinstance(n_nodes, int) or not spec.node < n_nodes:
        raise ValueError(f"the relay's n_nodes must be an integer above this node's index {spec.node}; got {n_nodes!r}")
    algorithm = peer_algorithm(str(config["method"]), str(config["hyperparameters"]), str(config.get("attack") or ""),
                               n_nodes)
    model = peer_model(str(config["task"]), data.n_features, int(config["n_classes"]), algorithm.config.l2,
                       str(config.get("model", "linear")))
    if model.n_params != spec.dim:
        raise ValueError(f"node {spec.node}: its model has {model.n_params} parameters but the relay's spec says "
                         f"dim={spec.dim}")
    theta = (initial_theta(model, int(config["seed"]), spec.node, algorithm.config.model_init) if is_deep(model)
             else model.init())
    node = algorithm.make_node(spec, Peer(spec.node, data, model, theta))
    save_round_state(state, job_key(config), _seq(config), {"node": node, "rng": None, "rng_k": 0})
    return _reply(node, data.client_id, {})


def _seq(config: Mapping[str, Any]) -> int:
    """The message's place in the relayed run (0: setup)."""
    seq = config.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        raise ValueError(f"the relay's seq must be a non-negative integer; got {seq!r}")
    return seq


def step(node_config: Mapping[str, Any], state: RecordDict, content: RecordDict) -> RecordDict:
    """Consume phase ``apply`` of iteration ``apply_k`` (its inbox), then emit phase ``emit``.

    After the last phase of an iteration the node also reports its test accuracy and loss.
    """
    config: dict[str, Any] = dict(content["config"])  # the relay's values: str()/int() convert them
    key = job_key(config)
    seq = _seq(config)
    st, had = load_round_state(state, key, seq)
    if not had:
        raise RuntimeError("this node holds no peer state for the job (it missed the relay's setup, or restarted)")
    node = st["node"]
    algorithm = peer_algorithm(str(config["method"]), str(config["hyperparameters"]))
    report: dict[str, float] = {}
    apply = str(config.get("apply", ""))
    if apply:
        k = int(config["apply_k"])
        if st["rng_k"] != k:
            st["rng"] = np.random.default_rng(np.random.SeedSequence([int(config["seed"]), k, node.node]))
            st["rng_k"] = k
        inbox = {int(j): v for j, v in record_arrays(content, "inbox", required=False).items()}
        with np.errstate(over="ignore", invalid="ignore"):  # divergence is reported by the relay from the norms
            node.incoming(apply, inbox, st["rng"])
        if apply == algorithm.phases[-1] and node.peer.data is not None:
            report.update(peer_metrics(node.peer))
    emit = str(config.get("emit", ""))
    outbox = node.outgoing(emit) if emit else {}
    save_round_state(state, key, seq, st)
    return _reply(node, node.peer.data.client_id, report, outbox)
