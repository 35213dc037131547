"""Frozen, validated hyper-parameter dataclasses: the base every method's config derives from.

A config field is declared with :func:`hp`: default, help text, accepted values (:class:`Bounds`) and, for a
parameter worth tuning, its search space (:class:`Space`: :func:`floats`, :func:`ints`, :func:`choice`).
:meth:`Config.from_dict` builds a config from a mapping (CLI ``-p KEY=VALUE``, TOML, Flower run config) and
``Config.__post_init__`` checks every declared bound (a ``ValueError`` naming the field). See
docs/internals.md#topofl.config for bounds, coercion and the rule for subclasses' ``__post_init__``.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from topofl._validation import check_choice, check_int, check_range
from topofl.limits import MAX_CLIENT_EXAMPLES, MAX_SEED, MAX_SEEDS

C = TypeVar("C", bound="Config")


SPACE_KINDS = ("float", "int", "choice")


@dataclass(frozen=True)
class Space:
    """The search space of one hyper-parameter, declared beside its default (``hp(..., space=...)``)
    and read by the tuner (:mod:`topofl.experiments.tuning`).

    ``kind`` is ``"float"`` or ``"int"`` (a range ``[low, high]``, sampled uniformly or, with
    ``log``, log-uniformly) or ``"choice"`` (one of ``choices``). ``tuned`` says whether the
    parameter is tuned when a user names none (``topofl tune`` without ``--tune-params``); a
    space with ``tuned=False`` is tuned only on request.
    """

    kind: str
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    choices: tuple[Any, ...] = ()
    tuned: bool = True

    def __post_init__(self) -> None:
        if self.kind not in SPACE_KINDS:
            raise ValueError(f"space kind must be one of {', '.join(SPACE_KINDS)}; got {self.kind!r}")
        if self.kind == "choice":
            if len(self.choices) < 2 or len(set(self.choices)) != len(self.choices):
                raise ValueError(f"a choice space needs at least two distinct options; got {self.choices!r}")
            return
        if not (self.low < self.high) or (self.log and self.low <= 0):
            raise ValueError(f"a {self.kind} space needs low < high (and low > 0 on a log scale); "
                             f"got [{self.low}, {self.high}]")
        if self.kind == "int" and not (float(self.low).is_integer() and float(self.high).is_integer()):
            raise ValueError(f"an int space needs integer bounds; got [{self.low}, {self.high}]")

    def contains(self, value: Any) -> bool:
        """Whether ``value`` lies in the space."""
        if self.kind == "choice":
            return any(value == c and type(value) is type(c) for c in self.choices)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.kind == "int" and not float(value).is_integer():
            return False
        return bool(self.low <= value <= self.high)

    def describe(self) -> str:
        """``log-uniform in [0.001, 1]``, ``integers, uniform in [1, 5]`` or ``one of fo, hf``."""
        if self.kind == "choice":
            return "one of " + ", ".join(str(c).lower() if isinstance(c, bool) else str(c) for c in self.choices)
        scale = "log-uniform" if self.log else "uniform"
        return f"{'integers, ' if self.kind == 'int' else ''}{scale} in [{self.low:g}, {self.high:g}]"


def floats(low: float, high: float, log: bool = False, tuned: bool = True) -> Space:
    """A real range ``[low, high]`` (log-uniform with ``log``)."""
    return Space("float", float(low), float(high), log, (), tuned)


def ints(low: int, high: int, log: bool = False, tuned: bool = True) -> Space:
    """An integer range ``[low, high]``."""
    return Space("int", int(low), int(high), log, (), tuned)


def choice(*options: Any, tuned: bool = True) -> Space:
    """One of ``options``."""
    return Space("choice", choices=tuple(options), tuned=tuned)


def _interval(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    """``(0.0, 100.0]``: the interval as :func:`topofl._validation.check_range` writes it."""
    lo = "-inf" if low is None else f"{low}"
    hi = "inf" if high is None else f"{high}"
    return f"{'(' if low_open or low is None else '['}{lo}, {hi}{')' if high_open or high is None else ']'}"


@dataclass(frozen=True)
class Bounds:
    """The values one config field accepts, declared beside its default (``hp(..., low=0.0, ...)``)
    and checked by :meth:`Config.__post_init__` with the helpers of :mod:`topofl._validation`.

    Either a range — a number (never a bool) with ``low`` (<|<=) value (<|<=) ``high``, ``None``
    leaving a side unbounded, ``low_open``/``high_open`` making a side strict, and ``integer``
    requiring an integer (closed bounds only) — or, with ``choices``, one of those strings.
    ``also`` lists values accepted besides the range (a sentinel such as ``0`` = auto).
    ``low`` and ``high`` are kept as written (``0`` or ``0.0``): the error message shows them so.
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    choices: tuple[str, ...] = ()
    also: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        ranged = self.low is not None or self.high is not None or self.low_open or self.high_open or self.integer
        if self.choices and ranged:
            raise ValueError("bounds are either choices or a range, not both; "
                             f"got choices={self.choices!r} and a range")
        if self.choices and len(set(self.choices)) != len(self.choices):
            raise ValueError(f"choices must be distinct; got {self.choices!r}")
        if self.integer and (self.low_open or self.high_open):
            raise ValueError("integer bounds are closed: give low/high as the smallest/largest integer accepted")
        if (self.low_open and self.low is None) or (self.high_open and self.high is None):
            raise ValueError("low_open/high_open need the bound they open")
        if self.low is not None and self.high is not None and not self.low <= self.high:
            raise ValueError(f"bounds need low <= high; got [{self.low}, {self.high}]")

    def check(self, name: str, value: Any) -> None:
        """``ValueError`` naming ``name`` unless ``value`` lies within the bounds."""
        if self.also and value in self.also:
            return
        if self.choices:
            check_choice(name, value, self.choices)
        elif self.integer:
            low = None if self.low is None else int(self.low)
            high = None if self.high is None else int(self.high)
            check_int(name, value, low, high)
        else:
            check_range(name, value, self.low, self.high, low_open=self.low_open, high_open=self.high_open)

    def admits(self, space: Space) -> bool:
        """Whether every value of the search space ``space`` lies within the bounds."""
        # a range is convex: its two ends suffice
        values = space.choices if space.kind == "choice" else (space.low, space.high)
        try:
            for v in values:
                self.check("value", int(v) if space.kind == "int" else v)
        except ValueError:
            return False
        return True

    def describe(self) -> str:
        """``in (0.0, 100.0]``, ``an integer in [1, 10000]``, ``one of rdp, pld`` (and ``, or 0``)."""
        if self.choices:
            text = "one of " + ", ".join(self.choices)
        else:
            interval = _interval(self.low, self.high, self.low_open, self.high_open)
            text = f"{'an integer ' if self.integer else ''}in {interval}"
        return text + "".join(f", or {v!r}" for v in self.also)


def hp(
    default: Any,
    help: str,
    *,
    space: Space | None = None,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    integer: bool = False,
    choices: Sequence[str] = (),
    also: Sequence[Any] = (),
    **kw: Any,
) -> Any:
    """A config field: its default (``dataclasses.MISSING`` for a required field), a help text
    (shown by ``topofl methods`` and ``--help``), the values it accepts and, for a parameter worth
    tuning, its search space (:class:`Space`; ``topofl tune`` reads it).

    Parameters
    ----------
    default : object
        The default value; it must satisfy the bounds and lie in ``space``.
    help : str
        One line for ``topofl methods`` and ``--help``.
    space : Space, optional
        The tuner's search space; it must lie within the bounds (checked when the class is defined).
    low, high : float, optional
        Smallest and largest value accepted (``None``: unbounded); written as the message should show them.
    low_open, high_open : bool
        Whether ``low``/``high`` themselves are refused.
    integer : bool
        Whether the value must be an integer (a bool is not); closed bounds only.
    choices : sequence of str
        The strings accepted (instead of a range).
    also : sequence
        Values accepted besides the range, e.g. ``(0,)`` for "0 = auto".

    Returns
    -------
    dataclasses.Field
        The field, with ``help``, ``bounds`` (:class:`Bounds`, when any is declared) and ``space`` in its metadata.
    """
    meta: dict[str, Any] = {"help": help, **kw}
    if low is not None or high is not None or low_open or high_open or integer or choices:
        bounds = Bounds(low, high, low_open, high_open, integer, tuple(choices), tuple(also))
        if default is not dataclasses.MISSING:
            bounds.check("default", default)
        meta["bounds"] = bounds
    elif also:
        raise ValueError("also= adds values to declared bounds; declare low/high, integer or choices with it")
    if space is not None:
        if default is not dataclasses.MISSING and not space.contains(default):
            raise ValueError(f"default {default!r} lies outside its search space ({space.describe()})")
        meta["space"] = space
    if default is dataclasses.MISSING:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


#: :meth:`Config.field_bounds` of every config class, computed once
_BOUNDS: dict[type, dict[str, Bounds]] = {}
#: each config class's defaults that pass the bounds the class resolves, by field (:func:`_checked_defaults`)
_DEFAULTS: dict[type, dict[str, tuple[Any, Bounds]]] = {}
#: each config class's fields by name (:meth:`Config.from_dict`), found once
_FIELDS: dict[type, dict[str, dataclasses.Field[Any]]] = {}


def _checked_defaults(cls: Any) -> dict[str, tuple[Any, Bounds]]:
    """``{name: (default, bounds)}`` of the fields of the config class ``cls`` whose declared default passes the
    bounds the class resolves for it (:meth:`Config.field_bounds`: a class that inherits one field from two bases,
    or narrows a bound, may resolve other bounds than those its default was declared with), checked once per class.
    """
    cached = _DEFAULTS.get(cls)
    if cached is None:
        cached = {}
        bounds_of = cls.field_bounds()
        for f in dataclasses.fields(cls):
            bounds = bounds_of.get(f.name)
            if bounds is None or f.default is dataclasses.MISSING:
                continue
            try:
                bounds.check(f.name, f.default)
            except Exception:  # noqa: BLE001 - a default outside them: every value of the field is checked
                continue
            cached[f.name] = (f.default, bounds)
        _DEFAULTS[cls] = cached
    return cached


def _inherited_bounds(cls: type, name: str) -> Bounds | None:
    """The bounds the nearest base class of ``cls`` declares for field ``name``, if any."""
    for base in cls.__mro__[1:]:
        f = vars(base).get("__dataclass_fields__", {}).get(name)
        if f is not None and "bounds" in f.metadata:
            bounds: Bounds = f.metadata["bounds"]
            return bounds
    return None


@dataclass(frozen=True)
class Config:
    """Base of every method's hyper-parameters: validation of the declared bounds, help listing
    and construction from a mapping.

    A field that a subclass declares again without bounds keeps those of the base class (pFedMe's
    ``lr`` is still > 0); every declared default and search space is checked against the field's
    bounds when the class is defined.
    """

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        for name in inspect.get_annotations(cls):  # the fields this class declares or declares again
            value = vars(cls).get(name, dataclasses.MISSING)
            meta = value.metadata if isinstance(value, dataclasses.Field) else {}
            default = value.default if isinstance(value, dataclasses.Field) else value
            bounds = meta.get("bounds") or _inherited_bounds(cls, name)
            if bounds is None:
                continue
            if default is not dataclasses.MISSING:
                try:
                    bounds.check(name, default)
                except ValueError as exc:
                    where = f"{cls.__name__}.{name}"
                    raise ValueError(f"{where}: the default lies outside the field's bounds: {exc}") from None
            space = meta.get("space")
            if space is not None and not bounds.admits(space):
                raise ValueError(f"{cls.__name__}.{name}: search space ({space.describe()}) lies outside the "
                                 f"field's bounds ({bounds.describe()})")

    def __post_init__(self) -> None:
        # a field holding its declared default itself (that very object: immutable, as a dataclass's defaults are),
        # which passed these very bounds (_checked_defaults, once per class): only the other values are checked
        checked = _checked_defaults(type(self))
        for name, bounds in type(self).field_bounds().items():
            value = getattr(self, name)
            known = checked.get(name)
            if known is None or value is not known[0] or bounds is not known[1]:
                bounds.check(name, value)

    @classmethod
    def field_bounds(cls) -> dict[str, Bounds]:
        """``{name: Bounds}`` of every field that declares bounds (or inherits them), in field order."""
        cached = _BOUNDS.get(cls)
        if cached is None:
            cached = {}
            for f in dataclasses.fields(cls):
                bounds = f.metadata.get("bounds") or _inherited_bounds(cls, f.name)
                if bounds is not None:
                    cached[f.name] = bounds
            _BOUNDS[cls] = cached
        return cached

    @classmethod
    def field_help(cls) -> dict[str, tuple[Any, str]]:
        """``{name: (default, help)}`` for every hyper-parameter."""
        return {f.name: (f.default, f.metadata.get("help", "")) for f in dataclasses.fields(cls)}

    @classmethod
    def search_space(cls, names: Sequence[str] | None = None) -> dict[str, Space]:
        """``{name: Space}`` of the hyper-parameters to tune: those whose space is tuned by default
        (``names`` None), or exactly ``names`` — ``ValueError`` for a name that is not a
        hyper-parameter or declares no space.
        """
        spaces = {f.name: f.metadata["space"] for f in dataclasses.fields(cls) if "space" in f.metadata}
        if names is None:
            return {k: v for k, v in spaces.items() if v.tuned}
        known = {f.name for f in dataclasses.fields(cls)}
        for n in names:
            if n not in known:
                raise ValueError(f"unknown hyper-parameter {n!r} for {cls.__name__}; known: {', '.join(sorted(known))}")
            if n not in spaces:
                raise ValueError(f"{cls.__name__}.{n} declares no search space; tunable: {', '.join(spaces) or 'none'}")
        return {n: spaces[n] for n in names}

    @classmethod
    def search_space_names(cls) -> tuple[str, ...]:
        """Every hyper-parameter that declares a search space, tuned by default or on request."""
        return tuple(f.name for f in dataclasses.fields(cls) if "space" in f.metadata)

    @classmethod
    def from_dict(cls: type[C], values: Mapping[str, Any]) -> C:
        """Build from a mapping, rejecting unknown names with the list of known ones."""
        known = _FIELDS.get(cls)
        if known is None:
            known = _FIELDS[cls] = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(
                f"unknown hyper-parameter(s) {', '.join(unknown)} for {cls.__name__}; known: {', '.join(known)}"
            )
        return cls(**{k: coerce(k, v, known[k].default) for k, v in values.items()})


def coerce(name: str, value: Any, default: Any) -> Any:
    """Coerce strings from the CLI/TOML to the type of the field's default."""
    if not isinstance(value, str) or isinstance(default, str):
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:
                raise ValueError(f"{name} must be a float; {value} is beyond float range") from None
        return value
    try:
        if isinstance(default, bool):
            low = value.lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return low in ("true", "1", "yes")
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
    except ValueError:
        raise ValueError(f"{name} must be a {type(default).__name__}; got {value!r}") from None
    return value


#: the local update rules (:mod:`topofl.models.optimizers`)
OPTIMIZERS = ("sgd", "sgd-momentum", "adam")


@dataclass(frozen=True)
class TrainingConfig(Config):
    """Local-training hyper-parameters shared by every method of both families."""

    lr: float = hp(
        0.1, "local SGD step size (> 0)",
        low=0.0, high=100.0, low_open=True, space=floats(1e-3, 1.0, log=True),
    )
    local_epochs: int = hp(2, "local epochs per round (>= 1)", low=1, high=10_000, integer=True, space=ints(1, 5))
    batch_size: int = hp(
        32, "local mini-batch size (>= 1)",
        low=1, high=MAX_CLIENT_EXAMPLES, integer=True, space=choice(16, 32, 64, tuned=False),
    )
    l2: float = hp(1e-3, "L2 penalty on model weights (>= 0)", low=0.0, space=floats(1e-6, 1e-1, log=True, tuned=False))
    optimizer: str = hp(
        "sgd", "local update rule: sgd | sgd-momentum (heavy ball, PyTorch's convention) | adam (Kingma & Ba 2015) "
        "at step size lr", choices=OPTIMIZERS, space=choice(*OPTIMIZERS, tuned=False),
    )
    momentum: float = hp(0.9, "sgd-momentum's μ, in [0, 1)", low=0.0, high=1.0, high_open=True,
                         space=floats(0.5, 0.99, tuned=False))
    adam_beta1: float = hp(0.9, "adam's β1, in [0, 1)", low=0.0, high=1.0, high_open=True)
    adam_beta2: float = hp(0.999, "adam's β2, in [0, 1)", low=0.0, high=1.0, high_open=True)
    adam_eps: float = hp(1e-8, "adam's ε (> 0)", low=0.0, low_open=True)


# ---- what users type: seed ranges and KEY=VALUE assignments (the CLI, Flower's run config, attack specs) ----

def parse_seeds(text: str) -> tuple[int, ...]:
    """``"0-9"``, ``"0,3,7"``, ``"0-4,10"`` or ``"42"`` → a tuple of distinct seeds in order.

    At most ``MAX_SEEDS`` seeds, each in ``[0, MAX_SEED]`` (:mod:`topofl.limits`); a request
    above that is refused before any range is built.
    """
    spans: list[tuple[int, int]] = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                spans.append((lo, hi))
            elif part:
                spans.append((int(part), int(part)))
        except ValueError:
            raise ValueError(f"seeds must look like 0-9, 0,3,7 or 42 (non-negative integers); got {text!r}") from None
    if not spans or min(lo for lo, _ in spans) < 0:
        raise ValueError(f"seeds must look like 0-9, 0,3,7 or 42 (non-negative integers); got {text!r}")
    if max(hi for _, hi in spans) > MAX_SEED:
        raise ValueError(f"seeds must be at most {MAX_SEED}; got {text!r}")
    count = sum(hi - lo + 1 for lo, hi in spans)
    if count > MAX_SEEDS:
        raise ValueError(f"seeds: at most {MAX_SEEDS} seeds per command; {text!r} asks for {count:,}")
    return tuple(dict.fromkeys(s for lo, hi in spans for s in range(lo, hi + 1)))


def parse_value(text: str) -> Any:
    """A Python literal (int, float, tuple "1,5"), true/false, or else the string itself."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return text.strip()


def parse_assignments(items: Iterable[str], field: str) -> dict[str, Any]:
    """``["a=1", "m.b=x"]`` → ``{"a": 1, "m.b": "x"}``; a missing ``=`` is an error naming ``field``."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"{field} takes KEY=VALUE; got {item!r}")
        key, value = item.split("=", 1)
        if not key.strip():
            raise ValueError(f"{field} takes KEY=VALUE; got {item!r}")
        out[key.strip()] = parse_value(value)
    return out
