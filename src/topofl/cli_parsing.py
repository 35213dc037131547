"""Pure helpers of the CLI: seed ranges, KEY=VALUE assignments, TOML files."""
from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from topofl.algorithms.registry import get as get_method

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"0-9"``, ``"0,3,7"``, ``"0-4,10"`` or ``"42"`` → a tuple of distinct seeds in order."""
    seeds: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                seeds.extend(range(lo, hi + 1))
            elif part:
                seeds.append(int(part))
        except ValueError:
            raise ValueError(f"seeds must look like 0-9, 0,3,7 or 42 (non-negative integers); got {text!r}") from None
    if not seeds or min(seeds) < 0:
        raise ValueError(f"seeds must look like 0-9, 0,3,7 or 42 (non-negative integers); got {text!r}")
    return tuple(dict.fromkeys(seeds))


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


def method_hyperparameters(methods: Sequence[str], flat: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Route hyper-parameters to methods: ``"ptopofl.beta"`` to one method, a bare ``"lr"`` to every
    selected method that has it. A name no selected method knows is an error listing the known ones."""
    out: dict[str, dict[str, Any]] = {m: {} for m in methods}
    for key, value in flat.items():
        if "." in key:
            method, name = key.split(".", 1)
            if method not in out:
                raise ValueError(f"hyper-parameter {key!r} names method {method!r}, which is not selected ({', '.join(methods)})")
            out[method][name] = value
            continue
        targets = [m for m in methods if key in get_method(m).Config.field_help()]
        if not targets:
            known = sorted({f for m in methods for f in get_method(m).Config.field_help()})
            raise ValueError(f"unknown hyper-parameter {key!r} for {', '.join(methods)}; known: {', '.join(known)}")
        for m in targets:
            out[m].setdefault(key, value)
    return out


def load_toml(path: Path) -> dict[str, Any]:
    """Read a run/compare TOML file (layout in the README)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"config file {str(path)!r} does not exist")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"config file {str(path)!r} is not valid TOML: {exc}") from None
    allowed = {"scenario", "method", "methods", "seed", "seeds", "rounds", "client_fraction", "scenario_params", "hyperparameters"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ValueError(f"config file {str(path)!r} has unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(allowed))}")
    return data


def flatten_hyperparameters(table: Mapping[str, Any]) -> dict[str, Any]:
    """TOML ``[hyperparameters]`` (bare keys, and sub-tables per method) → ``{"lr": .., "ptopofl.beta": ..}``."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, Mapping):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return flat
