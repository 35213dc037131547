"""Message transport between graph neighbours, with every payload's size counted.

Peers only ever read what was sent to them. The in-process transport delivers synchronously;
a Flower relay (issue 5) implements the same two methods.
"""
from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # networkx is imported where a graph is built or checked (lazy: ~0.1 s)
    import networkx as nx


class InProcessTransport:
    """Synchronous neighbour-to-neighbour delivery.

    ``bits_per_float`` (default 32, as a deployment sends float32 and as the Sheaf-FMTL paper
    counts) converts payload sizes to bits. ``bits`` accumulates over the whole run;
    ``round_bits`` since the last :meth:`reset_round`.
    """

    def __init__(self, graph: nx.Graph, bits_per_float: int = 32) -> None:
        self.graph = graph
        self.bits_per_float = bits_per_float
        self._inbox: dict[int, dict[tuple[int, str], np.ndarray]] = defaultdict(dict)
        self.bits = 0
        self.round_bits = 0
        self.messages = 0
        self.round_sent: defaultdict[int, int] = defaultdict(int)  # bits each node sent since reset_round
        self.round_received: defaultdict[int, int] = defaultdict(int)  # ... and received

    def send(self, src: int, dst: int, tag: str, payload: np.ndarray) -> None:
        """Queue ``payload`` from ``src`` to its neighbour ``dst`` under ``tag``."""
        if not self.graph.has_edge(src, dst):
            raise ValueError(f"node {src} tried to send to {dst}, which is not its neighbour")
        size = int(np.size(payload)) * self.bits_per_float
        self.bits += size
        self.round_bits += size
        self.round_sent[src] += size
        self.round_received[dst] += size
        self.messages += 1
        self._inbox[dst][(src, tag)] = payload

    def receive(self, dst: int, src: int, tag: str) -> np.ndarray:
        """The payload ``src`` sent to ``dst`` under ``tag`` (consumed)."""
        try:
            return self._inbox[dst].pop((src, tag))
        except KeyError:
            raise RuntimeError(f"node {dst} expected a {tag!r} message from {src}, but none was sent") from None

    def reset_round(self) -> int:
        """Bits sent since the last reset (per-node counts are cleared too)."""
        bits, self.round_bits = self.round_bits, 0
        self.round_sent.clear()
        self.round_received.clear()
        return bits

    def pending(self) -> dict[int, Any]:
        return {k: list(v) for k, v in self._inbox.items() if v}
