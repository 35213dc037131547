"""Helpers of the CLI: routing hyper-parameters to methods and TOML files (seed ranges and
KEY=VALUE parsing live in :mod:`topofl.parsing`, re-exported here).
"""
from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from topofl.methods import get as get_method
from topofl.parsing import parse_assignments, parse_seeds, parse_value

__all__ = ["CONFIG_KEYS", "flatten_hyperparameters", "load_toml", "method_hyperparameters", "parse_assignments", "parse_seeds", "parse_value"]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def method_hyperparameters(methods: Sequence[str], flat: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Route hyper-parameters to methods: ``"ptopofl.beta"`` to one method, a bare ``"lr"`` to every
    selected method that has it. A name no selected method knows is an error listing the known ones.
    """
    out: dict[str, dict[str, Any]] = {m: {} for m in methods}
    for key, value in flat.items():
        if "." in key:
            method, name = key.split(".", 1)
            if method not in out:
                raise ValueError(f"hyper-parameter {key!r} names method {method!r}, which is not selected ({', '.join(methods)})")
            out[method][name] = value
            continue
        targets = [m for m in methods if key in get_method(m).config.field_help()]
        if not targets:
            known = sorted({f for m in methods for f in get_method(m).config.field_help()})
            raise ValueError(f"unknown hyper-parameter {key!r} for {', '.join(methods)}; known: {', '.join(known)}")
        for m in targets:
            out[m].setdefault(key, value)
    return out


def load_toml(path: Path) -> dict[str, Any]:
    """Read a run/compare TOML file (layout in the README); every key's type is checked
    (:data:`CONFIG_KEYS`) and a wrong one is a ``ValueError`` naming the file and the key.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"config file {str(path)!r} does not exist")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"config file {str(path)!r} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - set(CONFIG_KEYS))
    if unknown:
        raise ValueError(f"config file {str(path)!r} has unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(CONFIG_KEYS))}")
    for key, value in data.items():
        expected, ok = CONFIG_KEYS[key]
        if not ok(value):
            raise ValueError(f"config file {str(path)!r}: {key} must be {expected}; got {value!r}")
    return data


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


#: the keys a run/compare TOML file may hold: (what the value must be, its check)
CONFIG_KEYS: dict[str, tuple[str, Any]] = {
    "scenario": ("a string, e.g. scenario = \"healthcare\"", lambda v: isinstance(v, str)),
    "method": ("a string, e.g. method = \"ptopofl\"", lambda v: isinstance(v, str)),
    "methods": ("a list of method names, e.g. methods = [\"ptopofl\", \"fedavg\"]",
                lambda v: isinstance(v, list) and bool(v) and all(isinstance(m, str) for m in v)),
    "seed": ("an integer", _is_int),
    "model": ("a model name such as \"cnn-small\" or \"package.module:factory\"", lambda v: isinstance(v, str) and bool(v)),
    "seeds": ("a string such as \"0-9\", an integer or a list of integers",
              lambda v: isinstance(v, str) or _is_int(v) or (isinstance(v, list) and bool(v) and all(_is_int(x) for x in v))),
    "rounds": ("an integer", _is_int),
    "client_fraction": ("a number in (0, 1]", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
    "scenario_params": ("a table ([scenario_params] with KEY = VALUE lines)", lambda v: isinstance(v, Mapping)),
    "hyperparameters": ("a table ([hyperparameters] with KEY = VALUE lines, [hyperparameters.METHOD] for one method)",
                        lambda v: isinstance(v, Mapping)),
}


def flatten_hyperparameters(table: Mapping[str, Any]) -> dict[str, Any]:
    """TOML ``[hyperparameters]`` (bare keys, and sub-tables per method) → ``{"lr": .., "ptopofl.beta": ..}``."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, Mapping):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return flat
