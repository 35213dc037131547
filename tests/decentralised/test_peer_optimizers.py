"""Local training knobs of the decentralised methods (issue 22): ``local_steps`` mini-batch steps per
iteration (the last one coupled), and the update rules, each node keeping its optimiser across
iterations; momentum 0 is the papers' plain step bit for bit."""
import numpy as np
import pytest

import topofl
from topofl.models.optimizers import LocalOptimizer, OptimizerSpec

SMALL = {"n_clients": 4, "n_min": 40, "n_max": 60, "adversarial": (1,)}
PEERS = {"sheaf": {"gamma": 0.3}, "dfedu": {}, "dpsgd": {}, "local-peers": {}}


def _run(method, rounds=3, **hp):
    fed = topofl.make_scenario("healthcare", seed=0, **SMALL)
    return topofl.simulate_decentralised(fed, method, rounds=rounds, seed=0, graph="ring", **{**PEERS[method], **hp})


def _models(result):
    return {k: np.asarray(v) for k, v in result.client_models.items()}


@pytest.mark.parametrize("method", sorted(PEERS))
def test_momentum_zero_is_the_papers_step_bit_for_bit(method):
    a, b = _run(method, lr=0.05), _run(method, lr=0.05, optimizer="sgd-momentum", momentum=0.0)
    assert all(np.array_equal(x, _models(b)[k]) for k, x in _models(a).items())


@pytest.mark.parametrize("method", sorted(PEERS))
def test_every_peer_method_takes_the_rules_and_a_step_budget(method):
    plain = _run(method, lr=0.02)
    budget = _run(method, lr=0.02, local_steps=3)
    assert not np.array_equal(_models(plain)[0], _models(budget)[0]), method
    for opt in ("sgd-momentum", "adam"):
        h = _run(method, lr=0.02, local_steps=3, optimizer=opt)
        assert np.isfinite(h.curve("loss")).all(), (method, opt)
        assert not np.array_equal(_models(h)[0], _models(budget)[0]), (method, opt)


def test_a_lone_peer_with_adam_and_a_budget_is_adam_on_its_own_minibatches():
    """local-peers: K steps of one Adam per node, its moments carried across iterations; the
    mini-batches are the runner's (iteration k draws from SeedSequence([seed, k, node]))."""
    fed = topofl.make_scenario("healthcare", seed=0, **SMALL)
    h = topofl.simulate_decentralised(fed, "local-peers", rounds=3, seed=0, graph="ring", lr=0.01, local_steps=2,
                                      optimizer="adam", batch_size=16)
    client = fed.clients[2]
    model = h.models[2]
    theta = np.zeros(model.n_params)  # linear models start at zero
    adam = LocalOptimizer(OptimizerSpec("adam", lr=0.01))
    for k in (1, 2, 3):
        rng = np.random.default_rng(np.random.SeedSequence([0, k, 2]))
        for _ in range(2):
            idx = rng.choice(client.n_train, size=16, replace=False)
            adam.step(theta, model.grad(theta, client.X_train[idx], client.y_train[idx]))
    np.testing.assert_array_equal(h.client_models[2], theta)
    assert adam.t == 6


def test_the_knobs_are_validated_naming_the_field():
    fed = topofl.make_scenario("healthcare", seed=0, **SMALL)
    with pytest.raises(ValueError, match="local_steps"):
        topofl.simulate_decentralised(fed, "dfedu", rounds=1, local_steps=0)
    with pytest.raises(ValueError, match="optimizer"):
        topofl.simulate_decentralised(fed, "dfedu", rounds=1, optimizer="lion")
