"""Hostile peers: the attacks of :mod:`topofl.robustness.attacks` for the decentralised methods.

:func:`attacked_peers` wraps any :class:`~topofl.decentralised.protocol.PeerAlgorithm` (Sheaf-FMTL, dFedU,
D-PSGD, Local) so that the given adversaries misbehave from iteration ``start_round`` on, with the same
:class:`~topofl.robustness.attacks.AttackConfig`: a data kind poisons what a node trains on, a reply kind alters
its payload p_k (what it sends one neighbour in one phase) relative to the honest p_{k−1}; the descriptor
forgeries are refused. See docs/internals.md#topofl.robustness.peer_attacks for each kind's formula and paper.
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
#: the reply kinds, defined on the payload of each phase (docs/internals.md#topofl.robustness.peer_attacks)
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
        """The inner node's payloads, altered by a reply kind while attacking.

        The kinds' payloads: :meth:`_alter`; see docs/internals.md#topofl.robustness.peer_attacks.
        """
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
        """The payload sent instead of the honest p_k = ``honest`` (p_{k−1} = ``prev``): ``sign_flip``
        p_{k−1} − s·(p_k − p_{k−1}) (Li et al. 2019; Peng & Ling 2020), ``scaled_replacement``
        p_{k−1} + γ·(p_k − p_{k−1}) (Bagdasaryan et al. 2020), ``gaussian_noise`` p_k + ε (Blanchard et al.
        2017), ``collusion`` p_k + δ shared by all (Blanchard et al. 2017; Baruch et al. 2019) or ``free_rider``
        the first payload (Fraboni et al. 2021).
        """
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
            raise ValueError(f"attack kind={attack.kind!r} does not apply to peer methods "
                             "(it forges pTopoFL's descriptor, which peers do not send); "
                             f"peer kinds: {', '.join(PEER_KINDS)}")
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
    """``algorithm`` with the nodes ``adversaries`` attacking as ``attack`` says.

    Each kind: docs/internals.md#topofl.robustness.peer_attacks.

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
    log.info("peer attack %s by node(s) %s from iteration %d", config.spec, sorted(wrapped.adversaries),
             config.start_round)
    return wrapped

