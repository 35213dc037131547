"""Image data sets: MNIST (IDX files), rotated MNIST, heterogeneous CIFAR-10, rotated digits.

Images are scaled to [0, 1] and flattened row-major. Rotations are multiples of 90 degrees done
with :func:`numpy.rot90` (``np.rot90(image, angle // 90)``: counter-clockwise), so they are exact
pixel permutations with no interpolation.
"""
from __future__ import annotations

import gzip
import pickle
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import numpy as np

from topofl._validation import check_int
from topofl.data.loaders.base import LoadedData
from topofl.data.loaders.protocol import (
    ASSIGN,
    build_clients,
    check_protocol_args,
    check_seed,
    stream,
)
from topofl.models.preprocessing import rescaled_record

#: IDX magic numbers: unsigned-byte data with 3 dimensions (images) and 1 dimension (labels).
IDX_IMAGES_MAGIC = 2051
IDX_LABELS_MAGIC = 2049
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}

CIFAR10_CLASSES = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)


# ----------------------------------------------------------------------------------------------
# IDX / MNIST
# ----------------------------------------------------------------------------------------------
def read_idx(path: str | Path, expected_magic: int | None = None) -> np.ndarray:
    """Read an IDX file (the MNIST format), plain or gzip-compressed.

    The header is a big-endian 32-bit magic number ``0x0000TTDD`` (``TT`` the data type, e.g.
    ``0x08`` for unsigned bytes; ``DD`` the number of dimensions), then one big-endian 32-bit size
    per dimension, then the data in row-major order.

    Parameters
    ----------
    path : str or Path
        The file; gzip compression is detected from the content, not the name.
    expected_magic : int, optional
        Required magic number, e.g. 2051 for images or 2049 for labels.

    Returns
    -------
    ndarray
        The data with the header's shape, in native byte order.

    Raises
    ------
    ValueError
        Missing or unreadable file, a wrong magic number, an unknown data type, or a data size
        that disagrees with the header.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"IDX: file not found: {path}")
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError) as exc:
        raise ValueError(f"{path}: cannot read the IDX file ({type(exc).__name__}: {exc})") from None
    if len(raw) < 4:
        raise ValueError(f"{path}: too short for an IDX header ({len(raw)} bytes)")
    magic = int.from_bytes(raw[:4], "big")
    if expected_magic is not None and magic != expected_magic:
        raise ValueError(f"{path}: IDX magic number is {magic}; expected {expected_magic}")
    if raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES or raw[3] == 0:
        raise ValueError(f"{path}: not an IDX file (magic number {magic} = 0x{magic:08x})")
    ndim = raw[3]
    head = 4 + 4 * ndim
    if len(raw) < head:
        raise ValueError(f"{path}: header announces {ndim} dimensions but the file has only {len(raw)} bytes")
    dims = tuple(int(v) for v in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    if len(raw) - head != expected:
        raise ValueError(
            f"{path}: header shape {dims} needs {expected} data bytes but the file holds {len(raw) - head}"
        )
    return np.frombuffer(raw, dtype=dtype, offset=head).reshape(dims).astype(dtype.newbyteorder("="))


def _find_idx(root: Path, stem: str) -> Path | None:
    """``root/stem`` with the usual name variants: ``-idx``/``.idx`` separator, optional ``.gz``."""
    for name in (stem, stem.replace("-idx", ".idx")):
        for candidate in (root / name, root / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    return None


def _read_mnist(root: str | Path, use_test: bool) -> tuple[np.ndarray, np.ndarray, list[str], int]:
    """Raw uint8 images (N, rows, cols), int64 labels, files read, number of rows from ``train``."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(
            f"MNIST: directory not found: {root}; expected a directory holding "
            "train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz]"
        )
    parts = [("train", True)]
    if use_test:
        parts.append(("t10k", False))
    if (_find_idx(root, "train-images-idx3-ubyte") is None
            and _find_idx(root, "mnist-10k-images-idx3-ubyte") is not None):
        parts = [("mnist-10k", True)]  # the 10,000-digit set shipped with topofl (and in ../shared/data)
    images: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    files: list[str] = []
    n_official_train = 0
    for prefix, required in parts:
        pair = _mnist_pair(root, prefix, required)
        if pair is None:
            continue
        pi, pl = pair
        img, lab = _checked_mnist(pi, pl)
        if images and img.shape[1:] != images[0].shape[1:]:
            raise ValueError(f"{pi}: images are {img.shape[1:]} but the training images are {images[0].shape[1:]}")
        if prefix == "train":
            n_official_train = int(img.shape[0])
        images.append(img)
        labels.append(lab.astype(np.int64))
        files += [str(pi), str(pl)]
    return np.concatenate(images), np.concatenate(labels), files, n_official_train


def _mnist_pair(root: Path, prefix: str, required: bool) -> tuple[Path, Path] | None:
    """The image and label files of ``prefix`` (``train``, ``t10k``, ...) in ``root``; ``None`` when both are
    absent and not ``required``, a ``ValueError`` naming the file when one is missing otherwise.
    """
    pi = _find_idx(root, f"{prefix}-images-idx3-ubyte")
    pl = _find_idx(root, f"{prefix}-labels-idx1-ubyte")
    if pi is None and pl is None and not required:
        return None
    for found, stem in ((pi, f"{prefix}-images-idx3-ubyte"), (pl, f"{prefix}-labels-idx1-ubyte")):
        if found is None:
            raise ValueError(
                f"MNIST: file not found: {root / stem} (or {stem}.gz); expected the MNIST IDX file {stem}"
            )
    assert pi is not None and pl is not None  # both checked just above
    return pi, pl


def _checked_mnist(pi: Path, pl: Path) -> tuple[np.ndarray, np.ndarray]:
    """The images (n, rows, cols) uint8 and labels (n,) 0..9 of one pair of MNIST IDX files."""
    img = read_idx(pi, IDX_IMAGES_MAGIC)
    lab = read_idx(pl, IDX_LABELS_MAGIC)
    if img.ndim != 3 or img.dtype != np.uint8:
        raise ValueError(f"{pi}: expected unsigned-byte images of shape (n, rows, cols); got {img.dtype} {img.shape}")
    if lab.ndim != 1:
        raise ValueError(f"{pl}: expected a 1-D label vector; got shape {lab.shape}")
    if lab.shape[0] != img.shape[0]:
        raise ValueError(f"{pl}: holds {lab.shape[0]} labels but {pi} holds {img.shape[0]} images")
    if lab.size and int(lab.max()) > 9:
        raise ValueError(f"{pl}: holds label {int(lab.max())}; MNIST labels are 0..9")
    return img, lab


def load_mnist_idx(root: str | Path, use_test: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """MNIST images and labels from IDX files (plain or ``.gz``), scaled to [0, 1] and flattened.

    Parameters
    ----------
    root : str or Path
        Directory with ``train-images-idx3-ubyte`` and ``train-labels-idx1-ubyte`` (each
        optionally ``.gz``; ``train-images.idx3-ubyte`` naming is accepted too) and, optionally,
        ``t10k-images-idx3-ubyte`` / ``t10k-labels-idx1-ubyte``; or the ``mnist-10k-*`` files of
        the 10,000-digit set (:func:`topofl.data.loaders.mnist10k.mnist_10k_dir`).
    use_test : bool, default True
        Append the ``t10k`` rows when those files are present.

    Returns
    -------
    X : ndarray of shape (n, rows * cols), float64 in [0, 1]
        Images divided by 255, flattened row-major; ``train`` rows first, then ``t10k`` rows.
    y : ndarray of shape (n,), int64
        Digits 0..9.

    Raises
    ------
    ValueError
        Missing directory or training file (the message names the expected file), a wrong
        magic number (2051 for images, 2049 for labels), truncated data, or image/label counts
        that differ.
    """
    images, labels, _, _ = _read_mnist(root, use_test)
    return images.reshape(images.shape[0], -1) / 255.0, labels


# ----------------------------------------------------------------------------------------------
# Rotated federations
# ----------------------------------------------------------------------------------------------
def _angles(groups: int | Sequence[int]) -> tuple[int, ...]:
    """Rotation angles of the groups: ``k`` → (0, 90, ..., 90 (k-1)), or explicit angles."""
    if isinstance(groups, (int, np.integer)) and not isinstance(groups, bool):
        check_int("groups", groups, 1, 4)
        return tuple(90 * i for i in range(int(groups)))
    try:
        angles = tuple(cast("Sequence[int]", groups))  # a bool is not iterable: TypeError, caught below
    except TypeError:
        raise ValueError(f"groups must be a number of groups (1-4) or a sequence of angles; got {groups!r}") from None
    if not angles:
        raise ValueError("groups must hold at least one rotation angle; got an empty sequence")
    for a in angles:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or a % 90 != 0:
            raise ValueError(f"groups angles must be integer multiples of 90 degrees; got {a!r}")
    return tuple(int(a) for a in angles)


def _assign_groups(n_clients: int, n_groups: int, seed: int) -> np.ndarray:
    """Balanced seeded assignment: clients in a random order are dealt round-robin to the groups."""
    order = stream(seed, ASSIGN).permutation(n_clients)
    group = np.empty(n_clients, dtype=np.int64)
    group[order] = np.arange(n_clients) % n_groups
    return group


def _shares(n: int, n_clients: int, per_client: int | None, seed: int, what: str) -> list[np.ndarray]:
    """Disjoint seeded row sets: equal shares of all ``n`` rows, or ``per_client`` rows each."""
    perm = stream(seed, ASSIGN, 1).permutation(n)
    if per_client is None:
        if n < 4 * n_clients:
            raise ValueError(f"{what}: {n} images cannot give {n_clients} clients at least 4 each")
        return [np.sort(s) for s in np.array_split(perm, n_clients)]
    if per_client * n_clients > n:
        raise ValueError(
            f"{what}: samples_per_client={per_client} x n_clients={n_clients} = {per_client * n_clients} "
            f"exceeds the {n} images available"
        )
    return [np.sort(s) for s in perm[: per_client * n_clients].reshape(n_clients, per_client)]


def _rotated(  # noqa: PLR0913 (private helper of the two rotated loaders: their options, passed through by keyword)
    images: np.ndarray,
    labels: np.ndarray,
    scale: float,
    *,
    n_clients: int,
    angles: tuple[int, ...],
    samples_per_client: int | None,
    seed: int,
    protocol: bool,
    test_fraction: float,
    keep: float,
    what: str,
) -> tuple[list, dict[str, Any]]:
    group = _assign_groups(n_clients, len(angles), seed)
    shares = _shares(images.shape[0], n_clients, samples_per_client, seed, what)
    parts = []
    for k, rows in enumerate(shares):
        angle = angles[group[k]]
        rotated = np.rot90(images[rows], angle // 90, axes=(1, 2))
        X = rotated.reshape(rows.size, -1) / scale
        parts.append((X, labels[rows], {"group": int(group[k]), "angle": angle, "n_rows": int(rows.size)}))
    clients, record = build_clients(parts, seed=seed, protocol=protocol, test_fraction=test_fraction, keep=keep,
                                    what=what)
    facts = {
        "protocol": record,
        "angles": list(angles),
        "group_sizes": np.bincount(group, minlength=len(angles)).tolist(),
        "rotation": "np.rot90(image, angle // 90): counter-clockwise, exact",
        "image_shape": list(images.shape[1:]),
    }
    return clients, facts


def rotated_mnist(
    root: str | Path,
    n_clients: int = 40,
    groups: int | Sequence[int] = (0, 90, 180, 270),
    seed: int = 0,
    samples_per_client: int | None = None,
    protocol: bool = True,
    *,
    use_test: bool = True,
    test_fraction: float = 0.25,
    keep: float = 0.2,
) -> LoadedData:
    """Rotated MNIST: clients in rotation groups, each seeing its digits rotated by the group's angle.

    Clients are put in a seeded random order and dealt round-robin to the groups (group sizes
    differ by at most one: 40 clients and 4 groups give 10 per group). Every client gets a
    disjoint seeded set of images (all images pooled: ``train`` then ``t10k``), rotated by its
    group's angle with ``np.rot90(image, angle // 90)``, scaled to [0, 1] and flattened (784).

    Parameters
    ----------
    root : str or Path
        Directory of the MNIST IDX files (see :func:`load_mnist_idx`).
    n_clients : int, default 40
        Number of clients.
    groups : int or sequence of int, default (0, 90, 180, 270)
        Rotation angles (multiples of 90 degrees) of the groups, or a number of groups ``g``
        (1-4) meaning angles ``0, 90, ..., 90 (g - 1)``.
    seed : int, default 0
        Seed of the group assignment, of the images drawn, of the split and of the reduction.
    samples_per_client : int, optional
        Images per client (at least 4). ``None`` shares all images equally (sizes differ by at
        most one).
    protocol : bool, default True
        Apply the Sheaf-FMTL protocol (Appendix F): seeded 75/25 train/test split of every
        client, then the training data of a seeded half of the clients reduced to 20 %.
        With ``False`` the clients are only split; none is reduced.
    use_test : bool, default True
        Pool the ``t10k`` images with the training images when their files are present.
    test_fraction : float, default 0.25
        Fraction of each client's rows held out for testing.
    keep : float, default 0.2
        Fraction of training rows kept by a reduced client.

    Returns
    -------
    LoadedData
        ``task="multiclass"``, ``n_classes=10``; ``meta`` has ``group``, ``angle``, ``n_rows``,
        ``n_train_full`` and ``reduced``.

    Raises
    ------
    ValueError
        Bad files (see :func:`load_mnist_idx`), angles that are not multiples of 90, or more
        images requested than available.
    """
    seed = check_seed(seed)
    check_protocol_args(protocol, test_fraction, keep)
    check_int("n_clients", n_clients, 1)
    angles = _angles(groups)
    if samples_per_client is not None:
        check_int("samples_per_client", samples_per_client, 4)
    images, labels, files, n_train = _read_mnist(root, use_test)
    clients, facts = _rotated(
        images, labels, 255.0, n_clients=int(n_clients), angles=angles, samples_per_client=samples_per_client,
        seed=seed, protocol=protocol, test_fraction=test_fraction, keep=keep, what="rotated MNIST",
    )
    info = {
        "source": {"dataset": "MNIST (IDX files)", "root": str(Path(root)), "files": files,
                   "n_images": int(images.shape[0]), "n_from_train_files": n_train},
        **facts,
    }
    return LoadedData(clients, task="multiclass", n_classes=10, name="rotated_mnist", info=info,
                      preprocessing=rescaled_record(len(clients), clients[0].n_features,
                                                    "pixel values 0-255 scaled by 1/255"))


def rotated_digits(
    n_clients: int = 40,
    groups: int | Sequence[int] = 4,
    seed: int = 0,
    protocol: bool = True,
    *,
    test_fraction: float = 0.25,
    keep: float = 0.2,
) -> LoadedData:
    """Rotated digits: the offline stand-in for rotated MNIST, from scikit-learn's bundled digits.

    ``sklearn.datasets.load_digits`` (1797 images of 8 x 8 pixels with values 0..16, 10 classes;
    shipped with scikit-learn, no download) is scaled to [0, 1]. Clients are dealt round-robin
    (seeded order) to the rotation groups; each client gets a disjoint seeded equal share of the
    images (40 clients: 44-45 images each), rotated with ``np.rot90(image, angle // 90)`` and
    flattened (64 features).

    Parameters
    ----------
    n_clients : int, default 40
        Number of clients (at most 449, so that every client has 4 images).
    groups : int or sequence of int, default 4
        Number of rotation groups ``g`` (1-4, angles ``0, 90, ..., 90 (g - 1)``) or the angles.
    seed : int, default 0
        Seed of the group assignment, of the shares, of the split and of the reduction.
    protocol : bool, default True
        Apply the Sheaf-FMTL protocol (Appendix F): seeded 75/25 train/test split of every
        client, then the training data of a seeded half of the clients reduced to 20 %.
        With ``False`` the clients are only split; none is reduced.
    test_fraction : float, default 0.25
        Fraction of each client's rows held out for testing.
    keep : float, default 0.2
        Fraction of training rows kept by a reduced client.

    Returns
    -------
    LoadedData
        ``task="multiclass"``, ``n_classes=10``, 64 features; ``meta`` has ``group``, ``angle``,
        ``n_rows``, ``n_train_full`` and ``reduced``.
    """
    from sklearn.datasets import load_digits

    seed = check_seed(seed)
    check_protocol_args(protocol, test_fraction, keep)
    check_int("n_clients", n_clients, 1)
    angles = _angles(groups)
    digits = load_digits()
    images = np.asarray(digits.images, dtype=np.float64)
    labels = np.asarray(digits.target, dtype=np.int64)
    clients, facts = _rotated(
        images, labels, 16.0, n_clients=int(n_clients), angles=angles, samples_per_client=None,
        seed=seed, protocol=protocol, test_fraction=test_fraction, keep=keep, what="rotated digits",
    )
    info = {"source": {"dataset": "scikit-learn load_digits (bundled, 8x8, values 0-16 scaled by 1/16)",
                       "n_images": int(images.shape[0])}, **facts}
    return LoadedData(clients, task="multiclass", n_classes=10, name="rotated_digits", info=info,
                      preprocessing=rescaled_record(len(clients), clients[0].n_features,
                                                    "pixel values 0-16 scaled by 1/16"))


# ----------------------------------------------------------------------------------------------
# CIFAR-10
# ----------------------------------------------------------------------------------------------
class _CifarUnpickler(pickle.Unpickler):
    """Unpickler that only rebuilds NumPy arrays, so a crafted file cannot run arbitrary code."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a CIFAR-10 batch")
        if module == "numpy.core.multiarray":  # NumPy >= 2 moved it to numpy._core
            multiarray: ModuleType
            try:
                import numpy._core.multiarray as multiarray
            except ImportError:  # NumPy 1.x
                import numpy.core.multiarray as multiarray
            return getattr(multiarray, name)
        return super().find_class(module, name)


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with open(path, "rb") as fh:
            batch = _CifarUnpickler(fh, encoding="bytes").load()
    except Exception as exc:  # pickle raises many types on corrupt input
        raise ValueError(f"{path}: not a readable CIFAR-10 batch pickle ({type(exc).__name__}: {exc})") from None
    if not isinstance(batch, dict):
        raise ValueError(f"{path}: expected a pickled dict with keys b'data' and b'labels'; got {type(batch).__name__}")
    fields = {}
    for key in ("data", "labels"):
        for k in (key.encode(), key):
            if k in batch:
                fields[key] = batch[k]
                break
        else:
            raise ValueError(f"{path}: key b'{key}' not found; the dict holds {sorted(map(str, batch))}")
    data = np.asarray(fields["data"])
    if data.ndim != 2 or data.shape[1] != 3072 or data.dtype.kind not in "biuf":
        raise ValueError(f"{path}: b'data' must be a numeric (N, 3072) array; got {data.dtype} {data.shape}")
    if data.dtype != np.uint8:
        if not np.all(np.isfinite(data)) or data.min() < 0 or data.max() > 255:
            raise ValueError(f"{path}: b'data' must hold pixel values 0..255")
        data = data.astype(np.uint8)
    try:
        labels = np.asarray(fields["labels"], dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{path}: b'labels' must be a list of integers 0..9") from None
    if labels.ndim != 1 or labels.shape[0] != data.shape[0]:
        raise ValueError(f"{path}: b'labels' has shape {labels.shape} but b'data' has {data.shape[0]} rows")
    bad = np.flatnonzero(~np.isin(labels, np.arange(10)))
    if bad.size:
        raise ValueError(f"{path}: b'labels'[{bad[0]}] is {labels[bad[0]]!r}; CIFAR-10 labels are integers 0..9")
    return data, labels.astype(np.int64)


def load_cifar10_arrays(root: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """All CIFAR-10 images of the python pickles in ``root`` (``data_batch_1..5``, ``test_batch``
    when present) as ``(X, y)``: X (n, 3072) in [0, 1] (channel-major, as stored), y int64.
    """
    root = Path(root)
    files = [root / f"data_batch_{i}" for i in range(1, 6)] + [root / "test_batch"]
    present = [f for f in files if f.is_file()]
    if not present:
        raise ValueError(f"CIFAR-10: no data_batch_* or test_batch pickles in {root}")
    parts = [_read_cifar_batch(f) for f in present]
    return np.vstack([d for d, _ in parts]).astype(np.float64) / 255.0, np.concatenate([y for _, y in parts])


def _cifar_batches(root: Path, use_test: bool) -> tuple[Path, list[Path]]:
    """The ``cifar-10-batches-py`` directory (``root`` or the one in it) and its batch files (``test_batch``
    last, with ``use_test`` and when present); a ``ValueError`` naming a missing directory or training batch.
    """
    if not (root / "data_batch_1").is_file() and (root / "cifar-10-batches-py").is_dir():
        root = root / "cifar-10-batches-py"
    if not root.is_dir():
        raise ValueError(
            f"CIFAR-10: directory not found: {root}; expected the cifar-10-batches-py directory "
            "with data_batch_1..data_batch_5 and test_batch"
        )
    paths = [root / f"data_batch_{i}" for i in range(1, 6)]
    for p in paths:
        if not p.is_file():
            raise ValueError(
                f"CIFAR-10: file not found: {p}; expected the CIFAR-10 python batch {p.name} (pickled dict)"
            )
    if use_test and (root / "test_batch").is_file():
        paths.append(root / "test_batch")
    return root, paths


def _cifar_parts(data: np.ndarray, labels: np.ndarray, seed: int, n_clients: int, cpc: int,
                 spc: int) -> list[tuple[np.ndarray, np.ndarray, dict[str, Any]]]:
    """Every client's ``(X, y, meta)``: ``cpc`` seeded classes and ``spc`` images drawn without replacement
    (see :func:`load_cifar10`); a ``ValueError`` when a class has fewer images than its clients need.
    """
    rng = stream(seed, ASSIGN)
    held = [np.sort(rng.choice(10, size=cpc, replace=False)) for _ in range(n_clients)]
    counts = [np.full(cpc, spc // cpc) + (np.arange(cpc) < spc % cpc) for _ in range(n_clients)]
    pools = [stream(seed, ASSIGN, 1, c).permutation(np.flatnonzero(labels == c)) for c in range(10)]
    used = np.zeros(10, dtype=np.int64)
    demand = np.zeros(10, dtype=np.int64)
    for cls, cnt in zip(held, counts, strict=True):
        np.add.at(demand, cls, cnt)
    for c in range(10):
        if demand[c] > pools[c].size:
            raise ValueError(
                f"CIFAR-10: class {c} ({CIFAR10_CLASSES[c]}) has {pools[c].size} images but its clients need "
                f"{demand[c]}; lower samples_per_client or n_clients"
            )
    parts = []
    for k in range(n_clients):
        picked = []
        for c, m in zip(held[k], counts[k], strict=True):
            picked.append(pools[c][used[c]: used[c] + m])
            used[c] += m
        rows = np.sort(np.concatenate(picked))
        meta = {"classes": held[k].tolist(), "class_counts": counts[k].tolist(), "n_rows": int(rows.size)}
        parts.append((data[rows] / 255.0, labels[rows], meta))
    return parts


def load_cifar10(
    root: str | Path,
    n_clients: int = 40,
    classes_per_client: int = 5,
    seed: int = 0,
    samples_per_client: int = 500,
    protocol: bool = True,
    *,
    use_test: bool = True,
    test_fraction: float = 0.25,
    keep: float = 0.2,
) -> LoadedData:
    """Heterogeneous CIFAR-10: every client holds a seeded subset of the classes.

    Every client draws ``classes_per_client`` of the 10 classes at random (seeded) and gets
    ``samples_per_client`` images split as evenly as possible over its classes (the first
    ``samples_per_client % classes_per_client`` of its classes, in increasing order, get one
    more). Images are drawn without replacement from the pooled batches, so clients never share
    an image. Features are the 3072 bytes of a row (1024 red, 1024 green, 1024 blue values of
    the 32 x 32 image, row-major) divided by 255.

    Parameters
    ----------
    root : str or Path
        The ``cifar-10-batches-py`` directory (or a directory containing it) with the pickled
        batches ``data_batch_1`` .. ``data_batch_5`` and, optionally, ``test_batch``; each a
        dict with ``b"data"`` (N x 3072 uint8) and ``b"labels"`` (N integers 0..9). Only NumPy
        arrays and builtins are unpickled.
    n_clients : int, default 40
        Number of clients.
    classes_per_client : int, default 5
        Classes held by every client (1-10).
    seed : int, default 0
        Seed of the classes, of the images drawn, of the split and of the reduction.
    samples_per_client : int, default 500
        Images per client (at least 4 and at least ``classes_per_client``).
    protocol : bool, default True
        Apply the Sheaf-FMTL protocol (Appendix F): seeded 75/25 train/test split of every
        client, then the training data of a seeded half of the clients reduced to 20 %.
        With ``False`` the clients are only split; none is reduced.
    use_test : bool, default True
        Pool ``test_batch`` with the training batches when it is present.
    test_fraction : float, default 0.25
        Fraction of each client's rows held out for testing.
    keep : float, default 0.2
        Fraction of training rows kept by a reduced client.

    Returns
    -------
    LoadedData
        ``task="multiclass"``, ``n_classes=10``, 3072 features in [0, 1]; ``meta`` has
        ``classes`` (sorted list), ``class_counts``, ``n_rows``, ``n_train_full`` and
        ``reduced``.

    Raises
    ------
    ValueError
        A missing batch (the message names the path), an unreadable pickle, missing keys, wrong
        shapes, labels outside 0..9, or a class with fewer images than its clients need.
    """
    seed = check_seed(seed)
    check_protocol_args(protocol, test_fraction, keep)
    check_int("n_clients", n_clients, 1)
    check_int("classes_per_client", classes_per_client, 1, 10)
    check_int("samples_per_client", samples_per_client, max(4, int(classes_per_client)))
    n_clients, cpc, spc = int(n_clients), int(classes_per_client), int(samples_per_client)
    root, paths = _cifar_batches(Path(root), use_test)
    batches = [_read_cifar_batch(p) for p in paths]
    data = np.concatenate([b[0] for b in batches])
    labels = np.concatenate([b[1] for b in batches])
    parts = _cifar_parts(data, labels, seed, n_clients, cpc, spc)
    clients, record = build_clients(parts, seed=seed, protocol=protocol, test_fraction=test_fraction, keep=keep,
                                    what="CIFAR-10")
    info = {
        "source": {"dataset": "CIFAR-10 (python version)", "root": str(root), "files": [str(p) for p in paths],
                   "n_images": int(data.shape[0])},
        "protocol": record,
        "classes": list(CIFAR10_CLASSES),
        "classes_per_client": cpc,
        "samples_per_client": spc,
        "feature_layout": "3072 = 3 channels (R, G, B) x 32 x 32, row-major, scaled by 1/255",
    }
    return LoadedData(clients, task="multiclass", n_classes=10, name="cifar10_heterogeneous", info=info,
                      preprocessing=rescaled_record(len(clients), clients[0].n_features,
                                                    "pixel values 0-255 scaled by 1/255"))
