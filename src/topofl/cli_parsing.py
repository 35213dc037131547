"""Pure helpers of the CLI: seed ranges, KEY=VALUE assignments, TOML files."""
from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from topofl.algorithms.registry import get as get_method
from topofl.limits import MAX_SEED, MAX_SEEDS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


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
    """Read a run/compare TOML file (layout in the README); every key's type is checked
    (:data:`CONFIG_KEYS`) and a wrong one is a ``ValueError`` naming the file and the key."""
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
