"""Dataset loaders: fixture files in the real formats are written to tmp_path, then loaded."""
from __future__ import annotations

import dataclasses
import gzip
import os
import pickle
import re

import numpy as np
import pytest
import scipy.io
from loader_fixtures import (
    cell_array,
    idx_bytes,
    mat_clients,
    row_ids_cifar,
    write_cifar,
    write_har,
    write_mat,
    write_mnist,
)

from topofl.data.federation import ClientData, Federation
from topofl.data.loaders import (
    LoadedData,
    load_cifar10,
    load_gleam,
    load_har,
    load_mnist_idx,
    load_school,
    load_vehicle,
    read_idx,
    reduce_half,
    rotated_digits,
    rotated_mnist,
    split_client,
    synthetic_tabular,
)


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------
def n_test(n: int) -> int:
    return int(np.floor(0.25 * n + 0.5))


def check_protocol(data: LoadedData, full_sizes: list[int], protocol: bool = True) -> None:
    """75/25 split of every client; exactly half (rounded down) reduced to 20 % of their training rows."""
    reduced = [c.meta["reduced"] for c in data.clients]
    assert sum(reduced) == (len(full_sizes) // 2 if protocol else 0)
    assert data.info["protocol"]["applied"] is protocol
    assert data.info["protocol"]["reduced_clients"] == [k for k, r in enumerate(reduced) if r]
    for c, n in zip(data.clients, full_sizes, strict=False):
        assert len(c.y_test) == n_test(n)
        n_tr = n - n_test(n)
        assert c.meta["n_train_full"] == n_tr
        expected = max(3, int(np.floor(0.2 * n_tr + 0.5))) if c.meta["reduced"] else n_tr
        assert c.n_train == expected
        assert c.X_train.shape[0] == c.y_train.shape[0] and c.X_test.shape[0] == c.y_test.shape[0]


def same(a: LoadedData, b: LoadedData) -> bool:
    return len(a.clients) == len(b.clients) and all(
        all(np.array_equal(u, v) for u, v in zip(ca, cb, strict=True)) and dict(ca.meta) == dict(cb.meta)
        for ca, cb in zip(a.clients, b.clients, strict=True)
    )


def pooled(c: ClientData) -> tuple[np.ndarray, np.ndarray]:
    return np.vstack([c.X_train, c.X_test]), np.concatenate([c.y_train, c.y_test])


# ----------------------------------------------------------------------------------------------
# protocol
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n, n_te", [(4, 1), (10, 3), (40, 10), (45, 11), (101, 25)])
def test_split_client_is_75_25_and_keeps_rows(n, n_te):
    X = np.arange(2 * n, dtype=float).reshape(n, 2)
    y = np.arange(n, dtype=float)
    Xtr, ytr, Xte, yte = split_client(X, y, np.random.default_rng(1))
    assert len(yte) == n_te and len(ytr) == n - n_te
    assert sorted(np.concatenate([ytr, yte]).tolist()) == y.tolist()
    np.testing.assert_array_equal(Xtr[:, 1], 2 * ytr + 1)  # rows stay aligned with their labels
    again = split_client(X, y, np.random.default_rng(1))
    assert np.array_equal(again[1], ytr)


def test_split_client_rejects_too_few_rows_and_bad_fraction():
    X, y = np.zeros((3, 2)), np.zeros(3)
    with pytest.raises(ValueError, match="client 7 has 3 rows"):
        split_client(X, y, np.random.default_rng(0), field="client 7")
    with pytest.raises(ValueError, match="test_fraction"):
        split_client(np.zeros((9, 2)), np.zeros(9), np.random.default_rng(0), test_fraction=1.0)
    with pytest.raises(ValueError, match="y has shape"):
        split_client(np.zeros((9, 2)), np.zeros(8), np.random.default_rng(0))


def test_reduce_half_reduces_exactly_half_rounded_down():
    rng = np.random.default_rng(0)
    clients = [ClientData(rng.normal(size=(n, 3)), np.arange(n, dtype=float), np.ones((5, 3)), np.ones(5), client_id=k,
                          meta={"tag": k}) for k, n in enumerate([30, 40, 50, 60, 12])]
    out = reduce_half(clients, np.random.default_rng(3))
    assert sum(c.meta["reduced"] for c in out) == 2
    for before, after in zip(clients, out, strict=False):
        assert after.meta["tag"] == before.meta["tag"] and after.client_id == before.client_id
        assert np.array_equal(after.X_test, before.X_test)
        if after.meta["reduced"]:
            assert after.n_train == max(3, round(0.2 * before.n_train))
            assert set(after.y_train.tolist()) <= set(before.y_train.tolist())
            assert np.all(np.diff(after.y_train) > 0)  # original order kept
        else:
            assert after.n_train == before.n_train
    assert [c.meta["reduced"] for c in reduce_half(clients, np.random.default_rng(3))] == [c.meta["reduced"] for c in out]
    assert not reduce_half(clients[:1], np.random.default_rng(0))[0].meta["reduced"]


# ----------------------------------------------------------------------------------------------
# .mat cell-array data sets
# ----------------------------------------------------------------------------------------------
VEHICLE_SIZES = [40, 44, 48, 52, 56, 60, 63]


@pytest.fixture
def vehicle_file(tmp_path):
    Xs, Ys = mat_clients(VEHICLE_SIZES, 100, "pm1")
    return write_mat(tmp_path / "vehicle_sensor.mat", Xs, Ys), Xs, Ys


def test_vehicle_shapes_label_mapping_and_protocol(vehicle_file):
    path, Xs, Ys = vehicle_file
    data = load_vehicle(path)
    assert isinstance(data, LoadedData) and data.name == "vehicle"
    assert data.task == "binary" and data.n_classes == 2 and data.n_clients == 7
    assert data.feature_counts == [100] * 7
    assert data.info["label_map"] == {"-1": 0, "1": 1} and data.info["source"]["file"] == str(path)
    X_all, Y_all = np.vstack(Xs), np.vstack(Ys).ravel()
    for k, c in enumerate(data.clients):
        assert c.client_id == k and c.meta["cell"] == k and c.meta["n_rows"] == VEHICLE_SIZES[k]
        X, y = pooled(c)
        ids = X[:, 0].astype(int)
        np.testing.assert_array_equal(X, X_all[ids])
        np.testing.assert_array_equal(y, (Y_all[ids] > 0).astype(float))
        assert set(np.unique(y)) <= {0.0, 1.0}
    check_protocol(data, VEHICLE_SIZES)
    fed = data.to_federation()
    assert isinstance(fed, Federation) and fed.task == "binary" and len(fed) == 7 and fed.info["protocol"]


def test_vehicle_is_deterministic_per_seed(vehicle_file):
    path = vehicle_file[0]
    a, b = load_vehicle(path, seed=5), load_vehicle(path, seed=5)
    assert same(a, b)
    c = load_vehicle(path, seed=6)
    assert not same(a, c)
    assert c.info["protocol"]["seed"] == 6


def test_vehicle_without_protocol_only_splits(vehicle_file):
    data = load_vehicle(vehicle_file[0], protocol=False)
    check_protocol(data, VEHICLE_SIZES, protocol=False)
    assert data.info["protocol"]["name"] == "train/test split only"


def test_gleam_column_cells_and_01_labels(tmp_path):
    sizes = [20, 30, 25, 18]
    Xs, Ys = mat_clients(sizes, 9, "01", seed=2)
    path = write_mat(tmp_path / "gleam.mat", Xs, Ys, column=True)
    data = load_gleam(path, seed=1)
    assert data.n_clients == 4 and data.feature_counts == [9] * 4 and data.task == "binary"
    assert data.info["label_map"] == {"0": 0, "1": 1}
    Y_all = np.vstack(Ys).ravel()
    for c in data.clients:
        X, y = pooled(c)
        np.testing.assert_array_equal(y, Y_all[X[:, 0].astype(int)])
    check_protocol(data, sizes)


def test_school_regression_targets_unchanged(tmp_path):
    sizes = [30, 22, 41, 17, 26]
    Xs, Ys = mat_clients(sizes, 28, "scores", seed=3)
    data = load_school(write_mat(tmp_path / "school.mat", Xs, Ys))
    assert data.task == "regression" and data.n_classes == 0 and data.feature_counts == [28] * 5
    Y_all = np.vstack(Ys).ravel()
    for c in data.clients:
        X, y = pooled(c)
        np.testing.assert_array_equal(y, Y_all[X[:, 0].astype(int)])
    check_protocol(data, sizes)
    assert data.to_federation().task == "regression"


def _mat_case(tmp_path, case):
    Xs, Ys = mat_clients([20, 21, 22], 6, "pm1")
    path = tmp_path / "bad.mat"
    if case == "missing":
        return tmp_path / "nowhere" / "vehicle_sensor.mat", [r"file not found: .*nowhere.*vehicle_sensor\.mat", "expected"]
    if case == "cell_counts":
        scipy.io.savemat(str(path), {"X": cell_array(Xs), "Y": cell_array(Ys[:2])})
        return path, ["bad.mat", "'X' has 3 cells.*'Y' has 2"]
    if case == "row_counts":
        Ys[2] = Ys[2][:-1]
        write_mat(path, Xs, Ys)
        return path, ["bad.mat", "X cell 2 .*22 rows.*Y cell 2 .*21 labels"]
    if case == "nan":
        Xs[1][4, 3] = np.nan
        write_mat(path, Xs, Ys)
        return path, ["bad.mat", "X cell 1", "non-finite"]
    if case == "nan_label":
        Ys[0][2, 0] = np.nan
        write_mat(path, Xs, Ys)
        return path, ["bad.mat", "Y cell 0", "non-finite"]
    if case == "missing_var":
        scipy.io.savemat(str(path), {"X": cell_array(Xs), "labels": cell_array(Ys)})
        return path, ["bad.mat", "variable 'Y' not found"]
    if case == "not_cells":
        scipy.io.savemat(str(path), {"X": np.vstack(Xs), "Y": np.vstack(Ys)})
        return path, ["bad.mat", "'X' must be a \\(1, K\\) or \\(K, 1\\) cell array"]
    if case == "features":
        Xs[2] = Xs[2][:, :5]
        write_mat(path, Xs, Ys)
        return path, ["bad.mat", "X cell 2 .*5 features.*6"]
    if case == "labels":
        Ys[1][0, 0] = 2.0
        write_mat(path, Xs, Ys)
        return path, ["bad.mat", "Y cell 1", "2.0"]
    if case == "not_mat":
        path.write_text("hello")
        return path, ["bad.mat", "not a readable .mat file"]
    raise AssertionError(case)


@pytest.mark.parametrize(
    "case", ["missing", "cell_counts", "row_counts", "nan", "nan_label", "missing_var", "not_cells", "features", "labels", "not_mat"]
)
def test_mat_loaders_reject_bad_input_naming_file_and_field(tmp_path, case):
    path, patterns = _mat_case(tmp_path, case)
    with pytest.raises(ValueError) as err:
        load_vehicle(path)
    for pattern in patterns:
        assert re.search(pattern, str(err.value)), (pattern, str(err.value))


def test_loader_arguments_are_checked(vehicle_file):
    with pytest.raises(ValueError, match="seed"):
        load_vehicle(vehicle_file[0], seed=-1)
    with pytest.raises(ValueError, match="protocol"):
        load_vehicle(vehicle_file[0], protocol="yes")
    with pytest.raises(ValueError, match="keep"):
        load_vehicle(vehicle_file[0], keep=0.0)


def test_loaded_data_is_frozen(vehicle_file):
    data = load_vehicle(vehicle_file[0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        data.name = "other"


# ----------------------------------------------------------------------------------------------
# UCI HAR
# ----------------------------------------------------------------------------------------------
HAR_TRAIN = {1: 20, 3: 24, 5: 17, 6: 10}
HAR_TEST = {2: 30, 4: 16, 6: 8}


@pytest.fixture(scope="module")
def har_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("har") / "UCI HAR Dataset"
    written = write_har(root, HAR_TRAIN, HAR_TEST)
    return root, written


def test_har_one_client_per_subject(har_root):
    root, written = har_root
    data = load_har(root)
    assert data.task == "multiclass" and data.n_classes == 6 and data.name == "har"
    assert [c.meta["subject"] for c in data.clients] == [1, 2, 3, 4, 5, 6]
    assert [c.meta["partition"] for c in data.clients] == ["train", "test", "train", "test", "train", "both"]
    assert data.feature_counts == [561] * 6
    X_all = np.vstack([written["train"][0], written["test"][0]])
    y_all = np.concatenate([written["train"][1], written["test"][1]])
    s_all = np.concatenate([written["train"][2], written["test"][2]])
    sizes = []
    for c in data.clients:
        X, y = pooled(c)
        ids = np.round(X[:, 0] * 1e3).astype(int)
        assert np.all(s_all[ids] == c.meta["subject"])
        np.testing.assert_allclose(X, X_all[ids], rtol=1e-6)
        np.testing.assert_array_equal(y, y_all[ids] - 1)  # labels 1..6 -> 0..5
        sizes.append(int(np.sum(s_all == c.meta["subject"])))
    assert sizes == [20, 30, 24, 16, 17, 18]
    check_protocol(data, sizes)
    assert load_har(root.parent).n_clients == 6  # the directory containing "UCI HAR Dataset"
    assert data.to_federation().n_features == 561


def _break_har(root, case):
    if case == "missing":
        (root / "test" / "subject_test.txt").unlink()
        return [r"file not found: .*test.subject_test\.txt", "UCI HAR Dataset layout"]
    if case == "rows":
        lines = (root / "train" / "y_train.txt").read_text().splitlines()
        (root / "train" / "y_train.txt").write_text("\n".join(lines[:-1]) + "\n")
        return [r"y_train\.txt", "has 70 rows.*X_train.txt has 71"]
    if case == "nan":
        lines = (root / "test" / "X_test.txt").read_text().splitlines()
        lines[3] = lines[3].replace(lines[3].split()[5], "nan", 1)
        (root / "test" / "X_test.txt").write_text("\n".join(lines) + "\n")
        return [r"X_test\.txt", "non-finite"]
    if case == "label":
        lines = (root / "train" / "y_train.txt").read_text().splitlines()
        lines[4] = "7"
        (root / "train" / "y_train.txt").write_text("\n".join(lines) + "\n")
        return [r"y_train\.txt", "line 5", "1..6"]
    if case == "features":
        X = np.loadtxt(root / "test" / "X_test.txt")
        np.savetxt(root / "test" / "X_test.txt", X[:, :11], fmt="%.7e")
        return [r"X_test\.txt", "has 11 features", r"X_train\.txt has 12"]
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["missing", "rows", "nan", "label", "features"])
def test_har_rejects_bad_input_naming_file(tmp_path, case):
    root = tmp_path / "UCI HAR Dataset"
    write_har(root, {1: 30, 3: 41}, {2: 30}, n_features=12)
    patterns = _break_har(root, case)
    with pytest.raises(ValueError) as err:
        load_har(root)
    for pattern in patterns:
        assert re.search(pattern, str(err.value)), (pattern, str(err.value))


def test_har_seeded(tmp_path):
    root = tmp_path / "har"
    write_har(root, {1: 30, 3: 41, 4: 12}, {2: 30}, n_features=12)
    assert same(load_har(root, seed=3), load_har(root, seed=3))
    assert not same(load_har(root, seed=3), load_har(root, seed=4))


# ----------------------------------------------------------------------------------------------
# MNIST IDX / rotated MNIST
# ----------------------------------------------------------------------------------------------
def test_read_idx_plain_and_gzip(tmp_path):
    arr = np.random.default_rng(0).integers(0, 256, size=(5, 4, 3), dtype=np.uint8)
    (tmp_path / "a").write_bytes(idx_bytes(arr, 2051))
    (tmp_path / "a.gz").write_bytes(gzip.compress(idx_bytes(arr, 2051)))
    np.testing.assert_array_equal(read_idx(tmp_path / "a", 2051), arr)
    np.testing.assert_array_equal(read_idx(tmp_path / "a.gz", 2051), arr)
    with pytest.raises(ValueError, match=r"magic number is 2051; expected 2049"):
        read_idx(tmp_path / "a", 2049)
    (tmp_path / "short").write_bytes(idx_bytes(arr, 2051)[:-7])
    with pytest.raises(ValueError, match=r"short: header shape \(5, 4, 3\) needs 60 data bytes but the file holds 53"):
        read_idx(tmp_path / "short")


@pytest.mark.parametrize("gz", [False, True])
def test_load_mnist_idx(tmp_path, gz):
    images, labels = write_mnist(tmp_path, n_train=30, n_test=10, gz=gz)
    X, y = load_mnist_idx(tmp_path)
    assert X.shape == (40, 784) and y.shape == (40,)
    assert X.min() >= 0.0 and X.max() <= 1.0
    np.testing.assert_array_equal(X, images.reshape(40, -1) / 255.0)
    np.testing.assert_array_equal(y, labels)
    assert load_mnist_idx(tmp_path, use_test=False)[0].shape == (30, 784)


def test_load_mnist_idx_errors_name_the_file(tmp_path):
    with pytest.raises(ValueError, match="MNIST: directory not found"):
        load_mnist_idx(tmp_path / "none")
    write_mnist(tmp_path, n_train=10, n_test=5)
    os.remove(tmp_path / "t10k-labels-idx1-ubyte")
    with pytest.raises(ValueError, match=r"file not found: .*t10k-labels-idx1-ubyte"):
        load_mnist_idx(tmp_path)
    os.remove(tmp_path / "train-labels-idx1-ubyte")
    with pytest.raises(ValueError, match=r"file not found: .*train-labels-idx1-ubyte.*expected the MNIST IDX file"):
        load_mnist_idx(tmp_path, use_test=False)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.zeros(9, np.uint8), 2049))
    with pytest.raises(ValueError, match=r"train-labels-idx1-ubyte: holds 9 labels but .*train-images-idx3-ubyte holds 10"):
        load_mnist_idx(tmp_path, use_test=False)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.zeros((10, 28, 28), np.uint8), 2051))
    with pytest.raises(ValueError, match=r"train-labels-idx1-ubyte: IDX magic number is 2051; expected 2049"):
        load_mnist_idx(tmp_path, use_test=False)


def _check_rotations(data: LoadedData, originals: np.ndarray, labels: np.ndarray, side: int) -> set:
    """Every row is np.rot90 of an original image by its group's angle; returns the originals used."""
    lookup = {img.tobytes(): i for i, img in enumerate(originals)}
    seen = set()
    for c in data.clients:
        k = c.meta["angle"] // 90
        assert c.meta["angle"] == data.info["angles"][c.meta["group"]]
        X, y = pooled(c)
        for row, label in zip(X, y, strict=False):
            img = row.reshape(side, side)
            back = np.rot90(img, -k)
            i = lookup[back.tobytes()]
            np.testing.assert_array_equal(img, np.rot90(originals[i], k))
            assert label == labels[i]
            assert i not in seen  # disjoint shares
            seen.add(i)
    return seen


def test_rotated_mnist_groups_rotations_and_protocol(tmp_path):
    images, labels = write_mnist(tmp_path, n_train=130, n_test=30, gz=True)
    data = rotated_mnist(tmp_path, n_clients=40, samples_per_client=4, protocol=False)
    assert data.n_clients == 40 and data.feature_counts == [784] * 40 and data.n_classes == 10
    assert data.info["group_sizes"] == [10, 10, 10, 10] and data.info["angles"] == [0, 90, 180, 270]
    seen = _check_rotations(data, images / 255.0, labels, 28)
    assert len(seen) == 160

    small = rotated_mnist(tmp_path, n_clients=8, seed=2)  # equal shares of all 160 images
    assert small.info["group_sizes"] == [2, 2, 2, 2]
    check_protocol(small, [20] * 8)
    _check_rotations(small, images / 255.0, labels, 28)
    assert same(small, rotated_mnist(tmp_path, n_clients=8, seed=2))
    other = rotated_mnist(tmp_path, n_clients=8, seed=3)
    assert not same(small, other)


def test_rotated_mnist_rejects_bad_angles_and_sizes(tmp_path):
    write_mnist(tmp_path, n_train=40)
    with pytest.raises(ValueError, match="multiples of 90"):
        rotated_mnist(tmp_path, n_clients=4, groups=(0, 45))
    with pytest.raises(ValueError, match="exceeds the 40 images"):
        rotated_mnist(tmp_path, n_clients=4, samples_per_client=11)


# ----------------------------------------------------------------------------------------------
# rotated digits (offline)
# ----------------------------------------------------------------------------------------------
def test_rotated_digits_groups_shares_and_rotations():
    from sklearn.datasets import load_digits

    digits = load_digits()
    data = rotated_digits(protocol=False)
    assert data.n_clients == 40 and data.feature_counts == [64] * 40 and data.task == "multiclass"
    assert data.info["group_sizes"] == [10, 10, 10, 10]
    assert sorted({c.meta["n_rows"] for c in data.clients}) == [44, 45]
    assert sum(c.meta["n_rows"] for c in data.clients) == 1797
    # duplicated images exist in load_digits: map each distinct image to its set of labels
    images = digits.images / 16.0
    lookup: dict[bytes, set] = {}
    for img, t in zip(images, digits.target, strict=False):
        lookup.setdefault(img.tobytes(), set()).add(int(t))
    for c in data.clients:
        k = c.meta["angle"] // 90
        X, y = pooled(c)
        assert X.min() >= 0.0 and X.max() <= 1.0
        for row, label in zip(X, y, strict=False):
            img = row.reshape(8, 8)
            original = np.rot90(img, -k)
            assert int(label) in lookup[original.tobytes()]
            np.testing.assert_array_equal(img, np.rot90(original, k))
    protocol = rotated_digits(seed=1)
    check_protocol(protocol, [c.meta["n_rows"] for c in protocol.clients])
    assert same(protocol, rotated_digits(seed=1)) and not same(protocol, rotated_digits(seed=2))
    assert protocol.to_federation().n_features == 64


def test_rotated_digits_two_groups():
    data = rotated_digits(n_clients=7, groups=2)
    assert data.info["angles"] == [0, 90] and data.info["group_sizes"] == [4, 3]


# ----------------------------------------------------------------------------------------------
# CIFAR-10
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cifar_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar") / "cifar-10-batches-py"
    data, labels = write_cifar(root, per_class=6)
    return root, data, labels


def test_cifar10_heterogeneous_classes(cifar_root):
    root, raw, labels = cifar_root
    data = load_cifar10(root, n_clients=6, classes_per_client=5, samples_per_client=20, seed=0, protocol=False)
    assert data.n_clients == 6 and data.feature_counts == [3072] * 6 and data.n_classes == 10
    assert data.info["source"]["n_images"] == 360
    seen = set()
    for c in data.clients:
        assert len(c.meta["classes"]) == 5 and c.meta["class_counts"] == [4] * 5
        X, y = pooled(c)
        assert X.min() >= 0.0 and X.max() <= 1.0
        ids = row_ids_cifar(X)
        np.testing.assert_array_equal(X, raw[ids] / 255.0)
        np.testing.assert_array_equal(y, labels[ids])
        assert set(y.astype(int).tolist()) == set(c.meta["classes"])
        assert np.array_equal(np.bincount(y.astype(int), minlength=10)[c.meta["classes"]], [4] * 5)
        assert not seen & set(ids.tolist())  # drawn without replacement
        seen |= set(ids.tolist())
    check_protocol(data, [20] * 6, protocol=False)
    reduced = load_cifar10(root, 6, 5, 0, 20)
    check_protocol(reduced, [20] * 6)
    for c, full in zip(reduced.clients, data.clients, strict=False):  # same draw, then the protocol
        np.testing.assert_array_equal(c.X_test, full.X_test)
        assert set(np.unique(c.y_train).astype(int).tolist()) <= set(c.meta["classes"])
    assert same(reduced, load_cifar10(root, 6, 5, 0, 20))
    assert not same(reduced, load_cifar10(root, 6, 5, 1, 20))
    assert load_cifar10(root.parent, 6, 5, 0, 20, use_test=False).info["source"]["n_images"] == 300


def test_cifar10_errors(tmp_path, cifar_root):
    with pytest.raises(ValueError, match="exceeds|has 36 images but its clients need"):
        load_cifar10(cifar_root[0], n_clients=6, samples_per_client=100)
    root = tmp_path / "c"
    write_cifar(root, per_class=2, test=False)
    os.remove(root / "data_batch_3")
    with pytest.raises(ValueError, match=r"file not found: .*data_batch_3; expected the CIFAR-10 python batch"):
        load_cifar10(root, n_clients=2, samples_per_client=10)
    with open(root / "data_batch_3", "wb") as fh:
        pickle.dump({b"data": np.zeros((20, 3072), np.uint8)}, fh, protocol=2)
    with pytest.raises(ValueError, match=r"data_batch_3: key b'labels' not found"):
        load_cifar10(root, n_clients=2, samples_per_client=10)
    with open(root / "data_batch_3", "wb") as fh:
        pickle.dump({b"data": np.zeros((20, 3072), np.uint8), b"labels": [0] * 19}, fh, protocol=2)
    with pytest.raises(ValueError, match=r"data_batch_3: b'labels' has shape \(19,\) but b'data' has 20 rows"):
        load_cifar10(root, n_clients=2, samples_per_client=10)
    with open(root / "data_batch_3", "wb") as fh:
        pickle.dump({b"data": np.zeros((20, 3000), np.uint8), b"labels": [0] * 20}, fh, protocol=2)
    with pytest.raises(ValueError, match=r"data_batch_3: b'data' must be a numeric \(N, 3072\) array"):
        load_cifar10(root, n_clients=2, samples_per_client=10)
    with open(root / "data_batch_3", "wb") as fh:
        pickle.dump({b"data": os.getcwd, b"labels": [0]}, fh, protocol=2)
    with pytest.raises(ValueError, match=r"data_batch_3: not a readable CIFAR-10 batch pickle .*not allowed"):
        load_cifar10(root, n_clients=2, samples_per_client=10)


# ----------------------------------------------------------------------------------------------
# synthetic tabular (heterogeneous feature counts)
# ----------------------------------------------------------------------------------------------
def test_synthetic_tabular_heterogeneous_features():
    data = synthetic_tabular()
    assert data.n_clients == 12 and data.task == "multiclass" and data.n_classes == 3
    counts = data.feature_counts
    assert len(set(counts)) > 1 and all(15 <= m <= 30 for m in counts)
    assert data.info["group_sizes"] == [4, 4, 4]
    for c in data.clients:
        feats = c.meta["features"]
        assert len(feats) == c.n_features == c.X_test.shape[1]
        assert feats == sorted(set(feats)) and 0 <= feats[0] and feats[-1] < 30
        assert c.meta["group"] in (0, 1, 2)
        assert set(np.unique(np.concatenate([c.y_train, c.y_test]))) <= {0.0, 1.0, 2.0}
    check_protocol(data, [c.meta["n_rows"] for c in data.clients])
    with pytest.raises(ValueError, match="features but client 0 has"):
        data.to_federation()
    assert same(data, synthetic_tabular()) and not same(data, synthetic_tabular(seed=1))


def test_synthetic_tabular_options():
    subsets = [[0, 1, 2], [3, 4, 5]]
    data = synthetic_tabular(n_clients=2, n_features=6, feature_subsets=subsets, n_groups=2, n_classes=2, protocol=False)
    assert data.task == "binary" and [c.meta["features"] for c in data.clients] == subsets
    fed = data.to_federation()  # equal subset sizes: a valid federation
    assert fed.n_features == 3 and fed.task == "binary"
    with pytest.raises(ValueError, match=r"feature_subsets\[1\] holds an index outside 0..5"):
        synthetic_tabular(n_clients=2, n_features=6, feature_subsets=[[0], [6]], n_groups=2)
    with pytest.raises(ValueError, match="n_groups"):
        synthetic_tabular(n_clients=2, n_groups=3)
