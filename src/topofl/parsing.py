"""Parsing of what users type: seed ranges and ``KEY=VALUE`` assignments (pure, no imports of methods).

Shared by the CLI (:mod:`topofl.cli_parsing`) and the Flower run config (:mod:`topofl.flower.settings`).
"""
from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import Any

from topofl.limits import MAX_SEED, MAX_SEEDS


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
