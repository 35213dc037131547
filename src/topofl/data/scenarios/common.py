"""Building blocks shared by the synthetic scenarios (all seeded, all vectorised)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from topofl._validation import check_int
from topofl.limits import MAX_CLIENTS, MAX_FEATURES, MAX_SAMPLES_PER_CLIENT, MAX_SCENARIO_VALUES


def check_size(n_clients: int, n_per_client: int, n_features: int, samples_field: str = "n_max") -> None:
    """Refuse, before generating anything, a scenario above the documented bounds (:mod:`topofl.limits`)."""
    check_int("n_clients", n_clients, 1, MAX_CLIENTS)
    check_int(samples_field, n_per_client, 1, MAX_SAMPLES_PER_CLIENT)
    check_int("n_features", n_features, 1, MAX_FEATURES)
    total = n_clients * n_per_client * n_features
    if total > MAX_SCENARIO_VALUES:
        raise ValueError(
            f"n_clients × {samples_field} × n_features = {n_clients} × {n_per_client} × {n_features} = {total:,} "
            f"values exceeds the limit of {MAX_SCENARIO_VALUES:,}; lower one of them"
        )


def intercept_for_prevalence(logits: np.ndarray, prevalence: float) -> float:
    """Intercept b such that mean(σ(logits + b)) equals ``prevalence`` (Brent's method, SciPy)."""
    from scipy.optimize import brentq  # lazy: scipy.optimize takes ~0.3 s to import (only scenario builders need it)
    from scipy.special import expit

    return float(brentq(lambda b: expit(logits + b).mean() - prevalence, -50.0, 50.0, xtol=1e-8))


def rotated_rule(base: np.ndarray, cos_sim: float, rng: np.random.Generator) -> np.ndarray:
    """A unit vector whose cosine with unit vector ``base`` is ``cos_sim`` (random orthogonal part)."""
    u = rng.standard_normal(base.size)
    u -= (u @ base) * base
    u /= np.linalg.norm(u)
    return cos_sim * base + np.sqrt(max(0.0, 1.0 - cos_sim**2)) * u


def split_train_test(X: np.ndarray, y: np.ndarray, test_fraction: float, rng: np.random.Generator):
    """Random split keeping at least 3 training and 1 test sample."""
    n = X.shape[0]
    n_test = min(n - 3, max(1, int(round(test_fraction * n))))
    perm = rng.permutation(n)
    te, tr = perm[:n_test], perm[n_test:]
    return X[tr], y[tr], X[te], y[te]


def flip_labels(y: np.ndarray, rate: float, rng: np.random.Generator) -> np.ndarray:
    """Binary labels with a random ``rate`` fraction flipped (label-flip poisoning)."""
    y = y.copy()
    k = int(round(rate * y.size))
    idx = rng.choice(y.size, size=k, replace=False)
    y[idx] = 1.0 - y[idx]
    return y


def build_config(cls: type, overrides: Mapping[str, Any]):
    """Instantiate a scenario config dataclass, rejecting unknown parameters by name."""
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ValueError(f"unknown parameter(s) {', '.join(unknown)} for {cls.__name__}; known: {', '.join(known)}")
    values = {}
    for k, v in overrides.items():
        default = known[k].default
        if isinstance(default, tuple) and not isinstance(v, tuple):
            v = tuple(v) if isinstance(v, (list, np.ndarray)) else (v,)
        elif isinstance(default, float) and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        values[k] = v
    return cls(**values)
