"""Flower run-config and node-config values as TOML: the ``k=v`` command-line form and a document."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Union

__all__ = ["ConfigValue", "format_config", "toml_document"]

ConfigValue = Union[bool, int, float, str]
"""A value of a Flower run-config or node-config entry."""

_BARE_KEY_RE = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_value(value: ConfigValue, *, inline: bool) -> str:
    """Render one scalar as TOML.

    ``inline=True`` renders strings so that Flower's ``k=v`` parser of
    ``--node-config``/``--run-config`` (a regex taking ``"..."`` or ``'...'``)
    keeps them in one piece.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        if not inline or '"' not in value:
            return json.dumps(value)  # a valid TOML basic string
        if "'" not in value and "\n" not in value:
            return f"'{value}'"  # TOML literal string
        raise ValueError(
            f"cannot pass {value!r} on Flower's command line: it holds both quote kinds"
        )
    raise TypeError(f"unsupported config value {value!r} ({type(value).__name__})")


def _check_key(key: str) -> str:
    if not _BARE_KEY_RE.match(key):
        raise ValueError(f"config key {key!r} must match [A-Za-z0-9_-]+")
    return key


def format_config(config: Mapping[str, ConfigValue]) -> str:
    """Format a flat config as Flower's ``"k1=v1 k2=v2"`` command-line string.

    Values are TOML (strings quoted), as ``--node-config`` and ``--run-config``
    expect: ``format_config({"partition-id": 0, "data-path": "/d/a.npz"})`` gives
    ``'partition-id=0 data-path="/d/a.npz"'``.

    Parameters
    ----------
    config
        Keys made of ``[A-Za-z0-9_-]``; values bool, int, float or str.

    Returns
    -------
    str
        The ``k=v`` pairs, separated by spaces.
    """
    return " ".join(
        f"{_check_key(k)}={_toml_value(v, inline=True)}" for k, v in config.items()
    )


def toml_document(config: Mapping[str, ConfigValue]) -> str:
    """Render a flat config as a TOML document (for ``flwr run --run-config x.toml``).

    Parameters
    ----------
    config
        Keys made of ``[A-Za-z0-9_-]``; values bool, int, float or str.

    Returns
    -------
    str
        One ``key = value`` line per entry.
    """
    return "".join(
        f"{_check_key(k)} = {_toml_value(v, inline=False)}\n" for k, v in config.items()
    )
