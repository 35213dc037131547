"""Decentralised algorithms: peers on a graph, no server; messages go through a transport.

``sheaf`` — Sheaf-FMTL (Ben Issaid, Vepakomma, Bennis, TMLR 2025), Algorithm 1:
    θ_i ← θ_i − α (∇f_i(θ_i; ξ) + λ Σ_j P_ijᵀ (P_ij θ_i − P_ji θ_j))           (Eq. 27)
    P_ij ← P_ij − ηλ (P_ij θ_i⁺ − P_ji θ_j⁺) θ_i⁺ᵀ                               (Eq. 28)
  all peers in parallel, the stochastic gradient taken at the same iterate as the coupling
  term; two exchanges per iteration of d_ij numbers per directed edge (P_ij θ_i before the model
  step, P_ij θ_i⁺ before the map step). ``local_steps > 1`` reproduces the public code's habit of
  several local mini-batch steps per coupling step (which weakens the coupling by that factor);
  it is an option, not the default.
``dfedu`` — dFedU (Dinh et al. 2022), Eq. 18 with a_ij = 1: θ_i ← θ_i − α(∇f_i + λ Σ_j a_ij(θ_i − θ_j)).
``dpsgd`` — D-PSGD (Lian et al. 2017): θ_i ← Σ_j W_ij θ_j − α ∇f_i(θ_i), Metropolis weights.
``local`` — every peer alone.

Every algorithm is written once, as a node-local protocol. Whoever coordinates (the in-process
runner, or a relay between separate processes) calls :meth:`PeerAlgorithm.node_specs` once to
tell each node its neighbours, their model sizes, a seed and any mixing weights (a
:class:`NodeSpec`); each node then builds its own state with :meth:`PeerAlgorithm.make_node` (a
:class:`PeerNode`, which sees only its own peer, its spec and the messages relayed to it). One
iteration is the fixed sequence of message phases :attr:`PeerAlgorithm.phases`; in each phase
every node first computes what it sends (:meth:`PeerNode.outgoing`), and only then does every node
consume what its neighbours sent (:meth:`PeerNode.incoming`). :meth:`PeerAlgorithm.iterate` is
that loop, written once, over an in-process transport.
"""
from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

import networkx as nx
import numpy as np

from topofl._validation import check_choice, check_int, check_range
from topofl.algorithms.base import AlgorithmConfig, hp
from topofl.decentralised.graphs import metropolis_weights
from topofl.decentralised.maps import FLOAT, INITS, NodeMaps, initial_maps
from topofl.decentralised.transport import InProcessTransport
from topofl.data.federation import ClientData


@dataclass(frozen=True)
class PeerConfig(AlgorithmConfig):
    """Shared peer hyper-parameters: ``lr`` is the model step size α; one mini-batch per iteration."""

    lr: float = hp(0.1, "model step size α (> 0); Theorem 1 needs α < 2/(N·L)")
    local_epochs: int = hp(1, "unused by decentralised methods (one mini-batch step per iteration)")


class Peer:
    """One client: its data (None for a data-less node such as a server), model and parameters."""

    def __init__(self, node: int, data: ClientData | None, model, theta: np.ndarray) -> None:
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
        return self.model.grad(theta, self.data.X_train[idx], self.data.y_train[idx])


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
    """

    node: int
    neighbours: tuple[int, ...]
    neighbour_dims: tuple[int, ...]
    dim: int
    seed: int
    weights: tuple[float, ...] = ()
    mode: str = ""

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "node", int(self.node))
        put(self, "neighbours", tuple(int(j) for j in self.neighbours))
        put(self, "neighbour_dims", tuple(int(d) for d in self.neighbour_dims))
        put(self, "dim", int(self.dim))
        put(self, "seed", int(self.seed))
        put(self, "weights", tuple(float(w) for w in self.weights))
        put(self, "mode", str(self.mode))
        if list(self.neighbours) != sorted(set(self.neighbours)):
            raise ValueError(f"node {self.node}: neighbours must be sorted and distinct; got {list(self.neighbours)}")
        if self.node in self.neighbours:
            raise ValueError(f"node {self.node} lists itself as a neighbour")
        if len(self.neighbour_dims) != len(self.neighbours):
            raise ValueError(f"node {self.node}: {len(self.neighbours)} neighbours but {len(self.neighbour_dims)} neighbour sizes")
        if self.dim < 1 or any(d < 1 for d in self.neighbour_dims):
            raise ValueError(f"node {self.node}: model sizes must be >= 1; got dim={self.dim}, neighbour_dims={list(self.neighbour_dims)}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (ints, floats, lists, a string); :meth:`from_dict` inverts it exactly."""
        return {
            "node": self.node, "neighbours": list(self.neighbours), "neighbour_dims": list(self.neighbour_dims),
            "dim": self.dim, "seed": self.seed, "weights": list(self.weights), "mode": self.mode,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodeSpec:
        """Rebuild a spec from :meth:`to_dict` output (``weights`` and ``mode`` may be absent)."""
        return cls(
            node=d["node"], neighbours=tuple(d["neighbours"]), neighbour_dims=tuple(d["neighbour_dims"]),
            dim=d["dim"], seed=d["seed"], weights=tuple(d.get("weights", ())), mode=d.get("mode", ""),
        )


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

    def __init__(self, spec: NodeSpec, peer: Peer, config: PeerConfig) -> None:
        if peer.node != spec.node:
            raise ValueError(f"spec for node {spec.node} given the peer of node {peer.node}")
        if peer.dim != spec.dim:
            raise ValueError(f"node {spec.node}: spec says model size {spec.dim}, the peer's model has {peer.dim}")
        self.spec, self.peer, self.config = spec, peer, config

    @property
    def node(self) -> int:
        return self.spec.node

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
        for j, size in zip(self.spec.neighbours, sizes):
            if j not in received:
                raise RuntimeError(f"node {self.node} expected a {phase!r} message from {j}, but none was received")
            x = np.asarray(received[j], dtype=np.float64)
            if x.shape != (size,):
                raise ValueError(f"node {self.node}: the {phase!r} message from {j} has shape {x.shape}, expected ({size},)")
            out.append(x)
        return out


class PeerAlgorithm(ABC):
    """A decentralised algorithm: coordinator-side setup plus a node-local protocol (module docstring).

    After :meth:`setup`, ``peers`` is the list of :class:`Peer` objects (node order), ``nodes``
    maps node id → :class:`PeerNode` and ``specs`` node id → :class:`NodeSpec`.
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
                raise ValueError(f"{self.name} needs equal model sizes on all peers; got sizes {sorted(sizes)} (Sheaf-FMTL allows different sizes)")
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
            raise ValueError(f"peers {sorted(p.node for p in peers)} do not match the graph's nodes {sorted(graph.nodes)}")
        self.peers, self.graph = peers, graph
        self.nbrs = {i: sorted(graph.neighbors(i)) for i in graph.nodes}
        self.specs = self.node_specs({p.node: p.dim for p in peers}, graph, rng)
        self.nodes = {i: self.make_node(self.specs[i], by_node[i]) for i in sorted(self.specs)}

    def iterate(self, k: int, transport: InProcessTransport, rngs: Sequence[np.random.Generator]) -> None:
        """One synchronous iteration of every node, phase by phase.

        In each phase every node's outgoing payloads are sent first (so the transport counts every
        directed message), then :meth:`after_outgoing` runs, then every node consumes what it was
        sent. ``rngs[idx]`` is the generator of ``peers[idx]``, used for all phases.
        """
        order = [p.node for p in self.peers]
        gens = dict(zip(order, rngs))
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

    def flops(self, batch: int) -> float:
        """Analytic floating-point operations of one iteration, all peers (gradients: 6·b·d)."""
        return float(sum(self.nodes[p.node].flops(batch) for p in self.peers))

    def state_bytes(self) -> int:
        """Bytes of algorithm state beyond the models (restriction maps, …)."""
        return sum(n.state_bytes() for n in self.nodes.values())

    def log(self) -> dict[str, Any]:
        return {}


class LocalNode(PeerNode):
    """A peer alone: one local mini-batch SGD step per iteration, nothing sent."""

    phases = ("step",)

    def outgoing(self, phase: str) -> dict[int, np.ndarray]:
        self._check_phase(phase)
        return {}

    def incoming(self, phase: str, received: Mapping[int, np.ndarray], rng: np.random.Generator) -> None:
        """θ_i ← θ_i − α ∇f_i(θ_i; ξ)."""
        self._check_phase(phase)
        if received:
            raise ValueError(f"local node {self.node} received messages from {sorted(received)}")
        c, p = self.config, self.peer
        p.theta = p.theta - c.lr * p.grad(p.theta, c.batch_size, rng)


class LocalPeers(PeerAlgorithm):
    name = "local"
    same_size = False
    node_class = LocalNode
    phases = LocalNode.phases


@dataclass(frozen=True)
class DFedUConfig(PeerConfig):
    lam: float = hp(0.05, "coupling λ of Eq. 18 with a_ij = 1 (>= 0); stable while α·λ·max degree < 1")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("lam", self.lam, 0.0)


class ModelSendingNode(PeerNode):
    """A node that sends its model θ_i to every neighbour in one phase, ``"theta"``."""

    phases = ("theta",)

    def __init__(self, spec: NodeSpec, peer: Peer, config: PeerConfig) -> None:
        super().__init__(spec, peer, config)
        if any(d != spec.dim for d in spec.neighbour_dims):
            raise ValueError(f"node {spec.node} (size {spec.dim}) exchanges models with neighbours of sizes {list(spec.neighbour_dims)}; they must be equal")

    def outgoing(self, phase: str) -> dict[int, np.ndarray]:
        self._check_phase(phase)
        return {j: self.peer.theta for j in self.spec.neighbours}


class DFedUNode(ModelSendingNode):
    config: DFedUConfig

    def incoming(self, phase: str, received: Mapping[int, np.ndarray], rng: np.random.Generator) -> None:
        """dFedU, Eq. 18 with a_ij = 1: θ_i ← θ_i − α(∇f_i(θ_i; ξ) + λ Σ_j (θ_i − θ_j))."""
        recv = self._gather(phase, received, self.spec.neighbour_dims)
        c, p = self.config, self.peer
        pull = sum(p.theta - r for r in recv)
        p.theta = p.theta - c.lr * (p.grad(p.theta, c.batch_size, rng) + c.lam * pull)

    def flops(self, batch: int) -> float:
        return super().flops(batch) + 3 * len(self.spec.neighbours) * self.peer.dim


class DFedU(PeerAlgorithm):
    name = "dfedu"
    Config = DFedUConfig
    node_class = DFedUNode
    phases = DFedUNode.phases


class DPSGDNode(ModelSendingNode):
    def __init__(self, spec: NodeSpec, peer: Peer, config: PeerConfig) -> None:
        super().__init__(spec, peer, config)
        if len(spec.weights) != len(spec.neighbours) + 1:
            raise ValueError(f"D-PSGD node {spec.node} needs weights (W_ii, W_ij for each of its {len(spec.neighbours)} neighbours); got {len(spec.weights)}")

    def incoming(self, phase: str, received: Mapping[int, np.ndarray], rng: np.random.Generator) -> None:
        """D-PSGD (Lian et al. 2017): θ_i ← W_ii θ_i + Σ_j W_ij θ_j − α ∇f_i(θ_i; ξ)."""
        recv = self._gather(phase, received, self.spec.neighbour_dims)
        c, p, w = self.config, self.peer, self.spec.weights
        mix = w[0] * p.theta + sum(w[1 + b] * r for b, r in enumerate(recv))
        p.theta = mix - c.lr * p.grad(p.theta, c.batch_size, rng)

    def flops(self, batch: int) -> float:
        return super().flops(batch) + 2 * (len(self.spec.neighbours) + 1) * self.peer.dim


class DPSGD(PeerAlgorithm):
    name = "dpsgd"
    node_class = DPSGDNode
    phases = DPSGDNode.phases

    def node_specs(self, dims: Mapping[int, int], graph: nx.Graph, rng: np.random.Generator) -> dict[int, NodeSpec]:
        """Base specs plus each node's Metropolis row (W_ii, W_i,nbr0, …) in ``weights``."""
        specs = super().node_specs(dims, graph, rng)
        W = metropolis_weights(graph)
        return {i: dataclasses.replace(s, weights=(W[(i, i)], *(W[(i, j)] for j in s.neighbours))) for i, s in specs.items()}


@dataclass(frozen=True)
class SheafConfig(PeerConfig):
    lam: float = hp(0.001, "sheaf-Laplacian strength λ (paper Table 1: 0.001 for R-MNIST)")
    eta: float = hp(0.05, "restriction-map step size η (>= 0; 0 keeps the maps fixed); Theorem 1 needs η < 2/(λ·D²)")
    gamma: float = hp(0.03, "edge-space fraction γ in (0, 1]: d_ij = floor(γ·min(d_i, d_j))")
    map_init: str = hp("gaussian", "initial maps: gaussian (paper) | uniform | orthogonal | identity_noise | scaled_identity | sparse_sign (compact-capable)")
    map_scale: float = hp(1.0, "σ of the initial maps (gaussian/orthogonal scale, uniform half-width, noise sd; √a for scaled_identity)")
    maps: str = hp("auto", "storage: dense | compact (exact low-rank form; needs map_init=sparse_sign) | auto (dense when it fits)")
    memory_budget: float = hp(2e9, "bytes the restriction maps may use (auto picks dense only below min(budget, dense_limit))")
    dense_limit: float = hp(5e8, "largest dense map storage auto mode accepts, in bytes")
    on_budget: str = hp("error", "when compact maps would outgrow the budget: error | recompress (opt-in, approximate)")
    recompress_rank: int = hp(8, "rank kept by recompress (approximate once the history rank exceeds it)")
    local_steps: int = hp(1, "mini-batch steps per coupling step (1 = Algorithm 1; >1 = public code's variant)")
    map_precision: str = hp("float64", "storage of compact map factors: float64 (exact to rounding) | float32 (half the memory, float32-accurate)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("lam", self.lam, 0.0)
        check_range("eta", self.eta, 0.0)
        check_range("gamma", self.gamma, 0.0, 1.0, low_open=True)
        check_choice("map_init", self.map_init, INITS)
        check_range("map_scale", self.map_scale, 0.0, low_open=True)
        check_choice("maps", self.maps, ("auto", "dense", "compact"))
        check_range("memory_budget", self.memory_budget, 0.0, low_open=True)
        check_range("dense_limit", self.dense_limit, 0.0)
        check_choice("on_budget", self.on_budget, ("error", "recompress"))
        check_int("recompress_rank", self.recompress_rank, 1)
        check_int("local_steps", self.local_steps, 1, 10_000)
        check_choice("map_precision", self.map_precision, ("float64", "float32"))
        if self.maps == "compact" and self.map_init != "sparse_sign":
            raise ValueError(f"maps='compact' needs map_init='sparse_sign' (a compactly stored initial map); got map_init={self.map_init!r}")


def edge_dim(gamma: float, d_i: int, d_j: int, i: int, j: int) -> int:
    """d_ij = ⌊γ·min(d_i, d_j)⌋ (paper §4.1); refuses an empty edge space."""
    d = int(np.floor(gamma * min(d_i, d_j) + 1e-9))
    if d < 1:
        raise ValueError(f"edge ({i}, {j}) gets d_ij = floor({gamma} * min({d_i}, {d_j})) = 0; raise gamma")
    return d


class SheafNode(PeerNode):
    """One node of Sheaf-FMTL: its model and its stacked restriction maps P_ij, j ∈ N(i)."""

    phases = ("proj", "proj_new")
    config: SheafConfig

    def __init__(self, spec: NodeSpec, peer: Peer, config: SheafConfig) -> None:
        super().__init__(spec, peer, config)
        c = config
        self.sizes = [edge_dim(c.gamma, spec.dim, d_j, spec.node, j) for j, d_j in zip(spec.neighbours, spec.neighbour_dims)]
        mode = spec.mode or c.maps
        if mode not in ("dense", "compact"):
            raise ValueError(f"Sheaf-FMTL node {spec.node} needs its map storage ('dense' or 'compact') in spec.mode, as node_specs resolves it; got {spec.mode!r} with maps={c.maps!r}")
        child = np.random.default_rng(np.random.SeedSequence([spec.seed, spec.node]))
        self.maps = NodeMaps(initial_maps(c.map_init, self.sizes, spec.dim, c.map_scale, child), self.sizes, mode == "compact", c.map_precision)
        self._proj: np.ndarray | None = None  # P_ij θ_i^k, stacked
        self._proj_new: np.ndarray | None = None  # P_ij^k θ_i^{k+1}, stacked

    def _blocks(self, stacked: np.ndarray) -> dict[int, np.ndarray]:
        off = self.maps.offsets
        return {j: stacked[off[b] : off[b + 1]] for b, j in enumerate(self.spec.neighbours)}

    def _pending(self, value: np.ndarray | None, phase: str) -> np.ndarray:
        if value is None:
            raise RuntimeError(f"node {self.node}: incoming({phase!r}) before outgoing({phase!r}) in this iteration")
        return value

    def outgoing(self, phase: str) -> dict[int, np.ndarray]:
        """``proj``: the blocks of P_ij θ_i^k; ``proj_new``: the blocks of P_ij^k θ_i^{k+1}."""
        self._check_phase(phase)
        if phase == "proj":
            self._proj = self.maps.project(self.peer.theta)
            return self._blocks(self._proj)
        self._proj_new = self.maps.project(self.peer.theta)
        return self._blocks(self._proj_new)

    def incoming(self, phase: str, received: Mapping[int, np.ndarray], rng: np.random.Generator) -> None:
        """``proj``: the model step (Eq. 27); ``proj_new``: the map step (Eq. 28)."""
        recv = np.concatenate(self._gather(phase, received, self.sizes))
        if phase == "proj":
            self.model_step(recv, rng)
        else:
            self.map_step(recv)

    def model_step(self, recv: np.ndarray, rng: np.random.Generator) -> None:
        """Eq. 27: θ_i ← θ_i − α (∇f_i(θ_i; ξ) + λ Σ_j P_ijᵀ (P_ij θ_i − P_ji θ_j)).

        Parameters
        ----------
        recv : numpy.ndarray
            The stacked P_ji θ_j^k of every neighbour j (neighbour order).
        rng : numpy.random.Generator
            Mini-batch sampling; with ``local_steps > 1`` (the public code's variant) the extra
            local steps are taken first and the coupled step at their end point.
        """
        c, p = self.config, self.peer
        proj = self._pending(self._proj, "proj")
        theta = p.theta
        for _ in range(c.local_steps - 1):  # optional public-code variant
            theta = theta - c.lr * p.grad(theta, c.batch_size, rng)
        coupling = self.maps.back_project(proj - recv)
        p.theta = theta - c.lr * (p.grad(theta, c.batch_size, rng) + c.lam * coupling)  # Eq. 27
        self._proj = None

    def map_step(self, recv: np.ndarray) -> None:
        """Eq. 28: P_ij ← P_ij − ηλ (P_ij θ_i^{k+1} − P_ji θ_j^{k+1}) θ_i^{k+1}ᵀ (skipped for η = 0).

        Parameters
        ----------
        recv : numpy.ndarray
            The stacked P_ji^k θ_j^{k+1} of every neighbour j (neighbour order).
        """
        c = self.config
        proj_new = self._pending(self._proj_new, "proj_new")
        if c.eta > 0:
            self.maps.update(c.eta * c.lam * (proj_new - recv), self.peer.theta)  # Eq. 28
        self._proj_new = None

    def state_bytes(self) -> int:
        return self.maps.nbytes

    def flops(self, batch: int) -> float:
        base = super().flops(batch) * self.config.local_steps
        m, d_e, d_i = self.maps, sum(self.sizes), self.peer.dim
        if m.compact:
            r = m.rank
            return base + 3 * (2 * d_i * len(m.sizes) + 2 * r * (d_e + d_i)) + 2 * d_e
        return base + 8 * d_e * d_i  # two projections, one back-projection, one rank-one update


class SheafFMTL(PeerAlgorithm):
    name = "sheaf"
    Config = SheafConfig
    same_size = False
    config: SheafConfig
    node_class = SheafNode
    phases = SheafNode.phases

    def node_specs(self, dims: Mapping[int, int], graph: nx.Graph, rng: np.random.Generator) -> dict[int, NodeSpec]:
        """Base specs (map seeds drawn in sorted node order) plus the map storage in ``mode``.

        The edge spaces d_ij (paper §4.1) are checked here, and ``maps="auto"`` is resolved from
        the dense storage of all nodes' maps, Σ_i Σ_j d_ij·d_i floats.
        """
        c = self.config
        missing = [i for i in graph.nodes if i not in dims]
        if missing:
            raise ValueError(f"no model size given for graph nodes {sorted(missing)}")
        sizes = {i: [edge_dim(c.gamma, dims[i], dims[j], i, j) for j in sorted(graph.neighbors(i))] for i in graph.nodes}
        dense_bytes = sum(sum(sizes[i]) * dims[i] * FLOAT for i in sizes)
        if c.maps == "auto":
            compact = dense_bytes > min(c.memory_budget, c.dense_limit)
            if compact and c.map_init != "sparse_sign":
                raise ValueError(
                    f"dense restriction maps would need {dense_bytes / 1e9:.2f} GB (> {min(c.memory_budget, c.dense_limit) / 1e9:.2f} GB); "
                    "use map_init='sparse_sign' for exact compact maps, or raise dense_limit/memory_budget"
                )
        else:
            compact = c.maps == "compact"
        if not compact and dense_bytes > c.memory_budget:
            raise ValueError(f"dense restriction maps need {dense_bytes / 1e9:.2f} GB, above memory_budget={c.memory_budget:.3g} bytes")
        mode = "compact" if compact else "dense"
        return {i: dataclasses.replace(s, mode=mode) for i, s in super().node_specs(dims, graph, rng).items()}

    def setup(self, peers: list[Peer], graph: nx.Graph, rng: np.random.Generator) -> None:
        super().setup(peers, graph, rng)
        self.compact = any(n.maps.compact for n in self.nodes.values())
        self.dense_bytes = sum(sum(n.sizes) * n.spec.dim * FLOAT for n in self.nodes.values())
        self.recompressions: list[tuple[int, float]] = []

    @property
    def maps(self) -> dict[int, NodeMaps]:
        """Node id → that node's stacked restriction maps."""
        return {i: n.maps for i, n in self.nodes.items()}

    @property
    def sizes(self) -> dict[int, list[int]]:
        """Node id → its edge-space sizes d_ij, neighbour order."""
        return {i: n.sizes for i, n in self.nodes.items()}

    def after_outgoing(self, phase: str, k: int) -> None:
        """Before the map step (Eq. 28) the in-process runner enforces the memory budget."""
        if phase == "proj_new":
            self._check_budget(k)

    def _check_budget(self, k: int) -> None:
        if not self.compact or self.config.eta == 0:
            return
        maps = self.maps
        after = self.state_bytes() + sum(m.bytes_per_update() for m in maps.values())
        if after <= self.config.memory_budget:
            return
        if self.config.on_budget == "error":
            raise MemoryError(
                f"compact restriction maps would grow to {after / 1e9:.2f} GB at iteration {k}, above memory_budget="
                f"{self.config.memory_budget:.3g} bytes; raise memory_budget or set on_budget='recompress' (approximate)"
            )
        lost = max(m.recompress(self.config.recompress_rank) for m in maps.values())
        self.recompressions.append((k, lost))

    def log(self) -> dict[str, Any]:
        return {"map_storage_bytes": self.state_bytes(), "compact": self.compact, "recompressions": list(self.recompressions)}

    def frobenius_matrix(self) -> np.ndarray:
        """‖P_ij‖_F for every directed edge, as an N × N matrix (paper Fig. 4)."""
        n = len(self.peers)
        F = np.zeros((n, n))
        for i, m in self.maps.items():
            for j, f in zip(self.nbrs[i], m.block_frobenius()):
                F[i, j] = f
        return F


REGISTRY: dict[str, type[PeerAlgorithm]] = {cls.name: cls for cls in (SheafFMTL, DFedU, DPSGD, LocalPeers)}


def build(name: str, hyperparameters: dict[str, Any] | None = None) -> PeerAlgorithm:
    if name not in REGISTRY:
        raise ValueError(f"unknown decentralised method {name!r}; available: {', '.join(REGISTRY)}")
    cls = REGISTRY[name]
    return cls(cls.Config.from_dict(dict(hyperparameters or {})))


def field_names(cls: type[PeerAlgorithm]) -> list[str]:
    return [f.name for f in dataclasses.fields(cls.Config)]
