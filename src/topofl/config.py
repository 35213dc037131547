"""Frozen, validated hyper-parameter dataclasses: the base every method's config derives from.

A config field is declared with :func:`hp` (default and help text); ``topofl methods`` and the
CLI's ``--help`` show the help. :meth:`Config.from_dict` builds a config from a mapping (CLI
``-p KEY=VALUE``, TOML, Flower run config), refusing unknown names and coercing strings to the
field's type; ``__post_init__`` validates every value, so a bad one is a ``ValueError`` naming
the field and the allowed range.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from topofl._validation import check_int, check_range
from topofl.limits import MAX_CLIENT_EXAMPLES

C = TypeVar("C", bound="Config")


def hp(default: Any, help: str, **kw: Any) -> Any:
    """A config field with a help text (shown by ``topofl methods`` and ``--help``)."""
    return field(default=default, metadata={"help": help, **kw})


@dataclass(frozen=True)
class Config:
    """Base of every method's hyper-parameters: help listing and construction from a mapping."""

    @classmethod
    def field_help(cls) -> dict[str, tuple[Any, str]]:
        """``{name: (default, help)}`` for every hyper-parameter."""
        return {f.name: (f.default, f.metadata.get("help", "")) for f in dataclasses.fields(cls)}

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

    lr: float = hp(0.1, "local SGD step size (> 0)")
    local_epochs: int = hp(2, "local epochs per round (>= 1)")
    batch_size: int = hp(32, "local mini-batch size (>= 1)")
    l2: float = hp(1e-3, "L2 penalty on model weights (>= 0)")

    def __post_init__(self) -> None:
        check_range("lr", self.lr, 0.0, 100.0, low_open=True)
        check_int("local_epochs", self.local_epochs, 1, 10_000)
        check_int("batch_size", self.batch_size, 1, MAX_CLIENT_EXAMPLES)
        check_range("l2", self.l2, 0.0)
