"""Finding 8: labels were guessed silently ({−1, +1} or 0.5-offset labels became a regression task
with NaN AUC; {1, 2} became a 3-class task with an empty class 0). Classification is now inferred
only from labels 0..C−1 (every class present) or from an explicit ``classes=`` / ``task=``."""
import logging

import numpy as np
import pytest

from topofl import Federation


def arrays(labels_train, labels_test, n_clients=2, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_clients):
        ytr = rng.choice(labels_train, size=40)
        yte = rng.choice(labels_test, size=12)
        out.append((rng.standard_normal((40, 3)), ytr, rng.standard_normal((12, 3)), yte))
    return out


@pytest.mark.parametrize("labels, found, hint", [
    ([-1.0, 1.0], "-1, 1", 'task="binary"'),
    ([0.5, 1.5], "0.5, 1.5", 'task="regression"'),
    ([1.0, 2.0], "1, 2", "classes=[1, 2]"),
    ([0.0, 2.0], "0, 2", "classes=[0, 1, 2]"),
])
def test_ambiguous_labels_are_a_value_error_naming_them_and_the_argument(labels, found, hint):
    with pytest.raises(ValueError) as exc:
        Federation.from_arrays(arrays(labels, labels))
    assert found in str(exc.value) and hint in str(exc.value)


def test_minus_one_plus_one_with_task_binary_maps_to_zero_one(caplog):
    with caplog.at_level(logging.INFO, logger="topofl"):
        fed = Federation.from_arrays(arrays([-1.0, 1.0], [-1.0, 1.0]), task="binary")
    assert fed.task == "binary" and set(np.unique(fed[0].y_train)) == {0.0, 1.0}
    assert "-1" in caplog.text and "0" in caplog.text


def test_explicit_classes_map_labels_to_indices():
    fed = Federation.from_arrays(arrays([1.0, 2.0], [1.0, 2.0]), classes=[1, 2])
    assert fed.task == "binary" and fed.n_classes == 2
    assert set(np.unique(fed[0].y_train)) == {0.0, 1.0}
    fed3 = Federation.from_arrays(arrays([3.0, 5.0, 7.0], [3.0, 7.0]), classes=[3, 5, 7])
    assert fed3.task == "multiclass" and fed3.n_classes == 3 and set(np.unique(fed3[0].y_train)) == {0.0, 1.0, 2.0}
    with pytest.raises(ValueError, match="not in classes"):
        Federation.from_arrays(arrays([1.0, 2.0, 4.0], [1.0]), classes=[1, 2])


def test_regression_must_be_asked_for():
    fed = Federation.from_arrays(arrays([0.5, 1.5, 2.25], [0.5]), task="regression")
    assert fed.task == "regression" and fed.n_classes == 0


def test_unambiguous_labels_still_infer():
    assert Federation.from_arrays(arrays([0.0, 1.0], [0.0, 1.0])).task == "binary"
    fed = Federation.from_arrays(arrays([0.0, 1.0, 2.0], [0.0, 2.0]))
    assert fed.task == "multiclass" and fed.n_classes == 3


def test_binary_task_with_other_labels_names_them():
    with pytest.raises(ValueError, match=r"classes=\[1, 2\]"):
        Federation.from_arrays(arrays([1.0, 2.0], [1.0, 2.0]), task="binary")


def test_too_many_classes_a_single_class_or_a_contradicted_task_are_refused():
    with pytest.raises(ValueError, match="exceeds the limit of 1000 classes"):
        Federation.from_arrays(arrays([0.0, 1e9], [0.0]), task="multiclass")
    with pytest.raises(ValueError, match="a single class: pass classes=\\[...\\] listing every class"):
        Federation.from_arrays(arrays([2.0], [2.0]))
    rng = np.random.default_rng(0)
    clients = [(rng.standard_normal((10, 2)), np.r_[np.zeros(5), np.ones(5)], rng.standard_normal((4, 2)), np.r_[0.0, 1, 0, 1])]
    with pytest.raises(ValueError, match="contradicts task='binary'"):
        Federation(clients, task="binary", n_classes=7)
    assert Federation(clients, task="multiclass", n_classes=5).n_classes == 5  # classes absent from the data
