"""The pTopoFL client descriptor φ (paper §3.1, Eq. 5 and Appendix B).

:func:`descriptor` computes the 48-dimensional φ of a point cloud (:class:`DescriptorLayout` names its
entries); :func:`descriptor_problems` checks a received one. See docs/internals.md#topofl.tda.descriptor
for the layout, how it reconciles the paper, and the ``scale`` options.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, overload

import numpy as np

from topofl._validation import as_points, check_choice, check_int
from topofl.tda.diagrams import diagrams, representable_scale

SCALINGS = ("none", "standard", "unit_box")
DEFAULT_N_SUB = 80
DEFAULT_N_THRESHOLDS = 20
_SCALARS = (
    "h0_betti",
    "h1_betti",
    "h0_entropy",
    "h1_entropy",
    "h0_amplitude",
    "h1_amplitude",
    "h0_n_persistent",
    "h1_n_persistent",
)


@dataclass(frozen=True)
class DescriptorLayout:
    """Names of the descriptor's entries, so that code asks for ``"h0_entropy"``, not index 2."""

    n_thresholds: int = DEFAULT_N_THRESHOLDS

    @property
    def names(self) -> tuple[str, ...]:
        return _layout_names(self.n_thresholds)

    def __len__(self) -> int:
        return len(_SCALARS) + 2 * self.n_thresholds

    def index(self, name: str) -> int:
        """Position of a scalar entry or of one curve value (``"h1_curve_07"``)."""
        try:
            return self.names.index(name)
        except ValueError:
            raise ValueError(f"unknown descriptor entry {name!r}; known: {', '.join(self.names)}") from None

    def slice(self, block: str) -> slice:
        """Slice of a whole block: ``"scalars"``, ``"h0_curve"`` or ``"h1_curve"``."""
        s, L = len(_SCALARS), self.n_thresholds
        blocks = {"scalars": slice(0, s), "h0_curve": slice(s, s + L), "h1_curve": slice(s + L, s + 2 * L)}
        if block not in blocks:
            raise ValueError(f"unknown descriptor block {block!r}; known: {', '.join(blocks)}")
        return blocks[block]

    def get(self, phi: np.ndarray, name: str) -> np.ndarray:
        """Entry or block ``name`` of one descriptor or of a (K, m) batch."""
        phi = np.asarray(phi)
        key = self.slice(name) if name in ("scalars", "h0_curve", "h1_curve") else self.index(name)
        return phi[..., key]


@lru_cache(maxsize=16)
def _layout_names(n_thresholds: int) -> tuple[str, ...]:
    curves = tuple(f"h{j}_curve_{i:02d}" for j in (0, 1) for i in range(n_thresholds))
    return _SCALARS + curves


LAYOUT = DescriptorLayout()
DESCRIPTOR_DIM = len(LAYOUT)


def subsample(X: np.ndarray, n_sub: int, rng: np.random.Generator) -> np.ndarray:
    """Seeded subsample of at most ``n_sub`` rows without replacement (all rows if fewer)."""
    if X.shape[0] <= n_sub:
        return X
    return X[rng.choice(X.shape[0], size=n_sub, replace=False)]


def scale_points(X: np.ndarray, scale: str) -> np.ndarray:
    """Apply the descriptor's optional scaling (see docs/internals.md#topofl.tda.descriptor).

    Both scalings are invariant to a global factor, so the points are first divided by a power of
    two (exact) that brings their spread near 1: means and variances of features near 1e300 or
    1e-300 then neither overflow nor underflow.
    """
    if scale == "none":
        return X
    X = X / representable_scale(X)
    if scale == "standard":
        sd = X.std(axis=0)
        standard: np.ndarray = (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
        return standard
    lo, span = X.min(axis=0), np.ptp(X, axis=0)
    unit_box: np.ndarray = (X - lo) / np.where(span > 0, span, 1.0)
    return unit_box


def persistence_entropy(pers: np.ndarray) -> float:
    """Persistence entropy -Σ p_i log p_i with p_i = pers_i / Σ pers (Eq. 5); 0 for no pairs."""
    total = pers.sum()
    if pers.size == 0 or total <= 0:
        return 0.0
    p = pers[pers > 0] / total
    return max(0.0, float(-(p * np.log(p)).sum()))  # max: a single pair gives 0.0, not -0.0


def _amplitude(pers: np.ndarray) -> float:
    """A_j = (Σ pers_i²)^{1/2} (Eq. 5), computed as m·‖pers/m‖ with m = max pers so that squares
    of persistences near 1e-300 or 1e300 neither underflow nor overflow.
    """
    m = float(pers.max()) if pers.size else 0.0
    if m <= 0.0:
        return 0.0
    if 1e-100 < m < 1e100:  # squares are safe: the plain formula (bit-identical to earlier releases)
        return float(np.sqrt(pers @ pers))
    q = pers / m
    return m * float(np.sqrt(q @ q))


def betti_curve(dgm: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Number of pairs alive (birth <= t < death) at each threshold t (Eq. 5, Appendix B)."""
    if dgm.shape[0] == 0:
        return np.zeros(thresholds.shape[0])
    alive = (dgm[:, :1] <= thresholds[None, :]) & (thresholds[None, :] < dgm[:, 1:2])
    counts: np.ndarray = alive.sum(axis=0).astype(np.float64)
    return counts


def _quantile_sorted(v: np.ndarray, q: float) -> float:
    """``np.quantile(v, q)`` (linear interpolation) of an already sorted 1-D array, without its overhead."""
    pos = q * (v.size - 1)
    lo = int(pos)
    hi = min(lo + 1, v.size - 1)
    return float(v[lo] + (pos - lo) * (v[hi] - v[lo]))


def thresholds_for(dgm0: np.ndarray, n_thresholds: int) -> np.ndarray:
    """L thresholds from 0 to the 95th percentile of H0 deaths (Appendix B)."""
    t_max = _quantile_sorted(np.sort(dgm0[:, 1]), 0.95) if dgm0.shape[0] else 0.0
    return np.linspace(0.0, t_max, n_thresholds)


def descriptor_from_diagrams(dgms: Sequence[np.ndarray], n_thresholds: int = DEFAULT_N_THRESHOLDS) -> np.ndarray:
    """Assemble φ from canonical H0 and H1 diagrams (pure function).

    The layout: docs/internals.md#topofl.tda.descriptor.
    """
    d0, d1 = dgms[0], dgms[1] if len(dgms) > 1 else np.empty((0, 2))
    thresholds = thresholds_for(d0, n_thresholds)
    scalars = np.empty(len(_SCALARS))
    for j, d in enumerate((d0, d1)):
        pers = d[:, 1] - d[:, 0]
        scalars[j] = pers.size
        scalars[2 + j] = persistence_entropy(pers)
        scalars[4 + j] = _amplitude(pers)
        med = _quantile_sorted(np.sort(pers), 0.5) if pers.size else 0.0
        scalars[6 + j] = float((pers > med).sum())
    return np.concatenate([scalars, betti_curve(d0, thresholds), betti_curve(d1, thresholds)])


@overload
def descriptor(
    X: np.ndarray,
    n_sub: int = ...,
    n_thresholds: int = ...,
    seed: int | np.random.Generator | None = ...,
    scale: str = ...,
    *,
    return_diagrams: Literal[False] = ...,
) -> np.ndarray: ...


@overload
def descriptor(
    X: np.ndarray,
    n_sub: int = ...,
    n_thresholds: int = ...,
    seed: int | np.random.Generator | None = ...,
    scale: str = ...,
    *,
    return_diagrams: Literal[True],
) -> tuple[np.ndarray, list[np.ndarray]]: ...


def descriptor(
    X: np.ndarray,
    n_sub: int = DEFAULT_N_SUB,
    n_thresholds: int = DEFAULT_N_THRESHOLDS,
    seed: int | np.random.Generator | None = 0,
    scale: str = "none",
    *,
    return_diagrams: bool = False,
) -> np.ndarray | tuple[np.ndarray, list[np.ndarray]]:
    """The 48-dimensional persistent-homology descriptor φ of a point cloud (paper §3.1, Eq. 5).

    Parameters
    ----------
    X : array of shape (n, d)
        A client's data; at least 3 finite points.
    n_sub : int
        Points subsampled (seeded, without replacement) before PH; paper: 80 (Table 3).
    n_thresholds : int
        Betti-curve resolution L; paper: 20, giving m = 48.
    seed : int or Generator
        Seed of the subsample.
    scale : {"none", "standard", "unit_box"}
        Scaling of the subsample before PH (docs/internals.md#topofl.tda.descriptor says why the default is "none").
    return_diagrams : bool
        Also return the canonical diagrams ``[D0, D1]`` the descriptor was computed from.

    Returns
    -------
    ndarray of shape (8 + 2 * n_thresholds,), and the diagrams if requested.
    """
    X = as_points(X, "X", min_points=3)
    check_int("n_sub", n_sub, 3)
    check_int("n_thresholds", n_thresholds, 1, 10_000)
    check_choice("scale", scale, SCALINGS)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    pts = scale_points(subsample(X, n_sub, rng), scale)
    dgms = diagrams(pts, maxdim=1, validate=False)
    phi = descriptor_from_diagrams(dgms, n_thresholds)
    return (phi, dgms) if return_diagrams else phi


def client_seed(seed: int, k: int) -> np.random.Generator:
    """Independent, reproducible generator for client ``k`` of a run seeded with ``seed``."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(k)]))


def descriptors(
    clouds: Sequence[np.ndarray],
    n_sub: int = DEFAULT_N_SUB,
    n_thresholds: int = DEFAULT_N_THRESHOLDS,
    seed: int = 0,
    scale: str = "none",
) -> np.ndarray:
    """Batch form: a (K, m) matrix of descriptors, client ``k`` subsampled with ``client_seed(seed, k)``."""
    if len(clouds) == 0:
        raise ValueError("clouds must hold at least one point cloud; got 0")
    rows = []
    for k, X in enumerate(clouds):
        try:
            rows.append(descriptor(X, n_sub, n_thresholds, client_seed(seed, k), scale))
        except ValueError as exc:
            raise ValueError(f"point cloud {k}: {exc}") from None
    return np.vstack(rows)


def descriptor_problems(phi: np.ndarray, n_thresholds: int = DEFAULT_N_THRESHOLDS,
                        n_points: int | None = None) -> str | None:
    """Why ``phi`` cannot be the descriptor of any point cloud; ``None`` when it can.

    Checks the invariants of :func:`descriptor_from_diagrams` for a cloud of ``n_points``
    distinct-enough points (the subsample size, ``min(n, n_sub)``; ``None`` = unknown):

    * β_0 (finite H0 pairs) is an integer in [1, n − 1] — a cloud of n points merges n − 1
      times; 0 only for a cloud of identical points, which carries no topology and is refused;
    * β_1 is an integer in [0, n(n−1)/2 − (n − 1)] (each H1 pair needs an edge that closes a cycle);
    * entropy H_j in [0, log β_j] (0 when β_j <= 1); amplitude A_j >= 0, and > 0 exactly when β_j > 0;
    * persistent counts are integers in [0, ⌊β_j / 2⌋] (pairs strictly above the median);
    * Betti-curve values are integers in [0, β_j]; the H0 curve starts at β_0 (every H0 pair is
      born at 0 and alive at the first threshold, 0) and never increases.

    Used by the server before it clusters on a reply's descriptor (a forged one is dropped).
    """
    L = n_thresholds
    phi = np.asarray(phi, dtype=np.float64)
    if phi.shape != (len(_SCALARS) + 2 * L,):
        return f"descriptor must have shape ({len(_SCALARS) + 2 * L},); got {phi.shape}"
    if not np.isfinite(phi).all():
        return "descriptor holds non-finite values"
    names = _layout_names(L)
    counts = phi[:2]
    for j, b in enumerate(counts):
        hi = (n_points - 1 if j == 0 else n_points * (n_points - 1) // 2 - (n_points - 1)) if n_points else np.inf
        lo = 1 if j == 0 else 0
        if b != np.round(b) or not lo <= b <= hi:
            return f"descriptor h{j}_betti must be an integer in [{lo}, {hi}]; got {b:.6g}"
    for j, b in enumerate(counts):
        ent, amp, npers = phi[2 + j], phi[4 + j], phi[6 + j]
        ent_max = float(np.log(b)) if b > 1 else 0.0
        if not -1e-12 <= ent <= ent_max + 1e-9:
            return f"descriptor h{j}_entropy must be in [0, log β_{j} = {ent_max:.6g}]; got {ent:.6g}"
        if amp < 0 or (amp > 0) != (b > 0):
            return (f"descriptor h{j}_amplitude must be > 0 when h{j}_betti > 0 and 0 otherwise; "
                    f"got {amp:.6g} with β_{j} = {b:.0f}")
        if npers != np.round(npers) or not 0 <= npers <= b // 2:
            return f"descriptor h{j}_n_persistent must be an integer in [0, {int(b // 2)}]; got {npers:.6g}"
    curves = (phi[len(_SCALARS): len(_SCALARS) + L], phi[len(_SCALARS) + L:])
    for j, (curve, b) in enumerate(zip(curves, counts, strict=True)):
        bad = (curve != np.round(curve)) | (curve < 0) | (curve > b)
        if bad.any():
            i = int(np.argmax(bad))
            return (f"descriptor {names[len(_SCALARS) + j * L + i]} must be an integer in [0, {b:.0f}]; "
                    f"got {curve[i]:.6g}")
    h0 = curves[0]
    if h0[0] != counts[0] or np.any(np.diff(h0) > 0):
        return "descriptor h0_curve must start at h0_betti and never increase (every H0 pair is born at 0)"
    return None
