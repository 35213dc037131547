"""Partitioners: how a labelled data set is split among clients (any array of labels).

:func:`iid`, :func:`dirichlet` (Hsu, Qi & Brown 2019), :func:`shards` (McMahan et al. 2017) and
:func:`by_group` return one sorted, seeded index array per client; :func:`partition` dispatches by name.
See docs/internals.md#topofl.data.partition.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from topofl._validation import check_int, check_range

PARTITIONS = ("iid", "dirichlet", "shards", "by_group")


def iid(n: int, n_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A random equal split of ``range(n)`` among ``n_clients`` clients."""
    check_int("n_clients", n_clients, 1, n)
    return [np.sort(part) for part in np.array_split(rng.permutation(n), n_clients)]


def dirichlet(y: np.ndarray, n_clients: int, alpha: float, rng: np.random.Generator, min_size: int = 10,
              max_tries: int = 1000) -> list[np.ndarray]:
    """Label-skewed split with Dir(α) class shares per client (Hsu et al. 2019).

    Raises ``ValueError`` when no draw in ``max_tries`` gives every client ``min_size`` samples
    (lower ``min_size`` or raise ``alpha``).
    """
    y = np.asarray(y)
    check_int("n_clients", n_clients, 1, y.size)
    check_range("alpha", alpha, 0.0, low_open=True)
    check_int("min_size", min_size, 0, y.size // n_clients)
    classes = np.unique(y)
    by_class = [rng.permutation(np.flatnonzero(y == c)) for c in classes]
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
        for idx in by_class:
            shares = rng.dirichlet(np.full(n_clients, alpha))
            cuts = (np.cumsum(shares)[:-1] * idx.size).astype(int)
            for k, chunk in enumerate(np.split(idx, cuts)):
                parts[k].append(chunk)
        out = [np.sort(np.concatenate(p)) for p in parts]
        if min(p.size for p in out) >= min_size:
            return out
    raise ValueError(f"no Dirichlet(alpha={alpha}) split in {max_tries} draws gives every one of {n_clients} clients "
                     f"{min_size} samples; lower min_size or raise alpha")


def shards(y: np.ndarray, n_clients: int, rng: np.random.Generator, shards_per_client: int = 2) -> list[np.ndarray]:
    """McMahan et al.'s shards: sort by label, ``shards_per_client`` random shards per client."""
    y = np.asarray(y)
    check_int("shards_per_client", shards_per_client, 1)
    check_int("n_clients", n_clients, 1, max(1, y.size // shards_per_client))
    order = np.argsort(y, kind="stable")
    pieces = np.array_split(order, n_clients * shards_per_client)
    deal = rng.permutation(len(pieces)).reshape(n_clients, shards_per_client)
    return [np.sort(np.concatenate([pieces[j] for j in row])) for row in deal]


def by_group(groups: Sequence[object] | np.ndarray) -> list[np.ndarray]:
    """One client per distinct group value, in sorted order of the values."""
    g = np.asarray(groups)
    if g.ndim != 1 or g.size == 0:
        raise ValueError(f"groups must be a non-empty 1-D array; got shape {g.shape}")
    return [np.flatnonzero(g == v) for v in np.unique(g)]


def partition(kind: str, y: np.ndarray, n_clients: int, rng: np.random.Generator, *, alpha: float = 0.5,
              min_size: int = 10, shards_per_client: int = 2,
              groups: Sequence[object] | None = None) -> list[np.ndarray]:
    """Dispatch on ``kind`` (one of :data:`PARTITIONS`)."""
    if kind == "iid":
        return iid(len(y), n_clients, rng)
    if kind == "dirichlet":
        return dirichlet(y, n_clients, alpha, rng, min_size)
    if kind == "shards":
        return shards(y, n_clients, rng, shards_per_client)
    if kind == "by_group":
        if groups is None:
            raise ValueError("partition 'by_group' needs groups=")
        return by_group(groups)
    raise ValueError(f"partition must be one of {', '.join(PARTITIONS)}; got {kind!r}")


def train_test_split(y: np.ndarray, test_fraction: float, rng: np.random.Generator,
                     stratify: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Sorted train and test indices of one client's rows: each label class split in the same
    proportion (``stratify``; classes of two or more rows keep at least one row on each side),
    or one random split (regression).
    """
    groups = [np.flatnonzero(y == c) for c in np.unique(y)] if stratify else [np.arange(len(y))]
    train: list[int] = []
    test: list[int] = []
    for members in groups:
        idx = rng.permutation(members)
        k = int(round(test_fraction * idx.size))
        if idx.size >= 2:
            k = min(max(k, 1), idx.size - 1)
        test.extend(idx[:k])
        train.extend(idx[k:])
    return np.sort(np.array(train, dtype=np.int64)), np.sort(np.array(test, dtype=np.int64))
