"""Scenario A — healthcare (pTopoFL paper §4.1): 8 hospitals, 20 features (10 informative),
60–250 patients, mortality prevalence 10–45 %, 2 adversarial hospitals with label flips.

Built from the paper's description so that the methods can differ (the authors' own generator is
:mod:`topofl.data.scenarios.paper_era`): hospitals in sub-populations that differ in case-mix geometry and in
decision rule, the ``geometry`` control, hospital effects and flipped training labels. See
docs/internals.md#topofl.data.scenarios.healthcare for the generator and its calibration.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topofl._validation import check_choice, check_int, check_range
from topofl.data.federation import ClientData, Federation
from topofl.data.scenarios.common import (
    check_size,
    flip_labels,
    intercept_for_prevalence,
    rotated_rule,
    split_train_test,
)


@dataclass(frozen=True)
class HealthcareConfig:
    """Parameters of the healthcare scenario; validated at construction.

    What each does: docs/internals.md#topofl.data.scenarios.healthcare.
    """

    n_clients: int = 8
    n_features: int = 20
    n_informative: int = 10
    n_min: int = 60
    n_max: int = 250
    prevalence_min: float = 0.10
    prevalence_max: float = 0.45
    n_groups: int = 2
    rule_similarity: float = 0.3
    signal: float = 2.6
    n_factors: int = 5
    factor_noise: float = 0.4
    hospital_shift: float = 0.3
    adversarial: tuple = (1, 5)
    flip_rate: float = 0.3
    test_fraction: float = 0.3
    geometry: str = "coupled"

    def __post_init__(self) -> None:
        check_size(self.n_clients, self.n_max, self.n_features)
        check_int("n_informative", self.n_informative, 1, self.n_features)
        check_int("n_min", self.n_min, 10)
        check_int("n_max", self.n_max, self.n_min)
        check_range("prevalence_min", self.prevalence_min, 0.0, 1.0, low_open=True, high_open=True)
        check_range("prevalence_max", self.prevalence_max, self.prevalence_min, 1.0, high_open=True)
        check_int("n_groups", self.n_groups, 1, self.n_clients)
        check_range("rule_similarity", self.rule_similarity, -1.0, 1.0)
        check_range("signal", self.signal, 0.0)
        check_int("n_factors", self.n_factors, 1, self.n_features)
        check_range("factor_noise", self.factor_noise, 0.0)
        check_range("hospital_shift", self.hospital_shift, 0.0)
        for a in self.adversarial:
            check_int("adversarial client", a, 0, self.n_clients - 1)
        check_range("flip_rate", self.flip_rate, 0.0, 1.0)
        check_range("test_fraction", self.test_fraction, 0.0, 1.0, low_open=True, high_open=True)
        check_choice("geometry", self.geometry, ("coupled", "independent", "shared"))


def _case_mix(group: int, n: int, loadings: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    """Patients of a group: a broad full-dimensional cloud (group 0) or a few correlated
    comorbidity factors plus noise (other groups); both with per-feature spread about 1.2.
    """
    q, d = loadings.shape
    if group == 0:
        return rng.standard_normal((n, d)) * 1.2
    return rng.standard_normal((n, q)) @ loadings + rng.standard_normal((n, d)) * noise


def make_healthcare(seed: int = 0, **overrides) -> Federation:
    """The healthcare federation of pTopoFL paper §4.1, Scenario A; every parameter can be overridden.

    The generator: docs/internals.md#topofl.data.scenarios.healthcare.
    """
    from topofl.data.scenarios.common import build_config

    cfg = build_config(HealthcareConfig, overrides)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0xA]))
    d, di = cfg.n_features, cfg.n_informative
    base = rng.standard_normal(di)
    base /= np.linalg.norm(base)
    rules = [base] + [rotated_rule(base, cfg.rule_similarity, rng) for _ in range(cfg.n_groups - 1)]
    loadings = [rng.standard_normal((cfg.n_factors, d)) * 1.2 / np.sqrt(cfg.n_factors) for _ in range(cfg.n_groups)]
    groups = np.arange(cfg.n_clients) % cfg.n_groups
    rng.shuffle(groups)
    # the control (an outside review): case-mix geometry tied to the rule group ("coupled", the
    # paper-like default), drawn independently of it (the same group sizes, shuffled by their own
    # generator), or one geometry for every hospital ("shared": group 0's broad cloud)
    if cfg.geometry == "coupled":
        geometry = groups
    elif cfg.geometry == "independent":
        geometry = np.random.default_rng(np.random.SeedSequence([int(seed), 0x6E0])).permutation(groups)
    else:
        geometry = np.zeros_like(groups)
    rates = np.linspace(cfg.prevalence_min, cfg.prevalence_max, cfg.n_clients)
    rng.shuffle(rates)
    sizes = rng.integers(cfg.n_min, cfg.n_max + 1, size=cfg.n_clients)
    clients = []
    for k in range(cfg.n_clients):
        g, geo = int(groups[k]), int(geometry[k])
        X = _case_mix(geo, int(sizes[k]), loadings[geo], cfg.factor_noise, rng)
        X = X * rng.uniform(0.85, 1.15, size=d) + rng.standard_normal(d) * cfg.hospital_shift
        z = cfg.signal * (X[:, :di] - X[:, :di].mean(axis=0)) @ rules[g]
        b = intercept_for_prevalence(z, float(rates[k]))
        y = (rng.random(X.shape[0]) < 1.0 / (1.0 + np.exp(-(z + b)))).astype(np.float64)
        Xtr, ytr, Xte, yte = split_train_test(X, y, cfg.test_fraction, rng)
        adversarial = k in cfg.adversarial
        if adversarial and cfg.flip_rate > 0:  # own generator: poisoning leaves the rest of the data as is
            ytr = flip_labels(ytr, cfg.flip_rate, np.random.default_rng(np.random.SeedSequence([int(seed), 0xF1, k])))
        meta = {"group": g, "geometry": geo, "adversarial": adversarial, "prevalence": float(rates[k])}
        clients.append(ClientData(Xtr, ytr, Xte, yte, client_id=k, meta=meta))
    return Federation(clients, task="binary", name="healthcare", info={"config": cfg.__dict__, "seed": seed})
