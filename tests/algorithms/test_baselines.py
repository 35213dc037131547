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


def test_perfedavg_variants_differ_and_adapt():
    fed = make_scenario("benchmark", seed=0)
    fo = simulate(fed, "perfedavg", rounds=3, seed=0, variant="fo")
    hf = simulate(fed, "perfedavg", rounds=3, seed=0, variant="hf")
    assert not np.array_equal(metrics(fo), metrics(hf))
    assert np.isfinite(metrics(hf)).all()


def test_perfedavg_hessian_vector_product_is_exact_on_a_quadratic():
    """For least squares the central difference (∇f(w+δv) − ∇f(w−δv)) / 2δ equals H v exactly."""
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((30, 3)), rng.standard_normal(30)
    m = LeastSquares(3, 0.0)
    w, v, d = rng.standard_normal(4), rng.standard_normal(4), 1e-3
    Z = np.hstack([X, np.ones((30, 1))])
    np.testing.assert_allclose((m.grad(w + d * v, X, y) - m.grad(w - d * v, X, y)) / (2 * d), Z.T @ Z / 30 @ v, atol=1e-8)


def test_ifca_forms_clusters_on_healthcare():
    h = simulate(make_scenario("healthcare", seed=0), "ifca", rounds=5, seed=0, k=2)
    assert len(set(h.server_logs[-1]["clusters"].values())) == 2


@pytest.mark.parametrize("scenario", ["healthcare", "benchmark"])
def test_every_method_is_stable_over_15_rounds(scenario):
    fed = make_scenario(scenario, seed=0)
    for method in available("server"):
        h = simulate(fed, method, rounds=15, seed=0)
        auc = h.curve("auc")
        assert np.isfinite(auc).all() and np.isfinite(h.curve("loss")).all(), method
        # stable: no collapse towards 0.5 at any round, no late drop (the reference SCAFFOLD falls
        # to 0.5 from round 10); seed 0 of benchmark is a hard draw (all methods ~0.70)
        assert auc.min() > 0.6 and auc[-1] >= auc.max() - 0.1, (method, auc)


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
