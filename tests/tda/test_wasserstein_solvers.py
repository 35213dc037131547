"""The exact Wasserstein distance on its two solvers (issue 25): SciPy's assignment and POT's network simplex
(gudhi's formulation) give the same optimum to rounding; ``solver="auto"`` takes POT from POT_MIN_POINTS points."""
from __future__ import annotations

import numpy as np
import pytest

from topofl.tda import distances
from topofl.tda.diagrams import diagrams
from topofl.tda.distances import POT_MAX_ORDER, POT_MIN_POINTS, wasserstein, wasserstein_exact


def random_diagram(rng: np.random.Generator, n: int, scale: float = 1.0) -> np.ndarray:
    birth = rng.random(n) * scale
    return np.column_stack([birth, birth + rng.random(n) * scale + 1e-9])


@pytest.mark.parametrize("p", [1.0, 2.0, 3.5])
@pytest.mark.parametrize("internal_p", [np.inf, 1.0, 2.0])
def test_both_solvers_give_the_same_distance(p, internal_p):
    rng = np.random.default_rng(int(p * 10 + (0 if internal_p == np.inf else internal_p)))
    for m, n in [(0, 0), (0, 3), (4, 0), (1, 1), (7, 12), (40, 33)]:
        for scale in (1e-6, 1.0, 1e6):
            a, b = random_diagram(rng, m, scale), random_diagram(rng, n, scale)
            want = wasserstein_exact(a, b, p, internal_p, solver="assignment")
            got = wasserstein_exact(a, b, p, internal_p, solver="pot")
            assert got == pytest.approx(want, rel=1e-12, abs=1e-300), (m, n, scale)


def test_both_solvers_agree_on_persistence_diagrams_of_point_clouds():
    rng = np.random.default_rng(0)
    for n in (20, 80, 200):
        A, B = diagrams(rng.standard_normal((n, 5))), diagrams(rng.standard_normal((n, 5)))
        for a, b in zip(A, B, strict=True):
            assert wasserstein_exact(a, b, solver="pot") == pytest.approx(
                wasserstein_exact(a, b, solver="assignment"), rel=1e-12)


def test_auto_takes_pot_from_the_threshold_and_the_assignment_below(monkeypatch):
    used = []
    real = distances._wasserstein_pot
    monkeypatch.setattr(distances, "_wasserstein_pot", lambda *args: used.append(len(args[0]) + len(args[1]))
                        or real(*args))
    rng = np.random.default_rng(1)
    small = (random_diagram(rng, POT_MIN_POINTS // 2 - 1), random_diagram(rng, POT_MIN_POINTS // 2))
    large = (random_diagram(rng, POT_MIN_POINTS // 2), random_diagram(rng, POT_MIN_POINTS // 2))
    assert wasserstein(*small) == wasserstein_exact(*small, solver="assignment")  # bit for bit, as before
    assert used == []
    wasserstein(*large)
    assert used == [POT_MIN_POINTS]


def test_unknown_solver_is_refused():
    with pytest.raises(ValueError, match="solver must be one of auto, assignment, pot; got 'hera'"):
        wasserstein_exact(np.zeros((0, 2)), np.zeros((0, 2)), solver="hera")


def test_a_long_pairwise_computation_reports_its_progress(monkeypatch, caplog):
    clock = iter(float(t) for t in range(0, 1000, 20))  # every row of pairs "takes" 20 s
    monkeypatch.setattr(distances, "_clock", lambda: next(clock))
    rng = np.random.default_rng(2)
    dgms = [[random_diagram(rng, 3), random_diagram(rng, 2)] for _ in range(7)]
    with caplog.at_level("INFO", logger="topofl.tda.distances"):
        D = distances.pairwise_diagram_distances(dgms)
    assert D.shape == (7, 7) and np.allclose(D, D.T)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and all("wasserstein distances of 7 clients" in m and "s left" in m for m in lines)
    assert "11 of 21 pairs in 40 s, about 36 s left" in lines[0]
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]  # one warning, then progress


def test_pot_keeps_small_distances_between_large_coordinates_and_large_orders():
    """Review of issue 25: diagrams near (1e3, 1e3) about 1e-6 apart — POT on coordinates divided by the largest
    one lost 7e-9 relative at p = 2 and everything (0.0) at p = 60; moved along the diagonal and divided by the
    largest distance, as the assignment divides its costs, it agrees up to p = 4."""
    rng = np.random.default_rng(3)
    a = 1e3 + np.column_stack([np.zeros(120), 1e-6 + rng.random(120) * 1e-6])
    b = 1e3 + np.column_stack([np.zeros(110), 1e-6 + rng.random(110) * 1e-6])
    for p in (1.0, 2.0, 4.0):
        want = wasserstein_exact(a, b, p, solver="assignment")
        assert want > 0
        assert wasserstein_exact(a, b, p, solver="pot") == pytest.approx(want, rel=1e-12)
    # a large order: POT's simplex loses precision (4 % here at p = 60); auto keeps the exact assignment
    assert wasserstein_exact(a, b, 60.0) == wasserstein_exact(a, b, 60.0, solver="assignment")
    assert POT_MAX_ORDER == 4.0


def test_pairs_below_the_diagonal_stay_with_the_assignment():
    """gudhi's distance to the diagonal is signed: POT would measure a pair that dies before it is born wrongly;
    ``auto`` keeps the assignment for such diagrams and ``pot`` refuses them."""
    rng = np.random.default_rng(4)
    a = random_diagram(rng, POT_MIN_POINTS)
    b = random_diagram(rng, POT_MIN_POINTS)[:, ::-1].copy()  # every pair below the diagonal
    assert wasserstein_exact(a, b) == wasserstein_exact(a, b, solver="assignment")
    with pytest.raises(ValueError, match="solver='pot' needs pairs with death >= birth"):
        wasserstein_exact(a, b, solver="pot")
