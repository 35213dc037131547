"""The checks must never refuse an honest client: every method on every built-in scenario, with
partial participation and pTopoFL's options, runs without a single recorded failure. (The
continual scenario caught a real false positive: a drifting client whose test split becomes
single-class mid-run has an honest NaN AUC.)"""
import pytest

import topofl
from topofl.algorithms.registry import available

CASES = [("continual", 20, {}), ("healthcare", 4, {}), ("benchmark", 3, {}), ("digits", 2, {"n_clients": 8})]


@pytest.mark.parametrize("scenario, rounds, params", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("method", available())
def test_honest_clients_are_never_refused(method, scenario, rounds, params):
    for seed in (0, 1):
        fed = topofl.make_scenario(scenario, seed=seed, **params)
        h = topofl.simulate(fed, method, rounds=rounds, seed=seed)
        assert not h.failures, (seed, h.failures[:2])


@pytest.mark.parametrize("hp", [
    {"cluster_distance": "wasserstein"}, {"descriptor_every": 2, "drift_threshold": 0.25}, {"augment": False},
    {"max_client_weight": 0.2}, {"n_sub": 10},
])
def test_honest_ptopofl_options_are_never_refused(hp):
    h = topofl.simulate(topofl.make_scenario("continual", seed=0), "ptopofl", rounds=8, seed=0, **hp)
    assert not h.failures, h.failures[:2]


def test_partial_participation_is_never_refused():
    for method in ("ptopofl", "scaffold", "ifca", "fedavg"):
        h = topofl.simulate(topofl.make_scenario("healthcare", seed=2), method, rounds=5, seed=2, client_fraction=0.5)
        assert not h.failures, (method, h.failures[:2])
