"""topofl messages ↔ Flower records (DESIGN: "the Flower adapter maps these onto Flower's records").

A server message travels as ``RecordDict({"params": ArrayRecord, "extras": ArrayRecord,
"config": ConfigRecord})``; a client update as ``RecordDict({"params", "extras", "descriptor"
(ArrayRecords), "metrics": MetricRecord (with "num-examples"), "meta": ConfigRecord})``. Arrays keep
their dtype (float64 by default), so a Flower run computes on the same numbers as an in-process run.

Decoding never trusts the sender: a missing or malformed record raises :class:`PayloadError`
naming the record, which the server turns into a logged, dropped reply.
"""
from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from topofl.atomic import write_bytes_atomic
from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.federation.pool import ClientEvaluation

STATE_KEY = "topofl"


class PayloadError(ValueError):
    """A reply whose records cannot be decoded (named in the message)."""


def arrays_record(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    """An ArrayRecord of named numpy arrays (order kept)."""
    return ArrayRecord({str(k): Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def record_arrays(content: RecordDict, key: str, required: bool = True) -> dict[str, np.ndarray]:
    """The named arrays of ArrayRecord ``key`` of a RecordDict."""
    if key not in content:
        if required:
            raise PayloadError(f"record {key!r} is missing")
        return {}
    rec = content[key]
    if not isinstance(rec, ArrayRecord):
        raise PayloadError(f"record {key!r} must be an ArrayRecord; got {type(rec).__name__}")
    try:
        return {k: rec[k].numpy() for k in rec}
    except Exception as exc:  # a corrupt Array: shape/dtype/data mismatch
        raise PayloadError(f"record {key!r} holds an array that cannot be decoded: {exc}") from None


def config_record(values: Mapping[str, Any]) -> ConfigRecord:
    """A ConfigRecord of scalars (numpy scalars converted to Python ones)."""
    return ConfigRecord({k: (v.item() if isinstance(v, np.generic) else v) for k, v in values.items()})


# ---- server → client -------------------------------------------------------------------------
def encode_server_message(message: ServerMessage, job: Mapping[str, Any], rnd: int) -> RecordDict:
    """The records of a server message: its params and extras, and a config of the job keys, its own config and the round."""
    return RecordDict({
        "params": arrays_record({"params": message.params}),
        "extras": arrays_record(message.extras),
        "config": config_record({**job, **message.config, "round": int(rnd)}),
    })


def decode_server_message(content: RecordDict) -> tuple[ServerMessage, dict[str, Any]]:
    """The server message and the full config (job keys, round and the message's own config)."""
    params = record_arrays(content, "params")["params"]
    extras = record_arrays(content, "extras", required=False)
    config = dict(content["config"]) if "config" in content else {}
    return ServerMessage(params, config=config, extras=extras), config


# ---- client → server -------------------------------------------------------------------------
def encode_update(update: ClientUpdate) -> RecordDict:
    """The records of a client update: params, extras, metrics with ``num-examples``, the client id and any descriptor."""
    rd = RecordDict({
        "params": arrays_record({"params": update.params}),
        "extras": arrays_record(update.extras),
        "metrics": MetricRecord({"num-examples": int(update.n_examples), **{k: float(v) for k, v in update.metrics.items()}}),
        "meta": config_record({"client": int(update.client_id)}),
    })
    if update.descriptor is not None:
        rd["descriptor"] = arrays_record({"phi": update.descriptor})
    return rd


def decode_update(content: RecordDict) -> ClientUpdate:
    """A :class:`ClientUpdate` from a reply; :class:`PayloadError` when a record is missing or malformed."""
    params = record_arrays(content, "params").get("params")
    if params is None:
        raise PayloadError("record 'params' has no array 'params'")
    if "metrics" not in content or "num-examples" not in content["metrics"]:
        raise PayloadError("record 'metrics' with 'num-examples' is missing")
    metrics: dict[str, Any] = dict(content["metrics"])  # the sender's values, unchecked: the server screens the update
    n = metrics.pop("num-examples")
    descriptor = record_arrays(content, "descriptor", required=False).get("phi")
    return ClientUpdate(
        client_id=_client_of(content), params=params, n_examples=n, descriptor=descriptor,
        metrics=metrics, extras=record_arrays(content, "extras", required=False),
    )


def encode_evaluation(ev: ClientEvaluation) -> RecordDict:
    """The records of a client evaluation: metrics, the client id and, when there are any, labels and scores."""
    rd = RecordDict({
        "metrics": MetricRecord({k: float(v) for k, v in ev.metrics.items()}),
        "meta": config_record({"client": int(ev.client_id)}),
    })
    if ev.scores is not None and ev.y_true is not None:
        rd["predictions"] = arrays_record({"y_true": ev.y_true, "scores": ev.scores})
    return rd


def decode_evaluation(content: RecordDict) -> ClientEvaluation:
    """A :class:`ClientEvaluation` from a reply; :class:`PayloadError` when its metrics or client id are missing."""
    if "metrics" not in content:
        raise PayloadError("record 'metrics' is missing")
    raw: dict[str, Any] = dict(content["metrics"])  # the sender's values: float() refuses a non-number
    metrics = {k: float(v) for k, v in raw.items()}
    pred = record_arrays(content, "predictions", required=False)
    return ClientEvaluation(_client_of(content), metrics, pred.get("y_true"), pred.get("scores"))


def _client_of(content: RecordDict) -> int:
    meta = content["meta"] if "meta" in content else None
    if not isinstance(meta, ConfigRecord) or "client" not in meta:
        raise PayloadError("record 'meta' with the client id is missing")
    cid = meta["client"]
    if isinstance(cid, bool) or not isinstance(cid, int):
        raise PayloadError(f"meta['client'] must be an integer; got {cid!r}")
    return cid


# ---- client state ----------------------------------------------------------------------------
def load_state(state: RecordDict, key: str) -> dict[str, Any] | Any:
    """A node's persistent topofl state from ``context.state`` (``{}`` when new or from another job).

    The state never leaves the node: ``context.state`` is kept by the node's own runtime.
    """
    rec = state[STATE_KEY] if STATE_KEY in state else None
    if rec is None or rec.get("job") != key:
        return {}
    return pickle.loads(cast(bytes, rec["state"]))  # bytes, as save_state stores them


def save_state(state: RecordDict, key: str, value: Any) -> None:
    """Store a node's state in ``context.state`` (pickled; kept on the node across rounds)."""
    state[STATE_KEY] = ConfigRecord({"job": key, "state": pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)})


#: snapshots of a federated client's state a node keeps on disk (node config ``state-dir``)
SNAPSHOTS_KEPT = 3


def message_seq(rnd: int, stage: str) -> int:
    """The position of a server message in a run: round r's ``fit`` is 2r, its ``evaluate`` 2r + 1."""
    return 2 * int(rnd) + (stage == "evaluate")


def state_dir(node_config: Mapping[str, Any]) -> Path | None:
    """The node config's ``state-dir`` (where this node keeps its client state on disk), or ``None``."""
    value = node_config.get("state-dir")
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"node config state-dir must be a directory path; got {value!r}")
    return Path(value)


def _snapshots(directory: Path, key: str) -> dict[int, Path]:
    d = directory / key
    out = {}
    for p in d.glob("seq-*.pkl") if d.is_dir() else []:
        tail = p.stem[4:]
        if tail.isdigit():
            out[int(tail)] = p
    return out


def load_round_state(state: RecordDict, key: str, seq: int, directory: Path | None = None) -> tuple[dict[str, Any], bool]:
    """A federated client's state as it was *before* message ``seq`` (:func:`message_seq`), and
    whether the node had it.

    In ``context.state`` (Flower keeps it per run) the node holds the state after its last message.
    With a ``directory`` (node config ``state-dir``) it keeps, on disk, its state after each of its
    last :data:`SNAPSHOTS_KEPT` messages of the job's lineage (a run and its resumptions): a resumed
    run — a new Flower run, whose ``context.state`` starts empty — finds its clients' state, and a
    round it sends again starts from the state the first attempt started from, so the run goes on
    exactly as if it had never stopped.
    """
    if directory is not None:
        before = [s for s in _snapshots(directory, key) if s < seq]
        if not before:
            return {}, False
        return pickle.loads((directory / key / f"seq-{max(before)}.pkl").read_bytes()), True  # the node's own files
    rec = state[STATE_KEY] if STATE_KEY in state else None
    if rec is None or rec.get("job") != key or int(cast(int, rec.get("seq", seq))) >= seq:
        return {}, False
    return pickle.loads(cast(bytes, rec["state"])), True


def save_round_state(state: RecordDict, key: str, seq: int, value: Any, directory: Path | None = None) -> None:
    """Keep ``value`` as the state after message ``seq`` (see :func:`load_round_state`); on disk,
    snapshots of later messages (from an attempt that went further before the server restarted)
    are dropped and only the last :data:`SNAPSHOTS_KEPT` are kept.
    """
    blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    if directory is None:
        state[STATE_KEY] = ConfigRecord({"job": key, "seq": int(seq), "state": blob})
        return
    d = directory / key
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_bytes_atomic(d / f"seq-{int(seq)}.pkl", blob)
    snaps = _snapshots(directory, key)
    older = sorted(s for s in snaps if s < seq)
    for s in [s for s in snaps if s > seq] + older[:max(0, len(older) - (SNAPSHOTS_KEPT - 1))]:
        snaps[s].unlink(missing_ok=True)
