import numpy as np
import pytest

from topofl import simulate
from topofl.federation.local import sgd
from topofl.models import LeastSquares


def test_fedavg_bytes_are_model_size_each_way(small_federation):
    h = simulate(small_federation, "fedavg", rounds=2, seed=0)
    p = small_federation.n_features + 1
    assert {r["bytes_up"] for r in h.records} == {p * 8}
    assert {r["bytes_down"] for r in h.records} == {p * 8}
    assert {r["floats_up"] for r in h.records} == {r["floats_down"] for r in h.records} == {p}
    assert h.rounds[0].bytes_up == p * 8 * len(small_federation)


def test_client_fraction_selects_a_subset_each_round(small_federation):
    h = simulate(small_federation, "fedavg", rounds=6, seed=0, client_fraction=0.5)
    for rnd in range(1, 7):
        active = [r for r in h.records if r["round"] == rnd and r["bytes_up"] > 0]
        assert len(active) == 2
    # every client is still evaluated every round
    assert len(h.records) == 6 * len(small_federation)


def test_on_round_is_called_as_rounds_finish(small_federation):
    seen = []
    simulate(small_federation, "fedavg", rounds=3, seed=0, on_round=lambda h, s: seen.append((s.round, len(h.rounds))))
    assert seen == [(1, 1), (2, 2), (3, 3)]


def test_training_improves_on_the_first_round(small_federation):
    h = simulate(small_federation, "fedavg", rounds=5, seed=0)
    assert h.curve("loss")[-1] < np.log(2) - 0.1


def test_divergent_local_training_is_a_clear_error():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 3)) * 10
    y = X @ np.ones(3)
    with pytest.raises(FloatingPointError, match="lr=50"):
        sgd(LeastSquares(3, 0.0), np.zeros(4), X, y, epochs=50, lr=50, batch_size=10, rng=rng)


def _history(aucs, start=1):
    from topofl.federation.history import History, RoundSummary

    nan = float("nan")
    return History("x", 0, rounds=[RoundSummary(start + i, a, 0.0, 0.5, 0.0, 0.5, nan, nan, 4, 0, 0) for i, a in enumerate(aucs)])


def test_convergence_round_by_hand():
    """The first round whose AUC reaches 95 % of the final one (paper Table 1's convergence round)."""
    assert _history([0.50, 0.70, 0.86, 0.84, 0.90]).convergence_round() == 3    # 0.95 × 0.90 = 0.855: round 3's 0.86
    assert _history([0.50, 0.70, 0.855, 0.90]).convergence_round() == 3         # reaching it exactly counts
    assert _history([0.95, 0.60, 0.80]).convergence_round() == 1                # an early peak counts, as in the paper's definition
    assert _history([0.5, 0.6, 0.9], start=4).convergence_round() == 6          # round numbers, not positions (a resumed run)
    assert _history([0.5, 0.6, 0.9]).convergence_round(fraction=0.5) == 1
    assert _history([0.5, float("nan")]).convergence_round() == -1              # no final AUC, no convergence round


