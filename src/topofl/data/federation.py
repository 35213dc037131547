"""Client data containers: :class:`ClientData` and :class:`Federation`.

A federation is a list of clients, each with its own train/test split, plus the task. Dynamic
federations (data that drift across rounds, paper §4.5) override :meth:`Federation.at_round`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from topofl._validation import as_labels, as_points

TASKS = ("binary", "multiclass", "regression")


@dataclass(frozen=True)
class ClientData:
    """One client's data. ``meta`` holds scenario facts (e.g. ``adversarial``, ``group``)."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    client_id: int = 0
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def n_train(self) -> int:
        return int(self.X_train.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.X_train.shape[1])

    def __iter__(self) -> Iterator[np.ndarray]:
        """Unpack as ``X_train, y_train, X_test, y_test``."""
        return iter((self.X_train, self.y_train, self.X_test, self.y_test))


def _validated_client(k: int, arrays: Sequence[Any], meta: Mapping[str, Any] | None = None) -> ClientData:
    if isinstance(arrays, ClientData):
        meta, arrays = arrays.meta, tuple(arrays)
    if len(arrays) != 4:
        raise ValueError(f"client {k} must be (X_train, y_train, X_test, y_test); got {len(arrays)} items")
    Xtr = as_points(arrays[0], f"client {k} X_train", min_points=3)
    ytr = as_labels(arrays[1], Xtr.shape[0], f"client {k} y_train")
    Xte = as_points(arrays[2], f"client {k} X_test", min_points=1)
    yte = as_labels(arrays[3], Xte.shape[0], f"client {k} y_test")
    if Xte.shape[1] != Xtr.shape[1]:
        raise ValueError(
            f"client {k} X_test has {Xte.shape[1]} features but its X_train has {Xtr.shape[1]}"
        )
    return ClientData(Xtr, ytr, Xte, yte, client_id=k, meta=dict(meta or {}))


def infer_task(labels: Sequence[np.ndarray]) -> tuple[str, int]:
    """Task and number of classes from the labels: {0,1} → binary, {0..C-1} → multiclass, else regression."""
    y = np.concatenate([np.asarray(v).ravel() for v in labels])
    if np.all(y == np.round(y)) and y.min() >= 0:
        n_classes = int(y.max()) + 1
        if n_classes <= 2:
            return "binary", 2
        if n_classes <= max(50, int(np.sqrt(y.size))):
            return "multiclass", n_classes
    return "regression", 0


class Federation:
    """A validated set of clients sharing one feature space and one task.

    Build one with :meth:`from_arrays` or :func:`topofl.data.make_scenario`. Iterating yields
    :class:`ClientData` objects with ``X_train, y_train, X_test, y_test``.
    """

    def __init__(
        self,
        clients: Sequence[ClientData],
        task: str | None = None,
        n_classes: int | None = None,
        name: str = "custom",
        info: Mapping[str, Any] | None = None,
    ) -> None:
        if len(clients) < 1:
            raise ValueError("a federation needs at least 1 client; got 0")
        checked = [_validated_client(k, c) for k, c in enumerate(clients)]
        d = checked[0].n_features
        for c in checked[1:]:
            if c.n_features != d:
                raise ValueError(
                    f"client {c.client_id} has {c.n_features} features but client 0 has {d}; "
                    "all clients must share one feature space"
                )
        inferred, inferred_c = infer_task([c.y_train for c in checked] + [c.y_test for c in checked])
        task = task or inferred
        if task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}; got {task!r}")
        if task == "binary":
            for c in checked:
                for part in ("y_train", "y_test"):
                    bad = ~np.isin(getattr(c, part), (0.0, 1.0))
                    if bad.any():
                        v = getattr(c, part)[bad][0]
                        raise ValueError(f"client {c.client_id} {part} must hold 0/1 labels for a binary task; got {v!r}")
        self.clients: list[ClientData] = checked
        self.task = task
        self.n_classes = int(n_classes or (inferred_c if task != "regression" else 0))
        self.name = name
        self.info: dict[str, Any] = dict(info or {})

    @classmethod
    def from_arrays(
        cls,
        arrays: Sequence[Sequence[Any]],
        task: str | None = None,
        name: str = "custom",
        meta: Sequence[Mapping[str, Any]] | None = None,
    ) -> "Federation":
        """Federation from ``[(X_train, y_train, X_test, y_test), ...]``, one tuple per client."""
        if isinstance(arrays, np.ndarray) or len(arrays) < 1:
            raise ValueError("arrays must be a non-empty list of (X_train, y_train, X_test, y_test) tuples")
        meta = meta or [{}] * len(arrays)
        clients = [_validated_client(k, a, meta[k]) for k, a in enumerate(arrays)]
        return cls(clients, task=task, name=name)

    @property
    def n_features(self) -> int:
        return self.clients[0].n_features

    @property
    def client_ids(self) -> list[int]:
        return [c.client_id for c in self.clients]

    def __len__(self) -> int:
        return len(self.clients)

    def __iter__(self) -> Iterator[ClientData]:
        return iter(self.clients)

    def __getitem__(self, k: int) -> ClientData:
        return self.clients[k]

    def at_round(self, rnd: int) -> "Federation":
        """The federation's data at round ``rnd`` (1-based). Static federations return themselves."""
        return self

    def __repr__(self) -> str:
        sizes = [c.n_train for c in self.clients]
        return (
            f"Federation(name={self.name!r}, task={self.task!r}, clients={len(self)}, "
            f"features={self.n_features}, n_train={min(sizes)}-{max(sizes)})"
        )
