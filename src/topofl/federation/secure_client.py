"""The client's side of a secure-aggregation round (:mod:`topofl.federation.secure`): the messages
of the four stages and :func:`client_step`, which every runtime calls for each request (the
in-process pool, a Flower node). A client keeps its trained model, its private keys and the shares
it holds in its own state between the stages, and checks every request before it acts on it.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.privacy import secagg

if TYPE_CHECKING:
    from topofl.federation.algorithm import Algorithm, ClientContext

STAGES = ("advertise", "share", "mask", "unmask")


# ---- the messages of the protocol ------------------------------------------------------------
@dataclass(frozen=True)
class Advertise:
    """Server → client, stage 1: the method's fit message."""

    round: int
    message: ServerMessage

    def n_bytes(self) -> int:
        return self.message.n_bytes()


@dataclass(frozen=True)
class Advertised:
    """Client → server, stage 1: the update without its model (``params`` empty) and two public keys."""

    client_id: int
    round: int
    update: ClientUpdate
    c_pk: bytes
    s_pk: bytes

    def n_bytes(self) -> int:
        return self.update.n_bytes() + len(self.c_pk) + len(self.s_pk)


@dataclass(frozen=True)
class ShareKeys:
    """Server → client, stage 2: its group, its weight in (0, 1], the public keys of its share set
    (its neighbours and itself), client id → ``(c_pk, s_pk)``, and the group's members and graph seed
    (the client rebuilds the public neighbour graph and checks its share set and, at unmask, that the
    survivors are still connected).
    """

    round: int
    group: int
    weight: float
    keys: Mapping[int, tuple[bytes, bytes]]
    members: tuple[int, ...] = ()
    graph_seed: tuple[int, ...] = ()

    def n_bytes(self) -> int:
        return 16 + sum(len(a) + len(b) + 8 for a, b in self.keys.values()) + 8 * (len(self.members)
                                                                                   + len(self.graph_seed))


@dataclass(frozen=True)
class SharedKeys:
    """Client → server, stage 2: one sealed share pair per neighbour, the commitment to its seed, and the
    digests of every share it dealt (holder → (digest of its self-mask share, digest of its key share),
    itself included: :func:`~topofl.privacy.secagg.share_digest`).
    """

    client_id: int
    round: int
    sealed: Mapping[int, bytes]
    commitment: bytes
    digests: Mapping[int, tuple[bytes, bytes]] = field(default_factory=dict)

    def n_bytes(self) -> int:
        return (len(self.commitment) + sum(len(b) + 8 for b in self.sealed.values())
                + sum(len(a) + len(b) + 8 for a, b in self.digests.values()))


@dataclass(frozen=True)
class MaskInput:
    """Server → client, stage 3: the sealed share pairs its neighbours addressed to it."""

    round: int
    sealed: Mapping[int, bytes]

    def n_bytes(self) -> int:
        return sum(len(b) + 8 for b in self.sealed.values())


@dataclass(frozen=True)
class MaskedInput:
    """Client → server, stage 3: y = q(w·θ, w, clipped) + masks (uint64, length n + 2)."""

    client_id: int
    round: int
    vector: np.ndarray

    def n_bytes(self) -> int:
        return int(np.asarray(self.vector).nbytes)


@dataclass(frozen=True)
class Unmask:
    """Server → client, stage 4: the group's survivors (sent a masked input) and dropped clients (sent
    shares, then no masked input).
    """

    round: int
    survivors: tuple[int, ...]
    dropped: tuple[int, ...]

    def n_bytes(self) -> int:
        return 8 * (len(self.survivors) + len(self.dropped))


@dataclass(frozen=True)
class Unmasked:
    """Client → server, stage 4: shares of survivors' seeds (``seeds``) and dropped clients' masking keys (``keys``)."""

    client_id: int
    round: int
    seeds: Mapping[int, bytes]
    keys: Mapping[int, bytes]

    def n_bytes(self) -> int:
        return sum(len(b) + 8 for b in (*self.seeds.values(), *self.keys.values()))


REPLY_TYPES = {"advertise": Advertised, "share": SharedKeys, "mask": MaskedInput, "unmask": Unmasked}


# ---- what a method tells the protocol --------------------------------------------------------
@dataclass(frozen=True)
class SecurePlan:
    """A method's plan of a secure round: ``groups[g]`` maps each member to its weight (> 0); the
    server learns ``Σ_k w_k θ_k`` over each group's survivors. ``log`` goes to the round's server log;
    ``context`` is for the method's own ``secure_aggregate``.
    """

    groups: Mapping[int, Mapping[int, float]]
    log: Mapping[str, Any] = field(default_factory=dict)
    context: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupSum:
    """What the server learns of a group: ``total`` = Σ w_k θ_k over ``members`` (the survivors, to
    quantisation error), ``weight`` = Σ w_k over them (exact, the server's own weights), the same
    sum as the clients quantised it (``reported_weight``) and how many coordinates they clipped.
    """

    total: np.ndarray
    weight: float
    members: tuple[int, ...]
    reported_weight: float
    clipped: int

    @property
    def mean(self) -> np.ndarray:
        """The weighted mean Σ w_k θ_k / Σ w_k of the survivors' models."""
        return self.total / self.weight


def secure_config(algorithm: Algorithm) -> Any:
    """The algorithm's config when it runs under secure aggregation, else ``None``."""
    c = algorithm.config
    return c if getattr(c, "secure_aggregation", False) else None


def quantiser(config: Any) -> secagg.Quantiser:
    """The fixed point of a config's ``secure_clip`` and ``secure_bits``."""
    return secagg.Quantiser(float(config.secure_clip), int(config.secure_bits))


# ---- the client's side -----------------------------------------------------------------------
def client_step(algorithm: Algorithm, ctx: ClientContext, request: Any) -> Any:
    """One client's answer to one stage's request (every runtime calls this); ``ValueError`` when the
    request is out of order or unsound (the client then leaves the round; it never reveals both
    shares of one neighbour, and never helps reveal a sum of fewer than ``secure_min_group`` inputs).
    """
    config = secure_config(algorithm)
    if config is None:
        raise ValueError(f"{algorithm.name} was not configured for secure aggregation (secure_aggregation=False)")
    st = ctx.state.get("secagg")
    if isinstance(request, Advertise):
        return _advertise(algorithm, ctx, request)
    if not isinstance(st, dict) or st.get("round") != getattr(request, "round", None):
        raise ValueError(f"secure aggregation: a {type(request).__name__} for a round this client did not advertise in")
    if isinstance(request, ShareKeys):
        return _share(config, ctx, st, request)
    if isinstance(request, MaskInput):
        return _mask(config, ctx, st, request)
    if isinstance(request, Unmask):
        return _unmask(config, ctx, st, request)
    raise ValueError(f"secure aggregation: unknown request {type(request).__name__}")


def _expect(st: dict[str, Any], stage: str, request: Any) -> None:
    if st.get("stage") != stage:
        raise ValueError(f"secure aggregation: {type(request).__name__} out of order (this client is past "
                         f"{st.get('stage')!r})")


def _advertise(algorithm: Algorithm, ctx: ClientContext, request: Advertise) -> Advertised:
    update = algorithm.client_fit(ctx, request.message)
    c_sk, s_seed = secagg.new_private_key(), secagg.new_secret()
    s_sk = secagg.masking_key(s_seed)   # the masking key comes from a 16-byte seed, which is what it shares
    # the self-mask seed b is drawn now, with the keys: a share request sent again (a Flower message
    # re-sent after a SuperLink restart starts from this state) shares the same b
    ctx.state["secagg"] = {"round": int(request.round), "stage": "advertised", "params": update.params,
                           "c_sk": c_sk, "s_sk": s_sk, "s_seed": s_seed, "seed": secagg.new_secret()}
    meta = dataclasses.replace(update, params=np.empty(0))
    return Advertised(ctx.client_id, int(request.round), meta, secagg.public_key(c_sk), secagg.public_key(s_sk))


def _share(config: Any, ctx: ClientContext, st: dict[str, Any], request: ShareKeys) -> SharedKeys:
    _expect(st, "advertised", request)
    me = ctx.client_id
    keys = dict(request.keys)
    mine = (secagg.public_key(st["c_sk"]), secagg.public_key(st["s_sk"]))
    if keys.get(me) != mine:
        raise ValueError("secure aggregation: the share set does not hold this client's own public keys")
    if not (isinstance(request.weight, float) and 0.0 < request.weight <= 1.0):
        raise ValueError(f"secure aggregation: weight must be in (0, 1]; got {request.weight!r}")
    members = tuple(sorted({int(c) for c in request.members}))
    if me not in members or len(members) < int(config.secure_min_group):
        raise ValueError(f"secure aggregation: a group of {len(members)} member(s) (this client "
                         f"{'in' if me in members else 'not in'} it) cannot hide its members "
                         f"(secure_min_group={config.secure_min_group})")
    graph = secagg.neighbour_graph(members, int(config.secure_neighbours), tuple(int(x) for x in request.graph_seed))
    if set(keys) != {*graph[me], me}:
        raise ValueError("secure aggregation: the share set is not this client's neighbours in the group's graph")
    for v, pair in keys.items():
        if len(pair) != 2 or any(not isinstance(k, bytes) or len(k) != secagg.KEY_BYTES for k in pair):
            raise ValueError(f"secure aggregation: client {v}'s public keys are not two {secagg.KEY_BYTES}-byte keys")
    n = len(keys)
    t = secagg.threshold_for(n, float(config.secure_threshold))
    order = sorted(keys)
    seed = st["seed"]   # the self-mask seed b, drawn at advertise
    b_shares = secagg.share_secret(seed, t, n)
    s_shares = secagg.share_secret(st["s_seed"], t, n)
    sealed, own, digests = {}, None, {}
    for i, v in enumerate(order):
        aad = secagg.associated(request.round, request.group, me, v)
        digests[v] = (secagg.share_digest(aad, b"b", b_shares[i]), secagg.share_digest(aad, b"s", s_shares[i]))
        if v == me:
            own = (b_shares[i], s_shares[i])
            continue
        sealed[v] = secagg.seal(secagg.share_key(st["c_sk"], keys[v][0]), b_shares[i] + s_shares[i], aad)
    complete = len(graph[me]) == len(members) - 1   # every member a neighbour: kept as the member list only
    st.update(stage="shared", group=int(request.group), weight=float(request.weight), keys=keys, threshold=t,
              members=members, graph=None if complete else graph, held={me: own})
    return SharedKeys(me, int(request.round), sealed, secagg.commitment(seed), digests)


def _mask(config: Any, ctx: ClientContext, st: dict[str, Any], request: MaskInput) -> MaskedInput:
    _expect(st, "shared", request)
    me, keys, rnd, group = ctx.client_id, st["keys"], int(st["round"]), int(st["group"])
    senders = dict(request.sealed)
    if any(v not in keys or v == me for v in senders):
        raise ValueError("secure aggregation: shares from a client outside this client's share set")
    if len(senders) + 1 < st["threshold"]:
        raise ValueError(f"secure aggregation: {len(senders) + 1} live share holder(s) < threshold {st['threshold']}")
    for v, blob in senders.items():
        plain = secagg.open_sealed(secagg.share_key(st["c_sk"], keys[v][0]), blob,
                                   secagg.associated(rnd, group, v, me))
        if len(plain) != 2 * secagg.SHARE_BYTES:
            raise ValueError(f"secure aggregation: client {v}'s share pair has {len(plain)} bytes")
        st["held"][v] = (plain[:secagg.SHARE_BYTES], plain[secagg.SHARE_BYTES:])
    q = quantiser(config)
    w = st["weight"]
    levels, clipped = q.encode(np.asarray(st.pop("params"), dtype=np.float64) * w)
    wl, _ = q.encode(np.array([w]))
    levels = np.concatenate([levels, wl, np.array([clipped], dtype=np.uint64)])
    pairs = {v: secagg.mask_seed(st["s_sk"], keys[v][1], rnd, group, (me, v)) for v in senders}
    vector = secagg.masked_input(levels, st["seed"], pairs, me)
    st.update(stage="masked", peers=tuple(sorted(senders)))
    return MaskedInput(me, rnd, vector)


def _unmask(config: Any, ctx: ClientContext, st: dict[str, Any], request: Unmask) -> Unmasked:
    _expect(st, "masked", request)
    st["stage"] = "unmasked"   # once per round: a second (replayed) request is refused
    me = ctx.client_id
    survivors, dropped = {int(c) for c in request.survivors}, {int(c) for c in request.dropped}
    if survivors & dropped:
        raise ValueError("secure aggregation: a client listed both as survivor and as dropped")
    if me not in survivors:
        raise ValueError("secure aggregation: this client is not among the survivors it is asked to unmask")
    need = max(int(st["threshold"]), int(config.secure_min_group))
    if len(survivors) < need:
        raise ValueError(f"secure aggregation: refusing to reveal a sum of {len(survivors)} input(s) "
                         f"(needs at least {need})")
    graph = st["graph"]   # None: the complete graph, connected on any survivors
    if not (survivors | dropped) <= set(st["members"]) or (graph is not None
                                                           and not secagg.connected(graph, sorted(survivors))):
        raise ValueError("secure aggregation: refusing to unmask survivors that are not one connected piece of "
                         "the group's graph (the server would learn each piece's sum)")
    peers, near = set(st["peers"]), set(st["keys"]) - {me}
    if not (dropped & near) <= peers:
        raise ValueError("secure aggregation: a neighbour listed as dropped never sent this client its shares")
    held = st.pop("held")
    seeds = {v: held[v][0] for v in sorted(survivors) if v in held}
    keys = {v: held[v][1] for v in sorted(dropped) if v in held}
    for k in ("seed", "s_sk", "s_seed", "c_sk", "graph", "members"):
        st.pop(k, None)
    return Unmasked(me, int(st["round"]), seeds, keys)
