"""What a coordinator tells each node of a decentralised run at setup (:class:`NodeSpec`)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class NodeSpec:
    """What one node is told at setup by whoever coordinates (in-process runner or a Flower relay).

    Attributes
    ----------
    node : int
        The node's id in the communication graph.
    neighbours : tuple of int
        Its neighbours, sorted.
    neighbour_dims : tuple of int
        Model sizes of those neighbours, same order.
    dim : int
        This node's model size.
    seed : int
        Per-node seed for any node-local random initialisation (Sheaf-FMTL's restriction maps).
    weights : tuple of float
        Algorithm-specific weights, e.g. D-PSGD's Metropolis row (W_ii, W_i,nbr0, W_i,nbr1, …);
        empty if unused.
    mode : str
        Algorithm-specific setting the coordinator resolves from global information (Sheaf-FMTL:
        ``"dense"`` or ``"compact"`` map storage, which ``maps="auto"`` decides from the storage of
        all nodes); empty if unused.
    edge_seed : int
        A seed every node of the run shares, for draws both ends of an edge must agree on without
        a message (Sheaf-FMTL's ``map_init="shared"``: edge (i, j) draws from
        ``SeedSequence([edge_seed, min(i, j), max(i, j)])``); 0 if unused.
    """

    node: int
    neighbours: tuple[int, ...]
    neighbour_dims: tuple[int, ...]
    dim: int
    seed: int
    weights: tuple[float, ...] = ()
    mode: str = ""
    edge_seed: int = 0

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "node", int(self.node))
        put(self, "neighbours", tuple(int(j) for j in self.neighbours))
        put(self, "neighbour_dims", tuple(int(d) for d in self.neighbour_dims))
        put(self, "dim", int(self.dim))
        put(self, "seed", int(self.seed))
        put(self, "weights", tuple(float(w) for w in self.weights))
        put(self, "mode", str(self.mode))
        put(self, "edge_seed", int(self.edge_seed))
        if list(self.neighbours) != sorted(set(self.neighbours)):
            raise ValueError(f"node {self.node}: neighbours must be sorted and distinct; got {list(self.neighbours)}")
        if self.node in self.neighbours:
            raise ValueError(f"node {self.node} lists itself as a neighbour")
        if len(self.neighbour_dims) != len(self.neighbours):
            raise ValueError(f"node {self.node}: {len(self.neighbours)} neighbours but "
                             f"{len(self.neighbour_dims)} neighbour sizes")
        if self.dim < 1 or any(d < 1 for d in self.neighbour_dims):
            raise ValueError(f"node {self.node}: model sizes must be >= 1; got dim={self.dim}, "
                             f"neighbour_dims={list(self.neighbour_dims)}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (ints, floats, lists, a string); :meth:`from_dict` inverts it exactly."""
        return {
            "node": self.node, "neighbours": list(self.neighbours), "neighbour_dims": list(self.neighbour_dims),
            "dim": self.dim, "seed": self.seed, "weights": list(self.weights), "mode": self.mode,
            "edge_seed": self.edge_seed,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodeSpec:
        """Rebuild a spec from :meth:`to_dict` output (``weights``, ``mode`` and ``edge_seed`` may be absent)."""
        return cls(
            node=d["node"], neighbours=tuple(d["neighbours"]), neighbour_dims=tuple(d["neighbour_dims"]),
            dim=d["dim"], seed=d["seed"], weights=tuple(d.get("weights", ())), mode=d.get("mode", ""),
            edge_seed=d.get("edge_seed", 0),
        )
