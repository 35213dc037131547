"""Local training knobs (issue 22): a step budget runs exactly K mini-batch steps, cycling through
freshly shuffled passes; sgd-momentum and adam follow PyTorch's optimisers step for step; a client
keeps its optimiser state between rounds exactly where the method says (or the config asks)."""
import numpy as np
import pytest

import topofl
from topofl.federation.local import sgd
from topofl.methods import build
from topofl.models import LeastSquares
from topofl.models.optimizers import LocalOptimizer, OptimizerSpec, epoch_batches, steps_per_round

SMALL = {"n_clients": 4, "n_min": 40, "n_max": 60, "adversarial": (1,)}


def test_epochs_give_the_batches_of_a_plain_permutation_loop():
    got = [b for epoch in epoch_batches(10, 4, 2, 0, np.random.default_rng(5)) for b in epoch]
    rng = np.random.default_rng(5)
    want = []
    for _ in range(2):
        order = rng.permutation(10)
        want += [order[s : s + 4] for s in range(0, 10, 4)]
    assert len(got) == len(want) == 6 and all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


@pytest.mark.parametrize("k", [1, 2, 3, 7, 8])
def test_a_step_budget_gives_exactly_k_batches_cycling_through_fresh_shuffles(k):
    epochs = list(epoch_batches(10, 4, epochs=99, local_steps=k, rng=np.random.default_rng(0)))
    batches = [b for e in epochs for b in e]
    assert len(batches) == k == steps_per_round(10, 4, 99, k)
    rng = np.random.default_rng(0)  # each pass is a fresh permutation, cut like an epoch (last batch of 2)
    for e in epochs:
        order = rng.permutation(10)
        assert all(np.array_equal(b, order[i * 4 : (i + 1) * 4]) for i, b in enumerate(e))
    assert [len(e) for e in epochs][:-1] == [3] * (len(epochs) - 1)


def _oracle_steps(model, theta, X, y, k, bs, seed, update):
    """K plain steps over the same batches, written out: the oracle of the step budget."""
    theta, rng, done = theta.copy(), np.random.default_rng(seed), 0
    while done < k:
        order = rng.permutation(len(y))
        for s in range(0, len(y), bs):
            if done == k:
                break
            idx = order[s : s + bs]
            theta = update(theta, model.grad(theta, X[idx], y[idx]))
            done += 1
    return theta


def test_sgd_with_a_step_budget_equals_k_written_out_steps():
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(23, 3)), rng.normal(size=23)
    model = LeastSquares(3, l2=0.0)
    theta0 = rng.normal(size=model.n_params)
    got = sgd(model, theta0, X, y, epochs=50, lr=0.05, batch_size=5, rng=np.random.default_rng(9), local_steps=11)
    want = _oracle_steps(model, theta0, X, y, 11, 5, 9, lambda t, g: t - 0.05 * g)
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got, sgd(model, theta0, X, y, epochs=50, lr=0.05, batch_size=5, rng=np.random.default_rng(9)))


@pytest.mark.parametrize("name, torch_opt", [
    ("sgd-momentum", lambda torch, p: torch.optim.SGD([p], lr=0.05, momentum=0.8)),
    ("adam", lambda torch, p: torch.optim.Adam([p], lr=0.05, betas=(0.85, 0.99), eps=1e-7)),
])
def test_the_rules_follow_pytorchs_optimisers_across_a_kept_state(name, torch_opt):
    torch = pytest.importorskip("torch")
    spec = OptimizerSpec(name, lr=0.05, momentum=0.8, beta1=0.85, beta2=0.99, eps=1e-7)
    rng = np.random.default_rng(3)
    grads = rng.normal(size=(12, 6))
    theta = rng.normal(size=6)
    ours = LocalOptimizer(spec)
    ref = torch.nn.Parameter(torch.tensor(theta, dtype=torch.float64))
    opt = torch_opt(torch, ref)
    mine = theta.copy()
    for i, g in enumerate(grads):
        if i == 5:  # a new round: the state is saved and loaded into a fresh optimiser, as a client keeps it
            ours = LocalOptimizer(spec, state=ours.state())
        ours.step(mine, g.copy())
        ref.grad = torch.tensor(g, dtype=torch.float64)
        opt.step()
    np.testing.assert_allclose(mine, ref.detach().numpy(), rtol=1e-12, atol=1e-14)


def test_a_kept_state_of_another_rule_starts_afresh():
    adam = LocalOptimizer(OptimizerSpec("adam", lr=0.1))
    adam.step(np.zeros(3), np.ones(3))
    momentum = LocalOptimizer(OptimizerSpec("sgd-momentum", lr=0.1), state=adam.state())
    assert momentum.t == 0 and momentum.buffers == {}


def _run(method, rounds=2, **hp):
    return topofl.simulate(topofl.make_scenario("healthcare", seed=0, **SMALL), method, rounds=rounds, seed=0, **hp)


@pytest.mark.parametrize("method", ["fedavg", "fedprox", "ditto", "pfedme", "perfedavg", "ifca", "local", "ptopofl"])
def test_every_server_method_trains_with_each_rule_and_a_step_budget(method):
    plain = _run(method, lr=0.01, local_steps=3)
    assert plain.curve("loss").tolist() != _run(method, lr=0.01).curve("loss").tolist(), method  # the budget counts
    for opt in ("sgd-momentum", "adam"):   # the same step size and budget: only the rule differs
        h = _run(method, optimizer=opt, lr=0.01, local_steps=3)
        assert np.isfinite(h.curve("loss")).all(), (method, opt)
        assert h.curve("loss").tolist() != plain.curve("loss").tolist(), (method, opt)


@pytest.mark.parametrize("method", ["fedavg", "fedprox", "ditto", "perfedavg", "ifca", "local", "ptopofl"])
def test_momentum_zero_is_plain_sgd_bit_for_bit(method):
    a = _run(method, lr=0.05, local_steps=4)
    b = _run(method, lr=0.05, local_steps=4, optimizer="sgd-momentum", momentum=0.0)
    assert [r["loss"] for r in a.records] == [r["loss"] for r in b.records]


def test_scaffold_refuses_a_rule_its_control_variates_cannot_read():
    with pytest.raises(ValueError, match="optimizer='adam': SCAFFOLD's control variates"):
        build("scaffold", {"optimizer": "adam"})
    assert np.isfinite(_run("scaffold", lr=0.05, local_steps=3).curve("loss")).all()  # the step budget it takes


def test_no_examples_is_an_error_not_an_endless_loop():
    with pytest.raises(ValueError, match="at least one example; got n=0"):
        next(epoch_batches(0, 4, 1, 5, np.random.default_rng(0)))


def test_a_lost_kept_state_is_reported_where_one_was_kept():
    assert "adam state" in build("local", {"optimizer": "adam"}).state_recovery()
    assert build("fedavg", {"optimizer": "adam"}).state_recovery() == ""  # nothing kept, nothing to lose
    assert "adam state" in build("fedavg", {"optimizer": "adam", "optimizer_state": "keep"}).state_recovery()
    assert "adam" not in build("local", {"optimizer": "adam", "optimizer_state": "reset"}).state_recovery()


@pytest.mark.parametrize("method, policy, kept", [
    ("local", "method", {"optimizer.personal"}),     # one model trained on and on: Adam's moments continue
    ("ditto", "method", {"optimizer.personal"}),     # the personal model continues; the global step restarts
    ("fedavg", "method", set()),                     # every round restarts from the server's model
    ("fedavg", "keep", {"optimizer.model"}),         # FLamby's choice, on request
    ("ditto", "reset", set()),
])
def test_a_client_keeps_its_optimiser_state_where_the_method_or_config_says(method, policy, kept):
    from topofl.data.scenarios import make_scenario
    from topofl.federation.algorithm import ClientContext

    fed = make_scenario("healthcare", seed=0, **SMALL)
    algo = build(method, {"optimizer": "adam", "lr": 0.01, "local_steps": 4, "optimizer_state": policy})
    model = algo.build_model(None, fed.task, fed.n_features, fed.n_classes)
    algo.setup(model, fed.client_ids, np.random.default_rng(0))
    client, state = fed.clients[0], {}
    for rnd in (1, 2):
        message = algo.configure_fit(rnd, fed.client_ids)[client.client_id]
        ctx = ClientContext(client, state, model, np.random.default_rng(rnd), rnd, 0)
        algo.aggregate_fit(rnd, [algo.client_fit(ctx, message)])
    keys = {k for k in state if k.startswith("optimizer.")}
    assert keys == kept
    for k in keys:  # two rounds of 4 steps each, one continued Adam
        assert state[k]["name"] == "adam" and state[k]["t"] == 8


def test_bad_knobs_are_refused_naming_the_field():
    with pytest.raises(ValueError, match="optimizer"):
        build("fedavg", {"optimizer": "rmsprop"})
    with pytest.raises(ValueError, match="local_steps"):
        build("fedavg", {"local_steps": -1})
    with pytest.raises(ValueError, match="adam_beta2"):
        build("fedavg", {"adam_beta2": 1.0})
    with pytest.raises(ValueError, match="optimizer_state"):
        build("fedavg", {"optimizer_state": "sometimes"})
