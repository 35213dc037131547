"""A synthetic multi-task tabular federation whose clients observe different feature subsets.

It exercises heterogeneous model sizes (Sheaf-FMTL's motivation): client ``k`` sees only the
columns ``meta["features"]`` of a latent ``n_features``-dimensional input, so its local model has
``len(meta["features"])`` inputs.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from topofl._validation import check_int, check_range
from topofl.data.loaders.base import LoadedData
from topofl.data.loaders.protocol import (
    ASSIGN,
    GENERATE,
    build_clients,
    check_protocol_args,
    check_seed,
    stream,
)


def _unit_columns(W: np.ndarray) -> np.ndarray:
    return W / np.linalg.norm(W, axis=0, keepdims=True)


def _check_subsets(feature_subsets: Sequence[Sequence[int]], n_clients: int, n_features: int) -> list[np.ndarray]:
    if isinstance(feature_subsets, (str, bytes)) or len(feature_subsets) != n_clients:
        raise ValueError(
            f"feature_subsets must hold one index sequence per client ({n_clients}); "
            f"got {len(feature_subsets) if hasattr(feature_subsets, '__len__') else feature_subsets!r}"
        )
    out = []
    for k, subset in enumerate(feature_subsets):
        idx = np.asarray(subset)
        if idx.ndim != 1 or idx.size == 0 or idx.dtype.kind not in "iu":
            raise ValueError(f"feature_subsets[{k}] must be a non-empty sequence of integer indices; got {subset!r}")
        if idx.min() < 0 or idx.max() >= n_features:
            raise ValueError(f"feature_subsets[{k}] holds an index outside 0..{n_features - 1}: {idx.tolist()}")
        if np.unique(idx).size != idx.size:
            raise ValueError(f"feature_subsets[{k}] repeats an index: {idx.tolist()}")
        out.append(np.sort(idx.astype(np.int64)))
    return out


def synthetic_tabular(  # noqa: PLR0913 (public API: the user-facing options of the synthetic data generator)
    n_clients: int = 12,
    n_features: int = 30,
    feature_subsets: Sequence[Sequence[int]] | None = None,
    seed: int = 0,
    protocol: bool = True,
    *,
    n_groups: int = 3,
    n_classes: int = 3,
    n_samples: int | tuple[int, int] = (80, 200),
    group_strength: float = 0.6,
    signal: float = 4.0,
    test_fraction: float = 0.25,
    keep: float = 0.2,
) -> LoadedData:
    """Multi-task tabular federation with heterogeneous feature subsets (no files needed).

    Generative model (all draws seeded):

    * a shared latent linear rule ``W0`` (``n_features x n_classes``, unit-norm columns);
    * ``n_groups`` task groups, group ``g`` using ``W_g = signal * unit(W0 + group_strength * D_g)``
      with ``D_g`` a random unit-column perturbation; clients are dealt round-robin (seeded
      order) to the groups, so group sizes differ by at most one;
    * client ``k`` draws ``n_k`` latent inputs ``x ~ N(0, I_n_features)`` and labels sampled from
      ``softmax(x @ W_g)`` (Gumbel-max), i.e. a 3-class multinomial-logistic task by default
      (``n_classes=2`` gives a binary task);
    * client ``k`` observes only the sorted columns ``features_k`` of ``x``. Unless
      ``feature_subsets`` is given, the subset sizes are spread evenly from
      ``ceil(n_features / 2)`` to ``n_features`` over the clients (in seeded order) and the
      columns are drawn at random, so clients have different feature counts.

    Parameters
    ----------
    n_clients : int, default 12
        Number of clients.
    n_features : int, default 30
        Dimension of the latent input shared by all rules.
    feature_subsets : sequence of sequences of int, optional
        Explicit observed column indices, one sequence per client.
    seed : int, default 0
        Seed of everything (rules, groups, subsets, data, split, reduction).
    protocol : bool, default True
        Apply the Sheaf-FMTL protocol (Appendix F): seeded 75/25 train/test split of every
        client, then the training data of a seeded half of the clients reduced to 20 %.
        With ``False`` the clients are only split; none is reduced.
    n_groups : int, default 3
        Number of task groups (1 to ``n_clients``; the paper-like setting uses 2-3).
    n_classes : int, default 3
        Number of classes (2 gives a binary task).
    n_samples : int or (int, int), default (80, 200)
        Rows per client, or the inclusive range each client's size is drawn from (at least 4).
    group_strength : float, default 0.6
        Size of the group perturbation relative to the shared rule (0: one shared task).
    signal : float, default 4.0
        Norm of every class's weight vector; larger means less label noise.
    test_fraction : float, default 0.25
        Fraction of each client's rows held out for testing.
    keep : float, default 0.2
        Fraction of training rows kept by a reduced client.

    Returns
    -------
    LoadedData
        Clients with *different* feature counts (so :meth:`LoadedData.to_federation` raises
        unless all subsets have one size); ``meta`` has ``features`` (observed indices),
        ``group``, ``n_rows``, ``n_train_full`` and ``reduced``; ``info`` records the generator
        settings, the true rules ``W0`` and ``W_groups`` (nested lists) and the protocol.
    """
    seed = check_seed(seed)
    check_protocol_args(protocol, test_fraction, keep)
    check_int("n_clients", n_clients, 1)
    check_int("n_features", n_features, 2)
    check_int("n_groups", n_groups, 1, n_clients)
    check_int("n_classes", n_classes, 2)
    check_range("group_strength", group_strength, 0.0)
    check_range("signal", signal, 0.0, low_open=True)
    n_clients, d, C = int(n_clients), int(n_features), int(n_classes)
    if isinstance(n_samples, (int, np.integer)) and not isinstance(n_samples, bool):
        lo = hi = int(n_samples)
    else:
        try:
            lo, hi = n_samples  # type: ignore[misc]
        except (TypeError, ValueError):
            raise ValueError(f"n_samples must be an integer or a (low, high) pair; got {n_samples!r}") from None
    check_int("n_samples low", lo, 4)
    check_int("n_samples high", hi, int(lo))

    gen = stream(seed, GENERATE)
    W0 = _unit_columns(gen.standard_normal((d, C)))
    W_groups = [signal * _unit_columns(W0 + group_strength * _unit_columns(gen.standard_normal((d, C))))
                for _ in range(int(n_groups))]
    order = stream(seed, ASSIGN).permutation(n_clients)
    group = np.empty(n_clients, dtype=np.int64)
    group[order] = np.arange(n_clients) % n_groups
    if feature_subsets is None:
        sizes = np.round(np.linspace(int(np.ceil(d / 2)), d, n_clients)).astype(np.int64)
        sizes = stream(seed, ASSIGN, 1).permutation(sizes)
        pick = stream(seed, ASSIGN, 2)
        subsets = [np.sort(pick.choice(d, size=int(m), replace=False)) for m in sizes]
    else:
        subsets = _check_subsets(feature_subsets, n_clients, d)
    sizes_n = gen.integers(int(lo), int(hi) + 1, size=n_clients)

    parts = []
    for k in range(n_clients):
        x = gen.standard_normal((int(sizes_n[k]), d))
        logits = x @ W_groups[group[k]]
        y = np.argmax(logits + gen.gumbel(size=logits.shape), axis=1)
        meta: dict[str, Any] = {"features": subsets[k].tolist(), "group": int(group[k]), "n_rows": int(sizes_n[k])}
        parts.append((x[:, subsets[k]], y, meta))
    clients, record = build_clients(parts, seed=seed, protocol=protocol, test_fraction=test_fraction, keep=keep,
                                    what="synthetic tabular")
    info = {
        "source": {"dataset": "synthetic (topofl.data.loaders.synthetic_tabular)", "files": []},
        "protocol": record,
        "generator": {
            "n_features": d, "n_classes": C, "n_groups": int(n_groups), "n_samples": [int(lo), int(hi)],
            "group_strength": float(group_strength), "signal": float(signal),
            "rule": "y ~ softmax(x @ W_group), x ~ N(0, I); client observes x[:, features]",
        },
        "W0": W0.tolist(),
        "W_groups": [W.tolist() for W in W_groups],
        "group_sizes": np.bincount(group, minlength=int(n_groups)).tolist(),
    }
    task = "binary" if C == 2 else "multiclass"
    return LoadedData(clients, task=task, n_classes=C, name="synthetic_tabular", info=info)
