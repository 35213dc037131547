"""Your own tabular data: one CSV with a site column, a directory with one CSV or NPZ per site, or
a pandas DataFrame (:meth:`Federation.from_dataframe`) — each site a client, split into train and test with a seed.

Every cell is checked where it enters: a missing column, an empty cell, a non-numeric feature, a
single site or labels that are not classes give a ``ValueError`` naming the file, column and line.
Labels follow :meth:`Federation.from_arrays`: classes 0..C−1 are inferred; anything else needs
``task`` (``binary`` also takes {−1, +1}; ``regression``) or ``classes``.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np

from topofl.data.federation import Federation

#: one site's rows: (name, X, y, feature names)
Site = tuple[str, np.ndarray, np.ndarray, list[str]]


def parse_cell(text: str, where: str, column: str, missing: str | None = None) -> float:
    """One CSV cell as a finite float (``missing``, e.g. ``"?"``, gives NaN); a ``ValueError``
    naming ``where`` (file and line) and the column otherwise.
    """
    cell = text.strip()
    if missing is not None and cell == missing:
        return float("nan")
    if cell == "":
        raise ValueError(f"{where}: column {column!r} is empty (fill or drop missing values first)")
    try:
        value = float(cell)
    except ValueError:
        raise ValueError(f"{where}: column {column!r} holds {cell[:40]!r}, not a number") from None
    if not np.isfinite(value):
        raise ValueError(f"{where}: column {column!r} holds {cell!r}")
    return value


def read_csv_sites(path: str | Path, site_column: str | None, label_column: str) -> list[Site]:
    """The sites of one CSV file with a header: rows grouped by ``site_column`` (``None``: the
    whole file is one site named after it); every other column except the label is a feature.
    """
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if not header:
                raise ValueError(f"{path.name}: empty file (a header row is needed)")
            header = [h.strip() for h in header]
            for col in [c for c in (site_column, label_column) if c is not None]:
                if col not in header:
                    raise ValueError(f"{path.name}: no column {col!r}; columns: {', '.join(header)}")
            features = [h for h in header if h not in (site_column, label_column)]
            if not features:
                raise ValueError(f"{path.name}: no feature columns besides {label_column!r}")
            fi = [header.index(h) for h in features]
            li = header.index(label_column)
            si = header.index(site_column) if site_column is not None else None
            groups: dict[str, tuple[list[list[float]], list[float]]] = {}
            for line, row in enumerate(reader, start=2):
                if not any(cell.strip() for cell in row):
                    continue
                if len(row) != len(header):
                    raise ValueError(f"{path.name} line {line}: {len(row)} values for {len(header)} columns")
                where = f"{path.name} line {line}"
                site = row[si].strip() if si is not None else path.stem
                if site == "":
                    raise ValueError(f"{where}: column {site_column!r} is empty")
                rows, labels = groups.setdefault(site, ([], []))
                rows.append([parse_cell(row[j], where, header[j]) for j in fi])
                labels.append(parse_cell(row[li], where, label_column))
    except OSError as exc:
        raise ValueError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{str(path)!r} is not a UTF-8 text file") from None
    if not groups:
        raise ValueError(f"{path.name}: no data rows")
    return [(name, np.array(rows, dtype=np.float64), np.array(labels), features) for name, (rows, labels) in sorted(groups.items())]


def read_sites(path: str | Path, site_column: str | None = "site", label_column: str = "y") -> list[Site]:
    """Sites from a CSV file (grouped by ``site_column``) or a directory of ``*.csv`` / ``*.npz``
    files, one site per file (named by the file; an NPZ holds ``X`` and ``y``).
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in (".csv", ".npz"))
        if not files:
            raise ValueError(f"{str(path)!r} holds no .csv or .npz files")
        sites: list[Site] = []
        for f in files:
            if f.suffix.lower() == ".csv":
                sites += read_csv_sites(f, None, label_column)
            else:
                sites.append(_read_npz(f))
        if len({s[1].shape[1] for s in sites}) != 1:
            raise ValueError("the sites' files have different numbers of features: " + ", ".join(f"{s[0]}: {s[1].shape[1]}" for s in sites))
        return sites
    if not path.is_file():
        raise ValueError(f"{str(path)!r} is neither a CSV file nor a directory")
    return read_csv_sites(path, site_column, label_column)


def _read_npz(path: Path) -> Site:
    try:
        with np.load(path, allow_pickle=False) as z:
            if "X" not in z or "y" not in z:
                raise ValueError(f"{path.name}: an NPZ site file needs arrays 'X' and 'y'; it has {', '.join(z.files)}")
            X, y = np.asarray(z["X"]), np.asarray(z["y"])
    except (OSError, EOFError) as exc:
        raise ValueError(f"cannot read {path.name} as NPZ: {exc}") from None
    if X.ndim != 2 or y.shape != (X.shape[0],) or X.dtype.kind not in "fiub" or y.dtype.kind not in "fiub":
        raise ValueError(f"{path.name}: X must be a numeric (n, d) array and y a numeric (n,) one; got {X.shape} {X.dtype} and {y.shape} {y.dtype}")
    return path.stem, X.astype(np.float64), y.astype(np.float64), [f"x{j}" for j in range(X.shape[1])]


def load_table(
    path: str | Path,
    site_column: str | None = "site",
    label_column: str = "y",
    **options: Any,
) -> Federation:
    """:func:`read_sites` then :meth:`Federation.from_sites` (``options``: seed, test_fraction, task, classes, standardise)."""
    return Federation.from_sites(read_sites(path, site_column, label_column), name=Path(path).stem, **options)


