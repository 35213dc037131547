"""The authors' paper-era synthetic data (pTopoFL paper §4.1, Scenarios A and B, as generated for Table 1).

:func:`paper_healthcare_clients` and :func:`paper_benchmark_clients` follow, draw for draw, the authors'
``framework/data.py`` (MorillaLab/TopoFederatedL before 2026-06-06, last at commit c027eae) — our own code,
written from a reading of it — so that the paper's seed 42 gives the same arrays to the last bit. See
docs/internals.md#topofl.data.scenarios.paper_era for each scenario's draws; how they differ from our
``healthcare`` and ``benchmark`` scenarios: docs/paper-protocol.md.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topofl._validation import check_int, check_range
from topofl.data.federation import ClientData, Federation

#: the seed of the paper's Table 1 (the authors' default ``random_state``)
PUBLISHED_SEED = 42


@dataclass(frozen=True)
class PaperHealthcareConfig:
    """The authors' paper-era Scenario A: ``n_clients`` hospitals, ``adversarial`` ones with a
    ``flip_fraction`` of all their labels (train and test) flipped
    (docs/internals.md#topofl.data.scenarios.paper_era).
    """

    n_clients: int = 8
    adversarial: tuple = (1, 5)
    flip_fraction: float = 0.3

    def __post_init__(self) -> None:
        check_int("n_clients", self.n_clients, 2, 100)
        for a in self.adversarial:
            check_int("adversarial client", a, 0, self.n_clients - 1)
        check_range("flip_fraction", self.flip_fraction, 0.0, 1.0)


@dataclass(frozen=True)
class PaperBenchmarkConfig:
    """The authors' paper-era Scenario B: ``n_clients`` clients of 500 points each, label skew only."""

    n_clients: int = 10

    def __post_init__(self) -> None:
        check_int("n_clients", self.n_clients, 2, 100)


def paper_healthcare_clients(seed: int = PUBLISHED_SEED, **overrides: object) -> list[ClientData]:
    """Scenario A's hospitals (pTopoFL paper §4.1) as the paper-era code generated them.

    The draws: docs/internals.md#topofl.data.scenarios.paper_era.

    Parameters
    ----------
    seed : int
        The generator's ``random_state`` (42 for Table 1).
    **overrides
        Fields of :class:`PaperHealthcareConfig`.

    Returns
    -------
    list of ClientData
        Raw (unscaled) features, float labels 0/1; ``meta`` holds ``adversarial`` and ``mortality_rate``.
    """
    from sklearn.datasets import make_classification

    from topofl.data.scenarios.common import build_config

    cfg = build_config(PaperHealthcareConfig, overrides)
    n_features = 20
    rng = np.random.RandomState(seed)
    sizes = rng.randint(60, 250, size=cfg.n_clients)
    pool_X, pool_y = make_classification(n_samples=10_000, n_features=n_features, n_informative=10, n_redundant=4,
                                         n_repeated=0, n_classes=2, flip_y=0.02, class_sep=1.0, random_state=seed)
    rng.choice(len(pool_X), 500, replace=False)  # the unused global test set: drawn only to keep the stream aligned
    rates = np.linspace(0.10, 0.45, cfg.n_clients)
    rng.shuffle(rates)
    positives, negatives = np.flatnonzero(pool_y == 1), np.flatnonzero(pool_y == 0)
    clients = []
    for k in range(cfg.n_clients):
        n, rate = int(sizes[k]), float(rates[k])
        shift = rng.randn(n_features) * 0.5
        scale = rng.uniform(0.7, 1.4, n_features)
        n_pos = int(n * rate)
        pos = rng.choice(positives, min(n_pos, positives.size), replace=True)
        neg = rng.choice(negatives, min(n - n_pos, negatives.size), replace=True)
        X = np.vstack([pool_X[pos] * scale + shift, pool_X[neg] * scale + shift * 0.3])
        y = np.concatenate([np.ones(pos.size), np.zeros(neg.size)])
        order = rng.permutation(y.size)
        X, y = X[order], y[order]
        adversarial = k in cfg.adversarial
        if adversarial:
            flipped = rng.choice(y.size, int(cfg.flip_fraction * y.size), replace=False)
            y[flipped] = 1.0 - y[flipped]
        test = rng.choice(y.size, max(30, int(n * 0.2)), replace=False)
        train = np.setdiff1d(np.arange(y.size), test)
        clients.append(ClientData(X[train], y[train], X[test], y[test], client_id=k,
                                  meta={"adversarial": adversarial, "mortality_rate": rate}))
    return clients


def paper_benchmark_clients(seed: int = PUBLISHED_SEED, **overrides: object) -> list[ClientData]:
    """Scenario B's clients (pTopoFL paper §4.1) as the paper-era code generated them
    (docs/internals.md#topofl.data.scenarios.paper_era): raw features, float labels 0/1 and
    ``meta["positive_fraction"]``; ``seed`` and ``overrides`` (fields of :class:`PaperBenchmarkConfig`) as
    for :func:`paper_healthcare_clients`.
    """
    from sklearn.datasets import make_classification

    from topofl.data.scenarios.common import build_config

    cfg = build_config(PaperBenchmarkConfig, overrides)
    n_total = 5000
    rng = np.random.RandomState(seed)
    pool_X, pool_y = make_classification(n_samples=n_total, n_features=20, n_informative=12, n_redundant=4, n_classes=5,
                                         n_clusters_per_class=1, random_state=seed)
    binary = pool_y >= 2
    positives, negatives = np.flatnonzero(binary), np.flatnonzero(~binary)
    per_client = n_total // cfg.n_clients
    clients = []
    for k in range(cfg.n_clients):
        fraction = float(rng.uniform(0.1, 0.9))
        n_pos = int(per_client * fraction)
        pos = rng.choice(positives, min(n_pos, positives.size), replace=True)
        neg = rng.choice(negatives, min(per_client - n_pos, negatives.size), replace=True)
        X = np.vstack([pool_X[pos], pool_X[neg]])
        X = X + rng.randn(*X.shape) * 0.3
        y = np.concatenate([np.ones(pos.size), np.zeros(neg.size)])
        order = rng.permutation(y.size)
        X, y = X[order], y[order]
        cut = int(y.size * 0.8)
        clients.append(ClientData(X[:cut], y[:cut], X[cut:], y[cut:], client_id=k,
                                  meta={"positive_fraction": fraction}))
    return clients


def make_paper_healthcare(seed: int = PUBLISHED_SEED, **overrides: object) -> Federation:
    """Scenario A as a :class:`Federation` for our own methods, z-scored per client as the authors' clients do."""
    return Federation(paper_healthcare_clients(seed, **overrides), task="binary", name="paper-healthcare",
                      standardise="per_client", info={"seed": seed, **overrides})


def make_paper_benchmark(seed: int = PUBLISHED_SEED, **overrides: object) -> Federation:
    """Scenario B as a :class:`Federation` for our own methods, z-scored per client as the authors' clients do."""
    return Federation(paper_benchmark_clients(seed, **overrides), task="binary", name="paper-benchmark",
                      standardise="per_client", info={"seed": seed, **overrides})
