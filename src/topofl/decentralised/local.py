"""Local: every peer alone, one mini-batch SGD step per iteration, nothing sent (the no-communication baseline)."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from topofl.decentralised.protocol import PeerAlgorithm, PeerNode


class LocalNode(PeerNode):
    """A peer alone: one local mini-batch SGD step per iteration, nothing sent."""

    phases = ("step",)

    def outgoing(self, phase: str) -> dict[int, np.ndarray]:
        self._check_phase(phase)
        return {}

    def incoming(self, phase: str, received: Mapping[int, np.ndarray], rng: np.random.Generator) -> None:
        """θ_i ← θ_i − α ∇f_i(θ_i; ξ) (with ``local_steps`` K: K such steps; another ``optimizer``: its rule)."""
        self._check_phase(phase)
        if received:
            raise ValueError(f"local node {self.node} received messages from {sorted(received)}")
        c, p = self.config, self.peer
        theta = self.local_steps(p.theta, rng)
        p.theta = self.step(theta, p.grad(theta, c.batch_size, rng))


class LocalPeers(PeerAlgorithm):
    """Every peer trains alone; zero bits move."""

    name = "local-peers"
    same_size = False
    node_class = LocalNode
    phases = LocalNode.phases
