"""Finding 2: a model scaled ×1000, or all entries 1e300, was aggregated silently (server values
reached 2e299). Every update is now checked against bounds relative to the model the server sent
(``max_update_ratio``) and for finite squares before aggregation."""
from collections.abc import Mapping

import numpy as np
import pytest
from attacking import replace, run_attacked, victim_failures

from topofl.algorithms.base import AlgorithmConfig


def scaled(factor):
    return lambda u, m: replace(u, params=u.params * factor)


def constant(value):
    return lambda u, m: replace(u, params=np.full_like(u.params, value))


@pytest.mark.parametrize("method", ["fedavg", "ptopofl", "fedprox", "ditto", "ifca", "pfedme", "perfedavg", "scaffold"])
@pytest.mark.parametrize("tamper, words", [(scaled(1000.0), "update norm"), (constant(1e300), "square"), (constant(1e100), "update norm")])
def test_absurd_update_is_dropped_and_the_model_stays_sane(method, tamper, words):
    clean, _ = run_attacked(method)
    attacked, algo = run_attacked(method, tamper)
    fails = victim_failures(attacked)
    assert [f.round for f in fails] == [1, 2, 3], [f.reason for f in attacked.failures]
    # SCAFFOLD's Δc must match its Δy (option II), so a tampered Δy is refused by that check first
    assert all(words in f.reason or (method == "scaffold" and "extras['dc']" in f.reason) for f in fails), fails[0].reason
    assert abs(attacked.final["auc"] - clean.final["auc"]) <= 0.01


def test_fedavg_global_model_is_bounded_under_attack():
    _, algo = run_attacked("fedavg", constant(1e300))
    assert np.abs(algo.global_params).max() < 100


def test_honest_updates_are_never_dropped_by_the_bound():
    for method in ("fedavg", "ptopofl", "scaffold", "ifca"):
        h, _ = run_attacked(method, rounds=5, lr=0.5, local_epochs=5)
        assert not h.failures, (method, h.failures[:1])


def test_the_bound_is_configurable_and_validated():
    assert AlgorithmConfig().max_update_ratio == 10.0
    with pytest.raises(ValueError, match="max_update_ratio"):
        AlgorithmConfig(max_update_ratio=0.5)
    with pytest.raises(ValueError, match="update_norm_floor"):
        AlgorithmConfig(update_norm_floor=-1.0)
    # a ×1000 update passes when the operator allows it explicitly — and the loss shows it
    from topofl.federation.runner import TrainingWarning

    with pytest.warns(TrainingWarning, match="training diverges"):
        h, _ = run_attacked("fedavg", scaled(1000.0), rounds=1, max_update_ratio=1e6)
    assert not victim_failures(h)


def test_one_reply_cannot_widen_its_own_bound():
    """The bound widens to the lower median of the *other* replies' deviations (so honest clients
    on large-scale features pass). With one honest client and two absurd ones, a median that
    counted the reply itself would be absurd and let both through; the others' lower median is
    the honest client's, so both are refused."""
    import topofl
    from helpers import blob_client

    rng = np.random.default_rng(0)
    fed = topofl.Federation.from_arrays([blob_client(rng, 80) for _ in range(3)])
    factors = {1: 1000.0, 2: 1200.0}
    h, _ = run_attacked("fedavg", lambda u, m: replace(u, params=u.params * factors[u.client_id]), rounds=2,
                        federation=fed, victim={1, 2})
    refused = sorted((f.round, f.client) for f in h.failures)
    assert refused == [(1, 1), (1, 2), (2, 1), (2, 2)] and all("update norm" in f.reason for f in h.failures)


class Sneaky(np.ndarray):
    """An array that hides its values from every check (a hostile in-process client's trick)."""

    def __array_ufunc__(self, *args, **kwargs):
        return np.zeros(1, dtype=bool) if args[0] is np.isfinite else super().__array_ufunc__(*args, **kwargs)


def test_array_subclasses_are_refused():
    h, algo = run_attacked("fedavg", lambda u, m: replace(u, params=np.full_like(u.params, 1e300).view(Sneaky)), rounds=1)
    (f,) = victim_failures(h)
    assert "plain numpy array" in f.reason and np.abs(algo.global_params).max() < 100


class Exploding(Mapping):
    """A mapping that raises when read."""

    def __init__(self, **kw):
        self.kw = kw

    def __getitem__(self, key):
        raise RuntimeError("boom")

    def __iter__(self):
        raise RuntimeError("boom")

    def __len__(self):
        return 1


@pytest.mark.parametrize("tamper, words", [
    (lambda u, m: replace(u, metrics={"risk_gradient": 10**400}), "an integer of 401 digits"),
    (lambda u, m: replace(u, metrics=Exploding(a=1.0)), "malformed reply (RuntimeError: boom)"),
    (lambda u, m: replace(u, extras=Exploding(a=1.0)), "malformed reply (RuntimeError: boom)"),
])
def test_malformed_replies_are_refused_not_raised(tamper, words):
    h, _ = run_attacked("ptopofl", tamper, rounds=1)
    (f,) = victim_failures(h)
    assert words in f.reason


def test_all_updates_refused_warns_once():
    """Honest clients on unscaled features alone in their round: every update exceeds the bound,
    the model cannot move; the user is told why and what to do (once)."""
    from test_extreme_scales_are_handled_or_refused import breast_cancer_clients

    from topofl.federation.runner import TrainingWarning

    with pytest.warns(TrainingWarning) as record:
        import topofl

        topofl.simulate(breast_cancer_clients(), "fedavg", rounds=4, seed=0, client_fraction=0.25)
    texts = [str(w.message) for w in record if "exceeded the update-norm bound" in str(w.message)]
    assert len(texts) == 1 and "standardise" in texts[0]
