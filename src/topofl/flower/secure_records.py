"""Secure-aggregation messages (:mod:`topofl.federation.secure_client`) ↔ Flower records.

Every stage travels as a ``train`` message whose ``"secagg"`` ConfigRecord names the stage; the
request also carries the job's config (as a fit message does), so a node builds the same context
as for a fit. Keys, sealed shares and Shamir shares are ``bytes`` in ConfigRecords; a masked input
is one uint64 array. A reply is checked before it is decoded: its stage and round, each list's
type and length (at most the group's size), each byte string's length, the masked array's dtype,
shape and byte count from its metadata (:func:`~topofl.flower.records.array_problem`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from topofl.federation.secure_client import (
    Advertise,
    Advertised,
    MaskedInput,
    MaskInput,
    SharedKeys,
    ShareKeys,
    Unmask,
    Unmasked,
)
from topofl.federation.validation import ArraySpec, ReplySchema
from topofl.flower.records import (
    PayloadError,
    array_problem,
    config_record,
    decode_server_message,
    decode_update,
    encode_server_message,
    encode_update,
)
from topofl.privacy import secagg

SECAGG = "secagg"
#: largest group a message may describe (Shamir shares carry a 2-byte index)
_MAX_IDS = 65535


def is_secure(content: RecordDict) -> bool:
    """Whether a ``train`` message is a stage of secure aggregation."""
    return SECAGG in content


# ---- server → node -----------------------------------------------------------------------------
def encode_request(request: Any, job: Mapping[str, Any], rnd: int, encoded: dict[int, ArrayRecord]) -> RecordDict:
    """The records of one stage's request (the job config travels with each, as with a fit message)."""
    if isinstance(request, Advertise):
        rd = encode_server_message(request.message, job, rnd, encoded)
        rd[SECAGG] = ConfigRecord({"stage": "advertise"})
        return rd
    rd = RecordDict({"config": config_record({**job, "round": int(rnd)})})
    if isinstance(request, ShareKeys):
        ids = sorted(request.keys)
        rd[SECAGG] = ConfigRecord({"stage": "share", "group": int(request.group), "weight": float(request.weight),
                                   "ids": ids, "c_pk": [request.keys[c][0] for c in ids],
                                   "s_pk": [request.keys[c][1] for c in ids], "members": list(request.members),
                                   "graph_seed": [int(x) for x in request.graph_seed]})
    elif isinstance(request, MaskInput):
        ids = sorted(request.sealed)
        rd[SECAGG] = ConfigRecord({"stage": "mask", "ids": ids, "sealed": [request.sealed[c] for c in ids]})
    elif isinstance(request, Unmask):
        rd[SECAGG] = ConfigRecord({"stage": "unmask", "survivors": list(request.survivors),
                                   "dropped": list(request.dropped)})
    else:
        raise TypeError(f"not a secure-aggregation request: {type(request).__name__}")
    return rd


def decode_request(content: RecordDict) -> tuple[Any, dict[str, Any]]:
    """The request of a ``train`` message with a ``"secagg"`` record, and the job config (``ValueError``
    when malformed: the node then refuses it).
    """
    rec = _config(content, SECAGG)
    stage = rec.get("stage")
    if stage == "advertise":
        message, config = decode_server_message(content)
        return Advertise(int(config["round"]), message), config
    config = dict(_config(content, "config"))
    rnd = _int(config.get("round"), "config round")
    if stage == "share":
        ids = _ints(rec, "ids")
        c_pk, s_pk = _bytes(rec, "c_pk", len(ids)), _bytes(rec, "s_pk", len(ids))
        weight = rec.get("weight")
        if not isinstance(weight, float):
            raise PayloadError(f"secagg weight must be a float; got {weight!r}")
        return ShareKeys(rnd, _int(rec.get("group"), "secagg group"), weight,
                         {c: (a, b) for c, a, b in zip(ids, c_pk, s_pk, strict=True)},
                         tuple(_ints(rec, "members")), tuple(_ints(rec, "graph_seed", distinct=False))), config
    if stage == "mask":
        ids = _ints(rec, "ids")
        return MaskInput(rnd, dict(zip(ids, _bytes(rec, "sealed", len(ids)), strict=True))), config
    if stage == "unmask":
        return Unmask(rnd, tuple(_ints(rec, "survivors")), tuple(_ints(rec, "dropped"))), config
    raise PayloadError(f"secagg stage must be advertise, share, mask or unmask; got {stage!r}")


# ---- node → server -----------------------------------------------------------------------------
def encode_reply(reply: Any, layout: Any = None) -> RecordDict:
    """The records of one stage's reply."""
    if isinstance(reply, Advertised):
        rd = encode_update(reply.update, layout)
        rd[SECAGG] = ConfigRecord({"stage": "advertise", "round": reply.round, "c_pk": reply.c_pk,
                                   "s_pk": reply.s_pk})
        return rd
    rd = RecordDict({"meta": config_record({"client": int(reply.client_id)})})
    if isinstance(reply, SharedKeys):
        ids = sorted(reply.sealed)
        held = sorted(reply.digests)
        rd[SECAGG] = ConfigRecord({"stage": "share", "round": reply.round, "ids": ids,
                                   "sealed": [reply.sealed[c] for c in ids], "commitment": reply.commitment,
                                   "digest_ids": held, "digests_b": [reply.digests[c][0] for c in held],
                                   "digests_s": [reply.digests[c][1] for c in held]})
    elif isinstance(reply, MaskedInput):
        rd[SECAGG] = ConfigRecord({"stage": "mask", "round": reply.round})
        rd["masked"] = ArrayRecord({"y": Array(np.ascontiguousarray(reply.vector))})
    elif isinstance(reply, Unmasked):
        seed_ids, key_ids = sorted(reply.seeds), sorted(reply.keys)
        rd[SECAGG] = ConfigRecord({"stage": "unmask", "round": reply.round, "seed_ids": seed_ids,
                                   "seeds": [reply.seeds[c] for c in seed_ids], "key_ids": key_ids,
                                   "keys": [reply.keys[c] for c in key_ids]})
    else:
        raise TypeError(f"not a secure-aggregation reply: {type(reply).__name__}")
    return rd


def decode_reply(content: RecordDict, stage: str, schema: ReplySchema | None, n_masked: int) -> Any:
    """A stage's reply from a node, checked before it is decoded: its ``stage``; ``schema`` (the method's,
    for the advertised update: the model is refused, only an empty one passes); ``n_masked`` numbers
    in a masked input. :class:`~topofl.flower.records.PayloadError` otherwise.
    """
    rec = _config(content, SECAGG)
    if rec.get("stage") != stage:
        raise PayloadError(f"a {stage} reply must say so in its secagg record; got {rec.get('stage')!r}")
    rnd = _int(rec.get("round"), "secagg round")
    if stage == "advertise":
        meta = dataclasses.replace(schema, params=ArraySpec((0,)), centers=None) if schema is not None else None
        update = decode_update(content, meta)
        c_pk, s_pk = rec.get("c_pk"), rec.get("s_pk")
        if not all(isinstance(k, bytes) and len(k) == secagg.KEY_BYTES for k in (c_pk, s_pk)):
            raise PayloadError(f"secagg public keys must be two {secagg.KEY_BYTES}-byte strings")
        return Advertised(update.client_id, rnd, update, c_pk, s_pk)  # type: ignore[arg-type]
    cid = _client(content)
    if stage == "share":
        ids = _ints(rec, "ids")
        sealed = _bytes(rec, "sealed", len(ids), secagg.SEALED_BYTES)
        commitment = rec.get("commitment")
        if not isinstance(commitment, bytes) or len(commitment) != 32:
            raise PayloadError("secagg commitment must be 32 bytes")
        held = _ints(rec, "digest_ids")
        digests = dict(zip(held, zip(_bytes(rec, "digests_b", len(held), 32), _bytes(rec, "digests_s", len(held), 32),
                                     strict=True), strict=True))
        return SharedKeys(cid, rnd, dict(zip(ids, sealed, strict=True)), commitment, digests)
    if stage == "mask":
        arrays = content["masked"] if "masked" in content else None
        if not isinstance(arrays, ArrayRecord) or list(arrays.keys()) != ["y"]:
            raise PayloadError("record 'masked' must hold one array 'y'")
        problem = array_problem(arrays["y"], (n_masked,), 0, ("uint64",))
        if problem:
            raise PayloadError(f"record 'masked': array 'y' {problem} (refused before decoding)")
        return MaskedInput(cid, rnd, arrays["y"].numpy())
    if stage == "unmask":
        seed_ids, key_ids = _ints(rec, "seed_ids"), _ints(rec, "key_ids")
        return Unmasked(cid, rnd, dict(zip(seed_ids, _bytes(rec, "seeds", len(seed_ids), secagg.SHARE_BYTES),
                                           strict=True)),
                        dict(zip(key_ids, _bytes(rec, "keys", len(key_ids), secagg.SHARE_BYTES), strict=True)))
    raise PayloadError(f"unknown secure-aggregation stage {stage!r}")


# ---- checks ------------------------------------------------------------------------------------
def _config(content: RecordDict, key: str) -> ConfigRecord:
    rec = content[key] if key in content else None
    if not isinstance(rec, ConfigRecord):
        raise PayloadError(f"record {key!r} must be a ConfigRecord")
    return rec


def _client(content: RecordDict) -> int:
    meta = content["meta"] if "meta" in content else None
    if not isinstance(meta, ConfigRecord):
        raise PayloadError("record 'meta' with the client id is missing")
    return _int(meta.get("client"), "meta['client']")


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PayloadError(f"{what} must be an integer; got {str(value)[:40]!r}")
    return value


def _ints(rec: Mapping[str, Any], key: str, distinct: bool = True) -> list[int]:
    value = rec.get(key)
    if not isinstance(value, list) or len(value) > _MAX_IDS:
        raise PayloadError(f"secagg {key} must be a list of at most {_MAX_IDS} integers")
    ids = [_int(v, f"secagg {key}") for v in value]
    if distinct and len(set(ids)) != len(ids):
        raise PayloadError(f"secagg {key} lists a client twice")
    return ids


def _bytes(rec: Mapping[str, Any], key: str, n: int, size: int | None = None) -> list[bytes]:
    value = rec.get(key)
    if not isinstance(value, list) or len(value) != n:
        raise PayloadError(f"secagg {key} must be a list of {n} byte strings")
    for v in value:
        if not isinstance(v, bytes) or (size is not None and len(v) != size) or len(v) > 4096:
            raise PayloadError(f"secagg {key} must hold byte strings" + (f" of {size} bytes" if size else ""))
    return list(value)
