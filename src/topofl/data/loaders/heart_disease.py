"""The UCI Heart Disease cohorts of four hospitals: a real, naturally federated clinical benchmark.

:func:`load_heart_disease`: Cleveland, Hungary, Switzerland and VA Long Beach, one client each; the files
ship in ``topofl/data/builtin/heart-disease/``. Missing values are handled by documented options
(``imputation``, ``indicators``, ``standardise``), each site using only its own training rows.
See docs/internals.md#topofl.data.loaders.heart_disease for the cohorts and the missing-value policy.
"""
from __future__ import annotations

from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import numpy as np

from topofl._validation import check_choice, check_range
from topofl.data.federation import Federation
from topofl.data.loaders.tables import parse_cell
from topofl.data.partition import train_test_split
from topofl.models.preprocessing import Preprocessing

#: the sites in file order, with their file names
SITES = {"cleveland": "processed.cleveland.data", "hungary": "processed.hungarian.data",
         "switzerland": "processed.switzerland.data", "va": "processed.va.data"}
#: the 13 feature columns of the UCI documentation, in file order (the 14th is the diagnosis)
FEATURES = ("age", "sex", "cp", "trestbps", "chol", "fbs", "restecg", "thalach", "exang", "oldpeak", "slope", "ca",
            "thal")
#: columns where a recorded 0 means "not measured" (Switzerland's cholesterol)
ZERO_MEANS_MISSING = ("chol",)


def heart_disease_dir() -> Path:
    """The directory of the shipped UCI Heart Disease files."""
    return Path(str(resources.files("topofl.data") / "builtin" / "heart-disease"))


def read_site(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """One site's file as ``(X, num)``: X (n, 13) float64 with NaN for ``?`` (and for a 0 in
    :data:`ZERO_MEANS_MISSING` columns), ``num`` the diagnosis 0–4 as int64.

    Raises ``ValueError`` naming the file, line and column for a malformed file: not ASCII text (a
    UTF-8 byte-order mark is ignored), not 14 values, a value that is not a finite number of
    magnitude at most :data:`topofl.data.loaders.tables.MAX_ABS_VALUE`, a diagnosis outside 0–4.
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise ValueError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path.name}: not ASCII text (byte {exc.start} cannot be decoded)") from None
    rows, labels = [], []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if not line.isascii():
            bad = next(ch for ch in line if not ch.isascii())
            raise ValueError(f"{path.name} line {i}: not ASCII text ({bad!r}); "
                             "the UCI files hold ASCII numbers and '?'")
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 14:
            raise ValueError(f"{path.name} line {i}: expected 14 comma-separated values; got {len(cells)}")
        row = [parse_cell(cell, f"{path.name} line {i}", name, missing="?")
               for name, cell in zip((*FEATURES, "num"), cells, strict=True)]
        if np.isnan(row[-1]) or row[-1] not in (0, 1, 2, 3, 4):
            raise ValueError(f"{path.name} line {i}: diagnosis 'num' must be 0-4; got {cells[-1]!r}")
        rows.append(row[:-1])
        labels.append(int(row[-1]))
    if not rows:
        raise ValueError(f"{path.name}: no rows")
    X = np.array(rows, dtype=np.float64)
    for name in ZERO_MEANS_MISSING:
        j = FEATURES.index(name)
        X[X[:, j] == 0, j] = np.nan
    return X, np.array(labels, dtype=np.int64)


def site_medians(X_train: np.ndarray) -> np.ndarray:
    """The median of every column over a site's observed training values (0 where it observed none)."""
    with np.errstate(all="ignore"):
        observed = ~np.isnan(X_train)
        return np.array([np.median(X_train[observed[:, j], j]) if observed[:, j].any() else 0.0
                         for j in range(X_train.shape[1])])


def impute_site(X_train: np.ndarray, X_test: np.ndarray, columns: Sequence[int],
                indicators: bool) -> tuple[np.ndarray, np.ndarray]:
    """Fill one site's missing values with the medians of its own training rows (0 where the site
    never observed a column) and append a 0/1 indicator per column of ``columns``.
    """
    med = site_medians(X_train)
    out = []
    for X in (X_train, X_test):
        miss = np.isnan(X)
        filled = np.where(miss, med[None, :], X)
        out.append(np.hstack([filled, miss[:, list(columns)].astype(np.float64)]) if indicators and columns else filled)
    return out[0], out[1]


def load_heart_disease(
    root: str | Path | None = None,
    *,
    sites: Sequence[str] = tuple(SITES),
    seed: int = 0,
    test_fraction: float = 0.25,
    imputation: str = "median",
    indicators: bool = True,
    standardise: str = "federated",
    pooled_training: bool = False,
) -> Federation:
    """The four-hospital federation (binary: ``num > 0``), one client per site in ``sites`` order.

    Parameters
    ----------
    root : path, optional
        A directory with the four UCI "processed" files; default: the copy shipped with topofl.
    sites : sequence of str
        Which of ``cleveland``, ``hungary``, ``switzerland``, ``va`` (at least two), in client order.
    seed : int
        Seeds each site's stratified train/test split.
    test_fraction : float
        Share of each site's patients held out for testing, in (0, 1).
    imputation : {"median"}
        Each site's own training medians (see docs/internals.md#topofl.data.loaders.heart_disease).
    indicators : bool
        Append a missing-value indicator per feature that is missing anywhere in the cohort.
    standardise : {"federated", "per_client", "none"}
        Feature scaling, as :meth:`Federation.from_arrays`.
    pooled_training : bool
        The pooled-data reference: every client trains on all sites' training rows together (each
        site imputed as above) and is tested on its own site's test rows, so a method that trains
        each client alone (``local``) gives a centralised model, scored site by site.
    """
    check_choice("imputation", imputation, ("median",))
    check_range("test_fraction", test_fraction, 0.0, 1.0, low_open=True, high_open=True)
    sites = list(sites)
    unknown = [s for s in sites if s not in SITES]
    if unknown:
        raise ValueError(f"unknown site(s) {', '.join(map(repr, unknown))}; available: {', '.join(SITES)}")
    if len(set(sites)) != len(sites) or len(sites) < 2:
        raise ValueError(f"sites must name at least two different sites; got {sites!r}")
    base = Path(root) if root is not None else heart_disease_dir()
    data = [read_site(base / SITES[s]) for s in sites]
    missing_anywhere = [j for j in range(len(FEATURES)) if any(np.isnan(X[:, j]).any() for X, _ in data)]
    splits = []
    for k, (_, num) in enumerate(data):
        y = (num > 0).astype(np.int64)
        rng = np.random.default_rng(np.random.SeedSequence([seed, k, 0x4EA7]))
        splits.append((y, *train_test_split(y, test_fraction, rng)))
    # what predict applies to a raw row: a 0 cholesterol is missing, each site's medians fill, indicators appended
    prep = Preprocessing(
        n_clients=len(sites), feature_names=FEATURES,
        impute=np.stack([site_medians(X[tr]) for (X, _), (_, tr, _) in zip(data, splits, strict=True)]),
        zero_is_missing=tuple(FEATURES.index(c) for c in ZERO_MEANS_MISSING),
        indicators=tuple(missing_anywhere) if indicators else (), task="binary", label_name="num > 0")
    arrays, meta = [], []
    for k, (name, (X, _), (y, tr, te)) in enumerate(zip(sites, data, splits, strict=True)):
        arrays.append((prep.impute_rows(X[tr], k), y[tr], prep.impute_rows(X[te], k), y[te]))
        meta.append({"site": name, "n_patients": int(y.size), "prevalence": float(y.mean()),
                     "missing_share": float(np.isnan(X).mean())})
    if pooled_training:
        Xp, yp = np.vstack([a[0] for a in arrays]), np.concatenate([a[1] for a in arrays])
        arrays = [(Xp, yp, Xte, yte) for _, _, Xte, yte in arrays]
    return Federation.from_arrays(arrays, task="binary", name="heart-disease", meta=meta, standardise=standardise,
                                  preprocessing=prep)


def feature_names(indicators: bool = True, root: str | Path | None = None,
                  sites: Sequence[str] = tuple(SITES)) -> list[str]:
    """The column names of :func:`load_heart_disease`'s features (indicators as ``NAME_missing``)."""
    base = Path(root) if root is not None else heart_disease_dir()
    data = [read_site(base / SITES[s])[0] for s in sites]
    extra = [f"{FEATURES[j]}_missing" for j in range(len(FEATURES)) if any(np.isnan(X[:, j]).any() for X in data)]
    return list(FEATURES) + (extra if indicators else [])
