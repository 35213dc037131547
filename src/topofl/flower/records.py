"""topofl messages ↔ Flower records (DESIGN: "the Flower adapter maps these onto Flower's records").

Arrays keep their dtype, so a Flower run computes on the same numbers as an in-process run. Decoding
never trusts the sender: a malformed record raises :class:`PayloadError`, and an array's dtype, shape
and size are checked before it is decoded. See docs/internals.md#topofl.flower.records.
"""
from __future__ import annotations

import io
import math
import pickle
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from topofl.atomic import write_bytes_atomic
from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.federation.pool import ClientEvaluation
from topofl.federation.validation import ArraySpec, ReplySchema
from topofl.limits import MAX_REPLY_FREE_VALUES

STATE_KEY = "topofl"


class PayloadError(ValueError):
    """A reply whose records cannot be decoded (named in the message)."""


def arrays_record(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    """An ArrayRecord of named numpy arrays (order kept)."""
    return ArrayRecord({str(k): Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def record_arrays(content: RecordDict, key: str, required: bool = True, expect: Mapping[str, ArraySpec] | None = None,
                  free_values: int = MAX_REPLY_FREE_VALUES) -> dict[str, np.ndarray]:
    """The named arrays of ArrayRecord ``key`` of a RecordDict.

    With ``expect`` (array name → :class:`~topofl.federation.validation.ArraySpec`) an array of
    another name, or whose declared dtype, shape or byte count does not fit its spec
    (:func:`array_problem`), is a :class:`PayloadError` raised before any array is decoded.
    """
    if key not in content:
        if required:
            raise PayloadError(f"record {key!r} is missing")
        return {}
    rec = content[key]
    if not isinstance(rec, ArrayRecord):
        raise PayloadError(f"record {key!r} must be an ArrayRecord; got {type(rec).__name__}")
    if expect is not None:
        unexpected = sorted(str(k) for k in rec if k not in expect)
        if unexpected:
            raise PayloadError(f"record {key!r} holds unexpected array(s) {', '.join(repr(k) for k in unexpected[:5])} "
                               f"(expected: {', '.join(repr(k) for k in expect) or 'none'})")
        for name in rec:
            reason = array_problem(rec[name], expect[name].shape, free_values, expect[name].dtypes)
            if reason:
                raise PayloadError(f"record {key!r}: array {name!r} {reason} (refused before decoding)")
    try:
        return {k: rec[k].numpy() for k in rec}
    except Exception as exc:  # a corrupt Array: shape/dtype/data mismatch
        raise PayloadError(f"record {key!r} holds an array that cannot be decoded: {exc}") from None


def params_record(params: np.ndarray, layout: Sequence[Any] | None = None) -> ArrayRecord:
    """A parameter vector as an ArrayRecord: with a ``layout`` of several layers that covers it
    (``ParamSlot`` objects), one array per layer named as the module names it, each a *view* of
    ``params`` (nothing is copied before Flower serialises it) — the per-layer arrays any Flower
    app exchanges; otherwise one array ``"params"``.
    """
    if _layered(params, layout):
        assert layout is not None
        return ArrayRecord({str(slot.name): Array(params[slot.offset : slot.offset + slot.size].reshape(slot.shape))
                            for slot in layout})
    return arrays_record({"params": params})


def _layered(params: np.ndarray, layout: Sequence[Any] | None) -> bool:
    return (layout is not None and len(layout) > 1 and params.ndim == 1
            and params.size == sum(int(slot.size) for slot in layout))


def record_params(content: RecordDict, spec: ArraySpec | None = None,
                  layout: Sequence[Any] | None = None) -> np.ndarray:
    """The parameter vector of ArrayRecord ``"params"``: its one array ``"params"``, or — when its
    arrays are exactly the layers of ``layout`` (``spec.layout`` unless given) — the layers
    rebuilt into one contiguous vector. Every layer's dtype (one of ``spec.dtypes``, the same for
    all), shape and byte count are checked from its metadata first, then each is copied once from
    Flower's bytes into its slice of the vector (no intermediate array). :class:`PayloadError`
    otherwise.
    """
    layout = layout if layout is not None else (spec.layout if spec is not None else None)
    rec = content["params"] if "params" in content else None
    if (isinstance(rec, ArrayRecord) and layout is not None and len(layout) > 1
            and sorted(rec.keys()) == sorted(str(slot.name) for slot in layout)):
        return _layers(rec, layout, spec)
    params = record_arrays(content, "params", expect={"params": spec} if spec is not None else None).get("params")
    if params is None:
        raise PayloadError("record 'params' has no array 'params'")
    return params


def _layers(rec: ArrayRecord, layout: Sequence[Any], spec: ArraySpec | None) -> np.ndarray:
    total = sum(int(slot.size) for slot in layout)
    if spec is not None and _shape_problem((total,), spec.shape, 0) is not None:
        raise PayloadError(f"record 'params': its layers hold {total} values; expected shape {_shape_text(spec.shape)}")
    dtypes = spec.dtypes if spec is not None else ("float32", "float64")
    kind: np.dtype | None = None
    starts = []
    for slot in layout:
        array = rec[str(slot.name)]
        reason = _record_problem(array, dtypes) or _shape_problem(tuple(array.shape), slot.shape, 0)
        dtype = np.dtype(str(array.dtype)) if reason is None else None
        if reason is None and kind is not None and dtype != kind:
            reason = f"is {dtype} while the layers before it are {kind}"
        if reason is None:
            assert dtype is not None
            reason, start = _data_problem(array.data, tuple(slot.shape), int(slot.size), dtype)
            starts.append(start)
            kind = dtype
        if reason:
            raise PayloadError(f"record 'params': layer {slot.name!r} {reason} (refused before decoding)")
    assert kind is not None
    flat = np.empty(total, dtype=kind)
    for slot, start in zip(layout, starts, strict=True):
        flat[slot.offset : slot.offset + slot.size] = np.frombuffer(rec[str(slot.name)].data, dtype=kind,
                                                                     count=int(slot.size), offset=start)
    return flat


def _shape_text(shape: Sequence[int | None]) -> str:
    return "(" + ", ".join("n" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def array_problem(array: Any, shape: Sequence[int | None], free_values: int = MAX_REPLY_FREE_VALUES,
                  dtypes: Sequence[str] = ("float64",)) -> str | None:
    """Why a Flower ``Array`` cannot be an array of ``shape`` in one of ``dtypes``, from its metadata
    and the ``.npy`` header in its bytes alone (nothing is decoded or copied); ``None`` when it can.

    ``None`` entries of ``shape`` take any length, but the array may then hold at most
    ``max(free_values, product of the fixed entries)`` values. The header's dtype and shape must
    be the record's, and the bytes after the header exactly that many values, so the decoded
    array is exactly what was checked.
    """
    problem = _record_problem(array, dtypes)
    if problem is not None:
        return problem
    declared = tuple(array.shape)
    problem = _shape_problem(declared, shape, free_values)
    if problem is not None:
        return problem
    return _data_problem(array.data, declared, math.prod(declared), np.dtype(str(array.dtype)))[0]


def _record_problem(array: Any, dtypes: Sequence[str] = ("float64",)) -> str | None:
    """Why ``array`` is not a Flower ``Array`` whose record declares a numpy array of one of
    ``dtypes``; ``None`` when it is.
    """
    if not isinstance(array, Array):
        return f"must be an Array; got {type(array).__name__}"
    if array.stype != "numpy.ndarray":
        return f"must be a serialised numpy array; its record declares stype {str(array.stype)[:40]!r}"
    if array.dtype not in dtypes:
        return f"must be {' or '.join(dtypes)}; its record declares dtype {str(array.dtype)[:40]!r}"
    return None


def _shape_problem(declared: tuple[Any, ...], shape: Sequence[int | None], free_values: int) -> str | None:
    """Why the ``declared`` shape of an array does not fit ``shape`` (:func:`array_problem`); ``None`` when it does."""
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in declared):
        return f"declares an invalid shape {str(declared)[:80]}"
    if len(declared) != len(shape) or any(s is not None and s != d for s, d in zip(shape, declared, strict=False)):
        return f"must have shape {_shape_text(shape)}; its record declares {declared}"
    count = math.prod(declared)
    fixed = math.prod(s for s in shape if s is not None)
    if any(s is None for s in shape) and count > max(int(free_values), fixed):
        return f"declares {count} values; at most {max(int(free_values), fixed)} are accepted"
    return None


def _data_problem(data: Any, declared: tuple[int, ...], count: int, dtype: np.dtype) -> tuple[str | None, int]:
    """Why ``data`` is not the ``.npy`` bytes of ``count`` values of ``dtype`` (native byte order)
    in shape ``declared`` (``None`` when it is), and where its values start.
    """
    if not isinstance(data, bytes):
        return f"must carry bytes; got {type(data).__name__}", 0
    try:
        fh = io.BytesIO(data)  # shares the bytes: nothing is copied
        version = np.lib.format.read_magic(fh)
        reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        h_shape, fortran, h_dtype = reader(fh)
    except Exception as exc:  # noqa: BLE001 - any malformed header is the sender's
        return f"has no valid .npy header ({type(exc).__name__}: {str(exc)[:120]})", 0
    if tuple(h_shape) != declared or h_dtype != dtype or fortran:
        return (f"carries data of shape {tuple(h_shape)} and dtype {h_dtype} while its record declares "
                f"{declared} {dtype}"), 0
    if len(data) - fh.tell() != count * dtype.itemsize:
        return (f"carries {len(data) - fh.tell()} bytes of data; {declared} {dtype} values take "
                f"{count * dtype.itemsize}"), 0
    return None, fh.tell()


def config_record(values: Mapping[str, Any]) -> ConfigRecord:
    """A ConfigRecord of scalars (numpy scalars converted to Python ones)."""
    return ConfigRecord({k: (v.item() if isinstance(v, np.generic) else v) for k, v in values.items()})


# ---- server → client -------------------------------------------------------------------------
def encode_server_message(message: ServerMessage, job: Mapping[str, Any], rnd: int,
                          encoded: dict[int, ArrayRecord] | None = None) -> RecordDict:
    """The records of a server message: its params and extras, and a config of the job keys, its own config and
    the round. ``encoded`` (id of a params array → its record) lets the messages of one exchange
    that carry the same array (FedAvg's global model to every client) share one serialised record,
    as Flower's own strategies share one payload.
    """
    if encoded is None:
        params = params_record(message.params)
    else:
        if id(message.params) not in encoded:
            encoded[id(message.params)] = params_record(message.params)
        params = encoded[id(message.params)]
    return RecordDict({
        "params": params,
        "extras": arrays_record(message.extras),
        "config": config_record({**job, **message.config, "round": int(rnd)}),
    })


def decode_server_message(content: RecordDict) -> tuple[ServerMessage, dict[str, Any]]:
    """The server message and the full config (job keys, round and the message's own config)."""
    params = record_params(content)
    extras = record_arrays(content, "extras", required=False)
    config = dict(content["config"]) if "config" in content else {}
    return ServerMessage(params, config=config, extras=extras), config


# ---- client → server -------------------------------------------------------------------------
def encode_update(update: ClientUpdate, layout: Sequence[Any] | None = None) -> RecordDict:
    """The records of a client update: params (layer by layer with the model's ``layout``:
    :func:`params_record`), extras, metrics with ``num-examples``, the client id and any descriptor.
    """
    rd = RecordDict({
        "params": params_record(update.params, layout),
        "extras": arrays_record(update.extras),
        "metrics": MetricRecord({"num-examples": int(update.n_examples),
                                 **{k: float(v) for k, v in update.metrics.items()}}),
        "meta": config_record({"client": int(update.client_id)}),
    })
    if update.descriptor is not None:
        rd["descriptor"] = arrays_record({"phi": update.descriptor})
    return rd


def decode_update(content: RecordDict, schema: ReplySchema | None = None) -> ClientUpdate:
    """A :class:`ClientUpdate` from a reply; :class:`PayloadError` when a record is missing or malformed.

    With ``schema`` (what the algorithm accepts from this client, its sizes from the server's
    model) the params, extras and descriptor arrays are checked against it before any is decoded
    (:func:`record_arrays`); the full check of the values is the server's screening.
    """
    if schema is not None:
        extras_spec: dict[str, ArraySpec] | None = dict(schema.extras)
        descriptor_spec: dict[str, ArraySpec] | None = ({"phi": schema.descriptor} if schema.descriptor is not None
                                                        else {})
    else:
        extras_spec = descriptor_spec = None
    params = record_params(content, schema.params if schema is not None else None)
    if "metrics" not in content or "num-examples" not in content["metrics"]:
        raise PayloadError("record 'metrics' with 'num-examples' is missing")
    metrics: dict[str, Any] = dict(content["metrics"])  # the sender's values, unchecked: the server screens the update
    n = metrics.pop("num-examples")
    descriptor = record_arrays(content, "descriptor", required=False, expect=descriptor_spec).get("phi")
    return ClientUpdate(
        client_id=_client_of(content), params=params, n_examples=n, descriptor=descriptor,
        metrics=metrics, extras=record_arrays(content, "extras", required=False, expect=extras_spec),
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


def decode_evaluation(content: RecordDict, n_test: int | None = None, n_classes: int = 0) -> ClientEvaluation:
    """A :class:`ClientEvaluation` from a reply; :class:`PayloadError` when its metrics or client id are missing.

    With ``n_test`` (what the client declared at discovery) pooled predictions larger than
    ``n_test`` labels and ``n_test × max(n_classes, 2)`` scores are refused before decoding.
    """
    if "metrics" not in content:
        raise PayloadError("record 'metrics' is missing")
    raw: dict[str, Any] = dict(content["metrics"])  # the sender's values: float() refuses a non-number
    metrics = {k: float(v) for k, v in raw.items()}
    expect = None
    if n_test is not None and "predictions" in content and isinstance(content["predictions"], ArrayRecord):
        scores = content["predictions"]["scores"] if "scores" in content["predictions"] else None
        wide = scores is not None and isinstance(scores, Array) and len(tuple(scores.shape)) == 2
        expect = {"y_true": ArraySpec((n_test,)),
                  "scores": ArraySpec((n_test, max(int(n_classes), 2)) if wide else (n_test,))}
    pred = record_arrays(content, "predictions", required=False, expect=expect)
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
#: snapshots a node keeps in ``context.state``: its state before and after its last message
MEMORY_SNAPSHOTS_KEPT = 2


#: the messages of a round in order: its fit (or, under secure aggregation, the advertise stage), the other
#: secure-aggregation stages, its evaluation
ROUND_MESSAGES = ("fit", "share", "mask", "unmask", "evaluate")


def message_seq(rnd: int, stage: str) -> int:
    """The position of a server message in a run: round r's ``fit`` is 8r, its secure-aggregation stages
    8r + 1..3 (``share``, ``mask``, ``unmask``), its ``evaluate`` 8r + 4.
    """
    return 8 * int(rnd) + ROUND_MESSAGES.index(stage)


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


def load_round_state(state: RecordDict, key: str, seq: int,
                     directory: Path | None = None) -> tuple[dict[str, Any], bool]:
    """A federated client's state as it was *before* message ``seq`` (:func:`message_seq`), and
    whether the node had it.

    In ``context.state`` (Flower keeps it per run) the node holds its state after each of its
    last :data:`MEMORY_SNAPSHOTS_KEPT` messages: a message the server sends again in the same run
    (its first reply was lost when the SuperLink restarted, :mod:`topofl.flower.exchange`) starts
    from the state the first copy started from, even when the node had already processed it.
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
    snaps = _memory_snapshots(state, key)
    earlier = [s for s in snaps if s < seq]
    if not earlier:
        return {}, False
    return pickle.loads(snaps[max(earlier)]), True


def _memory_snapshots(state: RecordDict, key: str) -> dict[int, bytes]:
    """``{seq: pickled state}`` kept in ``context.state`` for job ``key`` (``{}`` for another job)."""
    rec = state[STATE_KEY] if STATE_KEY in state else None
    if rec is None or rec.get("job") != key:
        return {}
    if "seqs" in rec:
        return {int(s): cast(bytes, b) for s, b in zip(cast(list, rec["seqs"]), cast(list, rec["states"]), strict=True)}
    if "seq" in rec:  # one snapshot (written by an earlier topofl)
        return {int(cast(int, rec["seq"])): cast(bytes, rec["state"])}
    return {}


def save_round_state(state: RecordDict, key: str, seq: int, value: Any, directory: Path | None = None) -> None:
    """Keep ``value`` as the state after message ``seq`` (see :func:`load_round_state`);
    snapshots of later messages (from an attempt that went further before the server restarted)
    are dropped and only the last :data:`MEMORY_SNAPSHOTS_KEPT` (in ``context.state``) or
    :data:`SNAPSHOTS_KEPT` (on disk) are kept.
    """
    blob = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    if directory is None:
        kept = {s: b for s, b in _memory_snapshots(state, key).items() if s < seq}
        kept[int(seq)] = blob
        order = sorted(kept)[-MEMORY_SNAPSHOTS_KEPT:]
        state[STATE_KEY] = ConfigRecord({"job": key, "seqs": order, "states": [kept[s] for s in order]})
        return
    d = directory / key
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_bytes_atomic(d / f"seq-{int(seq)}.pkl", blob, private=True)   # the client's state: its secrets too
    snaps = _snapshots(directory, key)
    older = sorted(s for s in snaps if s < seq)
    for s in [s for s in snaps if s > seq] + older[:max(0, len(older) - (SNAPSHOTS_KEPT - 1))]:
        snaps[s].unlink(missing_ok=True)
