"""Vietoris–Rips diagrams (topofl.tda.diagrams): shape of the output, known topologies, ripser.py."""
from __future__ import annotations

import numpy as np
import pytest
from ripser import ripser

from topofl.tda import diagrams


def _noisy_circle(n: int = 100, radius: float = 1.0, noise: float = 0.05, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    theta = rng.uniform(0.0, 2.0 * np.pi, n)
    return radius * np.c_[np.cos(theta), np.sin(theta)] + rng.normal(0.0, noise, (n, 2))


def _two_blobs(n_each: int = 30, sd: float = 0.1, gap: float = 10.0, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.vstack([rng.normal(0.0, sd, (n_each, 2)), rng.normal(0.0, sd, (n_each, 2)) + [gap, 0.0]])


def _persistence(d: np.ndarray) -> np.ndarray:
    return d[:, 1] - d[:, 0]


def _lexsorted(d: np.ndarray) -> np.ndarray:
    return d[np.lexsort((d[:, 1], d[:, 0]))]


# ---------------------------------------------------------------------------------------------
# Output format
# ---------------------------------------------------------------------------------------------


def test_format_one_finite_float64_array_per_dimension():
    X = np.random.default_rng(2).standard_normal((30, 3))
    for maxdim in (0, 1, 2):
        dgms = diagrams(X, maxdim=maxdim)
        assert len(dgms) == maxdim + 1
        for d in dgms:
            assert d.dtype == np.float64
            assert d.ndim == 2 and d.shape[1] == 2
            assert np.isfinite(d).all()
            # zero-persistence pairs dropped: every pair has death > birth
            assert (d[:, 1] > d[:, 0]).all()


def test_rows_sorted_by_decreasing_persistence():
    dgms = diagrams(np.random.default_rng(3).standard_normal((50, 4)), maxdim=1)
    for d in dgms:
        pers = _persistence(d)
        assert pers.size > 1
        assert np.all(np.diff(pers) <= 0.0)


def test_n_points_in_general_position_give_n_minus_1_finite_h0_pairs():
    n = 25
    X = np.random.default_rng(4).standard_normal((n, 3))
    d0 = diagrams(X, maxdim=0)[0]
    # n components are born at 0; n - 1 merge (finite deaths), the essential one is dropped
    assert d0.shape == (n - 1, 2)
    assert np.all(d0[:, 0] == 0.0)


def test_h0_deaths_are_the_minimum_spanning_tree_edges_of_a_hand_made_line():
    # Points on a line at 0, 1, 3, 6: the MST edges have lengths 1, 2, 3, which are the H0 deaths.
    X = np.array([[0.0], [1.0], [3.0], [6.0]])
    d0, d1 = diagrams(X, maxdim=1)
    np.testing.assert_allclose(d0, [[0.0, 3.0], [0.0, 2.0], [0.0, 1.0]], atol=1e-6)
    assert d1.shape == (0, 2)  # a line has no loops


def test_unit_square_has_one_loop_born_at_side_dying_at_diagonal():
    # The 4-cycle appears when the sides (length 1) enter and is filled when the
    # diagonals (length sqrt 2) enter.
    X = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    d0, d1 = diagrams(X, maxdim=1)
    np.testing.assert_allclose(d0, np.tile([0.0, 1.0], (3, 1)), atol=1e-6)
    np.testing.assert_allclose(d1, [[1.0, np.sqrt(2.0)]], atol=1e-6)


def test_duplicate_points_do_not_create_zero_length_pairs():
    X = np.array([[0.0, 0.0], [0.0, 0.0], [2.0, 0.0], [2.0, 0.0], [5.0, 0.0]])
    d0 = diagrams(X, maxdim=0)[0]
    # Duplicates merge at 0 (zero persistence, dropped); the clusters {0}, {2}, {5} merge at 2 and 3.
    np.testing.assert_allclose(d0, [[0.0, 3.0], [0.0, 2.0]], atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Known topologies
# ---------------------------------------------------------------------------------------------


def test_noisy_circle_has_exactly_one_dominant_h1_bar():
    d1 = diagrams(_noisy_circle(), maxdim=1)[1]
    pers = _persistence(d1)
    assert pers.size >= 1
    assert pers[0] > 1.0  # sorted: the first bar is the circle
    assert np.all(pers[1:] < 0.2)
    assert (pers > 1.0).sum() == 1


def test_two_distant_blobs_have_exactly_one_long_h0_bar():
    d0 = diagrams(_two_blobs(), maxdim=0)[0]
    pers = _persistence(d0)
    assert pers.size == 59
    # The blobs merge at the shortest inter-blob distance: a bit less than the 10 between centres.
    assert 9.0 < pers[0] < 10.0
    assert np.all(pers[1:] < 1.0)
    assert (pers > 1.0).sum() == 1


# ---------------------------------------------------------------------------------------------
# Cross-check with ripser.py
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_agrees_with_ripser_py(seed):
    X = np.random.default_rng(100 + seed).standard_normal((60, 5))
    ours = diagrams(X, maxdim=1)
    theirs = ripser(X, maxdim=1)["dgms"]
    assert len(ours) == len(theirs) == 2
    for a, b in zip(ours, theirs, strict=True):
        b = np.asarray(b, dtype=np.float64)
        b = b[np.isfinite(b[:, 1]) & (b[:, 1] > b[:, 0])]
        assert a.shape == b.shape
        np.testing.assert_allclose(_lexsorted(a), _lexsorted(b), rtol=0, atol=1e-5)
        # same multiset of persistences, and ours already in decreasing order
        np.testing.assert_allclose(_persistence(a), np.sort(_persistence(b))[::-1], rtol=0, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Input validation
# ---------------------------------------------------------------------------------------------


def test_nan_input_raises_naming_field():
    X = np.random.default_rng(5).standard_normal((10, 2))
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"X contains a non-finite value.*\(3, 1\)"):
        diagrams(X)


def test_inf_input_raises_naming_field():
    X = np.random.default_rng(6).standard_normal((10, 2))
    X[0, 0] = np.inf
    with pytest.raises(ValueError, match=r"X contains a non-finite value"):
        diagrams(X)


def test_fewer_than_three_points_raises():
    with pytest.raises(ValueError, match=r"X needs at least 3 points; got 2"):
        diagrams(np.zeros((2, 3)))


def test_one_dimensional_array_raises():
    with pytest.raises(ValueError, match=r"X must be a 2-D array.*ndim=1"):
        diagrams(np.arange(10.0))


def test_three_dimensional_array_raises():
    with pytest.raises(ValueError, match=r"X must be a 2-D array.*ndim=3"):
        diagrams(np.zeros((4, 3, 2)))


def test_non_numeric_input_raises():
    with pytest.raises(ValueError, match=r"X must hold real numbers; got dtype <U1"):
        diagrams([["a", "b"], ["c", "d"], ["e", "f"]])


@pytest.mark.parametrize("maxdim", [-1, 4, 1.0])
def test_bad_maxdim_raises(maxdim):
    with pytest.raises(ValueError, match="maxdim"):
        diagrams(np.random.default_rng(7).standard_normal((10, 2)), maxdim=maxdim)
