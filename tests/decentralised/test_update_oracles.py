"""Independent oracles of the decentralised update rules, and mutants of them that must fail.

Each oracle is written here from the papers' formulas with dense NumPy matrices; nothing is
imported from ``topofl.decentralised``'s maths, maps or nodes. The project is run as a user runs
it (``run_decentralised``) and its iterates are compared with the oracle's, iteration by
iteration, to 1e-12 (relative to the iterates' scale).

Sheaf-FMTL, Algorithm 1 (Ben Issaid, Vepakomma & Bennis, TMLR 2025), η > 0 and λ ≠ 1:

* coboundary δ (Eq. 1, block matrix of Eq. 13): one block row per edge e = (i, j), i < j, with
  (δθ)_e = P_ij θ_i − P_ji θ_j; sheaf Laplacian L_F = δᵀδ (Eq. 9; θᵀL_Fθ = Σ_e ‖(δθ)_e‖², Lemma 1);
* Eq. 27 for all clients at once: θ^{k+1} = θ^k − α (∇f(θ^k; ξ^k) + λ L_F(P^k) θ^k);
* Eq. 28 for every directed edge: P_ij^{k+1} = P_ij^k − ηλ (P_ij^k θ_i^{k+1} − P_ji^k θ_j^{k+1}) θ_i^{k+1}ᵀ.

D-PSGD (Lian et al. 2017, Algorithm 1): X^{k+1} = W X^k − α ∇F(X^k; ξ^k), the gradient at the
iterate before mixing, W the Metropolis–Hastings matrix W_ij = 1/(1 + max(deg i, deg j)) on edges,
W_ii = 1 − Σ_j W_ij. Local: θ^{k+1} = θ^k − α ∇f(θ^k; ξ^k). dFedU (Dinh et al. 2022, Eq. 18 with
a_ij = 1): Θ^{k+1} = Θ^k − α (∇F(Θ^k; ξ^k) + λ L_G Θ^k), L_G the graph Laplacian.

What the oracles take from the project are the inputs of the algorithms: the graph, the data, the
initial models θ⁰ and maps P⁰ (drawn by the project's initialisers, read after setup), and the
mini-batches ξ_i^k, which follow the runner's stated stream (node i at iteration k draws
``rng.choice(n_i, b, replace=False)`` from ``default_rng(SeedSequence([seed, k, i]))``; the whole
training set when b ≥ n_i). The gradients of the linear models are computed here from their
losses (mean cross-entropy or ½·mean squared error, plus l2/2·‖weights‖², intercepts unpenalised);
a CNN's ∇f_i is the model's own gradient (f_i is an input of Algorithm 1), in float64.

``test_mutants_of_eqs_27_28_fail_the_oracle`` replaces the project's map residual (Eq. 28) by one
without λ and by one of the opposite sign, and the model step (Eq. 27) by one without λ, and
checks that the oracle comparison then fails.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from topofl.data.federation import ClientData
from topofl.decentralised import make_graph, run_decentralised
from topofl.methods import build_peer

ROUNDS = 8
SEED = 4
N_CLASSES = 3


# ---- data and the linear models' gradients, from their losses ---------------------------------------
def clients_for(dims: list[int], task: str = "multiclass", n: int = 40, seed: int = 0) -> list[ClientData]:
    rng = np.random.default_rng(seed)
    out = []
    for k, d in enumerate(dims):
        X = rng.standard_normal((n, d))
        if task == "regression":
            y = X @ rng.standard_normal(d) + rng.normal(0, 0.1, n)
        else:
            y = np.argmax(X[:, :2] @ rng.standard_normal((2, N_CLASSES)) + rng.normal(0, 0.3, (n, N_CLASSES)), axis=1).astype(float)
        cut = 3 * n // 4
        out.append(ClientData(X[:cut], y[:cut], X[cut:], y[cut:], client_id=k))
    return out


def linear_grad(task: str, theta: np.ndarray, X: np.ndarray, y: np.ndarray, l2: float) -> np.ndarray:
    """∇ of mean loss + l2/2·‖W‖²; θ = [W (d × C, row-major), b (C)] (C = 1 for least squares)."""
    n, d = X.shape
    C = N_CLASSES if task == "multiclass" else 1
    W, b = theta[: d * C].reshape(d, C), theta[d * C :]
    Z = X @ W + b
    if task == "multiclass":
        E = np.exp(Z - Z.max(axis=1, keepdims=True))
        R = E / E.sum(axis=1, keepdims=True)
        R[np.arange(n), y.astype(int)] -= 1.0  # ∂CE/∂z = softmax − onehot
    else:
        R = Z - y[:, None]  # ∂(½ r²)/∂z = r
    return np.concatenate([(X.T @ R / n + l2 * W).ravel(), R.mean(axis=0)])


def batch(seed: int, k: int, i: int, n: int, b: int) -> Any:
    """The runner's stated mini-batch of node i at iteration k."""
    if b >= n:
        return slice(None)
    return np.random.default_rng(np.random.SeedSequence([seed, k, i])).choice(n, size=b, replace=False)


@dataclass
class Case:
    """One configuration: method hyper-parameters, graph, client model sizes, models."""

    name: str
    hp: dict[str, Any]
    graph: tuple[str, dict[str, Any]]
    dims: list[int]
    task: str = "multiclass"
    models: list[Any] | None = None  # PyTorch models (registry names or module factories, on 8×8 images), or linear
    extra: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name


def tiny_mlp() -> Any:
    """A second architecture for the mixed federation: 64 → 6 → 3 (411 parameters)."""
    import torch

    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 6), torch.nn.ReLU(), torch.nn.Linear(6, N_CLASSES))


def setup(case: Case) -> tuple[list[ClientData], Any, list[Any] | None]:
    from topofl.models.registry import build_model

    clients = clients_for(case.dims, case.task)
    graph = make_graph(case.graph[0], len(case.dims), seed=1, **case.graph[1])
    models = None
    if case.models:
        models = [build_model(m, task="multiclass", n_features=c.n_features, n_classes=N_CLASSES, l2=case.hp.get("l2", 1e-3), dtype="float64")
                  for m, c in zip(case.models, clients, strict=True)]
    return clients, graph, models


def run_project(method: str, case: Case) -> tuple[list[list[np.ndarray]], list[dict[tuple[int, int], np.ndarray]], Any]:
    """The project's iterates θ^k (k = 0..ROUNDS) and, for Sheaf-FMTL, its maps P^k, per directed edge."""
    clients, graph, models = setup(case)
    algo = build_peer(method, case.hp)
    thetas: list[list[np.ndarray]] = []
    maps: list[dict[tuple[int, int], np.ndarray]] = []

    def snapshot(*_: Any) -> None:
        thetas.append([p.theta.copy() for p in algo.peers])
        if method == "sheaf":
            blocks = {}
            for i, node in algo.nodes.items():
                P = node.maps.dense()
                edges = np.concatenate([[0], np.cumsum(node.sizes)])
                for b, j in enumerate(node.spec.neighbours):
                    blocks[(i, j)] = np.array(P[edges[b] : edges[b + 1]], copy=True)
            maps.append(blocks)

    original = algo.setup

    def setup_then_snapshot(*args: Any) -> None:
        original(*args)
        snapshot()

    algo.setup = setup_then_snapshot  # type: ignore[method-assign]
    run_decentralised(clients, graph, algo, ROUNDS, seed=SEED, task=case.task, n_classes=N_CLASSES, models=models,
                      eval_every=ROUNDS, on_round=snapshot)
    return thetas, maps, (clients, graph, models)


def gradient(case: Case, clients: list[ClientData], models: list[Any] | None):
    """∇f_i(θ; ξ_i^k) for the oracle."""
    b, l2 = case.hp.get("batch_size", 32), case.hp.get("l2", 1e-3)

    def grad(i: int, k: int, theta: np.ndarray) -> np.ndarray:
        c = clients[i]
        idx = batch(SEED, k, i, c.n_train, b)
        X, y = c.X_train[idx], c.y_train[idx]
        return models[i].grad(theta, X, y) if models is not None else linear_grad(case.task, theta, X, y, l2)

    return grad


# ---- the oracles -----------------------------------------------------------------------------------
def sheaf_oracle(theta0, P0, edges, grad, alpha, eta, lam, rounds):
    """Algorithm 1 with dense matrices: Eq. 27 through the sheaf Laplacian L_F = δᵀδ, Eq. 28 per map."""
    dims = [t.size for t in theta0]
    start = np.concatenate([[0], np.cumsum(dims)])
    thetas, Ps = [list(theta0)], [dict(P0)]
    for k in range(1, rounds + 1):
        theta, P = thetas[-1], Ps[-1]
        rows = []
        for i, j in edges:  # coboundary, Eq. 13: block row e = (i, j) holds P_ij at column block i and −P_ji at j
            row = np.zeros((P[(i, j)].shape[0], start[-1]))
            row[:, start[i] : start[i + 1]] = P[(i, j)]
            row[:, start[j] : start[j + 1]] = -P[(j, i)]
            rows.append(row)
        delta = np.vstack(rows)
        x = np.concatenate(theta)
        g = np.concatenate([grad(i, k, t) for i, t in enumerate(theta)])
        x_new = x - alpha * (g + lam * delta.T @ (delta @ x))  # Eq. 27, all clients: L_F θ = δᵀ(δθ), Eq. 9
        new = [x_new[start[i] : start[i + 1]] for i in range(len(dims))]
        P_new = {(i, j): Pij - eta * lam * np.outer(Pij @ new[i] - P[(j, i)] @ new[j], new[i]) for (i, j), Pij in P.items()}  # Eq. 28
        thetas.append(new)
        Ps.append(P_new)
    return thetas, Ps


def mixing_oracle(theta0, M, grad, alpha, rounds):
    """X^{k+1} = M X^k − α ∇F(X^k) (D-PSGD: M = W; Local: M = I; dFedU: M = I − αλ L_G)."""
    X = [np.vstack(theta0)]
    for k in range(1, rounds + 1):
        G = np.vstack([grad(i, k, x) for i, x in enumerate(X[-1])])
        X.append(M @ X[-1] - alpha * G)
    return [list(x) for x in X]


def metropolis(graph, n):
    deg = dict(graph.degree)
    W = np.zeros((n, n))
    for i, j in graph.edges:
        W[i, j] = W[j, i] = 1.0 / (1 + max(deg[i], deg[j]))
    W[np.diag_indices(n)] = 1.0 - W.sum(axis=1)
    return W


def laplacian(graph, n):
    A = np.zeros((n, n))
    for i, j in graph.edges:
        A[i, j] = A[j, i] = 1.0
    return np.diag(A.sum(axis=1)) - A


def assert_same(expected, got, what):
    """Iterates equal to 1e-12 of their scale, at every iteration."""
    for k, (a, b) in enumerate(zip(expected, got, strict=True)):
        for key in (a.keys() if isinstance(a, dict) else range(len(a))):
            scale = max(1.0, float(np.abs(a[key]).max()))
            np.testing.assert_allclose(b[key], a[key], rtol=0, atol=1e-12 * scale, err_msg=f"{what} {key} at iteration {k}")


# ---- Sheaf-FMTL --------------------------------------------------------------------------------------
HET = [3, 5, 4, 6, 3, 5]  # features per client: model sizes (d + 1)·3 = 12..21
BASE = {"lr": 0.05, "lam": 0.3, "eta": 0.05, "l2": 1e-3, "batch_size": 1000}
SHEAF_CASES = [
    Case("ring, equal sizes, gaussian", {**BASE, "gamma": 0.5, "map_scale": 0.5}, ("ring", {}), [4] * 5),
    Case("erdos-renyi, sizes differ, gaussian, mini-batches", {**BASE, "gamma": 0.4, "map_scale": 0.5, "batch_size": 8},
         ("erdos_renyi", {"p": 0.5}), HET),
    Case("complete, sizes differ, uniform", {**BASE, "gamma": 0.3, "map_init": "uniform", "map_scale": 0.5}, ("complete", {}), HET[:4]),
    Case("watts-strogatz, orthogonal", {**BASE, "gamma": 0.5, "map_init": "orthogonal"}, ("watts_strogatz", {"k": 2, "p": 0.3}), HET),
    Case("barabasi-albert, identity + noise", {**BASE, "gamma": 0.6, "map_init": "identity_noise", "map_scale": 0.1},
         ("barabasi_albert", {"m": 2}), [4] * 6),
    Case("star, shared maps, sizes differ", {**BASE, "gamma": 0.5, "map_init": "shared", "map_scale": 0.5}, ("star", {}), HET[:5]),
    Case("ring, scaled identity, learning maps", {**BASE, "gamma": 1.0, "map_init": "scaled_identity", "map_scale": 0.8}, ("ring", {}), [3] * 4),
    Case("erdos-renyi, sparse sign, dense storage", {**BASE, "gamma": 0.5, "map_init": "sparse_sign", "maps": "dense"},
         ("erdos_renyi", {"p": 0.6}), HET),
    Case("erdos-renyi, sparse sign, compact storage", {**BASE, "gamma": 0.5, "map_init": "sparse_sign", "maps": "compact", "batch_size": 10},
         ("erdos_renyi", {"p": 0.6}), HET),
    Case("complete, compact exchange", {**BASE, "gamma": 0.4, "map_scale": 0.5, "exchange": "compact", "batch_size": 8}, ("complete", {}), HET[:5]),
    Case("ring, least squares", {**BASE, "gamma": 0.5, "map_scale": 0.5, "lr": 0.1}, ("ring", {}), [3, 4, 5, 3, 4], task="regression"),
]
CNN_CASES = [
    Case("ring, same CNN (cnn-small, 8×8 images)", {**BASE, "gamma": 0.1, "map_scale": 0.1, "batch_size": 8}, ("ring", {}), [64] * 4,
         models=["cnn-small"] * 4),
    Case("erdos-renyi, a CNN and an MLP mixed, compact maps",
         {**BASE, "gamma": 0.1, "map_init": "sparse_sign", "maps": "compact", "map_scale": 0.3, "batch_size": 8},
         ("erdos_renyi", {"p": 0.7}), [64] * 5, models=["cnn-small", tiny_mlp, "cnn-small", tiny_mlp, "cnn-small"]),
]


def check_sheaf(case: Case) -> None:
    thetas, maps, (clients, graph, models) = run_project("sheaf", case)
    edges = sorted((min(i, j), max(i, j)) for i, j in graph.edges)
    hp = case.hp
    expected, expected_maps = sheaf_oracle(thetas[0], maps[0], edges, gradient(case, clients, models), hp["lr"], hp["eta"], hp["lam"], ROUNDS)
    assert_same(expected, thetas, "θ")
    assert_same(expected_maps, maps, "P")


@pytest.mark.parametrize("case", SHEAF_CASES, ids=str)
def test_sheaf_fmtl_iterates_match_a_dense_algorithm_1(case):
    check_sheaf(case)


@pytest.mark.parametrize("case", CNN_CASES, ids=str)
def test_sheaf_fmtl_iterates_match_a_dense_algorithm_1_with_cnns(case):
    pytest.importorskip("torch")
    check_sheaf(case)


def test_the_oracle_cases_move_the_maps_and_couple_the_models():
    """The comparison has teeth: the maps move (η > 0) and the coupling term is not negligible."""
    case = SHEAF_CASES[1]
    thetas, maps, (clients, graph, models) = run_project("sheaf", case)
    moved = max(float(np.abs(maps[-1][e] - maps[0][e]).max()) for e in maps[0])
    local = run_project("local-peers", Case("local", {k: case.hp[k] for k in ("lr", "l2", "batch_size")}, case.graph, case.dims))[0]
    coupled = max(float(np.abs(a - b).max()) for a, b in zip(thetas[-1], local[-1], strict=True))
    assert moved > 1e-3 and coupled > 1e-3


def drop_lambda_28(proj_new, received, eta, lam):
    return eta * (proj_new - received)


def flip_sign_28(proj_new, received, eta, lam):
    return -eta * lam * (proj_new - received)


def drop_lambda_27(theta, grad, coupling, lr, lam):
    return theta - lr * (grad + coupling)


@pytest.mark.parametrize("target, mutant", [("map_residual", drop_lambda_28), ("map_residual", flip_sign_28), ("model_step", drop_lambda_27)],
                         ids=["eq28-without-lambda", "eq28-residual-sign-flipped", "eq27-without-lambda"])
@pytest.mark.parametrize("case", [SHEAF_CASES[1], SHEAF_CASES[8]], ids=str)
def test_mutants_of_eqs_27_28_fail_the_oracle(monkeypatch, target, mutant, case):
    from topofl.decentralised.sheaf import maths

    monkeypatch.setattr(maths, target, mutant)
    with pytest.raises(AssertionError, match=r"(θ|P) .* at iteration \d"):
        check_sheaf(case)


# ---- D-PSGD, Local, dFedU ------------------------------------------------------------------------------
PEER_CASES = [
    Case("ring", {"lr": 0.1, "batch_size": 8}, ("ring", {}), [4] * 6),
    Case("erdos-renyi, full batch", {"lr": 0.1, "batch_size": 1000}, ("erdos_renyi", {"p": 0.4}), [4] * 7),
    Case("barabasi-albert", {"lr": 0.1, "batch_size": 8}, ("barabasi_albert", {"m": 2}), [4] * 6),
    Case("complete, least squares", {"lr": 0.1, "batch_size": 8}, ("complete", {}), [3] * 5, task="regression"),
]


def check_mixing(method: str, case: Case, M) -> None:
    thetas, _, (clients, graph, models) = run_project(method, case)
    expected = mixing_oracle(thetas[0], M(graph, len(case.dims)), gradient(case, clients, models), case.hp["lr"], ROUNDS)
    assert_same(expected, thetas, "θ")


@pytest.mark.parametrize("case", PEER_CASES, ids=str)
def test_dpsgd_iterates_match_gossip_then_gradient_step(case):
    check_mixing("dpsgd", case, metropolis)


@pytest.mark.parametrize("case", PEER_CASES, ids=str)
def test_dfedu_iterates_match_eq_18_with_the_graph_laplacian(case):
    lam = 0.2
    c = Case(case.name, {**case.hp, "lam": lam}, case.graph, case.dims, case.task)
    check_mixing("dfedu", c, lambda g, n: np.eye(n) - c.hp["lr"] * lam * laplacian(g, n))


@pytest.mark.parametrize("case", [*PEER_CASES, Case("sizes differ", {"lr": 0.1, "batch_size": 8}, ("ring", {}), HET)], ids=str)
def test_local_iterates_match_plain_sgd(case):
    thetas, _, (clients, graph, models) = run_project("local-peers", case)
    grad = gradient(case, clients, models)
    expected = [list(thetas[0])]
    for k in range(1, ROUNDS + 1):
        expected.append([t - case.hp["lr"] * grad(i, k, t) for i, t in enumerate(expected[-1])])
    assert_same(expected, thetas, "θ")


def test_dpsgd_and_local_match_their_formulas_with_a_cnn():
    pytest.importorskip("torch")
    case = Case("ring, cnn-small", {"lr": 0.05, "batch_size": 8}, ("ring", {}), [64] * 4, models=["cnn-small"] * 4)
    check_mixing("dpsgd", case, metropolis)
    check_mixing("local-peers", case, lambda g, n: np.eye(n))


def test_a_wrong_mixing_matrix_fails_the_dpsgd_oracle():
    """The D-PSGD oracle has teeth: uniform weights 1/(deg + 1) in place of Metropolis–Hastings fail it."""
    def uniform(g, n):
        A = laplacian(g, n)
        return (np.diag(np.diag(A)) - A + np.eye(n)) / (np.diag(A) + 1)[:, None]

    with pytest.raises(AssertionError, match=r"at iteration \d"):
        check_mixing("dpsgd", PEER_CASES[2], uniform)
