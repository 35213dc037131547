"""D-PSGD (Lian et al. 2017): θ_i ← Σ_j W_ij θ_j − α ∇f_i(θ_i), with Metropolis weights."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from topofl.decentralised.graphs import metropolis_weights
from topofl.decentralised.model_exchange import ModelSendingNode
from topofl.decentralised.protocol import NodeSpec, Peer, PeerAlgorithm, PeerConfig

if TYPE_CHECKING:  # networkx is imported where a graph is built or checked (lazy: ~0.1 s)
    import networkx as nx


def dpsgd_mix(theta: np.ndarray, received: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """Gossip averaging W_ii θ_i + Σ_j W_ij θ_j, ``weights`` = (W_ii, W_ij for each neighbour)."""
    mix: np.ndarray = weights[0] * theta + sum(weights[1 + b] * r for b, r in enumerate(received))
    return mix


def dpsgd_step(theta: np.ndarray, grad: np.ndarray, received: Sequence[np.ndarray], weights: Sequence[float],
               lr: float) -> np.ndarray:
    """W_ii θ_i + Σ_j W_ij θ_j − α ∇f_i(θ_i; ξ), ``weights`` = (W_ii, W_ij for each neighbour)."""
    return dpsgd_mix(theta, received, weights) - lr * grad


class DPSGDNode(ModelSendingNode):
    """A D-PSGD peer: sends its model and mixes its neighbours' models with its Metropolis row."""

    def __init__(self, spec: NodeSpec, peer: Peer, config: PeerConfig) -> None:
        super().__init__(spec, peer, config)
        if len(spec.weights) != len(spec.neighbours) + 1:
            raise ValueError(f"D-PSGD node {spec.node} needs weights (W_ii, W_ij for each of its "
                             f"{len(spec.neighbours)} neighbours); got {len(spec.weights)}")

    def incoming(self, phase: str, received: Mapping[int, np.ndarray], rng: np.random.Generator) -> None:
        """D-PSGD (Lian et al. 2017): θ_i ← W_ii θ_i + Σ_j W_ij θ_j − α ∇f_i(θ_i; ξ); with
        ``local_steps`` K, θ_i and the gradient are those at the end point of K − 1 local steps;
        another ``optimizer`` applies its rule to the gradient, from the mixed model.
        """
        recv = self._gather(phase, received, self.spec.neighbour_dims)
        c, p = self.config, self.peer
        theta = self.local_steps(p.theta, rng)
        grad = p.grad(theta, c.batch_size, rng)
        if c.optimizer == "sgd":
            p.theta = dpsgd_step(theta, grad, recv, self.spec.weights, c.lr)
        else:
            p.theta = self.step(dpsgd_mix(theta, recv, self.spec.weights), grad)

    def flops(self, batch: int) -> float:
        return super().flops(batch) + 2 * (len(self.spec.neighbours) + 1) * self.peer.dim


class DPSGD(PeerAlgorithm):
    """Decentralised parallel SGD: gossip averaging with Metropolis weights, then a local step."""

    name = "dpsgd"
    node_class = DPSGDNode
    phases = DPSGDNode.phases

    def node_specs(self, dims: Mapping[int, int], graph: nx.Graph, rng: np.random.Generator) -> dict[int, NodeSpec]:
        """Base specs plus each node's Metropolis row (W_ii, W_i,nbr0, …) in ``weights``."""
        specs = super().node_specs(dims, graph, rng)
        W = metropolis_weights(graph)
        return {i: dataclasses.replace(s, weights=(W[(i, i)], *(W[(i, j)] for j in s.neighbours)))
                for i, s in specs.items()}
