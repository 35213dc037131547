"""The peer-to-peer protocol every decentralised method implements (no server).

Every algorithm is written once, as a node-local protocol: a coordinator calls
:meth:`PeerAlgorithm.node_specs` (a :class:`NodeSpec` per node), each node builds its own state with
:meth:`PeerAlgorithm.make_node` (a :class:`PeerNode`), and one iteration is the phases
:attr:`PeerAlgorithm.phases`: in each, :meth:`PeerNode.outgoing` at every node, then
:meth:`PeerNode.incoming`. See docs/internals.md#topofl.decentralised.protocol for the coordinators and methods.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from topofl.config import TrainingConfig, floats, hp
from topofl.data.federation import ClientData
from topofl.decentralised.spec import NodeSpec
from topofl.decentralised.transport import InProcessTransport
from topofl.models.optimizers import LocalOptimizer, OptimizerSpec

if TYPE_CHECKING:  # networkx is imported where a graph is built or checked (lazy: ~0.1 s)
    import networkx as nx

__all__ = ["NodeSpec", "Peer", "PeerAlgorithm", "PeerConfig", "PeerNode"]


#: how the clients' initial models θ_i⁰ are drawn (:func:`topofl.decentralised.runner.initial_theta`)
MODEL_INITS = ("independent", "common")


@dataclass(frozen=True)
class PeerConfig(TrainingConfig):
    """Shared peer hyper-parameters: ``lr`` is the model step size α; one mini-batch per iteration.

    ``model_init`` sets the initial models θ_i⁰ of Algorithm 1 (line 1), which the Sheaf-FMTL paper
    leaves unspecified: ``"independent"`` (default) draws each client's start from its own stream,
    as the authors' public code does (one freshly constructed network per client); ``"common"``
    gives every client of the same architecture one shared start (the usual start of D-PSGD and
    FedAvg-style methods). Linear models start at zero either way.
    """

    lr: float = hp(0.1, "model step size α (> 0); Theorem 1 needs α < 2/(N·L)", space=floats(1e-3, 1.0, log=True))
    local_epochs: int = hp(1, "unused by decentralised methods (local_steps mini-batch steps per iteration)")
    local_steps: int = hp(
        1, "mini-batch steps per iteration (>= 1): local_steps − 1 steps on the node's own loss, then the method's "
        "coupled step from their end point (1 = the papers' algorithms; Sheaf-FMTL's public code's variant)",
        low=1, high=10_000, integer=True,
    )
    model_init: str = hp(
        "independent", "initial models: independent (each client its own random start, as the authors' public code) | "
        "common (one start shared by every client of the same architecture); linear models start at zero either way",
        choices=MODEL_INITS,
    )


class Peer:
    """One client: its data (None for a data-less node such as a server), model and parameters."""

    def __init__(self, node: int, data: ClientData | None, model: Any, theta: np.ndarray) -> None:
        self.node, self.data, self.model, self.theta = node, data, model, theta

    @property
    def dim(self) -> int:
        return self.theta.size

    def grad(self, theta: np.ndarray, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """Mini-batch stochastic gradient of f_i (zero for a data-less node)."""
        if self.data is None:
            return np.zeros_like(theta)
        n = self.data.n_train
        idx = rng.choice(n, size=min(batch_size, n), replace=False) if batch_size < n else slice(None)
        g: np.ndarray = self.model.grad(theta, self.data.X_train[idx], self.data.y_train[idx])
        return g


class PeerNode(ABC):
    """The node-local state of one algorithm on one graph node (picklable).

    A node sees only its own :class:`Peer` (data, model, θ), its :class:`NodeSpec` and the
    payloads its neighbours send it.

    Parameters
    ----------
    spec : NodeSpec
        What the coordinator told this node.
    peer : Peer
        This node's client; ``peer.theta`` is updated in place of the attribute by :meth:`incoming`.
    config : PeerConfig
        The algorithm's hyper-parameters (the same on every node).
    """

    phases: ClassVar[tuple[str, ...]]
    #: the node's update rule with its state, kept across iterations (made at the first step that
    #: needs one; a class default so that a node pickled before it existed still loads)
    optimizer: LocalOptimizer | None = None

    def __init__(self, spec: NodeSpec, peer: Peer, config: PeerConfig) -> None:
        if peer.node != spec.node:
            raise ValueError(f"spec for node {spec.node} given the peer of node {peer.node}")
        if peer.dim != spec.dim:
            raise ValueError(f"node {spec.node}: spec says model size {spec.dim}, the peer's model has {peer.dim}")
        self.spec, self.peer, self.config = spec, peer, config

    @property
    def node(self) -> int:
        return self.spec.node

    def step(self, theta: np.ndarray, direction: np.ndarray) -> np.ndarray:
        """θ − α·d with plain ``sgd`` (the papers' step), else one update of the node's optimiser,
        whose state (momentum, Adam's moments) the node keeps from iteration to iteration.
        """
        c = self.config
        if c.optimizer == "sgd":
            out: np.ndarray = theta - c.lr * direction
            return out
        if self.optimizer is None:
            self.optimizer = LocalOptimizer(OptimizerSpec.of(c))
        out = np.array(theta, dtype=np.float64, copy=True)
        self.optimizer.step(out, direction)
        return out

    def local_steps(self, theta: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The ``local_steps − 1`` steps on the node's own loss that precede the coupled step."""
        c = self.config
        for _ in range(c.local_steps - 1):
            theta = self.step(theta, self.peer.grad(theta, c.batch_size, rng))
        return theta

    @abstractmethod
    def outgoing(self, phase: str) -> dict[int, np.ndarray]:
        """Payloads this node sends to each neighbour in ``phase`` (may be empty).

        Parameters
        ----------
        phase : str
            One of :attr:`phases`.

        Returns
        -------
        dict of int to numpy.ndarray
            Neighbour id → payload.
        """

    @abstractmethod
    def incoming(self, phase: str, received: Mapping[int, np.ndarray], rng: np.random.Generator) -> None:
        """Consume what every neighbour sent in ``phase`` and advance this node's state.

        Parameters
        ----------
        phase : str
            One of :attr:`phases`.
        received : mapping of int to numpy.ndarray
            Sender id → payload, for every neighbour that sent one in this phase.
        rng : numpy.random.Generator
            This node's generator for this iteration (the same object for every phase of it).
        """

    def state_bytes(self) -> int:
        """Bytes of this node's algorithm state beyond its model (restriction maps, …)."""
        return 0

    def flops(self, batch: int) -> float:
        """Analytic floating-point operations of this node in one iteration (gradient: 6·b·d)."""
        p = self.peer
        return float(6 * min(batch, p.data.n_train if p.data else 0) * p.dim)

    def _check_phase(self, phase: str) -> None:
        if phase not in self.phases:
            raise ValueError(f"{type(self).__name__} has phases {self.phases}; got {phase!r}")

    def _gather(self, phase: str, received: Mapping[int, np.ndarray], sizes: Sequence[int]) -> list[np.ndarray]:
        """The payloads of every neighbour in neighbour order, checked against the expected ``sizes``."""
        self._check_phase(phase)
        extra = sorted(set(received) - set(self.spec.neighbours))
        if extra:
            raise ValueError(f"node {self.node} received {phase!r} messages from non-neighbours {extra}")
        out = []
        for j, size in zip(self.spec.neighbours, sizes, strict=False):
            if j not in received:
                raise RuntimeError(f"node {self.node} expected a {phase!r} message from {j}, but none was received")
            x = np.asarray(received[j], dtype=np.float64)
            if x.shape != (size,):
                raise ValueError(f"node {self.node}: the {phase!r} message from {j} has shape {x.shape}, "
                                 f"expected ({size},)")
            out.append(x)
        return out


class PeerAlgorithm(ABC):
    """A decentralised algorithm: coordinator-side setup plus a node-local protocol.

    The protocol: docs/internals.md#topofl.decentralised.protocol. After :meth:`setup`, ``peers`` is the list
    of :class:`Peer` objects (node order), ``nodes`` maps node id → :class:`PeerNode` and ``specs`` node id →
    :class:`NodeSpec`.
    """

    name: ClassVar[str]
    Config: ClassVar[type[PeerConfig]] = PeerConfig
    same_size: ClassVar[bool] = True
    node_class: ClassVar[type[PeerNode]]
    phases: ClassVar[tuple[str, ...]]

    def __init__(self, config: PeerConfig | None = None) -> None:
        self.config = config if config is not None else self.Config()

    def node_specs(self, dims: Mapping[int, int], graph: nx.Graph, rng: np.random.Generator) -> dict[int, NodeSpec]:
        """Coordinator side: sizes, seeds and weights for every node.

        Parameters
        ----------
        dims : mapping of int to int
            Model size of every graph node.
        graph : networkx.Graph
            The communication graph.
        rng : numpy.random.Generator
            Source of the per-node seeds, drawn as ``int(rng.integers(2**31))`` for the nodes in
            sorted order (one draw per node; nothing else is drawn).

        Returns
        -------
        dict of int to NodeSpec
            One spec per node, sorted by node id.
        """
        nodes = sorted(graph.nodes)
        missing = [i for i in nodes if i not in dims]
        if missing:
            raise ValueError(f"no model size given for graph nodes {missing}")
        if self.same_size:
            sizes = {int(dims[i]) for i in nodes}
            if len(sizes) > 1:
                raise ValueError(f"{self.name} needs equal model sizes on all peers; got sizes {sorted(sizes)} "
                                 "(Sheaf-FMTL allows different sizes)")
        specs = {}
        for i in nodes:
            nbrs = tuple(sorted(graph.neighbors(i)))
            specs[i] = NodeSpec(i, nbrs, tuple(dims[j] for j in nbrs), dims[i], int(rng.integers(2**31)))
        return specs

    def make_node(self, spec: NodeSpec, peer: Peer) -> PeerNode:
        """Node side: this algorithm's state object for one node (validates the spec)."""
        return self.node_class(spec, peer, self.config)

    def setup(self, peers: list[Peer], graph: nx.Graph, rng: np.random.Generator) -> None:
        """In-process setup: :meth:`node_specs` for all nodes, then :meth:`make_node` for each."""
        by_node = {p.node: p for p in peers}
        if sorted(by_node) != sorted(graph.nodes) or len(by_node) != len(peers):
            raise ValueError(f"peers {sorted(p.node for p in peers)} do not match the graph's nodes "
                             f"{sorted(graph.nodes)}")
        self.peers, self.graph = peers, graph
        self.nbrs = {i: sorted(graph.neighbors(i)) for i in graph.nodes}
        self.specs = self.node_specs({p.node: p.dim for p in peers}, graph, rng)
        self.nodes: Mapping[int, PeerNode] = {i: self.make_node(self.specs[i], by_node[i]) for i in sorted(self.specs)}

    def iterate(self, k: int, transport: InProcessTransport, rngs: Sequence[np.random.Generator]) -> None:
        """One synchronous iteration of every node, phase by phase.

        In each phase every node's outgoing payloads are sent first (so the transport counts every
        directed message), then :meth:`after_outgoing` runs, then every node consumes what it was
        sent. ``rngs[idx]`` is the generator of ``peers[idx]``, used for all phases.
        """
        order = [p.node for p in self.peers]
        gens = dict(zip(order, rngs, strict=False))
        for phase in self.phases:
            senders: dict[int, list[int]] = {i: [] for i in order}
            for i in order:
                for j, payload in self.nodes[i].outgoing(phase).items():
                    transport.send(i, j, phase, payload)
                    senders[j].append(i)
            self.after_outgoing(phase, k)
            for i in order:
                received = {j: transport.receive(i, j, phase) for j in sorted(senders[i])}
                self.nodes[i].incoming(phase, received, gens[i])

    def after_outgoing(self, phase: str, k: int) -> None:
        """Hook between the sends and the receives of a phase (in-process only); no-op by default."""
        return

    def before_run(self, rounds: int) -> None:
        """Hook after :meth:`setup`, before the first of ``rounds`` iterations (in-process only): refuse
        up front a run that cannot finish (Sheaf-FMTL: compact maps that would outgrow their budget);
        no-op by default.
        """
        return

    def flops(self, batch: int) -> float:
        """Analytic floating-point operations of one iteration, all peers (gradients: 6·b·d)."""
        return float(sum(self.nodes[p.node].flops(batch) for p in self.peers))

    def state_bytes(self) -> int:
        """Bytes of algorithm state beyond the models (restriction maps, …)."""
        return sum(n.state_bytes() for n in self.nodes.values())

    def log(self) -> dict[str, Any]:
        return {}
