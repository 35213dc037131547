"""Hostile peers: the attacks of :mod:`topofl.robustness.attacks` for the decentralised methods.

:func:`attacked_peers` wraps any :class:`~topofl.decentralised.protocol.PeerAlgorithm`
(Sheaf-FMTL, dFedU, D-PSGD, Local) so that the *adversaries* (usually
:func:`~topofl.robustness.attacks.choose_adversaries` of the node ids) misbehave from iteration
``start_round`` on. An honest node is the wrapped method's own node object, unchanged; an
adversary's node wraps the method's node, so its own state (model, restriction maps) is what its
honest — or, for a data kind, data-poisoned — local work gives, and only what it trains on or
what it sends its neighbours is altered. The attack uses the same :class:`AttackConfig` as the
server-based methods (``fraction`` is not read here: the adversaries are given).

Every message a peer method sends is, per phase, one vector per neighbour — the *payload*:
for Sheaf-FMTL (Ben Issaid, Vepakomma & Bennis, TMLR 2025) the projection
P_ij θ_i (phase ``proj``, then P_ij θ_i^{k+1} in ``proj_new``), for dFedU (Dinh et al. 2022) and
D-PSGD (Lian et al. 2017) the model θ_i; Local sends nothing. With p_k the honest payload of
iteration k on one edge and phase, and p_{k−1} that of the previous iteration (p_0 := p_1, so
the first iteration is honest whatever the kind):

``label_flip``, ``feature_poison``
    the node's local steps use a poisoned copy of its training data, exactly as for server
    methods (:func:`~topofl.robustness.attacks.poisoned_data`); test data are never touched.
``sign_flip``
    sends p_{k−1} − s·(p_k − p_{k−1}), ``s = scale``. For a server method the reply is
    θ_sent − s·(θ_k − θ_sent): the honest step from the model the local work started at,
    reversed. A peer's local work of iteration k starts from its previous state, whose message
    is p_{k−1}; so the peer analogue reverses the honest change of its message (for dFedU and
    D-PSGD, θ_i^{k−1} − s·(θ_i^k − θ_i^{k−1}); Li et al. 2019, "RSA", AAAI; the decentralised
    sign flip of Peng & Ling 2020, "Byzantine-robust decentralized stochastic optimization",
    ICASSP). The reference is the *honest* p_{k−1}, not the message actually sent then: with
    the latter each iteration would reflect the previous attack again and the message would
    drift from the honest one by a factor (1 + s) per iteration — a divergence by construction,
    where the server-side attack is the same bounded step every round.
``scaled_replacement``
    sends p_{k−1} + γ·(p_k − p_{k−1}), ``γ = boost``: the honest change boosted, the analogue of
    θ_sent + γ·(θ_k − θ_sent) (Bagdasaryan et al. 2020, AISTATS) with the same reference.
``gaussian_noise``
    sends p_k + ε, ε ~ N(0, ``noise_std``² I) independent per (seed, iteration, node, phase,
    neighbour) (Blanchard et al. 2017, NeurIPS). For a server method the noise replaces the
    update, θ_sent + ε; a peer has no message the receiver already holds, so the noise is added
    to the honest payload.
``collusion``
    sends p_k + δ with one δ ~ N(0, ``noise_std``² I) drawn from (seed, iteration, phase) alone
    (its first d_ij entries when payloads differ in size), so every adversary adds the same
    offset to every message of that phase without communicating (Blanchard et al. 2017; Baruch
    et al. 2019, "A little is enough", NeurIPS).
``free_rider``
    resends, on each edge and phase, the first payload it ever sent there: it contributes no
    progress yet keeps talking, the analogue of returning the received model unchanged
    (Fraboni et al. 2021, AISTATS).

``descriptor_forgery`` and ``crude_forgery`` forge pTopoFL's descriptor, which no peer method
sends: they are refused with a ``ValueError``. A reply kind on Sheaf-FMTL needs
``exchange="paper"`` (the compact exchange omits and reconstructs messages, so a payload is not
one vector per edge and iteration). Every altered payload has the honest payload's shape, so the
transport counts the same bits; iterations are counted by the node itself (one per call of
``outgoing`` for the method's first phase), so the wrapper works under any coordinator that
drives the :class:`~topofl.decentralised.protocol.PeerNode` protocol.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from topofl._validation import check_int
from topofl.data.federation import ClientData
from topofl.decentralised.protocol import NodeSpec, Peer, PeerAlgorithm, PeerNode
from topofl.robustness.attacks import _COLLUSION, _NOISE, AttackConfig, _gaussian, parse_attack, poisoned_data

if TYPE_CHECKING:  # networkx is imported where a graph is built or checked (lazy: ~0.1 s)
    import networkx as nx

__all__ = ["PEER_KINDS", "AttackedPeerNode", "AttackedPeers", "attacked_peers"]

log = logging.getLogger(__name__)

#: the data kinds that apply to peers (the forgeries alter a descriptor, which peers do not send)
PEER_DATA_KINDS = ("label_flip", "feature_poison")
#: the reply kinds, defined on the payload of each phase (module docstring)
PEER_REPLY_KINDS = ("sign_flip", "scaled_replacement", "gaussian_noise", "collusion", "free_rider")
#: every kind :func:`attacked_peers` accepts
PEER_KINDS = PEER_DATA_KINDS + PEER_REPLY_KINDS


class AttackedPeerNode(PeerNode):
    """An adversary's node: ``inner`` (the method's node) with its data or its payloads altered.

    Attributes the wrapper does not define (a Sheaf node's ``maps``, …) are ``inner``'s.

    Parameters
    ----------
    inner : PeerNode
        The method's node for this graph node (it keeps the node's honest state).
    attack : AttackConfig
        The attack (a kind of :data:`PEER_KINDS`).
    """

    def __init__(self, inner: PeerNode, attack: AttackConfig) -> None:
        super().__init__(inner.spec, inner.peer, inner.config)
        self.inner, self.attack = inner, attack
        vars(self)["phases"] = inner.phases
        self.round = 0  # iterations begun (the runner's k)
        self._prev: dict[tuple[str, int], np.ndarray] = {}  # honest payload of the previous iteration
        self._first: dict[tuple[str, int], np.ndarray] = {}  # first payload ever sent
        self._poisoned: ClientData | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("inner", "attack"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def attacking(self) -> bool:
        """Whether this node attacks in the current iteration."""
        return self.round >= self.attack.start_round

    def outgoing(self, phase: str) -> dict[int, np.ndarray]:
        """The inner node's payloads, altered by a reply kind while attacking (module docstring)."""
        self._check_phase(phase)
        if phase == self.phases[0]:
            self.round += 1
        payloads = self.inner.outgoing(phase)
        if self.attack.kind not in PEER_REPLY_KINDS:
            return payloads
        out = {}
        for j, payload in payloads.items():
            honest = np.array(payload, dtype=np.float64, copy=True)
            key = (phase, j)
            prev = self._prev.get(key, honest)
            first = self._first.setdefault(key, honest)
            self._prev[key] = honest
            out[j] = self._alter(phase, j, honest, prev, first) if self.attacking else payload
        return out

    def _alter(self, phase: str, j: int, honest: np.ndarray, prev: np.ndarray, first: np.ndarray) -> np.ndarray:
        a, kind = self.attack, self.attack.kind
        if kind == "sign_flip":
            return prev - a.scale * (honest - prev)
        if kind == "scaled_replacement":
            return prev + a.boost * (honest - prev)
        p = self.phases.index(phase)
        if kind == "gaussian_noise":
            return honest + _gaussian([a.seed, self.round, self.node, p, j, _NOISE], honest.size, a.noise_std)
        if kind == "collusion":
            return honest + _gaussian([a.seed, self.round, p, _COLLUSION], honest.size, a.noise_std)
        return first.copy()  # free_rider

    def incoming(self, phase: str, received: Mapping[int, np.ndarray], rng: np.random.Generator) -> None:
        """The inner node's step, on the poisoned training data while a data kind attacks."""
        peer = self.peer
        if self.attack.kind not in PEER_DATA_KINDS or not self.attacking or peer.data is None:
            self.inner.incoming(phase, received, rng)
            return
        if self._poisoned is None:
            self._poisoned = poisoned_data(peer.data, self.attack, peer.model)
        clean, peer.data = peer.data, self._poisoned
        try:
            self.inner.incoming(phase, received, rng)
        finally:
            peer.data = clean

    def state_bytes(self) -> int:
        """The inner node's state bytes."""
        return self.inner.state_bytes()

    def flops(self, batch: int) -> float:
        """The inner node's FLOPs (an attack's arithmetic is not the method's)."""
        return self.inner.flops(batch)


class AttackedPeers(PeerAlgorithm):
    """``inner`` with ``adversaries`` attacking from ``attack.start_round`` on (see :func:`attacked_peers`).

    Setup, the coordinator's hooks and every honest node are ``inner``'s; attributes the wrapper
    does not define (Sheaf-FMTL's ``maps``, …) are ``inner``'s.
    """

    def __init__(self, inner: PeerAlgorithm, attack: AttackConfig, adversaries: Iterable[int]) -> None:
        if not isinstance(inner, PeerAlgorithm):
            raise ValueError(f"attacked_peers() wraps a decentralised topofl PeerAlgorithm; got {type(inner).__name__}")
        if attack.kind not in PEER_KINDS:
            raise ValueError(f"attack kind={attack.kind!r} does not apply to peer methods (it forges pTopoFL's descriptor, "
                             f"which peers do not send); peer kinds: {', '.join(PEER_KINDS)}")
        exchange = getattr(inner.config, "exchange", "paper")
        if attack.kind in PEER_REPLY_KINDS and exchange != "paper":
            raise ValueError(f"attack kind={attack.kind!r} alters one payload per edge and iteration; it needs "
                             f"exchange='paper', got exchange={exchange!r}")
        super().__init__(inner.config)
        self.inner, self.attack = inner, attack
        self.adversaries = frozenset(int(a) for a in adversaries)
        for a in self.adversaries:
            check_int("adversary", a, 0)
        vars(self).update(name=inner.name, Config=inner.Config, same_size=inner.same_size,
                          node_class=inner.node_class, phases=inner.phases)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("inner", "attack", "adversaries"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"attacked_peers({self.inner!r}, {self.attack.spec!r}, adversaries={sorted(self.adversaries)})"

    def _wrap(self, node: PeerNode) -> PeerNode:
        return AttackedPeerNode(node, self.attack) if node.node in self.adversaries else node

    def node_specs(self, dims: Mapping[int, int], graph: nx.Graph, rng: np.random.Generator) -> dict[int, NodeSpec]:
        """The inner method's specs."""
        return self.inner.node_specs(dims, graph, rng)

    def make_node(self, spec: NodeSpec, peer: Peer) -> PeerNode:
        """The inner method's node, wrapped for an adversary."""
        return self._wrap(self.inner.make_node(spec, peer))

    def setup(self, peers: list[Peer], graph: nx.Graph, rng: np.random.Generator) -> None:
        """The inner method's setup, then its adversaries' nodes wrapped."""
        self.inner.setup(peers, graph, rng)
        unknown = sorted(self.adversaries - set(graph.nodes))
        if unknown:
            raise ValueError(f"adversaries {unknown} are not nodes of the graph (nodes {sorted(graph.nodes)})")
        self.peers, self.graph, self.nbrs, self.specs = self.inner.peers, graph, self.inner.nbrs, self.inner.specs
        self.nodes = {i: self._wrap(n) for i, n in self.inner.nodes.items()}

    def after_outgoing(self, phase: str, k: int) -> None:
        """The inner method's hook."""
        self.inner.after_outgoing(phase, k)

    def log(self) -> dict[str, Any]:
        """The inner method's log."""
        return self.inner.log()


def attacked_peers(algorithm: PeerAlgorithm, attack: AttackConfig | str, adversaries: Iterable[int]) -> PeerAlgorithm:
    """``algorithm`` with the nodes ``adversaries`` attacking as ``attack`` says (module docstring).

    Parameters
    ----------
    algorithm : PeerAlgorithm
        A configured decentralised method (or an already attacked one: attacks compose).
    attack : AttackConfig or str
        The attack, or its spec ``"kind:key=value,..."``
        (:func:`~topofl.robustness.attacks.parse_attack`); a kind of :data:`PEER_KINDS`.
    adversaries : iterable of int
        The attacking nodes, usually ``attack.adversaries(range(K))``
        (:func:`~topofl.robustness.attacks.choose_adversaries`).

    Returns
    -------
    PeerAlgorithm
        A wrapper whose honest nodes and coordinator side are ``algorithm``'s, unchanged.

    Raises
    ------
    ValueError
        For a descriptor kind, a reply kind on Sheaf-FMTL's compact exchange, or a bad adversary.
    """
    config = parse_attack(attack)
    wrapped = AttackedPeers(algorithm, config, adversaries)
    log.info("peer attack %s by node(s) %s from iteration %d", config.spec, sorted(wrapped.adversaries), config.start_round)
    return wrapped

