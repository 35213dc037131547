"""Sheaf-FMTL (Ben Issaid, Vepakomma, Bennis, TMLR 2025), Algorithm 1, as node-local state.

:class:`SheafNode` takes one node's model step (Eq. 27) and map step (Eq. 28); :class:`SheafFMTL` sets the
nodes up. ``exchange="paper"`` sends Algorithm 1's two projections per edge and iteration, ``"compact"`` one
(and ‖θ_i^{k+1}‖²), from which the neighbour rebuilds the other: the same iterates, bit for bit. The maths is in
:mod:`~topofl.decentralised.sheaf.maths`, the maps in :mod:`~topofl.decentralised.sheaf.maps`. See
docs/internals.md#topofl.decentralised.sheaf.algorithm for the update equations and the compact exchange.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from topofl.config import floats, hp
from topofl.decentralised.protocol import NodeSpec, Peer, PeerAlgorithm, PeerConfig, PeerNode
from topofl.decentralised.sheaf import maths
from topofl.decentralised.sheaf.maps import INITS, NodeMaps, initial_maps

if TYPE_CHECKING:  # networkx is imported where a graph is built or checked (lazy: ~0.1 s)
    import networkx as nx


@dataclass(frozen=True)
class SheafConfig(PeerConfig):
    """Hyper-parameters of Sheaf-FMTL: coupling λ, map step η, edge spaces, initial maps and their storage."""

    lam: float = hp(0.001, "sheaf-Laplacian strength λ (paper Table 1: 0.001 for R-MNIST)", low=0.0,
                    space=floats(1e-5, 0.1, log=True))
    eta: float = hp(0.05, "restriction-map step size η (>= 0; 0 keeps the maps fixed); Theorem 1 needs η < 2/(λ·D²)",
                    low=0.0, space=floats(1e-3, 0.5, log=True))
    gamma: float = hp(0.03, "edge-space fraction γ in (0, 1]: d_ij = floor(γ·min(d_i, d_j)) (tuned on request)",
                      low=0.0, high=1.0, low_open=True, space=floats(0.01, 1.0, log=True, tuned=False))
    map_init: str = hp("gaussian", "initial maps: gaussian (paper) | shared (both ends of an edge start from the same "
                       "N(0, σ²) map) | uniform | orthogonal | identity_noise | scaled_identity | sparse_sign "
                       "(compact-capable)", choices=INITS)
    map_scale: float = hp(1.0, "σ of the initial maps (gaussian/orthogonal scale, uniform half-width, noise sd; √a for "
                          "scaled_identity)", low=0.0, low_open=True)
    maps: str = hp("auto", "storage: dense | compact (exact low-rank form; needs map_init=sparse_sign) | auto (dense "
                   "when it fits)", choices=("auto", "dense", "compact"))
    memory_budget: float = hp(2e9, "bytes the restriction maps may use (auto picks dense only below min(budget, "
                              "dense_limit)); compact maps that would outgrow it within the run's rounds are refused "
                              "up front, naming the bytes needed", low=0.0, low_open=True)
    dense_limit: float = hp(5e8, "largest dense map storage auto mode accepts, in bytes", low=0.0)
    on_budget: str = hp("error", "when compact maps would outgrow the budget: error | recompress (opt-in, approximate)",
                        choices=("error", "recompress"))
    recompress_rank: int = hp(8, "rank kept by recompress (approximate once the history rank exceeds it)", low=1,
                              integer=True)
    map_precision: str = hp("float64", "storage of compact map factors: float64 (exact to rounding) | float32 (half "
                            "the memory, float32-accurate)", choices=("float64", "float32"))
    exchange: str = hp("paper", "messages per directed edge and iteration: paper (Algorithm 1: P_ij θ_i^k, then P_ij "
                       "θ_i^(k+1); 2·d_ij floats) | compact (P_ij θ_i^(k+1) and ‖θ_i^(k+1)‖², d_ij + 1 floats; "
                       "identical iterates)", choices=("paper", "compact"))

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared bounds of every field; the rule joining two fields follows
        if self.maps == "compact" and self.map_init != "sparse_sign":
            raise ValueError("maps='compact' needs map_init='sparse_sign' (a compactly stored initial map); "
                             f"got map_init={self.map_init!r}")


class SheafNode(PeerNode):
    """One node of Sheaf-FMTL: its model and its stacked restriction maps P_ij, j ∈ N(i)."""

    phases = ("proj", "proj_new")
    config: SheafConfig

    def __init__(self, spec: NodeSpec, peer: Peer, config: SheafConfig) -> None:
        super().__init__(spec, peer, config)
        c = config
        self.sizes = [maths.edge_dim(c.gamma, spec.dim, d_j, spec.node, j)
                      for j, d_j in zip(spec.neighbours, spec.neighbour_dims, strict=True)]
        mode = spec.mode or c.maps
        if mode not in ("dense", "compact"):
            raise ValueError(
                f"Sheaf-FMTL node {spec.node} needs its map storage ('dense' or 'compact') in spec.mode, "
                f"as node_specs resolves it; got {spec.mode!r} with maps={c.maps!r}"
            )
        child = np.random.default_rng(np.random.SeedSequence([spec.seed, spec.node]))
        P0 = initial_maps(c.map_init, self.sizes, spec.dim, c.map_scale, child, spec)
        self.maps = NodeMaps(P0, self.sizes, mode == "compact", c.map_precision)
        self._proj: np.ndarray | None = None  # P_ij θ_i^k, stacked
        self._proj_new: np.ndarray | None = None  # P_ij^k θ_i^{k+1}, stacked
        self._rebuilt: dict[int, np.ndarray] = {}  # compact exchange: P_ji^{k+1} θ_j^{k+1} of each neighbour j
        self._products = 0  # maps.products when this iteration began

    def _blocks(self, stacked: np.ndarray) -> dict[int, np.ndarray]:
        off = self.maps.offsets
        return {j: stacked[off[b] : off[b + 1]] for b, j in enumerate(self.spec.neighbours)}

    def _pending(self, value: np.ndarray | None, phase: str) -> np.ndarray:
        if value is None:
            raise RuntimeError(f"node {self.node}: incoming({phase!r}) before outgoing({phase!r}) in this iteration")
        return value

    def outgoing(self, phase: str) -> dict[int, np.ndarray]:
        """``proj``: the blocks of P_ij θ_i^k (compact exchange: only when not carried over, see
        docs/internals.md#topofl.decentralised.sheaf.algorithm); ``proj_new``: the blocks of P_ij^k θ_i^{k+1}
        (compact: and ‖θ_i^{k+1}‖²).
        """
        self._check_phase(phase)
        theta, compact = self.peer.theta, self.config.exchange == "compact"
        if phase == "proj":
            self._products = self.maps.products
            carried = self.maps.cached(theta) is not None  # then every neighbour has rebuilt exactly this value
            self._proj = self.maps.project(theta)
            return {} if compact and carried else self._blocks(self._proj)
        self._proj_new = self.maps.project(theta)
        blocks = self._blocks(self._proj_new)
        if compact:
            scale = self.maps.carry_scale(theta)
            return {j: np.append(b, scale) for j, b in blocks.items()}
        return blocks

    def incoming(self, phase: str, received: Mapping[int, np.ndarray], rng: np.random.Generator) -> None:
        """``proj``: the model step (Eq. 27); ``proj_new``: the map step (Eq. 28)."""
        if self.config.exchange == "paper":
            recv = np.concatenate(self._gather(phase, received, self.sizes))
            if phase == "proj":
                self.model_step(recv, rng)
            else:
                self.map_step(recv)
        elif phase == "proj":  # what a neighbour sent overrides the projection rebuilt from its last proj_new
            full, self._rebuilt = {**self._rebuilt, **received}, {}
            self.model_step(np.concatenate(self._gather(phase, full, self.sizes)), rng)
        else:
            parts = self._gather(phase, received, [d + 1 for d in self.sizes])
            self._rebuild(parts)
            self.map_step(np.concatenate([x[:-1] for x in parts]))

    def _rebuild(self, parts: list[np.ndarray]) -> None:
        """Compact exchange: P_ji^{k+1} θ_j^{k+1} = q − u c (Eq. 28; :func:`maths.carried_projection`), q =
        P_ji^k θ_j^{k+1} and c as received and u = ηλ (q − P_ij^k θ_i^{k+1}) as neighbour j's maps store it.
        """
        c, own = self.config, self._blocks(self._pending(self._proj_new, "proj_new"))
        self._rebuilt = {}
        for j, x in zip(self.spec.neighbours, parts, strict=True):
            q = x[:-1]
            u = self.maps.stored(maths.map_residual(q, own[j], c.eta, c.lam))
            self._rebuilt[j] = maths.carried_projection(q, u, float(x[-1])) if c.eta > 0 else q.copy()

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
        theta = self.local_steps(p.theta, rng)  # optional public-code variant (local_steps > 1)
        coupling = self.maps.back_project(proj - recv)
        grad = p.grad(theta, c.batch_size, rng)
        if c.optimizer == "sgd":
            p.theta = maths.model_step(theta, grad, coupling, c.lr, c.lam)  # Eq. 27
        else:   # another rule on Eq. 27's bracket ∇f_i + λ Σ_j P_ijᵀ(P_ij θ_i − P_ji θ_j)
            p.theta = self.step(theta, grad + c.lam * coupling)
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
            self.maps.update(maths.map_residual(proj_new, recv, c.eta, c.lam), self.peer.theta)  # Eq. 28
        self._proj_new = None

    def state_bytes(self) -> int:
        return self.maps.nbytes

    def flops(self, batch: int) -> float:
        """FLOPs of the iteration just taken: the projections it computed (the first is carried over
        the last map step from the second iteration on), Eq. 27's back-projection and Eq. 28's update.
        """
        m, c = self.maps, self.config
        return maths.node_flops(super().flops(batch) * c.local_steps, self.peer.dim, m.sizes, m.compact, m.rank,
                                projections=m.products - self._products, map_update=c.eta > 0,
                                rebuilt=c.exchange == "compact")


class SheafFMTL(PeerAlgorithm):
    """Sheaf-FMTL, Algorithm 1: learned restriction maps between models of any sizes."""

    name = "sheaf"
    Config = SheafConfig
    same_size = False
    config: SheafConfig
    nodes: Mapping[int, SheafNode]
    node_class = SheafNode
    phases = SheafNode.phases

    def node_specs(self, dims: Mapping[int, int], graph: nx.Graph, rng: np.random.Generator) -> dict[int, NodeSpec]:
        """Base specs (map seeds drawn in sorted node order) plus the map storage in ``mode`` and, in
        ``edge_seed``, a seed every node shares (derived from the node seeds) for ``map_init="shared"``.

        The edge spaces d_ij (paper §4.1) are checked here, and ``maps="auto"`` is resolved from
        the dense storage of all nodes' maps, Σ_i Σ_j d_ij·d_i floats.
        """
        c = self.config
        missing = [i for i in graph.nodes if i not in dims]
        if missing:
            raise ValueError(f"no model size given for graph nodes {sorted(missing)}")
        sizes = maths.edge_sizes(c.gamma, dims, {i: sorted(graph.neighbors(i)) for i in graph.nodes})
        dense_bytes = maths.dense_map_bytes(sizes, dims)
        if c.maps == "auto":
            compact = dense_bytes > min(c.memory_budget, c.dense_limit)
            if compact and c.map_init != "sparse_sign":
                raise ValueError(
                    f"dense restriction maps would need {dense_bytes / 1e9:.2f} GB "
                    f"(> {min(c.memory_budget, c.dense_limit) / 1e9:.2f} GB); "
                    "use map_init='sparse_sign' for exact compact maps, or raise dense_limit/memory_budget"
                )
        else:
            compact = c.maps == "compact"
        if not compact and dense_bytes > c.memory_budget:
            raise ValueError(f"dense restriction maps need {dense_bytes / 1e9:.2f} GB, "
                             f"above memory_budget={c.memory_budget:.3g} bytes")
        mode = "compact" if compact else "dense"
        specs = super().node_specs(dims, graph, rng)
        # nothing more drawn from rng
        edge_seed = int(np.random.SeedSequence([s.seed for s in specs.values()]).generate_state(1)[0])
        return {i: dataclasses.replace(s, mode=mode, edge_seed=edge_seed) for i, s in specs.items()}

    def setup(self, peers: list[Peer], graph: nx.Graph, rng: np.random.Generator) -> None:
        super().setup(peers, graph, rng)
        self.compact = any(n.maps.compact for n in self.nodes.values())
        self.dense_bytes = maths.dense_map_bytes({i: n.sizes for i, n in self.nodes.items()},
                                                 {i: n.spec.dim for i, n in self.nodes.items()})
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

    def before_run(self, rounds: int) -> None:
        """Refuse up front (``on_budget="error"``) a run whose compact maps would outgrow ``memory_budget``
        within ``rounds`` iterations, naming the bytes it needs (:func:`maths.budget_refusal`).
        """
        per = sum(m.bytes_per_update() for m in self.maps.values()) if self.compact and self.config.eta > 0 else 0
        problem = maths.budget_refusal(self.state_bytes(), per, rounds, self.config.memory_budget,
                                       self.config.map_precision == "float64")
        if problem and self.config.on_budget == "error":
            raise MemoryError(problem)

    def _check_budget(self, k: int) -> None:
        if not self.compact or self.config.eta == 0:
            return
        maps = self.maps
        after = self.state_bytes() + sum(m.bytes_per_update() for m in maps.values())
        if after <= self.config.memory_budget:
            return
        if self.config.on_budget == "error":
            raise MemoryError(
                f"compact restriction maps would grow to {after / 1e9:.2f} GB at iteration {k}, "
                f"above memory_budget={self.config.memory_budget:.3g} bytes; raise memory_budget or set "
                "on_budget='recompress' (approximate)"
            )
        lost = max(m.recompress(self.config.recompress_rank) for m in maps.values())
        self.recompressions.append((k, lost))

    def log(self) -> dict[str, Any]:
        return {"map_storage_bytes": self.state_bytes(), "compact": self.compact,
                "recompressions": list(self.recompressions)}

    def frobenius_matrix(self) -> np.ndarray:
        """‖P_ij‖_F for every directed edge, as an N × N matrix (paper Fig. 4)."""
        n = len(self.peers)
        F = np.zeros((n, n))
        for i, m in self.maps.items():
            for j, f in zip(self.nbrs[i], m.block_frobenius(), strict=True):
                F[i, j] = f
        return F
