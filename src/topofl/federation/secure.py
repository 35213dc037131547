"""A round under secure aggregation (SecAgg+, :mod:`topofl.privacy.secagg`): the server learns each
group's weighted sum of models and nothing about one client's model beyond what that sum reveals.

It replaces the fit step of the one round loop (:func:`topofl.federation.runner.run_rounds`) for a
method whose server needs only weighted sums of the models (DESIGN: "server rules compose"): the
method says which clients are summed together and with which weights (``secure_plan``, from what
the clients sent besides their models: sizes, descriptors), and folds the sums in (``secure_aggregate``).
FedAvg/FedProx/Ditto/Per-FedAvg sum every participant; pTopoFL one sum per cluster.

Four exchanges, each through the pool (:meth:`ClientPool.secure`, the same in every runtime):

1. **advertise** — the method's fit message; the client trains, keeps its model, and replies with
   everything else of its update (size, descriptor, metrics) and two fresh public keys.
2. **share** — its group, its weight and its neighbours' public keys; the client replies with its
   self-mask seed and masking key split into Shamir shares, encrypted for each neighbour, and a
   commitment to the seed.
3. **mask** — the shares addressed to it; the client replies with its masked, weighted, quantised model.
4. **unmask** — who survived and who dropped; the client reveals, per neighbour, the share that
   removes the masks of exactly the survivors' sum.

A group smaller than ``secure_min_group`` is never summed (the method's small-group policy merges
or excludes it, :meth:`~topofl.algorithms.ptopofl.algorithm.PTopoFL.secure_plan`); a group whose
survivors fall below its threshold or ``secure_min_group`` is abandoned before anything is revealed.
Every client reply is checked where it enters (its type, round, sender, sizes); a client that
fails or sends a bad reply leaves the round there, and the protocol recovers its masks.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.federation.pool import ClientEvaluation, ClientPool, Failure, InProcessPool
from topofl.federation.secure_client import (
    REPLY_TYPES,
    STAGES,
    Advertise,
    Advertised,
    GroupSum,
    MaskedInput,
    MaskInput,
    SecurePlan,
    SharedKeys,
    ShareKeys,
    Unmask,
    Unmasked,
    client_step,
    quantiser,
    secure_config,
)
from topofl.federation.validation import ArraySpec, ClientInfo, ReplySchema, screen_updates
from topofl.privacy import secagg

if TYPE_CHECKING:
    from topofl.federation.algorithm import Algorithm
    from topofl.federation.history import History

__all__ = [
    "STAGES", "Advertise", "Advertised", "GroupSum", "MaskInput", "MaskedInput", "SecurePlan", "ShareKeys",
    "SharedKeys", "Unmask", "Unmasked", "Recorded", "Vanishing", "client_step", "secure_config", "secure_fit",
]

log = logging.getLogger(__name__)

# ---- the server's side -----------------------------------------------------------------------
class _MetaView:
    """The algorithm as the screening sees a stage-1 reply: its schema with an empty model."""

    def __init__(self, algorithm: Algorithm) -> None:
        self.algorithm, self.config = algorithm, algorithm.config

    def reply_schema(self, client_id: int, message: ServerMessage, info: ClientInfo) -> ReplySchema:
        schema = self.algorithm.reply_schema(client_id, message, info)
        return dataclasses.replace(schema, params=ArraySpec((0,)), centers=None, scale=None)

    def reply_problem(self, update: ClientUpdate, message: ServerMessage, info: ClientInfo) -> str | None:
        return self.algorithm.reply_problem(update, message, info)

    def screens_independently(self) -> bool:
        return True   # there is no model to measure: the norm bound has nothing to compare


@dataclass
class _Traffic:
    """Bytes and numbers each client sent and received over the round's stages."""

    up: dict[int, list[int]] = field(default_factory=dict)
    down: dict[int, list[int]] = field(default_factory=dict)

    def add(self, side: dict[int, list[int]], cid: int, n_bytes: int, n_floats: int = 0) -> None:
        cur = side.setdefault(cid, [0, 0])
        cur[0] += n_floats
        cur[1] += n_bytes

    def as_tuples(self, side: dict[int, list[int]]) -> dict[int, tuple[int, int]]:
        return {cid: (v[0], v[1]) for cid, v in side.items()}


class _Exchange:
    """One round's stages through the pool: sends, counts the traffic, and keeps from each stage's
    replies those of the right type and round from a client that was asked, once; the rest become failures.
    """

    def __init__(self, pool: ClientPool, rnd: int, failures: list[Failure]) -> None:
        self.pool, self.rnd, self.failures, self.traffic = pool, rnd, failures, _Traffic()

    def __call__(self, stage: str, requests: dict[int, Any]) -> dict[int, Any]:
        if not requests:
            return {}
        for to, req in requests.items():
            n_floats = req.message.n_floats() if isinstance(req, Advertise) else 0
            self.traffic.add(self.traffic.down, to, req.n_bytes(), n_floats)
        replies, failures = self.pool.secure(self.rnd, stage, requests)
        self.failures.extend(failures)
        want = REPLY_TYPES[stage]
        got: dict[int, Any] = {}
        twice: set[int] = set()   # clients that replied more than once: every copy is refused
        r: Any
        for r in replies:
            cid: Any = getattr(r, "client_id", None)
            rnd = getattr(r, "round", None)
            reason: str
            if isinstance(cid, bool) or not isinstance(cid, (int, np.integer)):
                reason, cid = f"a {stage} reply without a client id ({type(r).__name__})", None
            elif int(cid) not in requests:
                reason, cid = f"a {stage} reply from client {cid}, which was not asked", None
            elif type(r) is not want:
                reason = f"a {stage} reply must be {want.__name__}; got {type(r).__name__}"
            elif type(rnd) is not int or rnd != self.rnd:
                reason = f"a {stage} reply for round {str(rnd)[:40]} (replayed or misrouted) in round {self.rnd}"
            elif int(cid) in got or int(cid) in twice:
                reason = f"a second {stage} reply from the same client"
                got.pop(int(cid), None)
                twice.add(int(cid))
            else:
                got[int(cid)] = r
                self.traffic.add(self.traffic.up, int(cid), _reply_bytes(r))
                continue
            self.refuse(None if cid is None else int(cid), stage, reason)
        return got

    def refuse(self, cid: int | None, stage: str, reason: str) -> None:
        """Record client ``cid``'s reply at ``stage`` as refused: it leaves the round there."""
        self.failures.append(Failure(self.rnd, cid, "fit", f"secure aggregation ({stage}): {reason}"))


def _reply_bytes(reply: Any) -> int:
    try:
        return int(reply.n_bytes())
    except Exception:  # noqa: BLE001 - a malformed reply is refused by its stage's checks, never a crash
        return 0


def secure_fit(pool: ClientPool, algorithm: Algorithm, rnd: int, messages: dict[int, ServerMessage],
               history: History, min_replies: int, seed: int, failures: list[Failure]
               ) -> tuple[dict[int, tuple[int, int]], dict[int, tuple[int, int]]]:
    """The fit step of round ``rnd`` under secure aggregation: the four stages, the method's plan and
    its aggregate; the round's server log goes to ``history`` (with ``secure``: per group its members,
    survivors, dropped clients, clipped coordinates) and refused or failed clients to ``failures``.
    Returns each client's (numbers, bytes) sent and received over the round.
    """
    config = secure_config(algorithm)
    assert config is not None
    send = _Exchange(pool, rnd, failures)
    advertised = send("advertise", {cid: Advertise(rnd, m) for cid, m in messages.items()})
    for sender in sorted(advertised):   # the update inside must be the sender's own (it could name another client)
        if not isinstance(advertised[sender].update, ClientUpdate) or advertised[sender].update.client_id != sender:
            send.refuse(sender, "advertise", "the update inside names another client")
            del advertised[sender]
    valid, rejected = screen_updates(_MetaView(algorithm), [r.update for r in advertised.values()], messages,
                                     pool.infos)
    for cid, reason in rejected:
        send.refuse(cid, "advertise", f"invalid payload: {reason}")
    keys = _public_keys(send, {u.client_id: advertised[u.client_id] for u in valid})
    valid = [u for u in valid if u.client_id in keys]
    for u in valid:
        if u.metrics:
            history.client_metrics[u.client_id] = dict(u.metrics)
    entry: dict[str, Any]
    if len(valid) < min_replies:
        entry = {"skipped": f"{len(valid)} valid update(s) < min_replies={min_replies}"}
        log.warning("round %d: %s; server state unchanged", rnd, entry["skipped"])
    else:
        plan = algorithm.secure_plan(rnd, valid)
        groups = _Groups(send, plan, keys, config, rnd, seed, algorithm.update_size() + secagg.TRAILER)
        groups.share()
        groups.mask()
        sums = groups.unmask()
        entry = {**algorithm.secure_aggregate(rnd, plan, sums), "secure": groups.report}
    history.server_logs.append({"round": rnd, **entry})
    return send.traffic.as_tuples(send.traffic.up), send.traffic.as_tuples(send.traffic.down)


def _public_keys(send: _Exchange, replies: Mapping[int, Advertised]) -> dict[int, tuple[bytes, bytes]]:
    """Each sound reply's two public keys: 32-byte X25519 keys, distinct, not low-order points (with one,
    every neighbour's agreement would fail and it would leave), and no key advertised by two clients
    this round (both are refused: a copied key would let one client open the other's shares).
    """
    keys: dict[int, tuple[bytes, bytes]] = {}
    for cid, r in replies.items():
        if secagg.valid_public_key(r.c_pk) and secagg.valid_public_key(r.s_pk) and r.c_pk != r.s_pk:
            keys[cid] = (r.c_pk, r.s_pk)
        else:
            send.refuse(cid, "advertise", f"public keys must be two distinct {secagg.KEY_BYTES}-byte X25519 keys "
                        "that agree a non-zero secret")
    count: dict[bytes, int] = {}
    for pair in keys.values():
        for k in pair:
            count[k] = count.get(k, 0) + 1
    for cid in sorted(keys):
        if any(count[k] > 1 for k in keys[cid]):
            send.refuse(cid, "advertise", "a public key another client advertised too this round")
            del keys[cid]
    return keys


#: a group size above which the complete graph (``secure_neighbours=0``) is worth a warning
COMPLETE_GRAPH_WARN = 200
_warned_complete: list[bool] = []   # warned once per process


class _Groups:
    """Stages 2-4 of one round for every group of a plan at once (one exchange per stage), and each
    group's sum; ``report`` is the round log's ``secure`` entry (per group).
    """

    def __init__(self, send: _Exchange, plan: SecurePlan, keys: dict[int, tuple[bytes, bytes]], config: Any,
                 rnd: int, seed: int, n: int) -> None:
        self.send, self.keys, self.config, self.rnd, self.n = send, keys, config, rnd, n
        self.min_group = int(config.secure_min_group)
        self.report: dict[str, Any] = {}
        self.graphs: dict[int, dict[int, tuple[int, ...]]] = {}
        self.seeds: dict[int, tuple[int, ...]] = {}   # the public seed of each group's neighbour graph
        self.weights: dict[int, dict[int, float]] = {}
        for g, members in sorted(plan.groups.items()):
            w = {int(c): float(v) for c, v in members.items() if int(c) in keys}
            entry = self.report.setdefault(str(g), {"members": sorted(w)})
            if len(w) < self.min_group:
                entry["abandoned"] = f"{len(w)} member(s) < secure_min_group={self.min_group}: not summed"
                continue
            top = max(w.values())
            self.weights[g] = {c: v / top for c, v in w.items()}
            if int(config.secure_neighbours) == 0 and len(w) > COMPLETE_GRAPH_WARN and not _warned_complete:
                _warned_complete.append(True)
                log.warning("secure aggregation: a group of %d clients with secure_neighbours=0 (every member a "
                            "neighbour) costs each client %d Shamir shares per secret and the server O(m²) work per "
                            "round; set secure_neighbours (SecAgg+'s sparse graph, e.g. 32) for groups this large",
                            len(w), len(w))
            self.seeds[g] = (seed, rnd, int(g), 0x5EC)
            self.graphs[g] = secagg.neighbour_graph(sorted(w), int(config.secure_neighbours), self.seeds[g])
        self.u2: dict[int, set[int]] = {}
        self.u3: dict[int, set[int]] = {}
        self.shared: dict[int, SharedKeys] = {}
        self.masked: dict[int, MaskedInput] = {}

    def threshold(self, g: int, c: int) -> int:
        """The threshold of client ``c``'s shares: its share set is its neighbours and itself."""
        return secagg.threshold_for(len(self.graphs[g][c]) + 1, float(self.config.secure_threshold))

    def share(self) -> None:
        """Stage 2: each member's group, weight and share set's keys; U2 = who answered soundly."""
        self.shared = self.send("share", {
            c: ShareKeys(self.rnd, int(g), self.weights[g][c], {v: self.keys[v] for v in (*near, c)},
                         tuple(sorted(graph)), self.seeds[g])
            for g, graph in self.graphs.items() for c, near in graph.items()})
        for g, graph in self.graphs.items():
            self.u2[g] = set()
            for c in graph:
                r = self.shared.get(c)
                if r is None:
                    continue
                if _sound(partial(_shares_sound, r, graph[c], c)):
                    self.u2[g].add(c)
                else:
                    self.send.refuse(c, "share", f"must carry one {secagg.SEALED_BYTES}-byte sealed share pair per "
                                     "neighbour, a 32-byte commitment and two 32-byte digests per share")

    def mask(self) -> None:
        """Stage 3: the shares addressed to each member of U2; U3 = who sent a sound masked input."""
        self.masked = self.send("mask", {
            c: MaskInput(self.rnd, {v: self.shared[v].sealed[c] for v in graph[c] if v in self.u2[g]})
            for g, graph in self.graphs.items() for c in sorted(self.u2[g])})
        n = self.n
        for g, graph in self.graphs.items():
            self.u3[g] = set()
            for c in sorted(self.u2[g]):
                r = self.masked.get(c)
                if r is None:
                    continue
                v = r.vector
                if (type(v) is np.ndarray and v.dtype == np.uint64 and v.dtype.byteorder in "=|" and v.shape == (n,)
                        and n > secagg.TRAILER):
                    self.u3[g].add(c)
                else:
                    self.send.refuse(c, "mask", "the masked input must be a uint64 vector of the round's length; got "
                                     f"{getattr(v, 'dtype', type(v).__name__)} {getattr(v, 'shape', '')}")
            entry = self.report[str(g)]
            entry.update(survivors=sorted(self.u3[g]), dropped=sorted(self.u2[g] - self.u3[g]),
                         left_before_masking=sorted(set(graph) - self.u2[g]))
            t = max(self.threshold(g, c) for c in graph)
            if len(self.u3[g]) < max(self.min_group, t):
                entry["abandoned"] = (f"{len(self.u3[g])} survivor(s) < max(secure_min_group={self.min_group}, "
                                      f"threshold={t}): nothing revealed")
            elif not secagg.connected(graph, sorted(self.u3[g])):
                entry["abandoned"] = ("the survivors are split into pieces of the neighbour graph (each piece's sum "
                                      "would be revealed): nothing revealed")
            else:
                short = self.unrecoverable(g)
                if short is not None:
                    entry["abandoned"] = f"{short}: nothing revealed"

    def unrecoverable(self, g: int) -> str | None:
        """Why some secret of group ``g`` could not be rebuilt from the survivors' shares — a survivor's
        self-mask seed or a dropped client's masking key held by fewer than its threshold of survivors —
        so that stage 4 is not asked for at all; ``None`` when every one can be.
        """
        graph, u3 = self.graphs[g], self.u3[g]
        for v in sorted(u3):
            holders = len(({v} | set(graph[v])) & u3)
            if holders < self.threshold(g, v):
                return f"client {v}'s self-mask seed has {holders} surviving holder(s) < its threshold"
        for v in sorted(self.u2[g] - u3):
            holders = len(set(graph[v]) & u3)
            if holders < self.threshold(g, v):
                return f"dropped client {v}'s masking key has {holders} surviving holder(s) < its threshold"
        return None

    def unmask(self) -> dict[int, GroupSum]:
        """Stage 4 for each group not abandoned, and its sum (decoded, with its weights)."""
        live = [g for g in self.graphs if "abandoned" not in self.report[str(g)]]
        unmasked = self.send("unmask", {
            c: Unmask(self.rnd, tuple(sorted(self.u3[g])), tuple(sorted(self.u2[g] - self.u3[g])))
            for g in live for c in sorted(self.u3[g])})
        q = quantiser(self.config)
        sums: dict[int, GroupSum] = {}
        for g in live:
            entry = self.report[str(g)]
            try:
                total = self.unmasked_total(g, unmasked)
            except ValueError as exc:
                entry["abandoned"] = f"unmasking failed: {exc}"
                log.warning("round %d: secure group %s: %s", self.rnd, g, entry["abandoned"])
                continue
            members = tuple(sorted(self.u3[g]))
            d = total.size - secagg.TRAILER
            reported = float(q.decode(total[d:d + 1], len(members))[0])
            weight = float(math.fsum(self.weights[g][c] for c in members))
            sums[g] = GroupSum(q.decode(total[:d], len(members)), weight, members, reported, int(total[d + 1]))
            entry.update(clipped=sums[g].clipped, weight=weight, reported_weight=reported)
            if abs(reported - weight) > len(members) * q.step + 1e-12 or sums[g].clipped > len(members) * d:
                entry["abandoned"] = (f"inconsistent sum (the clients' weights sum to {reported:.9g}, the server's to "
                                      f"{weight:.9g}; {sums[g].clipped} coordinate(s) clipped): not applied")
                log.warning("round %d: secure group %s: %s", self.rnd, g, entry["abandoned"])
                del sums[g]
                continue
            if sums[g].clipped:
                log.warning("round %d: secure group %s: %d coordinate(s) clipped to secure_clip=%g", self.rnd, g,
                            sums[g].clipped, q.clip)
        return sums

    def dealt(self, g: int, owner: int, holder: int, kind: int, share: bytes) -> bool:
        """Whether ``share`` is the one ``owner`` dealt ``holder`` (its self-mask share for ``kind`` 0, its key
        share for 1): the index of the holder's place in the owner's sorted share set, and the digest the
        owner sent at the share stage. A wrong or relabelled share is dropped, so it can neither make a
        rebuild fail nor displace an honest share.
        """
        order = sorted((*self.graphs[g][owner], owner))
        if len(share) != secagg.SHARE_BYTES or share[:2] != struct.pack(">H", order.index(holder) + 1):
            return False
        aad = secagg.associated(self.rnd, g, owner, holder)
        return secagg.share_digest(aad, b"bs"[kind:kind + 1], share) == self.shared[owner].digests[holder][kind]

    def unmasked_total(self, g: int, unmasked: Mapping[int, Unmasked]) -> np.ndarray:
        """Σ_{u ∈ U3} y_u with every mask removed: survivors' self masks from their rebuilt seeds (checked
        against their commitments), dropped clients' pairwise masks from their rebuilt masking keys
        (checked against their public keys); ``ValueError`` when a secret cannot be rebuilt.
        """
        graph, u2, u3 = self.graphs[g], self.u2[g], self.u3[g]
        n = self.masked[min(u3)].vector.size
        total = np.zeros(n, dtype=np.uint64)
        for c in sorted(u3):
            total += self.masked[c].vector
        seeds: dict[int, list[bytes]] = {}
        dead: dict[int, list[bytes]] = {}
        for c, r in unmasked.items():
            if c not in u3:
                continue
            try:   # a reply is read only as plain dicts of int → bytes; anything else delivers no share
                parsed = [(v, share, kind) for kind, m in (("seed", r.seeds), ("key", r.keys)) if type(m) is dict
                          for v, share in m.items() if type(v) is int and type(share) is bytes]
            except Exception:  # noqa: BLE001 - a malformed reply is ignored, never a crash
                parsed = []
            for v, share, kind in parsed:
                if kind == "seed" and v in u3 and (c == v or v in graph[c]) and self.dealt(g, v, c, 0, share):
                    seeds.setdefault(v, []).append(share)
                elif kind == "key" and v in u2 - u3 and v in graph[c] and self.dealt(g, v, c, 1, share):
                    dead.setdefault(v, []).append(share)
        for v in sorted(u3):
            seed = _rebuild(seeds.get(v, []), self.threshold(g, v), f"client {v}'s self-mask seed")
            if secagg.commitment(seed) != self.shared[v].commitment:
                raise ValueError(f"client {v}'s rebuilt self-mask seed does not match its commitment")
            total -= secagg.self_mask(seed, n)
        for v in sorted(u2 - u3):
            s_sk = secagg.masking_key(_rebuild(dead.get(v, []), self.threshold(g, v),
                                               f"dropped client {v}'s masking key"))
            if secagg.public_key(s_sk) != self.keys[v][1]:
                raise ValueError(f"dropped client {v}'s rebuilt masking key does not match its public key")
            for u in graph[v]:
                if u in u3:   # u added sign(u, v)·PRG(s_uv): take it out
                    m = secagg.prg(secagg.mask_seed(s_sk, self.keys[u][1], self.rnd, g, (u, v)), n)
                    if secagg.pairwise_sign(u, v) > 0:
                        total -= m
                    else:
                        total += m
        return total


def _rebuild(shares: list[bytes], t: int, what: str) -> bytes:
    """The secret the first ``t`` of ``shares`` (each checked by :meth:`_Groups.dealt`) rebuild;
    ``ValueError`` when fewer than ``t`` arrived.
    """
    if len(shares) < t:
        raise ValueError(f"{len(shares)} share(s) of {what} < threshold {t}")
    return secagg.combine_secret(shares[:t])


def _shares_sound(reply: SharedKeys, near: tuple[int, ...], me: int) -> bool:
    """Whether a share reply holds one sealed pair of the right size per neighbour, a 32-byte commitment and
    two 32-byte share digests per member of its share set (its neighbours and itself).
    """
    return (isinstance(reply.commitment, bytes) and len(reply.commitment) == 32 and type(reply.sealed) is dict
            and set(reply.sealed) == set(near)
            and all(type(b) is bytes and len(b) == secagg.SEALED_BYTES for b in reply.sealed.values())
            and type(reply.digests) is dict and set(reply.digests) == {*near, me}
            and all(type(d) is tuple and len(d) == 2 and all(type(x) is bytes and len(x) == 32 for x in d)
                    for d in reply.digests.values()))


def _sound(test: Callable[[], bool]) -> bool:
    """``test()``, or ``False`` when reading a malformed reply raises."""
    try:
        return bool(test())
    except Exception:  # noqa: BLE001 - a malformed reply is refused, never a crash
        return False


class Vanishing(ClientPool):
    """``pool`` whose clients vanish mid-round: ``schedule[r][k] = stage`` makes client ``k`` stop
    answering in round ``r`` from ``stage`` on (``"mask"``: after sharing its keys, before its masked
    input; ``"unmask"``: after sending its masked input). It comes back the next round. For dropout
    experiments and tests of the protocol's recovery; everything else is ``pool``'s.
    """

    def __init__(self, pool: ClientPool, schedule: Mapping[int, Mapping[int, str]]) -> None:
        for rnd, who in schedule.items():
            for cid, stage in who.items():
                if stage not in STAGES:
                    raise ValueError(f"vanishing schedule: round {rnd}, client {cid}: stage must be one of "
                                     f"{', '.join(STAGES)}; got {stage!r}")
        self.pool, self.schedule = pool, {int(r): dict(w) for r, w in schedule.items()}
        self.client_ids, self.infos = pool.client_ids, pool.infos

    def fit(self, rnd: int, messages: dict[int, ServerMessage]) -> tuple[list[ClientUpdate], list[Failure]]:
        return self.pool.fit(rnd, messages)

    def evaluate(self, rnd: int, messages: dict[int, ServerMessage]) -> tuple[list[ClientEvaluation], list[Failure]]:
        return self.pool.evaluate(rnd, messages)

    def final_models(self, rnd: int, messages: dict[int, ServerMessage]) -> Any:
        return self.pool.final_models(rnd, messages)

    def secure(self, rnd: int, stage: str, requests: dict[int, Any]) -> tuple[list[Any], list[Failure]]:
        gone = {cid for cid, s in self.schedule.get(rnd, {}).items() if STAGES.index(s) <= STAGES.index(stage)}
        replies, failures = self.pool.secure(rnd, stage, {c: r for c, r in requests.items() if c not in gone})
        failures += [Failure(rnd, cid, "fit", f"secure aggregation ({stage}): vanished") for cid in sorted(gone)
                     if cid in requests]
        return replies, failures

    def close(self) -> None:
        self.pool.close()


class Recorded(ClientPool):
    """``pool`` keeping every reply the server received (fit replies, each secure stage's replies): what
    an honest-but-curious server could analyse, for the attack experiments. ``models[(round, k)]`` is
    the model client ``k`` trained (read from its reply in the clear, or from its own state under secure
    aggregation), to score the attacks against.
    """

    def __init__(self, pool: InProcessPool) -> None:
        self.pool, self.client_ids, self.infos = pool, pool.client_ids, pool.infos
        self.received: list[tuple[int, str, Any]] = []
        self.models: dict[tuple[int, int], np.ndarray] = {}

    def fit(self, rnd: int, messages: dict[int, ServerMessage]) -> tuple[list[ClientUpdate], list[Failure]]:
        updates, failures = self.pool.fit(rnd, messages)
        self.received += [(rnd, "fit", u) for u in updates]
        self.models.update({(rnd, u.client_id): np.array(u.params, dtype=np.float64) for u in updates})
        return updates, failures

    def secure(self, rnd: int, stage: str, requests: dict[int, Any]) -> tuple[list[Any], list[Failure]]:
        replies, failures = self.pool.secure(rnd, stage, requests)
        self.received += [(rnd, stage, r) for r in replies]
        if stage == "advertise":
            for r in replies:
                st = self.pool.states[r.client_id].get("secagg", {})
                if "params" in st:
                    self.models[(rnd, r.client_id)] = np.array(st["params"], dtype=np.float64)
        return replies, failures

    def evaluate(self, rnd: int, messages: dict[int, ServerMessage]) -> tuple[list[ClientEvaluation], list[Failure]]:
        return self.pool.evaluate(rnd, messages)

    def final_models(self, rnd: int, messages: dict[int, ServerMessage]) -> Any:
        return self.pool.final_models(rnd, messages)
