"""Baselines: exact special cases from the issue, stability on both scenarios."""
import numpy as np
import pytest

from helpers import blob_client
from topofl import Federation, make_scenario, simulate
from topofl.federation.local import sgd
from topofl.federation.runner import client_rng, run_federation
from topofl.methods import available
from topofl.methods import build_server as build
from topofl.models import LeastSquares


def metrics(h):
    return np.array([[r["auc"], r["accuracy"], r["loss"]] for r in h.records])


def test_fedprox_with_mu_zero_is_exactly_fedavg():
    fed = make_scenario("healthcare", seed=2)
    np.testing.assert_array_equal(metrics(simulate(fed, "fedprox", rounds=5, seed=3, mu=0.0)), metrics(simulate(fed, "fedavg", rounds=5, seed=3)))


def test_fedprox_with_mu_positive_differs():
    fed = make_scenario("healthcare", seed=2)
    assert not np.array_equal(metrics(simulate(fed, "fedprox", rounds=3, seed=3, mu=1.0)), metrics(simulate(fed, "fedavg", rounds=3, seed=3)))


def test_ifca_with_one_cluster_is_exactly_fedavg():
    fed = make_scenario("benchmark", seed=1)
    np.testing.assert_array_equal(metrics(simulate(fed, "ifca", rounds=5, seed=0, k=1)), metrics(simulate(fed, "fedavg", rounds=5, seed=0)))


def test_ditto_with_lambda_zero_gives_local_trainings_personal_models():
    fed = make_scenario("healthcare", seed=4)
    np.testing.assert_array_equal(metrics(simulate(fed, "ditto", rounds=5, seed=1, lam=0.0)), metrics(simulate(fed, "local", rounds=5, seed=1)))


def test_local_only_sends_nothing():
    h = simulate(make_scenario("healthcare", seed=0), "local", rounds=2, seed=0)
    assert {r["bytes_up"] for r in h.records} == {r["bytes_down"] for r in h.records} == {0}


def test_scaffold_with_one_client_is_plain_local_sgd():
    rng = np.random.default_rng(0)
    fed = Federation.from_arrays([blob_client(rng, 90)])
    algo = build("scaffold", {"lr": 0.1, "local_epochs": 2})
    run_federation(fed, algo, rounds=4, seed=5)
    model = algo.model
    theta = model.init()
    c = fed[0]
    for rnd in range(1, 5):
        theta = sgd(model, theta, c.X_train, c.y_train, epochs=2, lr=0.1, batch_size=32, rng=client_rng(5, rnd, 0))
    np.testing.assert_allclose(algo.x, theta, rtol=0, atol=1e-12)


def test_scaffold_keeps_control_variates_on_the_client():
    fed = make_scenario("healthcare", seed=0)
    h = simulate(fed, "scaffold", rounds=2, seed=0)
    p = fed.n_features + 1
    assert {r["bytes_down"] for r in h.records} == {2 * p * 8}  # model + server control variate
    assert {r["bytes_up"] for r in h.records} == {2 * p * 8}  # Δy + Δc


def test_pfedme_on_a_quadratic_converges_to_the_analytic_optimum():
    """Least squares without L2, full batch, one local step per round: pFedMe is gradient descent on
    Σ p_i F_i with F_i the Moreau envelope of f_i(θ) = ½(θ − a_i)ᵀ A_i (θ − a_i) + const, whose
    minimiser is w* = (Σ p_i M_i)⁻¹ Σ p_i M_i a_i with M_i = (A_i⁻¹ + I/λ)⁻¹."""
    rng = np.random.default_rng(1)
    clients, lam = [], 2.0
    for k in range(3):
        X = rng.standard_normal((40 + 10 * k, 2)) + k
        y = X @ rng.standard_normal(2) + 0.5 * k + rng.normal(0, 0.1, X.shape[0])
        clients.append((X, y, X[:5], y[:5]))
    fed = Federation.from_arrays(clients, task="regression")
    algo = build("pfedme", {"lam": lam, "lr": 0.2, "personal_lr": 0.1, "inner_steps": 60, "local_epochs": 1, "batch_size": 10_000, "l2": 0.0})
    run_federation(fed, algo, rounds=400, seed=0)
    Ms, rhs, p = [], [], np.array([c.n_train for c in fed], float)
    p /= p.sum()
    for c in fed:
        Z = np.hstack([c.X_train, np.ones((c.n_train, 1))])
        A = Z.T @ Z / c.n_train
        a = np.linalg.solve(A, Z.T @ c.y_train / c.n_train)
        M = np.linalg.inv(np.linalg.inv(A) + np.eye(3) / lam)
        Ms.append(M)
        rhs.append(M @ a)
    w_star = np.linalg.solve(sum(pk * M for pk, M in zip(p, Ms, strict=True)), sum(pk * r for pk, r in zip(p, rhs, strict=True)))
    np.testing.assert_allclose(algo.global_params, w_star, atol=1e-6)


def test_pfedme_refuses_unstable_step_sizes():
    with pytest.raises(ValueError, match="lr\\*lam must be below 2"):
        simulate(make_scenario("healthcare", seed=0), "pfedme", rounds=1, lr=0.2, lam=15.0)


@pytest.mark.parametrize("variant", ["fo", "hf"])
def test_perfedavg_adaptation_step_lowers_every_clients_loss(variant):
    """Each client uses the global model after one gradient step on its own data (Fallah et al. 2020,
    Eq. 4): θ_k = w − α ∇f_k(w). Checked against that formula, and the step must lower every
    client's training loss (measured on benchmark seed 0, 5 rounds: mean 0.548 → 0.507 (FO),
    0.552 → 0.507 (HF), 10 of 10 clients lower; test loss 0.596 → 0.557 and 0.605 → 0.561).
    """
    fed = make_scenario("benchmark", seed=0)
    algo = build("perfedavg", {"variant": variant})
    h = simulate(fed, algo, rounds=5, seed=0)
    w, m = algo.global_params, h.model
    for c in fed:
        theta = h.client_models[c.client_id]
        np.testing.assert_allclose(theta, w - algo.config.alpha * m.grad(w, c.X_train, c.y_train), rtol=0, atol=1e-12)
        assert m.loss(theta, c.X_train, c.y_train) < m.loss(w, c.X_train, c.y_train), c.client_id
    before = np.mean([m.loss(w, c.X_test, c.y_test) for c in fed])
    after = np.mean([m.loss(h.client_models[c.client_id], c.X_test, c.y_test) for c in fed])
    assert after < before - 0.02  # the adaptation also helps on held-out data, on average


def test_perfedavg_variants_differ():
    fed = make_scenario("benchmark", seed=0)
    fo = simulate(fed, "perfedavg", rounds=3, seed=0, variant="fo")
    hf = simulate(fed, "perfedavg", rounds=3, seed=0, variant="hf")
    assert not np.array_equal(metrics(fo), metrics(hf))


def test_perfedavg_hessian_vector_product_is_exact_on_a_quadratic():
    """For least squares the central difference (∇f(w+δv) − ∇f(w−δv)) / 2δ equals H v exactly."""
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((30, 3)), rng.standard_normal(30)
    m = LeastSquares(3, 0.0)
    w, v, d = rng.standard_normal(4), rng.standard_normal(4), 1e-3
    Z = np.hstack([X, np.ones((30, 1))])
    np.testing.assert_allclose((m.grad(w + d * v, X, y) - m.grad(w - d * v, X, y)) / (2 * d), Z.T @ Z / 30 @ v, atol=1e-8)


def _two_rules(seed, n_clients=8, d=5, n=120):
    """Clients of two groups with opposite decision rules (y = 1[x·w > 0] and 1[x·w < 0]) on the same
    feature distribution: one global model cannot fit both (FedAvg's AUC ~0.5), k = 2 cluster models can.
    """
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(d)
    arrays, meta = [], []
    for k in range(n_clients):
        X = rng.standard_normal((n, d))
        y = ((X @ w) * (1 if k % 2 == 0 else -1) > 0).astype(float)
        arrays.append((X[:90], y[:90], X[90:], y[90:]))
        meta.append({"group": k % 2})
    return Federation.from_arrays(arrays, meta=meta)


@pytest.mark.parametrize("seed", range(5))
def test_ifca_recovers_the_rule_groups_where_one_model_cannot_fit_all(seed):
    """Measured on seeds 0-9: adjusted Rand index 1.0 on every seed, AUC 0.989-0.999 against FedAvg's 0.47-0.56."""
    from sklearn.metrics import adjusted_rand_score

    fed = _two_rules(seed)
    h = simulate(fed, "ifca", rounds=5, seed=seed, k=2)
    labels = h.server_logs[-1]["clusters"]
    assert adjusted_rand_score([c.meta["group"] for c in fed], [labels[c.client_id] for c in fed]) == 1.0
    assert h.final["auc"] > 0.97 and simulate(fed, "fedavg", rounds=5, seed=seed).final["auc"] < 0.6


#: (scenario, largest gap between any round from the 5th and the final AUC, largest drop of the final AUC
#: below the best round): bounds ~1.5x the worst measured on seed 0 over every method (healthcare: 0.022,
#: Ditto, and 0.006; benchmark, a hard draw whose AUC wanders 0.65-0.73 for every method: 0.05, pFedMe)
STABILITY = {"healthcare": (0.035, 0.01), "benchmark": (0.07, 0.06)}


@pytest.mark.parametrize("scenario", ["healthcare", "benchmark"])
def test_every_method_is_stable_over_15_rounds(scenario):
    """No collapse and no late drop over 15 rounds (in the authors' paper-era code SCAFFOLD dips from 0.910 to 0.802 on benchmark)."""
    fed = make_scenario(scenario, seed=0)
    gap, drop = STABILITY[scenario]
    for method in available("server"):
        h = simulate(fed, method, rounds=15, seed=0)
        auc, loss = h.curve("auc"), h.curve("loss")
        assert np.isfinite(auc).all() and np.isfinite(loss).all(), method
        assert np.abs(auc[4:] - auc[-1]).max() <= gap and auc.max() - auc[-1] <= drop, (method, auc)
        if scenario == "healthcare":  # training lowers the test loss of the model each client uses (measured: by 0.12-0.17)
            assert loss[-1] < loss[0] - 0.08, (method, loss)


@pytest.mark.parametrize(
    "method, hp, message",
    [
        ("fedprox", {"mu": -0.1}, "mu must be in [0.0, inf); got -0.1"),
        ("scaffold", {"global_lr": 0.0}, "global_lr must be in (0.0, 10.0]"),
        ("pfedme", {"inner_steps": 0}, "inner_steps must be in [1, 1000]; got 0"),
        ("ditto", {"lam": -1.0}, "lam must be in [0.0, inf); got -1.0"),
        ("perfedavg", {"variant": "so"}, "variant must be one of fo, hf; got 'so'"),
        ("ifca", {"k": 0}, "k must be in [1, 100]; got 0"),
    ],
)
def test_baseline_hyperparameters_are_validated(method, hp, message):
    with pytest.raises(ValueError) as err:
        build(method, hp)
    assert message in str(err.value)
