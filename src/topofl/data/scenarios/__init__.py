"""The built-in scenarios by name: seeded synthetic federations of the pTopoFL paper, real data
shipped with the package (heart disease, MNIST-10k, scikit-learn's digits), real image sets read
from disk (CIFAR-10, FEMNIST) and the user's own tables; ``topofl scenarios`` lists them.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from topofl.data.federation import Federation
from topofl.data.scenarios.benchmark import BenchmarkConfig, make_benchmark
from topofl.data.scenarios.continual import ContinualConfig, make_continual
from topofl.data.scenarios.healthcare import HealthcareConfig, make_healthcare
from topofl.data.scenarios.paper_era import (
    PaperBenchmarkConfig,
    PaperHealthcareConfig,
    make_paper_benchmark,
    make_paper_healthcare,
)
from topofl.limits import MAX_SEED


@dataclass(frozen=True)
class DigitsConfig:
    """Rotated digits (scikit-learn's bundled 8×8 digits, 4 rotation groups), the Sheaf-FMTL
    paper's protocol; see :func:`topofl.data.loaders.rotated_digits`.
    """

    n_clients: int = 40
    groups: int = 4
    protocol: bool = True


def make_digits(seed: int = 0, **overrides) -> Federation:
    """The rotated-digits federation (10 classes, 40 clients), for the federated baselines."""
    from topofl.data.loaders import rotated_digits
    from topofl.data.scenarios.common import build_config

    cfg = build_config(DigitsConfig, overrides)
    return rotated_digits(n_clients=cfg.n_clients, groups=cfg.groups, seed=seed, protocol=cfg.protocol).to_federation()


@dataclass(frozen=True)
class MnistConfig:
    """MNIST-10k (real digits, shipped offline) split among clients; see
    :func:`topofl.data.loaders.mnist10k.mnist_federation`. Use it with a deep model (``--model cnn-small``).
    """

    n_clients: int = 10
    partition: str = "dirichlet"
    alpha: float = 0.5
    n_samples: int = 10_000
    test_fraction: float = 0.25
    styles: float = 0.0
    min_size: int = 20


def make_mnist(seed: int = 0, **overrides: Any) -> Federation:
    """The MNIST-10k federation (10 classes); ``styles > 0`` draws each client in its own writing style."""
    from topofl.data.loaders.mnist10k import mnist_federation
    from topofl.data.scenarios.common import build_config

    cfg = build_config(MnistConfig, overrides)
    return mnist_federation(cfg.n_clients, partition_kind=cfg.partition, alpha=cfg.alpha, n_samples=cfg.n_samples,
                            test_fraction=cfg.test_fraction, styles=cfg.styles, seed=seed, min_size=cfg.min_size)


@dataclass(frozen=True)
class RealImagesConfig:
    """Real CIFAR-10 (python pickles) or LEAF FEMNIST (JSON) read from ``root`` — nothing is
    downloaded; the pTopoFL paper's Scenarios C and D (``topofl experiment deep --data-root``).
    """

    root: str = ""
    n_clients: int = 10
    partition: str = "dirichlet"
    alpha: float = 0.5
    test_fraction: float = 0.25
    min_size: int = 20


def make_cifar10(seed: int = 0, **overrides: Any) -> Federation:
    """CIFAR-10 from ``root``, Dirichlet(α) over clients (Scenario C)."""
    from topofl.data.loaders.images import load_cifar10_arrays
    from topofl.data.loaders.mnist10k import image_federation
    from topofl.data.scenarios.common import build_config

    cfg = build_config(RealImagesConfig, overrides)
    if not cfg.root:
        raise ValueError("scenario cifar10 needs root=DIR holding CIFAR-10's python pickles "
                         "(data_batch_1..5, test_batch)")
    X, y = load_cifar10_arrays(cfg.root)
    return image_federation(X, y, cfg.n_clients, partition_kind=cfg.partition, alpha=cfg.alpha,
                            test_fraction=cfg.test_fraction, seed=seed, min_size=cfg.min_size, name="cifar10",
                            rescaled="pixel values 0-255 scaled by 1/255")


def make_femnist(seed: int = 0, **overrides: Any) -> Federation:
    """LEAF FEMNIST from ``root``: ``n_clients`` writers (seeded choice), LEAF's split (Scenario D)."""
    from topofl.data.loaders.femnist import load_femnist
    from topofl.data.scenarios.common import build_config

    cfg = build_config(RealImagesConfig, overrides)
    if not cfg.root:
        raise ValueError("scenario femnist needs root=DIR holding LEAF FEMNIST's train/ and test/ JSON directories")
    return load_femnist(cfg.root, n_writers=cfg.n_clients, seed=seed).to_federation()


@dataclass(frozen=True)
class HeartDiseaseConfig:
    """The UCI Heart Disease cohorts of four real hospitals (Cleveland, Hungary, Switzerland, VA
    Long Beach; shipped offline), one client each; see
    :func:`topofl.data.loaders.heart_disease.load_heart_disease` for the missing-value policy.
    """

    sites: str = "cleveland,hungary,switzerland,va"
    test_fraction: float = 0.25
    imputation: str = "median"
    indicators: bool = True
    standardise: str = "federated"
    pooled_training: bool = False


def make_heart_disease(seed: int = 0, **overrides: Any) -> Federation:
    """The four-hospital federation (binary: diagnosis > 0); ``seed`` draws each site's split."""
    from topofl.data.loaders.heart_disease import load_heart_disease
    from topofl.data.scenarios.common import build_config

    cfg = build_config(HeartDiseaseConfig, overrides)
    sites = [s.strip() for s in cfg.sites.split(",") if s.strip()]
    return load_heart_disease(sites=sites, seed=seed, test_fraction=cfg.test_fraction, imputation=cfg.imputation,
                              indicators=cfg.indicators, standardise=cfg.standardise,
                              pooled_training=cfg.pooled_training)


@dataclass(frozen=True)
class TableConfig:
    """Your own data: a CSV with a site column, or a directory with one CSV or NPZ per site (each
    site a client); see :mod:`topofl.data.loaders.tables`. From the command line: ``--data``.
    """

    path: str = ""
    site_column: str = "site"
    label_column: str = "y"
    test_fraction: float = 0.25
    task: str = ""
    standardise: str = "federated"


def make_table(seed: int = 0, **overrides: Any) -> Federation:
    """The federation of the sites in ``path``; ``seed`` draws each site's train/test split."""
    from topofl.data.loaders.tables import load_table
    from topofl.data.scenarios.common import build_config

    cfg = build_config(TableConfig, overrides)
    if not cfg.path:
        raise ValueError("scenario table needs path=FILE.csv or a directory (on the command line: --data PATH)")
    return load_table(cfg.path, cfg.site_column or None, cfg.label_column, seed=seed, test_fraction=cfg.test_fraction,
                      task=cfg.task or None, standardise=cfg.standardise)


SCENARIOS: dict[str, tuple[Callable[..., Federation], type]] = {
    "healthcare": (make_healthcare, HealthcareConfig),
    "benchmark": (make_benchmark, BenchmarkConfig),
    "continual": (make_continual, ContinualConfig),
    "digits": (make_digits, DigitsConfig),
    "mnist": (make_mnist, MnistConfig),
    "cifar10": (make_cifar10, RealImagesConfig),
    "femnist": (make_femnist, RealImagesConfig),
    "heart-disease": (make_heart_disease, HeartDiseaseConfig),
    "table": (make_table, TableConfig),
    "paper-healthcare": (make_paper_healthcare, PaperHealthcareConfig),
    "paper-benchmark": (make_paper_benchmark, PaperBenchmarkConfig),
}


#: one line per scenario, what it is (``topofl scenarios`` prints it; keep it true to the generator or loader)
DESCRIPTIONS: dict[str, str] = {
    "healthcare": "Synthetic hospitals (pTopoFL paper, Scenario A): 8 clients, 20 features, 60-250 patients each; two "
                  "sub-populations differ in case-mix geometry and decision rule; hospitals 1 and 5 have 30 % of "
                  "their training labels flipped. Favours pTopoFL by construction: geometry=independent or shared is "
                  "the control.",
    "benchmark": "Synthetic benchmark (pTopoFL paper, Scenario B): 10 clients, 20 features (12 informative) from "
                 "make_classification; each client's class balance drawn from Uniform(0.1, 0.9), with its own feature "
                 "shift and noise.",
    "continual": "Synthetic drift (pTopoFL paper, §4.5): 6 clients whose data change over 20 rounds; clients 3-5 drift "
                 "(their feature cloud changes shape, grows and moves, and their labels follow).",
    "digits": "Real handwritten digits, offline: scikit-learn's bundled 8x8 digits (1797 images, 10 classes, 64 pixel "
              "features scaled to [0, 1]) dealt to 40 clients in 4 rotation groups (0, 90, 180, 270 degrees); "
              "Sheaf-FMTL protocol: 75/25 split per client and a seeded half of the clients keep 20 % of their "
              "training images (protocol=false: split only).",
    "mnist": "Real MNIST digits (10,000 images of 28x28, shipped offline) split among 10 clients by "
             "partition=dirichlet (default), iid or shards; styles > 0 draws each client in its own writing style. "
             "Use a deep model (--model cnn-small).",
    "cifar10": "Real CIFAR-10 read from root=DIR (its python pickles; nothing is downloaded), split among 10 clients "
               "by Dirichlet(alpha) label skew (pTopoFL paper, Scenario C).",
    "femnist": "Real LEAF FEMNIST read from root=DIR (its train/ and test/ JSON; nothing is downloaded): n_clients "
               "writers chosen by the seed, each with LEAF's own split (pTopoFL paper, Scenario D); partition, alpha, "
               "test_fraction and min_size do not apply.",
    "heart-disease": "Real UCI Heart Disease cohorts of four hospitals (Cleveland, Hungary, Switzerland, VA Long "
                     "Beach; 920 patients, 13 clinical features, shipped): one client each, label diagnosis > 0.",
    "table": "Your own data: path=FILE.csv with a site column, or a directory with one CSV or NPZ (X, y) per site; "
             "each site is a client (on the command line: --data PATH).",
    "paper-healthcare": "The authors' paper-era Scenario A generator (their framework/ code, seed 42 gives Table 1's "
                        "data): 8 hospitals resampled from one make_classification pool with their own shift and "
                        "scale, hospitals 1 and 5 with 30 % of all labels flipped (test too); z-scored per client. "
                        "topofl experiment paper-protocol.",
    "paper-benchmark": "The authors' paper-era Scenario B generator (seed 42 gives Table 1's data): 10 clients of 500 "
                       "points resampled from one 5-class make_classification pool collapsed to binary, class balance "
                       "U(0.1, 0.9), noise 0.3; label skew only; z-scored per client.",
}


#: the scenarios whose data are drawn afresh for every seed (synthetic generators): two seeds share no
#: row. Every other source (real data, a user's table, image partitions) re-splits one set of rows by
#: seed, so that a row tested under one seed trains under another (what tuning must not mix).
DRAWN_PER_SEED = frozenset({"healthcare", "benchmark", "continual", "paper-healthcare", "paper-benchmark"})


def make_scenario(name: str, seed: int = 0, **params: Any) -> Federation:
    """A seeded scenario federation by name; ``params`` override the scenario's defaults."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; available: {', '.join(SCENARIOS)}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be an integer in [0, {MAX_SEED}]; got {seed!r}")
    return SCENARIOS[name][0](seed, **params)


__all__ = ["DESCRIPTIONS", "DRAWN_PER_SEED", "SCENARIOS", "make_scenario", "HealthcareConfig", "BenchmarkConfig",
           "ContinualConfig"]
