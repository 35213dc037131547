"""One registry of named data sources for both families: the scenarios (:mod:`topofl.data.scenarios`)
and the offline data sets of the Sheaf-FMTL experiments. :func:`load` gives a source's clients for a seed.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from topofl.data.scenarios import DESCRIPTIONS, DRAWN_PER_SEED, SCENARIOS, make_scenario


@dataclass(frozen=True)
class DataSource:
    """A named data source: ``load(seed, **params)`` returns a :class:`~topofl.data.Federation` or a
    ``LoadedData`` (clients whose feature counts may differ); ``drawn_per_seed`` says whether two
    seeds share no row (synthetic generators) or re-split one set of rows (what tuning must not mix).
    """

    name: str
    load: Callable[..., Any]
    description: str
    drawn_per_seed: bool


def _rotated_mnist(seed: int, **params: Any) -> Any:
    """Rotated MNIST-10k (the 10,000 shipped digits), the Sheaf-FMTL paper's protocol."""
    from topofl.data.loaders import rotated_mnist
    from topofl.data.loaders.mnist10k import mnist_10k_dir

    return rotated_mnist(mnist_10k_dir(), seed=seed, **params)


def _rotated_digits(seed: int, **params: Any) -> Any:
    from topofl.data.loaders import rotated_digits

    return rotated_digits(seed=seed, **params)


def _tabular(seed: int, **params: Any) -> Any:
    from topofl.data.loaders import synthetic_tabular

    return synthetic_tabular(seed=seed, **params)


def _school(seed: int, **params: Any) -> Any:
    """School (the 139 schools shipped with topofl), the paper's protocol, z-scored per school."""
    from importlib import resources

    from topofl.data.loaders.matfiles import load_school

    path = Path(str(resources.files("topofl.data") / "builtin" / "school" / "school.mat"))
    return load_school(path, seed=seed, **{"standardise": "per_client", **params})


def _scenario_loader(name: str) -> Callable[..., Any]:
    def load(seed: int, **params: Any) -> Any:
        return make_scenario(name, seed, **params)

    return load


_PEER_SOURCES = {
    "rotated-digits": (_rotated_digits,
                       "scikit-learn's 8x8 digits dealt to clients in rotation groups (Sheaf-FMTL protocol).", False),
    "rotated-mnist": (_rotated_mnist, "Rotated MNIST-10k, the Sheaf-FMTL paper's protocol (10,000 shipped digits).",
                      False),
    "tabular": (_tabular, "Synthetic tabular clients whose feature counts differ (Sheaf-FMTL's heterogeneous models).",
                True),
    "school": (_school, "The School benchmark (139 schools, shipped), the Sheaf-FMTL protocol, z-scored per school.",
               False),
}

SOURCES: dict[str, DataSource] = {
    **{n: DataSource(n, _scenario_loader(n), DESCRIPTIONS.get(n, ""), n in DRAWN_PER_SEED) for n in SCENARIOS},
    **{n: DataSource(n, f, d, fresh) for n, (f, d, fresh) in _PEER_SOURCES.items()},
}


def available() -> list[str]:
    """Names of every registered data source."""
    return list(SOURCES)


def load(name: str, seed: int = 0, params: Mapping[str, Any] | None = None) -> Any:
    """The clients of data source ``name`` for ``seed`` (``params`` override its defaults).

    Raises
    ------
    ValueError
        For an unknown name (listing the known ones) or a bad parameter.
    """
    if name not in SOURCES:
        raise ValueError(f"unknown data source {name!r}; available: {', '.join(SOURCES)}")
    if name in SCENARIOS:
        return make_scenario(name, seed, **dict(params or {}))
    try:
        return SOURCES[name].load(seed, **dict(params or {}))
    except TypeError as exc:  # an unknown keyword of the loader: a bad parameter, named
        raise ValueError(f"data source {name!r}: {exc}") from None
