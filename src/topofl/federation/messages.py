"""The only objects that cross the client/server boundary (DESIGN: "messages only").

Parameters are flat float vectors; ``extras`` carries named arrays (e.g. control variates).
Every payload's size is counted in floats; bytes assume float64. What a server accepts of a
client's message is decided in :mod:`topofl.federation.validation`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

BYTES_PER_FLOAT = 8


def _n_floats(*arrays: Any) -> int:
    return int(sum(np.size(a) for a in arrays if a is not None))


@dataclass(frozen=True)
class ServerMessage:
    """Server → client: parameters to start from (or to use), a config and optional arrays."""

    params: np.ndarray
    config: Mapping[str, Any] = field(default_factory=dict)
    extras: Mapping[str, np.ndarray] = field(default_factory=dict)

    def n_floats(self) -> int:
        return _n_floats(self.params, *self.extras.values())


@dataclass(frozen=True)
class ClientUpdate:
    """Client → server: trained parameters, example count, optional descriptor, metrics, arrays."""

    client_id: int
    params: np.ndarray
    n_examples: int
    descriptor: np.ndarray | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    extras: Mapping[str, np.ndarray] = field(default_factory=dict)

    def n_floats(self) -> int:
        return _n_floats(self.params, self.descriptor, *self.extras.values())
