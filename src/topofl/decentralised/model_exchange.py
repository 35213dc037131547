"""The base of the methods whose nodes send their whole model θ_i to every neighbour (dFedU, D-PSGD)."""
from __future__ import annotations

import numpy as np

from topofl.decentralised.protocol import NodeSpec, Peer, PeerConfig, PeerNode


class ModelSendingNode(PeerNode):
    """A node that sends its model θ_i to every neighbour in one phase, ``"theta"``."""

    phases = ("theta",)

    def __init__(self, spec: NodeSpec, peer: Peer, config: PeerConfig) -> None:
        super().__init__(spec, peer, config)
        if any(d != spec.dim for d in spec.neighbour_dims):
            raise ValueError(f"node {spec.node} (size {spec.dim}) exchanges models with neighbours of sizes "
                             f"{list(spec.neighbour_dims)}; they must be equal")

    def outgoing(self, phase: str) -> dict[int, np.ndarray]:
        self._check_phase(phase)
        return {j: self.peer.theta for j in self.spec.neighbours}
