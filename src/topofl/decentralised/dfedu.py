"""dFedU (Dinh et al. 2022), Eq. 18 with a_ij = 1: θ_i ← θ_i − α(∇f_i + λ Σ_j a_ij(θ_i − θ_j))."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from topofl.config import floats, hp
from topofl.decentralised.model_exchange import ModelSendingNode
from topofl.decentralised.protocol import PeerAlgorithm, PeerConfig


@dataclass(frozen=True)
class DFedUConfig(PeerConfig):
    """Hyper-parameters of dFedU: the coupling λ towards the neighbours' models."""

    lam: float = hp(
        0.05, "coupling λ of Eq. 18 with a_ij = 1 (>= 0); stable while α·λ·max degree < 1",
        low=0.0, space=floats(1e-3, 0.5, log=True),
    )


def dfedu_step(theta: np.ndarray, grad: np.ndarray, received: Sequence[np.ndarray], lr: float,
               lam: float) -> np.ndarray:
    """Eq. 18 with a_ij = 1: θ_i − α(∇f_i(θ_i; ξ) + λ Σ_j (θ_i − θ_j))."""
    pull = sum(theta - r for r in received)
    step: np.ndarray = theta - lr * (grad + lam * pull)
    return step


class DFedUNode(ModelSendingNode):
    """A dFedU peer: sends its model and takes the Eq. 18 step with its neighbours' models."""

    config: DFedUConfig

    def incoming(self, phase: str, received: Mapping[int, np.ndarray], rng: np.random.Generator) -> None:
        """dFedU, Eq. 18 with a_ij = 1: θ_i ← θ_i − α(∇f_i(θ_i; ξ) + λ Σ_j (θ_i − θ_j)); with
        ``local_steps`` K, from the end point θ_i' of K − 1 local steps (gradient and pull at θ_i');
        another ``optimizer`` applies its rule to the bracket.
        """
        recv = self._gather(phase, received, self.spec.neighbour_dims)
        c, p = self.config, self.peer
        theta = self.local_steps(p.theta, rng)
        grad = p.grad(theta, c.batch_size, rng)
        if c.optimizer == "sgd":
            p.theta = dfedu_step(theta, grad, recv, c.lr, c.lam)
        else:
            p.theta = self.step(theta, grad + c.lam * sum(theta - r for r in recv))

    def flops(self, batch: int) -> float:
        return super().flops(batch) + 3 * len(self.spec.neighbours) * self.peer.dim


class DFedU(PeerAlgorithm):
    """Decentralised federated learning with model exchange (Dinh et al. 2022)."""

    name = "dfedu"
    Config = DFedUConfig
    node_class = DFedUNode
    phases = DFedUNode.phases
