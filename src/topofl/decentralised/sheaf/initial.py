"""Initial restriction maps of Sheaf-FMTL (paper §4.1; Appendix G, Table 6, compares others).

:func:`initial_maps` stacks node i's maps P_ij⁰ into one matrix, of kind ``gaussian`` (the paper's),
``shared``, ``uniform``, ``orthogonal``, ``identity_noise``, ``scaled_identity`` or the compact
``sparse_sign`` (:class:`StackedSparseSign`); a zero map is refused (paper Remark 3).
See docs/internals.md#topofl.decentralised.sheaf.initial for each kind.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np

from topofl._validation import check_choice
from topofl.decentralised.spec import NodeSpec

INITS = ("gaussian", "shared", "uniform", "orthogonal", "identity_noise", "scaled_identity", "sparse_sign")


class StackedSparseSign:
    """Stacked CountSketch blocks: in block b, column c holds ``signs[b, c]·scale`` at row
    ``offset_b + rows[b, c]``.
    """

    def __init__(self, sizes: Sequence[int], d_i: int, scale: float, rng: np.random.Generator) -> None:
        self.sizes = list(sizes)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)
        # block-local row indices in the narrowest integer type (int16 for edge spaces < 32768)
        itype = np.int16 if max(self.sizes) < 2**15 else np.int32
        self.local_rows = np.vstack([rng.integers(0, s, size=d_i) for s in self.sizes]).astype(itype)
        self.signs = (rng.integers(0, 2, size=(len(self.sizes), d_i)) * 2 - 1).astype(np.int8)
        self.scale = float(scale)
        self.shape = (int(sum(self.sizes)), d_i)

    @property
    def rows(self) -> np.ndarray:
        """Global row index of each block's entry in each column (computed on demand)."""
        return self.local_rows.astype(np.int64) + self.offsets[:, None]

    def apply(self, x: np.ndarray) -> np.ndarray:
        return np.bincount(self.rows.ravel(), weights=(self.signs * x).ravel(), minlength=self.shape[0]) * self.scale

    def apply_t(self, y: np.ndarray) -> np.ndarray:
        return cast(np.ndarray, self.scale * (self.signs * y[self.rows]).sum(axis=0))

    def dense(self) -> np.ndarray:
        P = np.zeros(self.shape)
        cols = np.broadcast_to(np.arange(self.shape[1]), self.rows.shape)
        P[self.rows.ravel(), cols.ravel()] = self.signs.ravel() * self.scale
        return P

    @property
    def nbytes(self) -> int:
        return self.local_rows.nbytes + self.signs.nbytes


def shared_maps(spec: NodeSpec, sizes: Sequence[int], scale: float) -> np.ndarray:
    """Node ``spec.node``'s stacked ``shared`` initial maps: for each neighbour j, the first d_i
    columns of the edge's d_ij × max(d_i, d_j) N(0, σ²) matrix
    (docs/internals.md#topofl.decentralised.sheaf.initial).
    """
    blocks = []
    for j, d_j, d_e in zip(spec.neighbours, spec.neighbour_dims, sizes, strict=True):
        edge = np.random.default_rng(np.random.SeedSequence([spec.edge_seed, min(spec.node, j), max(spec.node, j)]))
        blocks.append(edge.normal(0.0, scale, (d_e, max(spec.dim, d_j)))[:, : spec.dim])
    return np.vstack(blocks)


def initial_maps(
    kind: str, sizes: Sequence[int], d_i: int, scale: float, rng: np.random.Generator, spec: NodeSpec | None = None
) -> np.ndarray | StackedSparseSign:
    """Node i's stacked initial maps: a dense array, or a :class:`StackedSparseSign`.

    ``gaussian`` is the paper's initialisation (§4.1: N(0, 1) entries); Appendix G, Table 6, compares
    others (docs/internals.md#topofl.decentralised.sheaf.initial).

    ``rng`` is the node's own generator (every kind but ``shared``); ``shared`` needs the node's
    ``spec`` (neighbours, their sizes and the edge seed) instead.
    """
    check_choice("map_init", kind, INITS)
    if not scale > 0:
        raise ValueError("map_scale must be > 0: a zero initial restriction map never learns (paper Remark 3); "
                         f"got {scale}")
    if kind == "sparse_sign":
        return StackedSparseSign(sizes, d_i, scale, rng)
    if kind == "shared":
        if spec is None or spec.dim != d_i:
            raise ValueError("map_init='shared' draws each edge's map from the edge's seed: pass the node's spec "
                             "(its dim must be d_i)")
        return shared_maps(spec, sizes, scale)
    blocks = []
    for d_e in sizes:
        if kind == "gaussian":
            blocks.append(rng.normal(0.0, scale, (d_e, d_i)))
        elif kind == "uniform":
            blocks.append(rng.uniform(-scale, scale, (d_e, d_i)))
        elif kind == "orthogonal":
            if d_e > d_i:
                raise ValueError(f"orthogonal maps need d_ij <= d_i; got {d_e} > {d_i}")
            q, _ = np.linalg.qr(rng.standard_normal((d_i, d_e)))
            blocks.append(scale * q.T)
        elif kind == "identity_noise":
            blocks.append(np.eye(d_e, d_i) + rng.normal(0.0, scale, (d_e, d_i)))
        else:
            if d_e != d_i:
                raise ValueError("scaled_identity maps need d_ij = d_i (gamma = 1, equal model sizes); "
                                 f"got {d_e} x {d_i}")
            blocks.append(scale * np.eye(d_i))
    return np.vstack(blocks)
