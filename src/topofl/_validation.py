"""Input checks shared by the whole package.

Every check raises :class:`ValueError` whose message names the offending field and value,
so that bad input never turns into a silent NaN or a crash deep inside numpy.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np


def as_points(X: Any, field: str = "X", min_points: int = 1) -> np.ndarray:
    """Return ``X`` as a finite 2-D float64 array of points, or raise ``ValueError``.

    Parameters
    ----------
    X : array-like of shape (n, d)
        Point cloud or feature matrix.
    field : str
        Name used in error messages, e.g. ``"client 3 X_train"``.
    min_points : int
        Smallest acceptable number of rows.
    """
    arr = as_real(X, field)
    if arr.ndim != 2:
        raise ValueError(
            f"{field} must be a 2-D array of shape (n_points, n_features); got ndim={arr.ndim} "
            f"with shape {arr.shape}"
        )
    if arr.shape[0] < min_points:
        raise ValueError(f"{field} needs at least {min_points} points; got {arr.shape[0]}")
    if arr.shape[1] < 1:
        raise ValueError(f"{field} needs at least 1 feature; got shape {arr.shape}")
    check_finite(arr, field)
    return arr


def as_real(X: Any, field: str) -> np.ndarray:
    """``X`` as a float64 array of real numbers; ``ValueError`` naming ``field`` for complex,
    text or other non-real input (instead of NumPy's silent casts and warnings).
    """
    try:
        raw = np.asarray(X)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{field} must be a numeric array; got {type(X).__name__}: {exc}") from None
    if raw.dtype.kind == "c":
        raise ValueError(f"{field} must hold real numbers; got complex values (dtype {raw.dtype})")
    if raw.dtype.kind in "USVMm":
        raise ValueError(f"{field} must hold real numbers; got dtype {raw.dtype}")
    try:
        return np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{field} must be a numeric array of real numbers; got {type(X).__name__}: {exc}") from None


def check_finite(arr: np.ndarray, field: str) -> None:
    """Raise ``ValueError`` naming the first non-finite entry of ``arr``."""
    bad = ~np.isfinite(arr)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{field} contains a non-finite value ({float(arr[idx])}) at index {idx}")


def as_labels(y: Any, n: int, field: str = "y") -> np.ndarray:
    """Return ``y`` as a finite 1-D float64 array of length ``n``, or raise ``ValueError``."""
    arr = as_real(y, field)
    if arr.ndim != 1:
        raise ValueError(f"{field} must be a 1-D array; got shape {arr.shape}")
    if arr.shape[0] != n:
        raise ValueError(f"{field} has {arr.shape[0]} labels but the features have {n} rows")
    check_finite(arr, field)
    return arr


def show(value: Any) -> str:
    """A value as a user wrote it: numpy scalars shown as plain Python numbers."""
    if isinstance(value, np.generic):
        value = value.item()
    return repr(value)


def check_range(
    name: str,
    value: float,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """Raise ``ValueError`` unless ``low (<|<=) value (<|<=) high``.

    The message names the field, the value and the allowed interval.
    """
    kind = type(value)
    if kind is float:   # the common case, without the general checks' calls: finite is all a float must be
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite; got {show(value)}")
    elif kind is not int:   # a Python int (not a bool, whose type is bool) is a finite number
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ValueError(f"{name} must be a number; got {show(value)}")
        if not isinstance(value, (int, np.integer)) and not np.isfinite(value):  # Python ints of any size are finite
            raise ValueError(f"{name} must be finite; got {show(value)}")
    ok = True
    if low is not None:
        ok &= value > low if low_open else value >= low
    if high is not None:
        ok &= value < high if high_open else value <= high
    if not ok:
        lo = "-inf" if low is None else f"{low}"
        hi = "inf" if high is None else f"{high}"
        interval = f"{'(' if low_open or low is None else '['}{lo}, {hi}{')' if high_open or high is None else ']'}"
        raise ValueError(f"{name} must be in {interval}; got {show(value)}")


def check_int(name: str, value: Any, low: int | None = None, high: int | None = None) -> None:
    """Raise ``ValueError`` unless ``value`` is an integer within ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer; got {show(value)}")
    check_range(name, int(value), low, high)


def check_choice(name: str, value: Any, choices: tuple[str, ...] | list[str]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(str, choices))}; got {show(value)}")


class TrainingWarning(UserWarning):
    """Training is likely to go wrong: features on very different scales, or a diverging loss."""
