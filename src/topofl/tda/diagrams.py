"""Vietoris–Rips persistence diagrams through a compiled PH library.

Engine: giotto-ph (``gph.ripser_parallel``), a multi-threaded C++ port of Ripser. Measured on
the project's 2-core machine (points in R^20, ``maxdim=1``): 1.2 ms at n = 80, 67 ms at n = 500,
1.8 s at n = 2000, about twice as fast as ripser.py (2.1 ms / 163 ms / 5.3 s) and orders of
magnitude faster than gudhi's RipsComplex (22 ms at n = 80, 22 s at n = 500). The diagrams agree
with ripser.py to float32 precision (checked in ``tests/tda/test_tda_diagrams.py``).

Canonical format
----------------
``diagrams(X, maxdim)`` returns a list ``[D0, D1, ...]`` with one ``(k, 2)`` float64 array of
*finite* (birth, death) pairs per homological dimension, rows sorted by decreasing persistence.
The Rips filtration of a non-empty point cloud has exactly one essential class, the H0 component
that never dies (birth 0, death +inf); it carries no information beyond "the cloud is non-empty"
and is dropped. H1 and higher have no essential classes because the full filtration (no distance
threshold) is computed. Zero-persistence pairs (from duplicate points) are dropped, as in Ripser.
"""
from __future__ import annotations

import os

import numpy as np

from topofl._validation import as_points, check_int

_N_THREADS = int(os.environ.get("TOPOFL_PH_THREADS", "1"))


def _ripser_parallel():
    # Imported lazily: gph pulls in scikit-learn and takes ~1 s to import.
    from gph import ripser_parallel

    return ripser_parallel


def raw_ripser(X: np.ndarray, maxdim: int = 1, n_threads: int = _N_THREADS) -> list[np.ndarray]:
    """Call the PH library directly and return its diagrams unchanged (for benchmarks)."""
    return _ripser_parallel()(X, maxdim=maxdim, n_threads=n_threads)["dgms"]


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
        ``maxdim + 1`` arrays of finite (birth, death) pairs, see the module docstring.
    """
    if validate:
        X = as_points(X, "X", min_points=3)
        check_int("maxdim", maxdim, 0, 3)
    dgms = raw_ripser(np.ascontiguousarray(X, dtype=np.float64), maxdim=maxdim, n_threads=n_threads)
    return [canonical(d) for d in dgms]


def canonical(dgm: np.ndarray) -> np.ndarray:
    """Drop essential and zero-persistence pairs; float64; sort by decreasing persistence."""
    d = np.asarray(dgm, dtype=np.float64).reshape(-1, 2)
    finite = np.isfinite(d[:, 1]) & (d[:, 1] > d[:, 0])
    d = d[finite]
    order = np.argsort(d[:, 0] - d[:, 1], kind="stable")
    return d[order]
