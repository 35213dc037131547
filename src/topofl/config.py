"""Frozen, validated hyper-parameter dataclasses: the base every method's config derives from.

A config field is declared with :func:`hp` (default, help text and, for a parameter worth tuning,
its search space: :class:`Space`, built by :func:`floats`, :func:`ints` or :func:`choice`);
``topofl methods`` and the CLI's ``--help`` show the help. :meth:`Config.from_dict` builds a config from a mapping (CLI
``-p KEY=VALUE``, TOML, Flower run config), refusing unknown names and coercing strings to the
field's type; ``__post_init__`` validates every value, so a bad one is a ``ValueError`` naming
the field and the allowed range.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from topofl._validation import check_int, check_range
from topofl.limits import MAX_CLIENT_EXAMPLES

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
            raise ValueError(f"a {self.kind} space needs low < high (and low > 0 on a log scale); got [{self.low}, {self.high}]")
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


def hp(default: Any, help: str, *, space: Space | None = None, **kw: Any) -> Any:
    """A config field with a help text (shown by ``topofl methods`` and ``--help``) and, for a
    parameter worth tuning, its search space (:class:`Space`; ``topofl tune`` reads it).
    """
    meta = {"help": help, **kw}
    if space is not None:
        if not space.contains(default):
            raise ValueError(f"default {default!r} lies outside its search space ({space.describe()})")
        meta["space"] = space
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Config:
    """Base of every method's hyper-parameters: help listing and construction from a mapping."""

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
        known = {f.name: f for f in dataclasses.fields(cls)}
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


@dataclass(frozen=True)
class TrainingConfig(Config):
    """Local-training hyper-parameters shared by every method of both families."""

    lr: float = hp(0.1, "local SGD step size (> 0)", space=floats(1e-3, 1.0, log=True))
    local_epochs: int = hp(2, "local epochs per round (>= 1)", space=ints(1, 5))
    batch_size: int = hp(32, "local mini-batch size (>= 1)", space=choice(16, 32, 64, tuned=False))
    l2: float = hp(1e-3, "L2 penalty on model weights (>= 0)", space=floats(1e-6, 1e-1, log=True, tuned=False))

    def __post_init__(self) -> None:
        check_range("lr", self.lr, 0.0, 100.0, low_open=True)
        check_int("local_epochs", self.local_epochs, 1, 10_000)
        check_int("batch_size", self.batch_size, 1, MAX_CLIENT_EXAMPLES)
        check_range("l2", self.l2, 0.0)
