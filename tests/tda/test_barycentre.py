"""Fréchet means of persistence diagrams and distances to them (pTopoFL Eq. 12), checked by hand."""
import numpy as np
import pytest

from topofl.tda.barycentre import diagram_barycentre, distances_to_barycentre, frechet_mean
from topofl.tda.distances import wasserstein_exact

EMPTY = np.empty((0, 2))


def test_frechet_mean_of_two_matched_points_is_their_midpoint():
    # (0, 2) and (0, 4) are matched to each other (cost 1 each way) rather than to the diagonal
    # (costs √2 and 2√2 in the Euclidean ground metric): the mean is (0, 3)
    np.testing.assert_allclose(frechet_mean([np.array([[0.0, 2.0]]), np.array([[0.0, 4.0]])]), [[0.0, 3.0]])


def test_a_point_against_an_empty_diagram_meets_the_diagonal_half_way():
    # Turner et al. 2014: a point matched to the diagonal in one of two diagrams is averaged with its
    # projection (1, 1): ((0, 2) + (1, 1)) / 2 = (0.5, 1.5)
    np.testing.assert_allclose(frechet_mean([np.array([[0.0, 2.0]]), EMPTY]), [[0.5, 1.5]])


def test_edge_cases_empty_and_single_diagrams():
    assert frechet_mean([EMPTY, EMPTY]).shape == (0, 2)
    one = np.array([[0.0, 1.0], [0.5, 3.0]])
    np.testing.assert_array_equal(frechet_mean([one]), one)
    with pytest.raises(ValueError, match="at least one diagram"):
        frechet_mean([])


def test_barycentre_does_not_increase_the_frechet_energy_of_its_start():
    """The algorithm starts from the first diagram and only lowers Σ_k W2²(D, PD_k) (Turner et al. 2014: no step raises it)."""
    rng = np.random.default_rng(4)
    dgms = []
    for _ in range(4):
        b = rng.uniform(0, 1, 12)
        dgms.append(np.column_stack([b, b + rng.exponential(0.5, 12)]))

    def energy(D):
        return sum(wasserstein_exact(D, X, p=2.0, internal_p=2.0) ** 2 for X in dgms)

    bary = frechet_mean(dgms)
    assert energy(bary) < energy(dgms[0])
    np.testing.assert_array_equal(frechet_mean(dgms), bary)  # deterministic start: reproducible


def test_distances_to_barycentre_sum_over_dimensions_by_hand():
    clients = [[np.array([[0.0, 2.0]]), EMPTY], [np.array([[0.0, 4.0]]), np.array([[1.0, 2.0]])]]
    bary = diagram_barycentre(clients)
    np.testing.assert_allclose(bary[0], [[0.0, 3.0]])
    np.testing.assert_allclose(bary[1], [[1.25, 1.75]])  # (1, 2) half way to its projection (1.5, 1.5)
    # H0: (0,2)→(0,3) and (0,4)→(0,3) cost 1 in L∞ (the diagonal would cost 1.5). H1: client 0 has
    # nothing, so the barycentre's point (persistence 0.5) goes to the diagonal at L∞ cost 0.25;
    # client 1's (1,2) is matched to (1.25,1.75) at cost 0.25 (both to the diagonal: √(0.5²+0.25²)).
    np.testing.assert_allclose(distances_to_barycentre(clients, bary), [1.25, 1.25])
    with pytest.raises(ValueError, match="same homological dimensions"):
        diagram_barycentre([[EMPTY, EMPTY], [EMPTY]])
    with pytest.raises(ValueError, match="2 dimensions"):
        distances_to_barycentre([[EMPTY]], bary)
