"""Your own tabular data, each site a client, split into train and test with a seed.

:func:`load_table` reads one CSV with a site column or a directory with one CSV or NPZ per site
(:func:`read_sites`); a pandas DataFrame goes through :meth:`Federation.from_dataframe`. Every cell is
checked where it enters; what cannot be read unambiguously is refused with a ``ValueError`` naming the
file, column and line, never guessed.
See docs/internals.md#topofl.data.loaders.tables for what is refused and the bounds.
"""
from __future__ import annotations

import array
import contextlib
import csv
import logging
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from topofl.data.federation import Federation
from topofl.limits import MAX_SCENARIO_VALUES

log = logging.getLogger(__name__)

#: one site's rows: (name, X, y, feature names)
Site = tuple[str, np.ndarray, np.ndarray, list[str]]

#: Largest magnitude a feature or label value may have. Float64 holds every integer exactly only
#: up to 2**53 ≈ 9.0e15; values beyond 1e15 in a table are almost always a sentinel for "missing"
#: (9.99e99, 1e20, netCDF's 9.97e36, 3.4e38 = FLT_MAX, 1e308) or a unit error, and a single one
#: wipes out its column (or overflows) in the standardisation every site shares.
MAX_ABS_VALUE = 1e15
#: Most columns (site, label and features) a CSV header may have; a wider one is refused before any row is read.
MAX_COLUMNS = 100_000
#: Most numbers (rows × columns) one CSV file may hold: 1.6 GB of float64, as :data:`topofl.limits.MAX_SCENARIO_VALUES`.
MAX_VALUES = MAX_SCENARIO_VALUES
#: Names of columns shown in an error before "... (N in all)".
_SHOWN = 12
_FIX = ("rescale the column (change its unit, or take a log) or drop the row; "
        "a sentinel for a missing value must be removed first")


def parse_cell(text: str, where: str, column: str, missing: str | None = None) -> float:
    """One CSV cell as a finite float of magnitude at most :data:`MAX_ABS_VALUE`.

    Parameters
    ----------
    text : str
        The cell as read (surrounding whitespace is ignored).
    where : str
        The file and line, e.g. ``"sites.csv line 7"``, that start the error message.
    column : str
        The column's name, for the error message.
    missing : str, optional
        A marker (e.g. ``"?"``) read as NaN.

    Raises
    ------
    ValueError
        Naming ``where``, the column and the cell, for an empty cell, text that is not a number
        (underscores included: Python reads ``"1_000"`` as 1000), NaN or ±inf, or a magnitude
        above :data:`MAX_ABS_VALUE` — with what to do about it.
    """
    cell = text.strip()
    if missing is not None and cell == missing:
        return float("nan")
    if cell == "":
        raise ValueError(f"{where}: column {column!r} is empty (fill or drop missing values first)")
    try:
        if "_" in cell:
            raise ValueError
        value = float(cell)
    except ValueError:
        raise ValueError(f"{where}: column {column!r} holds {cell[:40]!r}, not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{where}: column {column!r} holds {cell[:40]!r}, not a finite number "
                         "(fill or drop missing values first)")
    if abs(value) > MAX_ABS_VALUE:
        raise ValueError(f"{where}: column {column!r} holds {value:.6g}, beyond ±{MAX_ABS_VALUE:g} "
                         f"(the largest magnitude topofl reads); {_FIX}")
    return value


def _shown(names: Sequence[str], limit: int = _SHOWN) -> str:
    """At most ``limit`` names, then how many there are in all."""
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def _quoted(names: Iterable[str], limit: int = _SHOWN) -> str:
    names = [repr(n) for n in names]
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _checked_header(raw: list[str], name: str, site_column: str | None,
                    label_column: str) -> tuple[list[str], dict[str, int]]:
    """The header's names (whitespace stripped) and a name → index map, in linear time; a
    ``ValueError`` naming the file for too many, unnamed, duplicate or missing columns.
    """
    if len(raw) > MAX_COLUMNS:
        raise ValueError(f"{name}: {len(raw):,} columns; at most {MAX_COLUMNS:,} (site, label and features) "
                         "are read from a CSV file")
    header = [h.strip() for h in raw]
    index = _header_index(header, name)
    if site_column is not None and site_column == label_column:
        raise ValueError(f"{name}: the site column and the label column are both {label_column!r}; "
                         "they must be two different columns")
    for col in (site_column, label_column):
        if col is not None and col not in index:
            raise _missing_column(name, col, header)
    return header, index


def _header_index(header: list[str], name: str) -> dict[str, int]:
    """A name → index map of the stripped ``header``; a ``ValueError`` for an unnamed or a duplicate column."""
    index: dict[str, int] = {}
    duplicates: dict[str, list[int]] = {}
    for j, h in enumerate(header):
        if h == "":
            hint = (" (pandas writes its row index as an unnamed first column: save with to_csv(..., index=False))"
                    if j == 0 else "")
            raise ValueError(f"{name}: column {j + 1} has no name{hint}; "
                             "every column needs a unique name in the header")
        if h in index:
            duplicates.setdefault(h, [index[h] + 1]).append(j + 1)
        else:
            index[h] = j
    if duplicates:
        where = "; ".join(f"{h!r} (columns {' and '.join(map(str, cols))})"
                          for h, cols in list(duplicates.items())[:_SHOWN])
        raise ValueError(f"{name}: duplicate column name(s) {where}; rename them so that each column has its own name")
    return index


def _missing_column(name: str, col: str, header: list[str]) -> ValueError:
    """The error for a site or label column ``col`` the header lacks: a wrong separator, a name in another case, or
    the columns there are.
    """
    sep = next((s for s in (";", "\t", "|") if len(header) == 1 and s in header[0]), None)
    if sep is not None:
        return ValueError(f"{name}: no column {col!r}; the file seems to be separated by {sep!r}, not commas: "
                          "save it as comma-separated values (decimal points, not commas)")
    alike = [h for h in header if h.casefold() == col.casefold()]
    if alike:
        return ValueError(f"{name}: no column {col!r} (there is {alike[0]!r}: names are case-sensitive)")
    return ValueError(f"{name}: no column {col!r}; columns: {_shown(header)}")


def read_csv_sites(path: str | Path, site_column: str | None, label_column: str) -> list[Site]:
    """The sites of one CSV file with a header: rows grouped by ``site_column`` (``None``: the
    whole file is one site named after it); every other column except the label is a feature.

    Parameters
    ----------
    path : str or Path
        A UTF-8 (optionally with a byte-order mark) comma-separated file; blank lines are skipped.
    site_column : str or None
        The column naming each row's site; ``None`` makes the file one site.
    label_column : str
        The column of labels (class values or a regression target).

    Returns
    -------
    list of (name, X, y, feature names)
        One entry per site, sorted by site name.

    Raises
    ------
    ValueError
        Naming the file, and the line and column where one is at fault, for anything the module
        docstring lists as refused.
    """
    path = Path(path)
    name = path.name
    with _csv_reader(path) as reader:
        header, index, fi = _read_header(reader, name, site_column, label_column)
        features = [header[j] for j in fi]
        groups = _read_groups(reader, path, header, index, fi, site_column, label_column)
    if not groups:
        raise ValueError(f"{name}: no data rows")
    d = len(fi)
    return [(site, np.frombuffer(bytearray().join(rows), dtype=np.float64).reshape(len(rows), d),
             np.array(labels, dtype=np.float64), features)
            for site, (rows, labels) in sorted(groups.items())]


def _read_header(reader: Any, name: str, site_column: str | None,
                 label_column: str) -> tuple[list[str], dict[str, int], list[int]]:
    """The checked header of a CSV ``reader`` (its first non-blank row), its name → index map and the
    indices of its feature columns.
    """
    raw = next((r for r in reader if any(c.strip() for c in r)), None)
    if raw is None:
        raise ValueError(f"{name}: empty file (a header row is needed)")
    header, index = _checked_header(raw, name, site_column, label_column)
    fi = [j for j, h in enumerate(header) if h not in (site_column, label_column)]
    if not fi:
        raise ValueError(f"{name}: no feature columns besides {label_column!r}"
                         + (f" and {site_column!r}" if site_column else ""))
    return header, index, fi


def _read_groups(reader: Any, path: Path, header: list[str], index: dict[str, int], fi: list[int],
                 site_column: str | None, label_column: str) -> dict[str, tuple[list[array.array[float]], list[float]]]:
    """The data rows left in a CSV ``reader``, by site: each site's feature rows (``fi``) and labels,
    every cell checked by :func:`parse_cell`.
    """
    name = path.name
    li = index[label_column]
    si = index[site_column] if site_column is not None else None
    width, budget = len(header), MAX_VALUES
    groups: dict[str, tuple[list[array.array[float]], list[float]]] = {}
    for row in reader:
        if not any(cell.strip() for cell in row):
            continue
        where = f"{name} line {reader.line_num}"
        if len(row) != width:
            raise ValueError(f"{where}: {len(row)} values for {width} columns")
        budget -= width
        if budget < 0:
            raise ValueError(f"{where}: more than {MAX_VALUES:,} values in the file; topofl reads at most that many "
                             "from a CSV file (split it, or pass arrays to Federation.from_arrays)")
        site = row[si].strip() if si is not None else path.stem
        if site == "":
            raise ValueError(f"{where}: column {site_column!r} is empty")
        rows, labels = groups.setdefault(site, ([], []))
        rows.append(array.array("d", [parse_cell(row[j], where, header[j]) for j in fi]))
        labels.append(parse_cell(row[li], where, label_column))
    return groups


def read_sites(path: str | Path, site_column: str | None = "site", label_column: str = "y") -> list[Site]:
    """Sites from a CSV file (grouped by ``site_column``) or a directory of ``*.csv`` / ``*.npz``
    files, one site per file (named by the file; an NPZ holds ``X`` and ``y``).

    In a directory, every CSV file must have the same set of column names; a file whose columns
    come in another order is aligned to the first CSV file's order (logged). NPZ files have no
    column names: they must have as many features as the others. Two files naming the same site
    (``a.csv`` and ``a.npz``) are refused.
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in (".csv", ".npz"))
        if not files:
            raise ValueError(f"{str(path)!r} holds no .csv or .npz files")
        sites: list[Site] = []
        source: dict[str, str] = {}
        reference: tuple[str, list[str]] | None = None
        for f in files:
            if f.stem in source:
                raise ValueError(f"{source[f.stem]} and {f.name} both name site {f.stem!r}; rename one of them")
            source[f.stem] = f.name
            if f.suffix.lower() == ".npz":
                sites.append(_read_npz(f))
                continue
            (site, X, y, features), = read_csv_sites(f, None, label_column)
            if reference is None:
                reference = (f.name, features)
            elif features != reference[1]:
                X = X[:, _alignment(f.name, features, *reference)]
                features = list(reference[1])
            sites.append((site, X, y, features))
        if len({s[1].shape[1] for s in sites}) != 1:
            raise ValueError("the sites' files have different numbers of features: "
                             + ", ".join(f"{s[0]}: {s[1].shape[1]}" for s in sites))
        return sites
    if not path.is_file():
        raise ValueError(f"{str(path)!r} is neither a CSV file nor a directory")
    return read_csv_sites(path, site_column, label_column)


def _alignment(name: str, features: list[str], ref_name: str, ref_features: list[str]) -> list[int]:
    """The column indices that put ``features`` in ``ref_features``' order; a ``ValueError``
    naming both files and the columns when the two sets of names differ.
    """
    position = {h: j for j, h in enumerate(features)}
    missing = [h for h in ref_features if h not in position]
    ref = set(ref_features)
    extra = [h for h in features if h not in ref]
    if missing or extra:
        parts = ([f"missing {_quoted(missing)}"] if missing else []) + ([f"extra {_quoted(extra)}"] if extra else [])
        raise ValueError(f"{name}: its columns differ from {ref_name}'s: {'; '.join(parts)} "
                         "(every site file needs the same columns)")
    log.info("%s: columns aligned by name to %s's order", name, ref_name)
    return [position[h] for h in ref_features]


def check_values(name: str, X: np.ndarray, y: np.ndarray) -> None:
    """A ``ValueError`` naming the file, entry and value for a non-finite value or one beyond :data:`MAX_ABS_VALUE`."""
    for label, arr in (("X", X), ("y", y)):
        bad = ~np.isfinite(arr)
        bad[~bad] = np.abs(arr[~bad]) > MAX_ABS_VALUE
        if bad.any():
            at = tuple(int(i) for i in np.argwhere(bad)[0])
            value = arr[at]
            where = f"{label}[{', '.join(map(str, at))}]" + (f" (column x{at[1]})" if label == "X" else "")
            if not np.isfinite(value):
                raise ValueError(f"{name}: {where} holds {value}; every value must be finite "
                                 "(fill or drop missing values first)")
            raise ValueError(f"{name}: {where} holds {value:.6g}, beyond ±{MAX_ABS_VALUE:g} "
                             f"(the largest magnitude topofl reads); {_FIX}")


def _read_npz(path: Path) -> Site:
    try:
        with np.load(path, allow_pickle=False) as z:
            if "X" not in z or "y" not in z:
                raise ValueError(f"{path.name}: an NPZ site file needs arrays 'X' and 'y'; it has {', '.join(z.files)}")
            X, y = np.asarray(z["X"]), np.asarray(z["y"])
    except (OSError, EOFError) as exc:
        raise ValueError(f"cannot read {path.name} as NPZ: {exc}") from None
    if X.ndim != 2 or y.shape != (X.shape[0],) or X.dtype.kind not in "fiub" or y.dtype.kind not in "fiub":
        raise ValueError(f"{path.name}: X must be a numeric (n, d) array and y a numeric (n,) one; "
                         f"got {X.shape} {X.dtype} and {y.shape} {y.dtype}")
    X, y = X.astype(np.float64), y.astype(np.float64)
    check_values(path.name, X, y)
    return path.stem, X, y, [f"x{j}" for j in range(X.shape[1])]


def load_table(
    path: str | Path,
    site_column: str | None = "site",
    label_column: str = "y",
    **options: Any,
) -> Federation:
    """:func:`read_sites` then :meth:`Federation.from_sites` (``options``: seed, test_fraction, task, classes,
    standardise).
    """
    return Federation.from_sites(read_sites(path, site_column, label_column), name=Path(path).stem,
                                 **{"label_name": label_column, **options})


@dataclass(frozen=True)
class PredictionRows:
    """Rows of a CSV file to predict (:func:`read_prediction_rows`): the feature values in the model's
    column order (NaN where a cell is missing), each row's site (``None``: no site column), its label
    (``None``: no label column) and its line in the file.
    """

    X: np.ndarray
    sites: list[str] | None
    labels: np.ndarray | None
    lines: list[int]
    ignored: list[str]
    features: list[str] = field(default_factory=list)


def read_prediction_rows(path: str | Path, features: Sequence[str] | None, site_column: str | None,
                         label_column: str | None, allow_missing: bool = False) -> PredictionRows:
    """The rows of a CSV file with a header to predict, as :class:`PredictionRows`.

    Parameters
    ----------
    path : str or Path
        A UTF-8 comma-separated file with a header (as :func:`read_csv_sites` reads).
    features : sequence of str or None
        The model's input columns by name, in its order (the file may hold them in any order;
        a missing one is a ``ValueError`` naming it); ``None``: every column but the site and label
        columns, in file order.
    site_column, label_column : str or None
        Columns naming each row's site and holding its label; ``None`` or absent from the
        header: none. Other columns are ignored (listed in ``ignored``).
    allow_missing : bool
        Read an empty cell, ``?``, ``NA`` or ``NaN`` of a feature as missing (NaN; the model imputes);
        otherwise such a cell is a ``ValueError`` naming the line and column.
    """
    path = Path(path)
    name = path.name
    with _csv_reader(path) as reader:
        raw = next((r for r in reader if any(c.strip() for c in r)), None)
        if raw is None:
            raise ValueError(f"{name}: empty file (a header row is needed)")
        if len(raw) > MAX_COLUMNS:
            raise ValueError(f"{name}: {len(raw):,} columns; at most {MAX_COLUMNS:,} are read from a CSV file")
        header = [h.strip() for h in raw]
        index = _header_index(header, name)
        site = site_column if site_column in index else None
        label = label_column if label_column in index else None
        if features is None:
            features = [h for h in header if h not in (site, label)]
        missing = [f for f in features if f not in index]
        if missing:
            raise ValueError(f"{name}: the model's column(s) {_quoted(missing)} are missing "
                             f"(it takes {len(features)}: {_shown(list(features))})")
        fi = [index[f] for f in features]
        used = set(fi) | {index[c] for c in (site, label) if c is not None}
        ignored = [h for j, h in enumerate(header) if j not in used]
        rows, sites, labels, lines = [], [], [], []
        budget = MAX_VALUES
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            where = f"{name} line {reader.line_num}"
            if len(row) != len(header):
                raise ValueError(f"{where}: {len(row)} values for {len(header)} columns")
            budget -= len(header)
            if budget < 0:
                raise ValueError(f"{where}: more than {MAX_VALUES:,} values in the file")
            rows.append([_feature_cell(row[j], where, header[j], allow_missing) for j in fi])
            if site is not None:
                s = row[index[site]].strip()
                if not s:
                    raise ValueError(f"{where}: column {site!r} is empty")
                sites.append(s)
            if label is not None:
                labels.append(parse_cell(row[index[label]], where, label))
            lines.append(reader.line_num)
    if not rows:
        raise ValueError(f"{name}: no data rows")
    return PredictionRows(np.array(rows, dtype=np.float64).reshape(len(rows), len(fi)),
                          sites if site is not None else None,
                          np.array(labels, dtype=np.float64) if label is not None else None, lines, ignored,
                          list(features))


@contextlib.contextmanager
def _csv_reader(path: Path) -> Iterator[Any]:
    """A ``csv.reader`` over the UTF-8 file ``path`` (a byte-order mark skipped), whose failures become one-line
    value errors naming the file (and the line): unreadable, not UTF-8, a field beyond the CSV reader's
    limit, or not CSV at all. The caller's own ``ValueError`` passes as it is.
    """
    name = path.name
    reader: Any = None
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            yield reader
    except csv.Error as exc:
        line = (reader.line_num if reader is not None else 0) or 1
        if "field larger than field limit" in str(exc):
            raise ValueError(f"{name} line {line}: a field is longer than {csv.field_size_limit():,} characters "
                             "(the CSV reader's limit); is it a comma-separated table, with every quote closed?"
                             ) from None
        raise ValueError(f"{name} line {line}: not readable as CSV ({exc})") from None
    except OSError as exc:
        raise ValueError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{str(path)!r} is not a UTF-8 text file (save it as \"CSV UTF-8\")") from None


#: cells read as a missing value where the model imputes (``read_prediction_rows(..., allow_missing=True)``)
MISSING_CELLS = ("", "?", "NA", "NaN", "nan")


def _feature_cell(text: str, where: str, column: str, allow_missing: bool) -> float:
    if allow_missing and text.strip() in MISSING_CELLS:
        return float("nan")
    return parse_cell(text, where, column)


def held_out_sites(path: str | Path, site_column: str | None = "site", label_column: str = "y", *, seed: int = 0,
                   test_fraction: float = 0.25, task: str | None = None) -> list[Site]:
    """The held-out (test) rows of every site of ``path`` that :func:`load_table` (and ``topofl run --data``)
    with ``seed`` and ``test_fraction`` scores its clients on, as ``(name, X, y, feature names)`` in client
    order: the rows to check saved models with (``topofl predict``), raw, as the file holds them.
    """
    from topofl.data.federation import site_split

    out = []
    for k, (site, X, y, features) in enumerate(read_sites(path, site_column, label_column)):
        _, te = site_split(y, k, seed, test_fraction, task)
        out.append((site, X[te], y[te], features))
    return out


def write_sites_csv(sites: Sequence[Site], path: str | Path, site_column: str = "site",
                    label_column: str = "y") -> Path:
    """Write sites ``(name, X, y, feature names)`` to one CSV file with a site column (every value exact,
    as :func:`read_csv_sites` reads it back).
    """
    path = Path(path)
    features = list(sites[0][3]) if sites else []
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow([site_column, *features, label_column])
        for site, X, y, names in sites:
            if list(names) != features:
                raise ValueError(f"site {site!r} has other columns than {sites[0][0]!r}")
            for row, label in zip(X, y, strict=True):
                w.writerow([site, *(_exact(v) for v in row), _exact(label)])
    return path


def _exact(value: float) -> str:
    """A number as CSV text that reads back exactly: an integer without ``.0``."""
    v = float(value)
    return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)
