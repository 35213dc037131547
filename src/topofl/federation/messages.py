"""The only objects that cross the client/server boundary (DESIGN: "messages only").

Parameters are flat float vectors in the model's dtype (:func:`as_sent`: float64 for the NumPy
models, float32 for a float32 PyTorch model); ``extras`` carries named arrays (e.g. control
variates). Every payload's size is counted in numbers and in bytes (of the arrays' own dtypes).
What a server accepts of a client's message is decided in :mod:`topofl.federation.validation`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: bytes of one float64 number (the NumPy models' and the peers' payloads)
BYTES_PER_FLOAT = 8


def _n_floats(*arrays: Any) -> int:
    return int(sum(np.size(a) for a in arrays if a is not None))


def _n_bytes(*arrays: Any) -> int:
    return int(sum(np.asarray(a).nbytes for a in arrays if a is not None))


@dataclass(frozen=True)
class ServerMessage:
    """Server → client: parameters to start from (or to use), a config and optional arrays."""

    params: np.ndarray
    config: Mapping[str, Any] = field(default_factory=dict)
    extras: Mapping[str, np.ndarray] = field(default_factory=dict)

    def n_floats(self) -> int:
        return _n_floats(self.params, *self.extras.values())

    def n_bytes(self) -> int:
        """The payload's bytes in the arrays' own dtypes (4 per float32 number, 8 per float64)."""
        return _n_bytes(self.params, *self.extras.values())


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
        if type(self.params) is np.ndarray and self.descriptor is None and type(self.extras) is dict \
                and not self.extras:
            return self.params.size   # a model alone (most replies): _n_floats' count, without its layers
        return _n_floats(self.params, self.descriptor, *self.extras.values())

    def n_bytes(self) -> int:
        """The payload's bytes in the arrays' own dtypes (4 per float32 number, 8 per float64)."""
        if type(self.params) is np.ndarray and self.descriptor is None and type(self.extras) is dict \
                and not self.extras:
            return self.params.nbytes
        return _n_bytes(self.params, self.descriptor, *self.extras.values())


def as_sent(messages: Mapping[int, ServerMessage], dtype: np.dtype) -> dict[int, ServerMessage]:
    """``messages`` with their parameters in ``dtype``, the precision the clients' model holds them in
    (a server keeps its aggregates in float64; a float32 model would round them when it loads them,
    so it is sent the rounded vector: half the bytes, and every runtime sends the same numbers).
    Messages that share one parameter array share one converted array; float64 passes unchanged.
    """
    if np.dtype(dtype) == np.float64:
        return dict(messages)
    cast: dict[int, np.ndarray] = {}
    out = {}
    for cid, m in messages.items():
        if m.params.dtype == dtype:
            out[cid] = m
            continue
        key = id(m.params)
        if key not in cast:
            cast[key] = m.params.astype(dtype)
        out[cid] = ServerMessage(cast[key], config=m.config, extras=m.extras)
    return out
