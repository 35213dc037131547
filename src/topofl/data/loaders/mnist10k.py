"""MNIST-10k: 10,000 real MNIST digits shipped with topofl (offline), and image federations of it.

:func:`load_mnist_10k` reads the shipped files; :func:`mnist_federation` (over :func:`image_federation`)
builds the federations of the deep-model experiments, with any partition of :mod:`topofl.data.partition`
and an optional writer-like style per client (pTopoFL §4.1 Scenario D′).
See docs/internals.md#topofl.data.loaders.mnist10k for provenance, licence and the styles.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np
from scipy import ndimage

from topofl._validation import check_int, check_range
from topofl.data.federation import ClientData, Federation
from topofl.data.loaders.images import load_mnist_idx
from topofl.data.partition import PARTITIONS, partition
from topofl.models.preprocessing import rescaled_record


def mnist_10k_dir() -> Path:
    """The directory of the shipped MNIST-10k files."""
    return Path(str(resources.files("topofl.data") / "builtin" / "mnist-10k"))


def load_mnist_10k(root: str | Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The 10,000 digits as ``(X, y)``: X (10000, 784) in [0, 1], y int64 (sorted by class)."""
    return load_mnist_idx(root if root is not None else mnist_10k_dir(), use_test=False)


def client_style(rng: np.random.Generator, strength: float = 1.0) -> dict[str, float]:
    """One client's writing style: rotation (±15°), shear (±0.3), scale (0.85–1.15), shift (±2 px)
    and stroke thickness (−1 thin, 0, +1 thick), each scaled by ``strength``: the offline stand-in for
    FEMNIST's writers (pTopoFL §4.1 Scenario D′).
    """
    return {
        "angle": float(rng.uniform(-15, 15) * strength), "shear": float(rng.uniform(-0.3, 0.3) * strength),
        "scale": float(1 + rng.uniform(-0.15, 0.15) * strength), "dx": float(rng.uniform(-2, 2) * strength),
        "dy": float(rng.uniform(-2, 2) * strength), "stroke": float(rng.integers(-1, 2)) if strength > 0 else 0.0,
    }


def apply_style(X: np.ndarray, style: dict[str, float], side: int = 28) -> np.ndarray:
    """``X`` (n, side²) in [0, 1] drawn in ``style``: one affine map about the centre, then a grey
    dilation (thick) or erosion (thin) with a 2×2 window.
    """
    a = np.deg2rad(style["angle"])
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    A = rot @ np.array([[1.0, style["shear"]], [0.0, 1.0]]) / style["scale"]
    centre = np.array([side / 2 - 0.5, side / 2 - 0.5])
    offset = centre - A @ (centre + np.array([style["dy"], style["dx"]]))
    out = np.empty_like(X)
    for i, img in enumerate(X.reshape(-1, side, side)):
        warped = ndimage.affine_transform(img, A, offset=offset, order=1, mode="constant", cval=0.0)
        if style["stroke"] > 0:
            warped = ndimage.grey_dilation(warped, size=(2, 2))
        elif style["stroke"] < 0:
            warped = ndimage.grey_erosion(warped, size=(2, 2))
        out[i] = np.clip(warped, 0.0, 1.0).ravel()
    return out


def image_federation(  # noqa: PLR0913 (public API: the keyword options of an image federation)
    X: np.ndarray, y: np.ndarray, n_clients: int, *, partition_kind: str = "dirichlet", alpha: float = 0.5,
    n_samples: int | None = None, test_fraction: float = 0.25, styles: float = 0.0, seed: int = 0, min_size: int = 20,
    shards_per_client: int = 2, name: str = "images", n_classes: int = 10, rescaled: str = "",
) -> Federation:
    """Images ``X`` (flattened, in [0, 1]) with labels ``y`` split among ``n_clients``: a seeded
    subset of ``n_samples`` rows, a partition (:mod:`topofl.data.partition`), each client's share
    split into train and test, and optionally a per-client writing style (28×28 grey images only).
    ``rescaled``: how ``X`` was scaled from the raw images (e.g. "pixel values 0-255 scaled by 1/255"),
    recorded in the federation's preprocessing (with the styles), so that ``predict`` refuses raw rows.
    """
    check_int("n_clients", n_clients, 1, 1000)
    n_samples = X.shape[0] if n_samples is None else n_samples
    check_int("n_samples", n_samples, 4 * n_clients, X.shape[0])
    check_range("test_fraction", test_fraction, 0.0, 1.0, low_open=True, high_open=True)
    check_range("styles", styles, 0.0, 3.0)
    if styles > 0 and X.shape[1] != 28 * 28:
        raise ValueError(f"writing styles apply to 28×28 grey images; these have {X.shape[1]} values")
    if partition_kind not in PARTITIONS or partition_kind == "by_group":
        raise ValueError(f"partition must be one of iid, dirichlet, shards; got {partition_kind!r}")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x3A157]))
    keep = rng.permutation(X.shape[0])[:n_samples]
    X, y = X[keep], np.asarray(y)[keep].astype(np.float64)
    parts = partition(partition_kind, y, n_clients, rng, alpha=alpha, min_size=min_size,
                      shards_per_client=shards_per_client)
    clients = []
    for k, idx in enumerate(parts):
        idx = rng.permutation(idx)
        n_test = max(1, int(round(test_fraction * idx.size)))
        tr, te = idx[n_test:], idx[:n_test]
        Xtr, Xte = X[tr], X[te]
        style = client_style(rng, styles) if styles > 0 else None
        if style is not None:
            Xtr, Xte = apply_style(Xtr, style), apply_style(Xte, style)
        meta = {"partition": partition_kind, "classes": sorted({int(v) for v in y[tr]}),
                **({"style": style} if style else {})}
        clients.append(ClientData(Xtr, y[tr], Xte, y[te], client_id=k, meta=meta))
    how = "; ".join(t for t in (rescaled, "each client's writing style applied" if styles > 0 else "") if t)
    return Federation(clients, task="multiclass", n_classes=n_classes, name=name,
                      preprocessing=rescaled_record(len(clients), X.shape[1], how) if how else None,
                      info={"partition": partition_kind, "alpha": alpha, "styles": styles, "n_samples": n_samples,
                            "seed": seed})


def mnist_federation(
    n_clients: int = 10, *, partition_kind: str = "dirichlet", alpha: float = 0.5, n_samples: int = 10_000,
    test_fraction: float = 0.25, styles: float = 0.0, seed: int = 0, min_size: int = 20, shards_per_client: int = 2,
    root: str | Path | None = None,
) -> Federation:
    """An image federation of MNIST-10k (see :func:`image_federation`)."""
    X, y = load_mnist_10k(root)
    return image_federation(X, y, n_clients, partition_kind=partition_kind, alpha=alpha, n_samples=n_samples,
                            test_fraction=test_fraction, styles=styles, seed=seed, min_size=min_size,
                            shards_per_client=shards_per_client, name="mnist",
                            rescaled="pixel values 0-255 scaled by 1/255")
