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
"""
from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

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


class PeerAlgorithm(ABC):
    name: ClassVar[str]
    Config: ClassVar[type[PeerConfig]] = PeerConfig
    same_size: ClassVar[bool] = True

    def __init__(self, config: PeerConfig | None = None) -> None:
        self.config = config if config is not None else self.Config()

    def setup(self, peers: list[Peer], graph: nx.Graph, rng: np.random.Generator) -> None:
        self.peers, self.graph = peers, graph
        self.nbrs = {i: sorted(graph.neighbors(i)) for i in graph.nodes}
        if self.same_size:
            dims = {p.dim for p in peers}
            if len(dims) > 1:
                raise ValueError(f"{self.name} needs equal model sizes on all peers; got sizes {sorted(dims)} (Sheaf-FMTL allows different sizes)")

    @abstractmethod
    def iterate(self, k: int, transport: InProcessTransport, rngs: Sequence[np.random.Generator]) -> None:
        """One synchronous iteration of every peer."""

    def flops(self, batch: int) -> float:
        """Analytic floating-point operations of one iteration, all peers (gradients: 6·b·d)."""
        return float(sum(6 * min(batch, p.data.n_train if p.data else 0) * p.dim for p in self.peers))

    def state_bytes(self) -> int:
        """Bytes of algorithm state beyond the models (restriction maps, …)."""
        return 0

    def log(self) -> dict[str, Any]:
        return {}

    def _send_models(self, transport: InProcessTransport) -> dict[int, dict[int, np.ndarray]]:
        for p in self.peers:
            for j in self.nbrs[p.node]:
                transport.send(p.node, j, "theta", p.theta)
        return {p.node: {j: transport.receive(p.node, j, "theta") for j in self.nbrs[p.node]} for p in self.peers}


class LocalPeers(PeerAlgorithm):
    name = "local"
    same_size = False

    def iterate(self, k, transport, rngs) -> None:
        c = self.config
        for p, rng in zip(self.peers, rngs):
            p.theta = p.theta - c.lr * p.grad(p.theta, c.batch_size, rng)


@dataclass(frozen=True)
class DFedUConfig(PeerConfig):
    lam: float = hp(0.05, "coupling λ of Eq. 18 with a_ij = 1 (>= 0); stable while α·λ·max degree < 1")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("lam", self.lam, 0.0)


class DFedU(PeerAlgorithm):
    name = "dfedu"
    Config = DFedUConfig

    def iterate(self, k, transport, rngs) -> None:
        c = self.config
        recv = self._send_models(transport)
        new = {}
        for p, rng in zip(self.peers, rngs):
            pull = sum(p.theta - recv[p.node][j] for j in self.nbrs[p.node])
            new[p.node] = p.theta - c.lr * (p.grad(p.theta, c.batch_size, rng) + c.lam * pull)
        for p in self.peers:
            p.theta = new[p.node]

    def flops(self, batch: int) -> float:
        return super().flops(batch) + sum(3 * len(self.nbrs[p.node]) * p.dim for p in self.peers)


class DPSGD(PeerAlgorithm):
    name = "dpsgd"

    def setup(self, peers, graph, rng) -> None:
        super().setup(peers, graph, rng)
        self.W = metropolis_weights(graph)

    def iterate(self, k, transport, rngs) -> None:
        c = self.config
        recv = self._send_models(transport)
        new = {}
        for p, rng in zip(self.peers, rngs):
            mix = self.W[(p.node, p.node)] * p.theta + sum(self.W[(p.node, j)] * recv[p.node][j] for j in self.nbrs[p.node])
            new[p.node] = mix - c.lr * p.grad(p.theta, c.batch_size, rng)
        for p in self.peers:
            p.theta = new[p.node]

    def flops(self, batch: int) -> float:
        return super().flops(batch) + sum(2 * (len(self.nbrs[p.node]) + 1) * p.dim for p in self.peers)


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


class SheafFMTL(PeerAlgorithm):
    name = "sheaf"
    Config = SheafConfig
    same_size = False
    config: SheafConfig

    def setup(self, peers, graph, rng) -> None:
        super().setup(peers, graph, rng)
        c = self.config
        dim = {p.node: p.dim for p in peers}
        self.sizes = {i: [edge_dim(c.gamma, dim[i], dim[j], i, j) for j in self.nbrs[i]] for i in self.nbrs}
        dense_bytes = sum(sum(self.sizes[i]) * dim[i] * FLOAT for i in self.nbrs)
        self.dense_bytes = dense_bytes
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
        self.compact = compact
        self.maps = {}
        for i in sorted(self.nbrs):
            child = np.random.default_rng(np.random.SeedSequence([int(rng.integers(2**31)), i]))
            self.maps[i] = NodeMaps(initial_maps(c.map_init, self.sizes[i], dim[i], c.map_scale, child), self.sizes[i], compact, c.map_precision)
        self.recompressions: list[tuple[int, float]] = []

    def _exchange(self, transport, tag: str, proj: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        for i, P in proj.items():
            off = self.maps[i].offsets
            for b, j in enumerate(self.nbrs[i]):
                transport.send(i, j, tag, P[off[b] : off[b + 1]])
        return {i: np.concatenate([transport.receive(i, j, tag) for j in self.nbrs[i]]) for i in proj}

    def iterate(self, k, transport, rngs) -> None:
        c = self.config
        peers = self.peers
        proj = {p.node: self.maps[p.node].project(p.theta) for p in peers}  # P_ij θ_i^k
        recv = self._exchange(transport, "proj", proj)  # P_ji θ_j^k
        new = {}
        for p, rng in zip(peers, rngs):
            theta = p.theta
            for _ in range(c.local_steps - 1):  # optional public-code variant
                theta = theta - c.lr * p.grad(theta, c.batch_size, rng)
            coupling = self.maps[p.node].back_project(proj[p.node] - recv[p.node])
            new[p.node] = theta - c.lr * (p.grad(theta, c.batch_size, rng) + c.lam * coupling)  # Eq. 27
        proj2 = {i: self.maps[i].project(new[i]) for i in new}  # P_ij^k θ_i^{k+1}
        recv2 = self._exchange(transport, "proj_new", proj2)
        self._check_budget(k)
        for p in peers:
            i = p.node
            p.theta = new[i]
            if c.eta > 0:
                self.maps[i].update(c.eta * c.lam * (proj2[i] - recv2[i]), new[i])  # Eq. 28

    def _check_budget(self, k: int) -> None:
        if not self.compact or self.config.eta == 0:
            return
        after = self.state_bytes() + sum(m.bytes_per_update() for m in self.maps.values())
        if after <= self.config.memory_budget:
            return
        if self.config.on_budget == "error":
            raise MemoryError(
                f"compact restriction maps would grow to {after / 1e9:.2f} GB at iteration {k}, above memory_budget="
                f"{self.config.memory_budget:.3g} bytes; raise memory_budget or set on_budget='recompress' (approximate)"
            )
        lost = max(m.recompress(self.config.recompress_rank) for m in self.maps.values())
        self.recompressions.append((k, lost))

    def state_bytes(self) -> int:
        return sum(m.nbytes for m in self.maps.values())

    def flops(self, batch: int) -> float:
        base = super().flops(batch) * self.config.local_steps
        total = 0.0
        for p in self.peers:
            m, d_e, d_i = self.maps[p.node], sum(self.sizes[p.node]), p.dim
            if self.compact:
                r = m.rank
                total += 3 * (2 * d_i * len(m.sizes) + 2 * r * (d_e + d_i)) + 2 * d_e
            else:
                total += 8 * d_e * d_i  # two projections, one back-projection, one rank-one update
        return base + total

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
