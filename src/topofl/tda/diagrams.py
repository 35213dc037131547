"""Vietoris–Rips persistence diagrams through a compiled PH library (giotto-ph).

:func:`diagrams` returns one float64 array of finite (birth, death) pairs per homological dimension,
sorted by decreasing persistence. See docs/internals.md#topofl.tda.diagrams for the canonical format
and the measured speed.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from topofl._validation import as_points, check_int

_N_THREADS = int(os.environ.get("TOPOFL_PH_THREADS", "1"))


def _ripser_parallel() -> Callable[..., dict[str, Any]]:
    # Imported lazily: gph pulls in scikit-learn and takes ~1 s to import.
    from gph import ripser_parallel

    fn: Callable[..., dict[str, Any]] = ripser_parallel  # gph ships no type information
    return fn


def raw_ripser(X: np.ndarray, maxdim: int = 1, n_threads: int = _N_THREADS) -> list[np.ndarray]:
    """Call the PH library directly and return its diagrams unchanged (for benchmarks)."""
    dgms: list[np.ndarray] = _ripser_parallel()(X, maxdim=maxdim, n_threads=n_threads)["dgms"]
    return dgms


def diagrams(
    X: np.ndarray,
    maxdim: int = 1,
    *,
    n_threads: int = _N_THREADS,
    validate: bool = True,
) -> list[np.ndarray]:
    """Exact Vietoris–Rips persistence diagrams of the points as given.

    Parameters
    ----------
    X : array of shape (n, d)
        Point cloud; at least 3 points, all finite.
    maxdim : int
        Highest homological dimension (0 or 1 for the descriptor; up to 3 accepted).
    n_threads : int
        Threads used by giotto-ph. Defaults to 1 (or ``$TOPOFL_PH_THREADS``): at the sizes of
        federated clients single-threaded calls are fastest and leave cores for other clients.
    validate : bool
        Check shape and finiteness (skip only for already validated arrays).

    Returns
    -------
    list of ndarray
        ``maxdim + 1`` arrays of finite (birth, death) pairs, see docs/internals.md#topofl.tda.diagrams.
    """
    if validate:
        X = as_points(X, "X", min_points=3)
        check_int("maxdim", maxdim, 0, 3)
    Y, s = ph_ready(np.ascontiguousarray(X, dtype=np.float64), "X")
    if s == 1.0:
        return [canonical(d) for d in raw_ripser(Y, maxdim=maxdim, n_threads=n_threads)]
    return [canonical(d) * s for d in raw_ripser(Y, maxdim=maxdim, n_threads=n_threads)]


#: coordinate spreads within [2**-SAFE_EXPONENT, 2**SAFE_EXPONENT] go to the PH library unscaled
SAFE_EXPONENT = 40
#: a cloud farther from the origin than this many spreads is centred first
CENTRE_RATIO = 64.0


def ph_ready(X: np.ndarray, field: str = "X") -> tuple[np.ndarray, float]:
    """``(Y, s)`` with ``diagrams(X) = s · diagrams(Y)`` and ``Y`` safe for the PH library.

    giotto-ph stores filtration values in float32 (range 1e-45 to 3e38, 7 digits) and computes
    distances from squared norms, so ``X * 1e39`` overflowed to empty diagrams, ``X * 1e-46``
    underflowed, and a cloud far from the origin lost its small distances. Rips diagrams are
    invariant under translation and equivariant under scaling, so:

    * a cloud farther from the origin than ``CENTRE_RATIO`` × its spread is translated to the
      centre of its bounding box;
    * a cloud whose spread lies outside [2⁻⁴⁰, 2⁴⁰] is divided by a power of two ``s`` (exact),
      and the diagrams are multiplied back by ``s``.

    Ordinary clouds are passed on unchanged (bit-identical results). ``ValueError`` naming
    ``field`` when the pairwise distances are not representable in float64.
    """
    if X.size == 0:
        return X, 1.0
    with np.errstate(over="ignore", invalid="ignore"):
        spread = np.ptp(X, axis=0)
        largest = float(spread.max())
        reach = largest * np.sqrt(X.shape[1])
    if not np.isfinite(reach):
        col = int(np.argmax(~np.isfinite(spread))) if not np.isfinite(spread).all() else int(np.argmax(spread))
        raise ValueError(
            f"{field}: pairwise distances are not representable in float64 (the coordinates of column {col} "
            f"span up to {largest:.3g}, times sqrt(d) overflows); rescale the data"
        )
    Y = X
    if float(np.abs(X).max()) > CENTRE_RATIO * largest:
        Y = X - (X.min(axis=0) + spread / 2.0)
    if largest == 0.0:
        return Y, 1.0
    exponent = int(np.floor(np.log2(largest)))
    if -SAFE_EXPONENT <= exponent <= SAFE_EXPONENT:
        return Y, 1.0
    s = float(np.ldexp(1.0, exponent))
    return Y / s, s


def representable_scale(X: np.ndarray, field: str = "X") -> float:
    """The power of two :func:`ph_ready` divides ``X`` by (1.0 for ordinary clouds)."""
    return ph_ready(X, field)[1]


def canonical(dgm: np.ndarray) -> np.ndarray:
    """Drop essential and zero-persistence pairs; float64; sort by decreasing persistence."""
    d = np.asarray(dgm, dtype=np.float64).reshape(-1, 2)
    finite = np.isfinite(d[:, 1]) & (d[:, 1] > d[:, 0])
    d = d[finite]
    order = np.argsort(d[:, 0] - d[:, 1], kind="stable")
    return d[order]
