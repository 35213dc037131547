"""Partitioners (iid, dirichlet, shards, by_group), MNIST-10k federations and the LEAF FEMNIST loader."""
import json

import numpy as np
import pytest

from topofl.data.loaders import load_femnist
from topofl.data.loaders.mnist10k import apply_style, client_style, load_mnist_10k, mnist_federation
from topofl.data.partition import by_group, dirichlet, iid, partition, shards


def labels(n=2000, classes=10, seed=0):
    return np.random.default_rng(seed).integers(0, classes, n)


def covers(parts, n):
    allidx = np.concatenate(parts)
    return np.array_equal(np.sort(allidx), np.arange(n))


def test_iid_split_is_even_and_complete():
    parts = iid(103, 10, np.random.default_rng(0))
    assert covers(parts, 103) and {p.size for p in parts} == {10, 11}


@pytest.mark.parametrize("alpha", [0.05, 0.5, 100.0])
def test_dirichlet_split_covers_every_sample_with_a_minimum_size(alpha):
    y = labels()
    parts = dirichlet(y, 10, alpha, np.random.default_rng(1), min_size=20)
    assert covers(parts, y.size) and min(p.size for p in parts) >= 20
    n_classes = [np.unique(y[p]).size for p in parts]
    if alpha == 100.0:
        assert min(n_classes) == 10  # near IID
    if alpha == 0.05:
        assert np.mean(n_classes) < 6  # label skew: few classes per client


def test_dirichlet_refuses_an_impossible_minimum():
    with pytest.raises(ValueError, match="min_size must be in"):
        dirichlet(labels(100), 10, 0.1, np.random.default_rng(0), min_size=11)


def test_shards_give_few_classes_per_client():
    y = labels()
    parts = shards(y, 20, np.random.default_rng(0), shards_per_client=2)
    assert covers(parts, y.size)
    assert max(np.unique(y[p]).size for p in parts) <= 4  # two shards, each within one or two labels


def test_by_group_and_dispatch_are_deterministic():
    g = np.array(["b", "a", "b", "c"])
    assert [p.tolist() for p in by_group(g)] == [[1], [0, 2], [3]]
    y = labels(500)
    a = partition("dirichlet", y, 5, np.random.default_rng(3), alpha=0.3)
    b = partition("dirichlet", y, 5, np.random.default_rng(3), alpha=0.3)
    assert all(np.array_equal(x, z) for x, z in zip(a, b, strict=True))
    with pytest.raises(ValueError, match="partition must be one of"):
        partition("random", y, 5, np.random.default_rng(0))


def test_mnist_10k_is_the_real_shipped_set():
    X, y = load_mnist_10k()
    assert X.shape == (10_000, 784) and 0.0 <= X.min() and X.max() <= 1.0
    assert np.bincount(y).tolist() == [1001, 1127, 991, 1032, 980, 863, 1014, 1070, 944, 978]


def test_mnist_federations_and_styles():
    fed = mnist_federation(10, partition_kind="dirichlet", alpha=0.1, n_samples=2000, seed=0, min_size=20)
    assert len(fed) == 10 and fed.n_classes == 10 and fed.task == "multiclass"
    assert np.mean([len(c.meta["classes"]) for c in fed]) < 8
    styled = mnist_federation(4, partition_kind="iid", n_samples=400, seed=0, styles=1.0, min_size=10)
    plain = mnist_federation(4, partition_kind="iid", n_samples=400, seed=0, min_size=10)
    assert all("style" in c.meta for c in styled)
    assert not np.allclose(styled[0].X_train, plain[0].X_train)
    X = plain[0].X_train[:3]
    same = apply_style(X, {"angle": 0.0, "shear": 0.0, "scale": 1.0, "dx": 0.0, "dy": 0.0, "stroke": 0.0})
    np.testing.assert_allclose(same, X, atol=1e-12)  # the identity style changes nothing
    s = client_style(np.random.default_rng(0))
    assert -15 <= s["angle"] <= 15 and s["stroke"] in (-1.0, 0.0, 1.0)


def write_leaf(root, users, invert=True):
    rng = np.random.default_rng(0)
    for split, n in (("train", 6), ("test", 2)):
        (root / split).mkdir(parents=True)
        data = {}
        for u in users:
            x = rng.random((n, 784)) * 0.3
            data[u] = {"x": (1.0 - x if invert else x).tolist(), "y": rng.integers(0, 62, n).tolist()}
        (root / split / "all_data_0.json").write_text(json.dumps({"users": users, "num_samples": [n] * len(users), "user_data": data}))


def test_femnist_reads_leaf_json_one_client_per_writer(tmp_path):
    write_leaf(tmp_path, ["f0001_02", "f0002_11", "f0003_40"])
    d = load_femnist(tmp_path)
    assert d.n_clients == 3 and d.n_classes == 62 and d.task == "multiclass"
    assert [c.meta["writer"] for c in d.clients] == ["f0001_02", "f0002_11", "f0003_40"]
    assert d.clients[0].X_train.shape == (6, 784) and d.clients[0].X_test.shape == (2, 784)
    assert d.clients[0].X_train.mean() < 0.5  # white background inverted to MNIST's black
    two = load_femnist(tmp_path, n_writers=2, seed=1)
    assert two.n_clients == 2


@pytest.mark.parametrize("mutate, words", [
    (lambda root: (root / "test").rename(root / "tst"), "test is not a directory"),
    (lambda root: (root / "train" / "all_data_0.json").write_text("{"), "not a LEAF JSON file"),
    (lambda root: (root / "train" / "all_data_0.json").write_text(json.dumps(
        {"users": ["u"], "user_data": {"u": {"x": [[0.5] * 10], "y": [1]}}})), "784 pixels"),
    (lambda root: (root / "train" / "all_data_0.json").write_text(json.dumps(
        {"users": ["u"], "user_data": {"u": {"x": [[0.5] * 784], "y": [70]}}})), "class ids 0..61"),
])
def test_femnist_bad_files_name_the_problem(tmp_path, mutate, words):
    write_leaf(tmp_path, ["u"])
    mutate(tmp_path)
    with pytest.raises(ValueError, match=words):
        load_femnist(tmp_path)
