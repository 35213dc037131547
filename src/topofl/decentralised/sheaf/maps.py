"""Restriction maps of Sheaf-FMTL, dense or exactly compact (issue 4, item 10).

:class:`NodeMaps` holds node i's maps P_ij stacked into one block matrix, so that projecting, back-projecting
(Eq. 27) and the rank-one update (Eq. 28) are one operation each per node; compactly stored maps keep
P_i = P⁰_i − Uᵀ V exactly. See docs/internals.md#topofl.decentralised.sheaf.maps for the algebra, the
carried projection and the memory cost.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import cast

import numpy as np

from topofl.decentralised.sheaf.initial import INITS, StackedSparseSign, initial_maps
from topofl.decentralised.sheaf.maths import FLOAT, carried_projection

__all__ = ["FLOAT", "INITS", "ChunkedRows", "NodeMaps", "StackedSparseSign", "initial_maps"]


class ChunkedRows:
    """A matrix that grows by rows, stored in fixed-size chunks: appending never copies (so no
    transient doubling of memory), and products run chunk by chunk.
    """

    CHUNK = 8

    def __init__(self, width: int, dtype: np.typing.DTypeLike = np.float64) -> None:
        self.width, self.dtype = width, np.dtype(dtype)
        self.chunks: list[np.ndarray] = []
        self.rank = 0

    def append(self, row: np.ndarray) -> None:
        if self.rank == len(self.chunks) * self.CHUNK:
            self.chunks.append(np.empty((self.CHUNK, self.width), dtype=self.dtype))
        self.chunks[-1][self.rank % self.CHUNK] = row
        self.rank += 1

    def _parts(self) -> Iterator[np.ndarray]:
        for c, chunk in enumerate(self.chunks):
            yield chunk[: min(self.CHUNK, self.rank - c * self.CHUNK)]

    def matvec(self, x: np.ndarray) -> np.ndarray:
        """M x (length rank)."""
        if self.rank == 0:
            return np.zeros(0)
        return np.concatenate([p @ x for p in self._parts()]).astype(np.float64, copy=False)

    def rmatvec(self, y: np.ndarray) -> np.ndarray:
        """Mᵀ y (length width)."""
        out = np.zeros(self.width)
        start = 0
        for p in self._parts():
            out += p.T @ y[start : start + p.shape[0]]
            start += p.shape[0]
        return out

    def array(self) -> np.ndarray:
        return np.vstack(list(self._parts())).astype(np.float64) if self.rank else np.zeros((0, self.width))

    def replace(self, M: np.ndarray) -> None:
        self.chunks, self.rank = [], 0
        for row in M:
            self.append(row)

    @property
    def nbytes(self) -> int:
        return self.rank * self.width * self.dtype.itemsize


# Dense kernels. The matrix-vector products use NumPy's own einsum loops and the rank-one update
# BLAS dgemm on row blocks of at most _BLOCK entries: all single-threaded, whatever the BLAS thread
# count. Measured on the 2-core machine in the sheaf-digits setting: a multithreaded BLAS call
# (P @ x, or dger on the whole of P) is as fast when the machine is quiet but up to 10-100x slower
# when another process competes for the cores (as ``--jobs 2`` experiment workers do, each with
# its own BLAS threads), while these kernels keep memory speed in both cases.
_BLOCK = 65536  # entries per block: below OpenBLAS's threading threshold, and a few hundred KB


def _rank_one_update(P: np.ndarray, u: np.ndarray, v: np.ndarray) -> None:
    """P ← P − u vᵀ in place, for a C-ordered float64 P, without a temporary of P's size."""
    from scipy.linalg.blas import dgemm  # lazy: SciPy adds ~0.15 s to every import of the methods

    PT = P.T  # Fortran-ordered view: Pᵀ ← Pᵀ − v uᵀ, block of rows of P = block of columns of Pᵀ
    step = max(1, _BLOCK // P.shape[1])
    col, row = np.ascontiguousarray(v).reshape(-1, 1), np.ascontiguousarray(u).reshape(1, -1)
    for a in range(0, P.shape[0], step):
        dgemm(-1.0, col, row[:, a : a + step], beta=1.0, c=PT[:, a : a + step], overwrite_c=True)


class NodeMaps:
    """All of one node's restriction maps, stacked; dense or compact.

    The algebra: docs/internals.md#topofl.decentralised.sheaf.maps.

    ``precision`` sets the storage type of the compact low-rank factors: float64 (default; the
    compact iterates equal the dense ones to rounding, ~1e-12) or float32 (half the memory; the
    iterates then agree with the float64 computation to float32 precision, ~1e-6 relative).

    The maps remember their last projection (x and P x, both copies, so they pickle with the
    maps): :meth:`project` returns it for an equal x, and :meth:`update` carries it over exactly
    when its v equals that x (P x − u (vᵀx)); any other update and :meth:`recompress` drop it.
    Writing to ``P`` directly bypasses this: call :meth:`forget` after doing so.
    """

    _memo: tuple[np.ndarray, np.ndarray] | None = None  # (x, P x) for the current maps
    products = 0  # projections P x actually computed (not answered from the remembered one)

    def __init__(self, P0: np.ndarray | StackedSparseSign, sizes: Sequence[int], compact: bool,
                 precision: str = "float64") -> None:
        self.sizes = list(sizes)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)]).astype(int)
        self.compact = compact
        if compact:
            if not isinstance(P0, StackedSparseSign):
                raise ValueError("compact restriction maps need a compact initial map (map_init='sparse_sign')")
            self.P0 = P0
            self._U = ChunkedRows(P0.shape[0], precision)
            self._V = ChunkedRows(P0.shape[1], precision)
        else:
            self.P = P0.dense() if isinstance(P0, StackedSparseSign) else np.array(P0, dtype=np.float64, copy=True)

    @property
    def rank(self) -> int:
        return self._U.rank if self.compact else 0

    @property
    def U(self) -> np.ndarray:
        return self._U.array()

    @property
    def V(self) -> np.ndarray:
        return self._V.array()

    def cached(self, x: np.ndarray) -> np.ndarray | None:
        """P x from the last projection (carried over any update since), or None if not known."""
        m = self._memo
        if m is None or m[0].shape != np.shape(x) or not np.array_equal(m[0], x):
            return None
        return cast(np.ndarray, m[1].copy())

    def forget(self) -> None:
        """Drop the remembered projection."""
        self._memo = None

    def project(self, x: np.ndarray, use_cache: bool = True) -> np.ndarray:
        """[P_ij x]_j stacked (Σ_j d_ij); the remembered value when x is unchanged (class docstring)."""
        if use_cache:
            y = self.cached(x)
            if y is not None:
                return y
        y = (np.einsum("ij,j->i", self.P, x) if not self.compact
             else self.P0.apply(x) - self._U.rmatvec(self._V.matvec(x)))
        self.products += 1
        self._memo = (np.array(x, dtype=np.float64, copy=True), y.copy())
        return cast(np.ndarray, y)

    def back_project(self, y: np.ndarray) -> np.ndarray:
        """Σ_j P_ijᵀ y_j for stacked y (the back-projection of the residuals in Eq. 27)."""
        if not self.compact:
            return cast(np.ndarray, np.einsum("ij,i->j", self.P, y))
        return cast(np.ndarray, self.P0.apply_t(y) - self._V.rmatvec(self._U.matvec(y)))

    def update(self, u: np.ndarray, v: np.ndarray) -> None:
        """P_i ← P_i − u vᵀ, i.e. every block P_ij ← P_ij − u_j vᵀ (Eq. 28 with u = ηλ r).

        If the last projection was of v, it is carried over: P_new v = P v − u (vᵀv), exactly.
        """
        u = np.asarray(u, dtype=np.float64)
        v = np.asarray(v, dtype=np.float64)
        m = self._memo
        carry = m is not None and m[0].shape == v.shape and np.array_equal(m[0], v)
        if not self.compact:
            P = self.P
            if P.flags.c_contiguous and P.flags.writeable and P.dtype == np.float64:
                _rank_one_update(P, u, v)
            else:
                self.P = np.ascontiguousarray(P - np.outer(u, v))
        else:
            self._U.append(u)
            self._V.append(v)
        # carry over what is stored (float32 factors round u and v): P_new x = P x − u (vᵀx)
        self._memo = ((m[0], carried_projection(m[1], self.stored(u), self.carry_scale(v)))
                      if carry and m is not None else None)

    def stored(self, u: np.ndarray) -> np.ndarray:
        """A factor of a rank-one update as the maps store it: float32-rounded for float32 compact
        factors, unchanged otherwise.
        """
        u = np.asarray(u, dtype=np.float64)
        if self.compact and self._U.dtype != np.float64:
            return u.astype(self._U.dtype).astype(np.float64)
        return u

    def carry_scale(self, v: np.ndarray) -> float:
        """vᵀx for the remembered projection's x (v as stored): the scalar the carried projection
        after :meth:`update` with this v uses (‖θ^{k+1}‖² when v = x = θ^{k+1} in float64).
        """
        if self._memo is None:
            raise RuntimeError("carry_scale needs a remembered projection; project() first")
        return float(self.stored(v) @ self._memo[0])

    def recompress(self, k: int) -> float:
        """Opt-in *approximate* re-compression of the low-rank part to rank k (compact only).

        With V = A S Bᵀ (thin SVD), Uᵀ V = (Uᵀ A S) Bᵀ ≈ (Uᵀ A_k S_k) B_kᵀ. Exact while k ≥ rank;
        returns the discarded share of the spectrum Σ_{>k} s² / Σ s² (0 when exact).
        """
        if not self.compact or self.rank <= k:
            return 0.0
        self._memo = None
        A, s, Bt = np.linalg.svd(self.V, full_matrices=False)
        lost = float((s[k:] ** 2).sum() / max((s**2).sum(), 1e-300))
        newU = (A[:, :k] * s[:k]).T @ self.U  # k × Σd_ij
        self._U.replace(newU)
        self._V.replace(Bt[:k])
        return lost

    def dense(self) -> np.ndarray:
        return self.P if not self.compact else self.P0.dense() - self.U.T @ self.V

    def block_frobenius(self) -> list[float]:
        """‖P_ij‖_F for each neighbour block, without forming compact maps."""
        if not self.compact:
            return [float(np.linalg.norm(self.P[a:b]))
                    for a, b in zip(self.offsets[:-1], self.offsets[1:], strict=True)]
        out = []
        U, V, P0 = self.U, self.V, self.P0
        G = V @ V.T
        for blk, (a, b) in enumerate(zip(self.offsets[:-1], self.offsets[1:], strict=True)):
            Ub = U[:, a:b]
            p0 = P0.scale**2 * P0.shape[1]
            # <P0_b, Ub^T V> = Σ_t Σ_c U[t, rows[b,c]] · signs[b,c]·σ · V[t,c]
            cross = float(np.einsum("tc,tc->", U[:, P0.rows[blk]], V * (P0.signs[blk] * P0.scale)))
            low = float(np.sum((Ub @ Ub.T) * G))
            out.append(float(np.sqrt(max(p0 - 2 * cross + low, 0.0))))
        return out

    @property
    def nbytes(self) -> int:
        if not self.compact:
            return self.P.size * FLOAT
        return self.P0.nbytes + self._U.nbytes + self._V.nbytes

    def bytes_per_update(self) -> int:
        """Storage one more iteration adds (compact), 0 for dense maps."""
        return (sum(self.sizes) + self.P0.shape[1]) * self._U.dtype.itemsize if self.compact else 0
