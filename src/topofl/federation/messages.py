"""The only objects that cross the client/server boundary (DESIGN: "messages only").

Parameters are flat float vectors; ``extras`` carries named arrays (e.g. control variates).
Every payload's size is counted in floats; bytes assume float64.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

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


def validate_update(update: ClientUpdate, n_params: int, descriptor_size: int | None = None) -> str | None:
    """Why ``update`` must not be aggregated, or ``None`` when it is sound.

    Checks what a server can check of any reply (issue 5: "the server validates every payload"):
    parameters are a 1-D float vector of the model's size, every array is finite, the example
    count is a non-negative integer and a descriptor, when sent, is a finite vector of the
    expected length. Used by every runtime before aggregation.
    """
    p = update.params
    if not isinstance(p, np.ndarray) or p.dtype.kind != "f":
        return f"params must be a float array; got {type(p).__name__} of dtype {getattr(p, 'dtype', None)}"
    if p.shape != (n_params,):
        return f"params must have shape ({n_params},); got {p.shape}"
    if isinstance(update.n_examples, bool) or not isinstance(update.n_examples, (int, np.integer)) or update.n_examples < 0:
        return f"n_examples must be a non-negative integer; got {update.n_examples!r}"
    arrays = {"params": p, **{f"extras[{k!r}]": v for k, v in update.extras.items()}}
    if update.descriptor is not None:
        d = update.descriptor
        if not isinstance(d, np.ndarray) or d.dtype.kind != "f" or d.ndim != 1:
            return f"descriptor must be a 1-D float array; got {type(d).__name__} {getattr(d, 'shape', '')}"
        if descriptor_size is not None and d.size != descriptor_size:
            return f"descriptor must have length {descriptor_size}; got {d.size}"
        arrays["descriptor"] = d
    for name, a in arrays.items():
        a = np.asarray(a)
        if a.dtype.kind not in "fiu":
            return f"{name} must be numeric; got dtype {a.dtype}"
        if not np.isfinite(a).all():
            return f"{name} holds {int(np.sum(~np.isfinite(a)))} non-finite value(s)"
    return None
