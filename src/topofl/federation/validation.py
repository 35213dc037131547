"""What the server checks before it reads anything a client sent (DESIGN: "the server decides trust").

:func:`client_info` validates a client's declaration, :func:`screen_updates` its fit replies against the
algorithm's :class:`ReplySchema`, :func:`evaluation_problem` its evaluation replies. A reply that fails
any check becomes a :class:`~topofl.federation.pool.Failure`, never aggregated.
See docs/internals.md#topofl.federation.validation.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.limits import MAX_CLIENT_EXAMPLES

#: the metrics every evaluation reply carries, and nothing else
EVALUATION_METRICS = ("auc", "accuracy", "loss")
#: what a regression client's evaluation carries besides (:func:`topofl.metrics.regression_scores`)
REGRESSION_METRICS = ("mse", "r2")
_WITH_REGRESSION = EVALUATION_METRICS + REGRESSION_METRICS


# ---- the declaration a client makes when it joins --------------------------------------------
@dataclass(frozen=True)
class ClientInfo:
    """What a client declared when it joined: the server's only source for its weight, and the
    size its pooled test predictions must have.
    """

    client_id: int
    n_train: int
    n_test: int


def _declared_int(field_name: str, value: Any, low: int, high: int) -> int:
    if type(value) is int and low <= value <= high:
        return value   # a plain int in range (every in-process declaration): what the checks below return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{field_name} must be an integer; got {value!r}")
    if not low <= int(value) <= high:
        raise ValueError(f"{field_name} must be in [{low}, {high}]; got {int(value)}")
    return int(value)


def client_info(client_id: Any, values: Mapping[str, Any]) -> ClientInfo:
    """Validate a client's declaration (its id, ``n_train``, ``n_test``).

    Raises ``ValueError`` naming the field: example counts are integers in
    ``[1, MAX_CLIENT_EXAMPLES]`` (:mod:`topofl.limits`).
    """
    cid = _declared_int("client", client_id, 0, 2**31 - 1)
    missing = [k for k in ("n_train", "n_test") if k not in values]
    if missing:
        raise ValueError(f"client {cid} declared no {', '.join(missing)}")
    return ClientInfo(
        cid,
        _declared_int("n_train", values["n_train"], 1, MAX_CLIENT_EXAMPLES),
        _declared_int("n_test", values["n_test"], 1, MAX_CLIENT_EXAMPLES),
    )


def declared_infos(clients: Sequence[Any]) -> dict[int, ClientInfo]:
    """Declarations of in-process clients (``ClientData`` objects), from their own data."""
    return {c.client_id: client_info(c.client_id, {"n_train": c.n_train, "n_test": int(c.X_test.shape[0])})
            for c in clients}


# ---- what an algorithm receives ----------------------------------------------------------------
@dataclass(frozen=True)
class ArraySpec:
    """What one array of a reply must be: of one of ``dtypes`` (float64 unless said; a PyTorch
    model's parameters may also be its float32) and of ``shape`` (``None`` = any length), finite,
    with a finite sum of squares, within ``[low, high]`` and, if ``integer``, whole numbers. The
    checks read the array where it lies: no converted copy.
    """

    shape: tuple[int | None, ...]
    required: bool = True
    low: float = -math.inf
    high: float = math.inf
    integer: bool = False
    dtypes: tuple[str, ...] = ("float64",)
    #: a model vector's layers (objects with ``name``, ``shape``, ``offset``, ``size``, e.g.
    #: :class:`~topofl.models.torch_models.ParamSlot`): a Flower reply may carry it layer by layer
    layout: tuple[Any, ...] | None = field(default=None, compare=False)

    def problem(self, name: str, value: Any) -> str | None:
        """Why ``value`` does not fit, naming the array; ``None`` when it does."""
        reason = self.form_problem(name, value)
        if reason is not None or value.size == 0:
            return reason
        return self._values_problem(name, value)

    def form_problem(self, name: str, value: Any) -> str | None:
        """Why ``value`` is not an array of this spec's kind, dtype and shape (the first checks of :meth:`problem`,
        with its reasons), without reading its values; ``None`` when it is.
        """
        if type(value) is not np.ndarray:  # a subclass could override isfinite, dot, norm, ...
            return f"{name} must be a plain numpy array; got {type(value).__name__}"
        dtype = value.dtype
        if id(dtype) not in _own_dtypes(tuple(self.dtypes)) and (dtype.name not in self.dtypes
                                                          or dtype.byteorder not in "=|"):
            return f"{name} must be {' or '.join(self.dtypes)}; got {value.dtype}"
        shape = tuple(self.shape)
        if (value.shape != shape if None not in shape else value.ndim != len(shape)
                or any(s is not None and s != v for s, v in zip(shape, value.shape, strict=True))):
            want = ("(" + ", ".join("n" if s is None else str(s) for s in self.shape)
                    + ("," if len(self.shape) == 1 else "") + ")")
            return f"{name} must have shape {want}; got {value.shape}"
        return None

    def _values_problem(self, name: str, value: np.ndarray) -> str | None:
        """:meth:`problem`'s checks of the values of a non-empty ``value`` that passed :meth:`form_problem`."""
        if (math.isfinite(self.low) or math.isfinite(self.high)) and _fast_dtype(value):
            lo, hi = _extremes(value)
            if _squares_fit(lo, hi, value):
                # finite values, too few and too small for their sum of squares to overflow: the first check below
                # would pass, so it is skipped, and the range is judged by the min and max just read
                return self._range_problem(name, value, lo, hi)
        with np.errstate(over="ignore", invalid="ignore"):
            squares = float(np.dot(value.ravel(), value.ravel()))
        if not math.isfinite(squares):   # a NaN or infinity makes the sum non-finite too: one pass when all is well
            bad = ~np.isfinite(value)
            if bad.any():
                return f"{name} holds {int(bad.sum())} non-finite value(s)"
            return (f"{name}: its sum of squares overflows {value.dtype} "
                    f"(largest |value| {float(np.abs(value).max()):.3g})")
        return self._range_problem(name, value)

    def _range_problem(self, name: str, value: np.ndarray, lo: float | None = None,
                       hi: float | None = None) -> str | None:
        """The checks of a finite ``value`` (of this spec's dtype and shape): the range, then whole numbers;
        ``lo`` and ``hi`` are its min and max when already read.
        """
        if math.isfinite(self.low) or math.isfinite(self.high):
            if lo is None or hi is None:
                lo, hi = _extremes(value)
            if lo < self.low or hi > self.high:
                return f"{name} must be in [{_num(self.low)}, {_num(self.high)}]; got values in [{lo:.6g}, {hi:.6g}]"
        if self.integer and not _all(value == value.round()):  # np.array_equal's test, at the same shape
            return f"{name} must hold integers; got {float(value[value != np.round(value)][0]):.6g}"
        return None


def _extremes(value: np.ndarray) -> tuple[float, float]:
    """``(float(value.min()), float(value.max()))`` of a non-empty array, by the reductions those methods make."""
    return float(_MIN(value, axis=None)), float(_MAX(value, axis=None))


def _all(flags: np.ndarray) -> bool:
    """``bool(flags.all())`` of a boolean array, by the reduction that method makes."""
    return bool(_AND(flags, axis=None))


_MIN, _MAX, _AND = np.minimum.reduce, np.maximum.reduce, np.logical_and.reduce
#: at most this many numbers for :func:`_squares_fit` (its rounding margin holds far beyond)
_SQUARES_SIZE = 1 << 20


def _fast_dtype(value: np.ndarray) -> bool:
    """Whether :func:`_squares_fit` can judge ``value``: float32 or float64 (not a longdouble, whose largest value is
    no Python float), at most :data:`_SQUARES_SIZE` numbers.
    """
    return value.dtype.kind == "f" and value.dtype.itemsize in (4, 8) and value.size <= _SQUARES_SIZE


def _squares_fit(lo: float, hi: float, value: np.ndarray) -> bool:
    """Whether ``value`` (of :func:`_fast_dtype`, not empty), whose min and max are ``lo`` and ``hi``, is finite with a
    sum of squares that cannot overflow its dtype: both finite (a NaN makes them NaN) and size · max(lo², hi²) at
    most the dtype's largest number / 1024 (the rounding of at most 2**20 additions stays far within that margin).
    False says nothing: the full checks then run.
    """
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return False
    big = max(abs(lo), abs(hi))
    return big * big * value.size <= _largest(value.dtype) / 1024


@functools.cache
def _largest(dtype: np.dtype) -> float:
    return float(np.finfo(dtype).max)


@functools.cache
def _own_dtypes(names: tuple[str, ...]) -> frozenset[int]:
    """The ids of NumPy's own descriptors of the dtypes ``names`` in native byte order — singletons, never freed
    (``np.dtype(name) is np.dtype(name)``; a parametric one such as ``datetime64[ns]`` is a fresh object each time,
    whose id could be reused, and is left out): an array whose dtype is one of them passes
    :meth:`ArraySpec.problem`'s dtype check without reading its name (~2 µs a read); any other dtype is judged by
    its name and byte order, as always.
    """
    own = set()
    for name in names:
        try:
            dtype = np.dtype(name)
        except TypeError:
            continue
        if dtype.name == name and dtype.byteorder in "=|" and np.dtype(name) is dtype:
            own.add(id(dtype))
    return frozenset(own)


def _num(v: float) -> str:
    return f"{int(v)}" if math.isfinite(v) and v == int(v) else f"{v:g}"


class DescriptorCheck(Protocol):
    """A check of a descriptor beyond its shape: why ``phi`` is refused, or ``None`` when it passes."""

    def __call__(self, phi: np.ndarray) -> str | None: ...


@dataclass(frozen=True)
class ReplySchema:
    """What an algorithm accepts in one client's fit reply (declared per client and round).

    Attributes
    ----------
    params : ArraySpec
        The parameter vector.
    centers : ndarray or None
        The model(s) the server sent, one per row: the update's deviation is its distance to the
        nearest row. ``None`` when ``params`` is itself a difference (SCAFFOLD's Δy): the
        deviation is then ``‖params‖``.
    scale : float or None
        The norm the deviation is compared with; default: the norm of the nearest center.
    extras : mapping
        Named arrays the reply may carry; any other name is refused.
    descriptor : ArraySpec or None
        The descriptor's spec, or ``None`` when the algorithm takes no descriptor.
    descriptor_check : callable or None
        Further checks of a sent descriptor's values (e.g. persistent-homology invariants).
    metrics : mapping
        Metric names the reply may report, with their ``(low, high)`` range.
    """

    params: ArraySpec
    centers: np.ndarray | None = None
    scale: float | None = None
    extras: Mapping[str, ArraySpec] = field(default_factory=dict)
    descriptor: ArraySpec | None = None
    descriptor_check: DescriptorCheck | None = None
    metrics: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def problem(self, update: ClientUpdate) -> str | None:
        """Why ``update`` does not match this schema; ``None`` when it does."""
        reason = self.params.problem("params", update.params)
        if reason:
            return reason
        if (not self.extras and self.descriptor is None and update.descriptor is None and type(update.extras) is dict
                and not update.extras and type(update.metrics) is dict and not update.metrics):
            return None   # a model alone, as asked (most replies): what the checks below conclude
        extras = update.extras if isinstance(update.extras, Mapping) else None
        if extras is None:
            return f"extras must be a mapping of named arrays; got {type(update.extras).__name__}"
        unexpected = sorted(str(k) for k in extras if k not in self.extras)
        if unexpected:
            return (f"unexpected extras {', '.join(repr(k) for k in unexpected)} "
                    f"(this method accepts: {', '.join(self.extras) or 'none'})")
        for key, spec in self.extras.items():
            if key not in extras:
                if spec.required:
                    return f"extras[{key!r}] is missing"
                continue
            reason = spec.problem(f"extras[{key!r}]", extras[key])
            if reason:
                return reason
        d = update.descriptor
        if self.descriptor is None:
            if d is not None:
                return "unexpected descriptor (this method takes none)"
        elif d is None:
            if self.descriptor.required:
                return "descriptor is required (the server asked for it) but the reply has none"
        else:
            reason = self.descriptor.problem("descriptor", d)
            if reason is None and self.descriptor_check is not None:
                reason = self.descriptor_check(d)
            if reason:
                return reason
        return _metrics_problem(update.metrics, self.metrics)

    @property
    def model_only_shape(self) -> tuple[int] | None:
        """The shape of a reply that is a model alone which :meth:`problem` passes on sight when its numbers' sum of
        squares is finite — a float64 vector of this shape, with no descriptor, extras or metrics —, when this schema
        asks nothing more of one (no range, no whole numbers, no extras, no descriptor); ``None`` otherwise.
        """
        known = self.__dict__.get("_model_only_shape", _UNKNOWN)   # worked out once per schema
        if known is _UNKNOWN:
            known = self._find_model_only_shape()
            object.__setattr__(self, "_model_only_shape", known)   # (frozen: its fields never change)
        return known  # type: ignore[no-any-return]

    def _find_model_only_shape(self) -> tuple[int] | None:
        p = self.params
        if type(self) is not ReplySchema or type(p) is not ArraySpec:
            return None   # a subclass's own checks (problem, deviation) are what run
        if (self.extras or self.descriptor is not None or "float64" not in p.dtypes or p.integer
                or math.isfinite(p.low) or math.isfinite(p.high) or len(p.shape) != 1 or p.shape[0] is None):
            return None
        return (p.shape[0],)

    def deviation(self, params: np.ndarray) -> tuple[float, float]:
        """``(‖params − nearest center‖, reference norm)`` for the norm bound."""
        with np.errstate(over="ignore", invalid="ignore"):
            return self._deviation(params, None)

    def _deviation(self, params: np.ndarray, norms: dict[int, float] | None) -> tuple[float, float]:
        """:meth:`deviation`, under the caller's ``np.errstate``; ``norms``: the centers' norms found so far, by
        row, kept by the caller while neither this schema nor its centers change (one round's screening).
        """
        if self.centers is None:
            return float(np.linalg.norm(params)), 0.0 if self.scale is None else float(self.scale)
        C = self.centers if type(self.centers) is np.ndarray and self.centers.ndim == 2 else np.atleast_2d(
            self.centers)   # a matrix as it is (np.atleast_2d's own answer, without its call)
        if C.shape[0] == 1 and params.size:  # one model sent (most methods): it is the nearest
            j, dev = 0, _distance(params, C[0])
        else:
            # one row at a time: no (rows × d) temporary, which for a deep model is tens of MB per reply
            dists = np.array([_distance(params, c) for c in C]) if params.size else np.zeros(C.shape[0])
            j = int(np.argmin(dists))
            dev = float(dists[j])
        if self.scale is not None:
            return dev, float(self.scale)
        ref = norms.get(j) if norms is not None else None
        if ref is None:
            ref = float(np.sqrt(np.dot(C[j], C[j])))
            if norms is not None:
                norms[j] = ref
        return dev, ref


_CHUNK = 1 << 20
_CHUNK32 = 1 << 18   # float32 blocks: 1 MB, in cache
_F64 = np.dtype(np.float64)
_UNKNOWN = object()   # a cache entry not yet worked out


def _distance(a: np.ndarray, b: np.ndarray) -> float:
    """‖a − b‖, block by block through one small buffer (overflow gives inf, which the norm bound
    then refuses).
    """
    # two float32 vectors (a float32 model's reply and the model it was sent): differences and their
    # squares in float32, a block at a time, the blocks' sums added in float64 (relative error ~1e-7,
    # for a bound that compares norms; 3x faster than converting both to float64)
    # (a float64 vector, NumPy's own descriptor, is known not to be float32 without comparing dtypes)
    dtype = np.float32 if a.dtype is not _F64 and a.dtype == b.dtype == np.float32 else np.float64
    chunk = _CHUNK32 if dtype == np.float32 else _CHUNK
    if a.size <= chunk:
        d = np.subtract(a, b, dtype=dtype)
        return float(np.sqrt(np.dot(d, d)))
    buf, total = np.empty(chunk, dtype=dtype), 0.0
    for start in range(0, a.size, chunk):
        stop = min(start + chunk, a.size)
        d = np.subtract(a[start:stop], b[start:stop], out=buf[: stop - start], dtype=dtype)
        total += float(np.dot(d, d))
    return float(np.sqrt(total))


def _metrics_problem(metrics: Any, allowed: Mapping[str, tuple[float, float]]) -> str | None:
    if not isinstance(metrics, Mapping):
        return f"metrics must be a mapping; got {type(metrics).__name__}"
    for key, value in metrics.items():
        if key not in allowed:
            return f"unexpected metric {key!r}"
        lo, hi = allowed[key]
        x = as_number(value)
        if x is None:
            return f"metric {key!r} must be a number; got {_short(value)}"
        if not (math.isfinite(x) and lo <= x <= hi):
            return f"metric {key!r} must be in [{_num(lo)}, {_num(hi)}]; got {x!r}"
    return None


def as_number(value: Any) -> float | None:
    """``value`` as a float if it is a real number (not a bool) that fits in a float, else ``None``
    (an integer like 10**400 overflows float: it is not a metric, it is an attack).
    """
    if type(value) is float:   # most metrics: the value itself (what float() returns for an exact float)
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    try:
        return float(value)
    except (OverflowError, ValueError):
        return None


def _short(value: Any) -> str:
    text = (repr(value) if not isinstance(value, int) or abs(value) < 10**30
            else f"an integer of {len(str(abs(value)))} digits")
    return text if len(text) <= 80 else text[:77] + "..."


def count_problem(claimed: Any, declared: int) -> str | None:
    """Why a reply's example count is refused: the server weights each client by what it declared
    when it joined, so a reply must repeat that count exactly.
    """
    if type(claimed) is not int and (isinstance(claimed, bool) or not isinstance(claimed, (int, np.integer))):
        return f"n_examples must be an integer; got {_short(claimed)}"
    if int(claimed) != declared:
        return f"n_examples={int(claimed)} differs from the count declared when the client joined (declared {declared})"
    return None


# ---- the round's screening --------------------------------------------------------------------
class ScreenedAlgorithm(Protocol):
    """What :func:`screen_updates` needs of an algorithm (see :class:`topofl.algorithms.base.Algorithm`)."""

    config: Any

    def reply_schema(self, client_id: int, message: ServerMessage, info: ClientInfo) -> ReplySchema: ...

    def reply_problem(self, update: ClientUpdate, message: ServerMessage, info: ClientInfo) -> str | None: ...


def _no() -> bool:
    return False


def _model_only(schema: ReplySchema, u: ClientUpdate, info: ClientInfo) -> bool:
    """Whether the snapshot ``u`` is seen at once to pass :func:`count_problem` and ``schema.problem``: a model alone
    (:attr:`ReplySchema.model_only_shape`), of the declared count, finite, too small for its sum of squares to
    overflow (read from its min and max: no warning can arise). False says nothing: the full checks then run, with
    their reasons.
    """
    shape = schema.model_only_shape
    p = u.params
    return (shape is not None and type(p) is np.ndarray and p.dtype is _F64 and p.shape == shape
            and u.descriptor is None and type(u.n_examples) is int and u.n_examples == info.n_train
            and type(u.metrics) is dict and not u.metrics and type(u.extras) is dict and not u.extras
            and (p.size == 0 or (p.size <= _SQUARES_SIZE and _squares_fit(*_extremes(p), p))))


def lower_median(values: Sequence[float]) -> float:
    """The lower median (an element of ``values``; 0 when empty)."""
    if not values:
        return 0.0
    v = sorted(values)
    return float(v[(len(v) - 1) // 2])


def lower_medians_of_others(values: Sequence[float]) -> list[float]:
    """``[lower_median(values without element k) for every k]``, from one sort: O(K log K), not the
    O(K² log K) of sorting the other K − 1 values once per k (the server's norm bound at thousands of
    clients). With s the sorted values and m = (K − 2) // 2 the lower median's index among K − 1,
    leaving out an element of rank r gives s[m + 1] when r <= m and s[m] otherwise (equal values are
    interchangeable, so the result is exactly the direct computation's).
    """
    n = len(values)
    if n <= 1:
        return [0.0] * n
    order = sorted(range(n), key=values.__getitem__)
    rank = [0] * n
    for r, k in enumerate(order):
        rank[k] = r
    m = (n - 2) // 2
    low, high = float(values[order[m]]), float(values[order[m + 1]])
    return [high if rank[k] <= m else low for k in range(n)]


def screen_updates(
    algorithm: ScreenedAlgorithm,
    updates: Sequence[Any],
    messages: Mapping[int, ServerMessage],
    infos: Mapping[int, ClientInfo],
) -> tuple[list[ClientUpdate], list[tuple[int | None, str]]]:
    """Split a round's replies into those fit to aggregate and ``(client, reason)`` rejections.

    In order, for each reply: a :class:`ClientUpdate` from a client of this run that was asked
    this round, once; the example count it declared when it joined; the algorithm's
    :class:`ReplySchema`; the algorithm's own consistency checks. Then the **norm bound**: with
    ``d_k`` the deviation from what the server sent (:meth:`ReplySchema.deviation`) and ``s_k``
    the norm of that model, a reply is refused when

        d_k > max_update_ratio · max(s_k, update_norm_floor, lower median of d_j over j ≠ k).

    The last term lets honest clients on large-scale features through when the others' updates
    are as large; it excludes the reply itself, so one reply can never widen its own bound. It is
    left out when the algorithm ``screens_independently`` (differential privacy: one client's
    inclusion must not depend on the others' replies).
    """
    # the library's own schema depends on nothing but the parameters sent: one per array sent this round (the
    # messages are alive, so an id names one array), and its centers' norms found once
    shared: dict[int, ReplySchema] | None = {} if getattr(algorithm, "schema_per_params", _no)() else None
    quick = np.geterr()["under"] == "ignore"
    if quick and shared is not None and type(updates) is list and getattr(algorithm, "replies_are_models", _no)():
        try:
            screened = _models_alone(algorithm, updates, messages, infos, shared)
        except Exception:  # noqa: BLE001 - something unreadable: the replies are judged one by one, with the reason
            screened = None
        if screened is not None:
            return screened
    seen: set[int] = set()
    # each reply's outcome in order: a rejection (client, reason), or a reply to measure (reply, schema, kept norms)
    outcomes: list[tuple[int | None, str] | tuple[ClientUpdate, ReplySchema, dict[int, float] | None]] = []
    norms: dict[int, dict[int, float]] = {}
    # a model alone passes its checks on sight (_model_only) unless underflow is to be reported: the full checks'
    # sum of squares would report it
    quick = quick and shared is not None
    for u in updates:
        if not isinstance(u, ClientUpdate):
            outcomes.append((None, f"a reply must be a ClientUpdate; got {type(u).__name__}"))
            continue
        cid = u.client_id
        known = (type(cid) is int or (not isinstance(cid, bool) and isinstance(cid, (int, np.integer)))) \
            and int(cid) in infos
        if not known:
            outcomes.append((None, f"client_id {cid!r} is not a client of this run"))
            continue
        cid = int(cid)
        reason: str | None
        if cid not in messages:
            reason = f"client {cid} was not asked for an update this round"
        elif cid in seen:
            reason = "a second reply from the same client in one round"
        else:
            seen.add(cid)
            info = infos[cid]
            message = messages[cid]
            schema = shared.get(id(message.params)) if shared is not None else None
            if schema is None:
                schema = algorithm.reply_schema(cid, message, info)
                if shared is not None:
                    shared[id(message.params)] = schema
            try:
                # a snapshot in plain dicts: what is checked is exactly what is aggregated
                metrics, extras = u.metrics, u.extras
                plain_m = type(metrics) is dict or isinstance(metrics, Mapping)
                plain_e = type(extras) is dict or isinstance(extras, Mapping)
                u = ClientUpdate(cid, u.params, u.n_examples, u.descriptor, dict(metrics) if plain_m else metrics,
                                 dict(extras) if plain_e else extras)
                if quick and _model_only(schema, u, info):
                    reason = algorithm.reply_problem(u, message, info)   # its count and schema pass
                else:
                    reason = (count_problem(u.n_examples, info.n_train) or schema.problem(u)
                              or algorithm.reply_problem(u, message, info))
                if reason is None:
                    outcomes.append((u, schema, norms.setdefault(id(schema), {}) if shared is not None else None))
                    continue
            except Exception as exc:  # noqa: BLE001 - e.g. a mapping that raises when read: refused, no crash
                reason = f"malformed reply ({type(exc).__name__}: {str(exc)[:200]})"
        outcomes.append((cid, reason))
    passed: list[tuple[ClientUpdate, float, float]] = []
    rejected: list[tuple[int | None, str]] = []
    with np.errstate(over="ignore", invalid="ignore"):   # the deviations' (ReplySchema.deviation's), and theirs only
        for outcome in outcomes:
            if len(outcome) == 2:
                rejected.append(outcome)
                continue
            u, schema, kept = outcome
            try:   # a schema subclass's own deviation, if it has one
                passed.append((u, *(schema._deviation(u.params, kept) if type(schema) is ReplySchema
                                    else schema.deviation(u.params))))
            except Exception as exc:  # noqa: BLE001 - refused, never a crash (as the checks above)
                rejected.append((u.client_id, f"malformed reply ({type(exc).__name__}: {str(exc)[:200]})"))
    return _norm_bound(algorithm, passed, rejected), rejected


def _norm_bound(algorithm: ScreenedAlgorithm, passed: list[tuple[ClientUpdate, float, float]],
                rejected: list[tuple[int | None, str]]) -> list[ClientUpdate]:
    """The replies of ``passed`` — ``(reply, deviation, reference norm)``, in order — within
    :func:`screen_updates`' norm bound; the others are added to ``rejected`` with the reason.
    """
    cfg = algorithm.config
    ratio, floor = float(cfg.max_update_ratio), float(cfg.update_norm_floor)
    deviations = [d for _, d, _ in passed]
    alone = bool(getattr(algorithm, "screens_independently", lambda: False)())
    others = [0.0] * len(passed) if alone else lower_medians_of_others(deviations)
    valid = []
    for (u, dev, ref), widen in zip(passed, others, strict=True):
        limit = ratio * max(ref, floor, widen)
        if dev > limit:
            rejected.append((u.client_id, (
                f"update norm {dev:.4g} exceeds max_update_ratio={ratio:g} × max(norm of the model sent {ref:.4g}, "
                f"update_norm_floor {floor:g}, median of the other updates {widen:.4g}) = {limit:.4g}"
            )))
        else:
            valid.append(u)
    return valid


def _models_alone(algorithm: ScreenedAlgorithm, updates: list[Any], messages: Mapping[int, ServerMessage],
                  infos: Mapping[int, ClientInfo], shared: dict[int, ReplySchema],
                  ) -> tuple[list[ClientUpdate], list[tuple[int | None, str]]] | None:
    """:func:`screen_updates` of a round in which every reply is a model alone (:attr:`ReplySchema.model_only_shape`)
    from a distinct client that was sent the same array as the others, with the count it declared — the whole round's
    checks at once: its models stacked, their extremes found once (each model's lie within them: if the stack's
    numbers pass :func:`_model_only`'s test, so do each model's), their deviations from the model sent row by row,
    each the dot product :func:`_distance` takes. The same outcome as the reply-by-reply path, reason for reason;
    ``None`` when a reply is anything else (or the stack would exceed what the test judges): that path then judges
    the round. For an algorithm whose replies are models alone (``replies_are_models``), with underflow ignored;
    the schema it makes is kept in ``shared`` (by the id of the array sent) for that path.
    """
    if not updates:
        return None
    first = updates[0]
    if type(first) is not ClientUpdate or type(first.client_id) is not int:
        return None
    message = messages.get(first.client_id)
    info = infos.get(first.client_id)
    if message is None or info is None:
        return None
    sent = message.params
    schema = shared[id(sent)] = algorithm.reply_schema(first.client_id, message, info)
    shape = schema.model_only_shape
    centers = schema.centers
    if (shape is None or not shape[0] or schema.scale is not None or type(centers) is not np.ndarray
            or centers.shape != (1, shape[0]) or centers.dtype is not _F64 or len(updates) * shape[0] > _SQUARES_SIZE):
        return None
    seen: set[int] = set()
    rows, snapshots = [], []
    for u in updates:
        if type(u) is not ClientUpdate:
            return None
        cid, p, n = u.client_id, u.params, u.n_examples
        info = infos.get(cid) if type(cid) is int else None
        message = messages.get(cid) if info is not None else None
        if (info is None or message is None or message.params is not sent or cid in seen or type(p) is not np.ndarray
                or p.dtype is not _F64 or p.shape != shape or u.descriptor is not None or type(n) is not int
                or n != info.n_train or type(u.metrics) is not dict or u.metrics or type(u.extras) is not dict
                or u.extras):
            return None
        seen.add(cid)
        rows.append(p)
        snapshots.append(ClientUpdate(cid, p, n, None, {}, {}))
    stack = np.array(rows)   # one copy (the rows checked to be float64 vectors of one shape)
    if not _squares_fit(*_extremes(stack), rows[0]):   # each model's size, the stack's extremes
        return None
    center = centers[0]
    dot, sqrt = np.dot, math.sqrt
    with np.errstate(over="ignore", invalid="ignore"):   # as _deviation's: an overflow gives inf, which is refused
        stack = np.subtract(stack, center, out=stack)
        reference = float(np.sqrt(dot(center, center)))
        passed = [(u, sqrt(float(dot(d, d))), reference) for u, d in zip(snapshots, stack, strict=True)]
    rejected: list[tuple[int | None, str]] = []
    return _norm_bound(algorithm, passed, rejected), rejected


# ---- evaluation replies -------------------------------------------------------------------------
def evaluation_problem(evaluation: Any, info: ClientInfo, task: str, n_classes: int) -> str | None:
    """Why a client's evaluation must not be averaged in; ``None`` when it is sound.

    Metrics are exactly ``auc``, ``accuracy`` and ``loss`` (regression: and ``mse``, ``r2``).
    Classification: accuracy in [0, 1]; AUC in [0, 1], or NaN for a test split that holds one class (it
    then has no AUC: it is kept in the client's record and left out of the mean, and ``n_clients_auc``
    says how many counted); with pooled predictions, AUC is NaN exactly when their labels hold one
    class. Regression: AUC and accuracy NaN, MSE finite and >= 0, R² <= 1 (NaN for a constant test
    target). Loss finite and >= 0. Pooled predictions, when sent, are labels and scores for the
    declared number of test samples (scores in [0, 1] for classification).
    """
    return _evaluation_problem(evaluation, info, task, n_classes, False)


def _evaluation_problem(evaluation: Any, info: ClientInfo, task: str, n_classes: int,
                        values_checked: bool) -> str | None:
    """:func:`evaluation_problem`; ``values_checked``: the pooled predictions' values are known to pass
    (:func:`pooled_values_sound` of the round's evaluations, in the round loop), so only their kind, dtype and shape
    are checked, with the same reasons.
    """
    m = getattr(evaluation, "metrics", None)
    if type(m) is not dict and not isinstance(m, Mapping):
        return f"metrics must be a mapping; got {type(m).__name__}"
    expected = _WITH_REGRESSION if task == "regression" else EVALUATION_METRICS
    values = _metric_values(m, expected)
    if isinstance(values, str):
        return values
    auc = values["auc"]
    problem = _metric_range_problem(values, task)
    if problem:
        return problem
    y, scores = getattr(evaluation, "y_true", None), getattr(evaluation, "scores", None)
    reason = _pooled_problem(y, scores, info.n_test, task, n_classes, values_checked)
    # y passed its check here: finite, so it holds one class exactly when every label equals the first
    if reason is None and y is not None and task != "regression" and math.isnan(auc) != (
            y.size == 0 or _all(y == y.flat[0])):
        reason = f"auc={auc!r} but the pooled labels hold {np.unique(y).size} class(es)"
    return reason


def _metric_values(m: Mapping[Any, Any], expected: tuple[str, ...]) -> dict[str, float] | str:
    """The ``expected`` metrics of ``m`` as numbers, or why they are not: one missing, one more, or one
    not a number.
    """
    missing = [k for k in expected if k not in m]
    if missing:
        return f"missing metric(s) {', '.join(missing)}"
    # a plain dict holding every expected key and no more entries holds nothing else (its keys are distinct)
    extra = [] if type(m) is dict and len(m) == len(expected) else [k for k in m if k not in expected]
    if extra:
        return f"unexpected metric {extra[0]!r}"
    values = {}
    for k in expected:
        x = as_number(m[k])
        if x is None:
            return f"{k} must be a number; got {_short(m[k])}"
        values[k] = x
    return values


def _metric_range_problem(values: Mapping[str, float], task: str) -> str | None:
    """Why the metric values are out of range for ``task``; ``None`` when they are in range."""
    auc, acc, loss = values["auc"], values["accuracy"], values["loss"]
    if not (math.isfinite(loss) and loss >= 0):
        return f"loss must be finite and >= 0; got {loss!r}"
    if task == "regression":
        if not (math.isnan(auc) and math.isnan(acc)):
            return f"a regression client reports no auc or accuracy (NaN); got auc={auc!r}, accuracy={acc!r}"
        if not (math.isfinite(values["mse"]) and values["mse"] >= 0):
            return f"mse must be finite and >= 0; got {values['mse']!r}"
        if not (math.isnan(values["r2"]) or values["r2"] <= 1.0):
            return f"r2 must be <= 1 (or NaN for a constant test target); got {values['r2']!r}"
    else:
        if not 0.0 <= acc <= 1.0:
            return f"accuracy must be in [0, 1]; got {acc!r}"
        if not (math.isnan(auc) or 0.0 <= auc <= 1.0):
            return f"auc must be in [0, 1] (or NaN for a single-class test split); got {auc!r}"
    return None


def _pooled_problem(y: Any, scores: Any, n: int, task: str, n_classes: int, values_checked: bool = False) -> str | None:
    if y is None and scores is None:
        return None
    if y is None or scores is None:
        return "pooled predictions need both y_true and scores"
    y_spec, s_spec = _pooled_specs(n, task, n_classes)
    if values_checked:
        return y_spec.form_problem("y_true", y) or s_spec.form_problem("scores", scores)
    reason = y_spec.problem("y_true", y)
    if reason:
        return reason.replace("must be in", "must hold class labels in") if "must be in" in reason else reason
    return s_spec.problem("scores", scores)


def pooled_values_sound(evaluations: Sequence[Any], task: str, n_classes: int) -> bool:
    """Whether every evaluation's pooled labels and scores pass the value checks of :func:`evaluation_problem`
    (finite; labels whole numbers in [0, C − 1], scores in [0, 1] for classification), judged in one pass over
    their concatenations: a round's evaluations at ~1 µs each instead of ~6 (thousands of clients a round).

    True only when every evaluation carries both arrays as plain float64 arrays and each concatenation takes
    :meth:`ArraySpec.problem`'s fast path (finite, its sum of squares far from overflowing) and passes its range
    and whole-number checks: then so does each array, a part of it (its min and max within the concatenation's,
    its size and largest value no larger). False says nothing: each evaluation is then judged whole. Shapes are
    not judged here (``_evaluation_problem`` with ``values_checked=True`` does it, with its reasons).
    """
    if np.geterr()["under"] != "ignore":
        return False   # the full checks' sums of squares would report an underflow
    ys, scores, total = [], [], 0
    for ev in evaluations:
        y, s = getattr(ev, "y_true", None), getattr(ev, "scores", None)
        if type(y) is not np.ndarray or type(s) is not np.ndarray or y.dtype is not _F64 or s.dtype is not _F64:
            return False
        total += max(y.size, s.size)
        if total > _SQUARES_SIZE:
            return False   # no copy of more than the fast checks may judge (a client's oversized arrays included)
        ys.append(y.ravel())
        scores.append(s.ravel())
    return bool(ys) and _joined_values_sound(np.concatenate(ys), np.concatenate(scores), task, n_classes)


def _joined_values_sound(labels: np.ndarray, scores: np.ndarray, task: str, n_classes: int) -> bool:
    """:func:`pooled_values_sound`'s test of a round's pooled labels and scores, each concatenated into one vector."""
    y_spec, s_spec = _pooled_specs(1, task, n_classes)   # the value checks hold for every size alike
    for spec, joined in ((y_spec, labels), (s_spec, scores)):
        if joined.size == 0 or not _fast_dtype(joined):
            return False
        lo, hi = _extremes(joined)
        if not _squares_fit(lo, hi, joined) or spec._range_problem("", joined, lo, hi) is not None:
            return False
    return True


def sound_round_pooled(evaluations: Sequence[Any], kind: type[Any], asked: Mapping[int, object],
                       infos: Mapping[int, ClientInfo], task: str,
                       n_classes: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The round's pooled labels and scores (each client's concatenated, in order) when every evaluation of a
    classification round passes the round loop's screening at once — each a ``kind`` (the runtime's own evaluation
    class, exactly) from a distinct client that was asked, and sound by :func:`evaluation_problem`, judged together:
    exactly ``auc``, ``accuracy`` and ``loss`` as floats in range, pooled labels and scores of the declared sizes
    whose values pass as one concatenation (:func:`pooled_values_sound`), and each client's AUC NaN exactly when its
    labels hold one class (their min equal to their max: the labels are finite). ``None`` says nothing: each
    evaluation is then judged on its own, with its reason. Timed alone on this project's machine: a round of 1,000
    evaluations in 1.4 ms instead of 5.5 ms, one of 8 in 26 µs instead of 68.
    """
    if task not in ("binary", "multiclass") or not evaluations or np.geterr()["under"] != "ignore":
        return None
    c = max(n_classes, 2)
    seen: set[int] = set()
    ys, scores, starts = [], [], []
    at, isnan, finite = 0, math.isnan, math.isfinite
    for ev in evaluations:
        if type(ev) is not kind:
            return None
        cid, m, y, s = ev.client_id, ev.metrics, ev.y_true, ev.scores
        info = infos.get(cid) if type(cid) is int and cid in asked and cid not in seen else None
        if info is None or type(m) is not dict or len(m) != 3:
            return None
        seen.add(cid)
        auc, acc, loss = m.get("auc"), m.get("accuracy"), m.get("loss")
        n = info.n_test
        if (type(auc) is not float or type(acc) is not float or type(loss) is not float
                or not (finite(loss) and loss >= 0 and 0.0 <= acc <= 1.0 and (isnan(auc) or 0.0 <= auc <= 1.0))
                or type(y) is not np.ndarray or type(s) is not np.ndarray or y.dtype is not _F64
                or s.dtype is not _F64 or n < 1 or y.shape != (n,)
                or s.shape != ((n,) if task == "binary" else (n, c))):
            return None
        ys.append(y)
        scores.append(s)
        starts.append(at)
        at += n
    if at * (c if task == "multiclass" else 1) > _SQUARES_SIZE:
        return None
    labels, pooled = np.concatenate(ys), np.concatenate(scores)
    if not _joined_values_sound(labels, pooled.ravel(), task, n_classes):
        return None
    one_class = np.minimum.reduceat(labels, starts) == np.maximum.reduceat(labels, starts)
    if not all(isnan(ev.metrics["auc"]) == bool(single) for ev, single in zip(evaluations, one_class, strict=True)):
        return None
    return labels, pooled


@functools.lru_cache(maxsize=4096)
def _pooled_specs(n: int, task: str, n_classes: int) -> tuple[ArraySpec, ArraySpec]:
    """The specs of pooled labels and scores of ``n`` test samples (made once per size: they are immutable)."""
    c = max(n_classes, 2)
    y_spec = ArraySpec((n,), low=0, high=c - 1, integer=True) if task != "regression" else ArraySpec((n,))
    if task == "multiclass":
        s_spec = ArraySpec((n, c), low=0.0, high=1.0)
    elif task == "binary":
        s_spec = ArraySpec((n,), low=0.0, high=1.0)
    else:
        s_spec = ArraySpec((n,))
    return y_spec, s_spec
