"""Sheaf-FMTL and the decentralised runtime: special cases (paper §3.3), exact compact maps,
accounting, bad input."""
import re

import networkx as nx
import numpy as np
import pytest

from topofl.data.federation import ClientData
from topofl.decentralised import make_graph, run_decentralised
from topofl.decentralised.sheaf import edge_dim
from topofl.methods import build_peer as build


def regression_clients(n_clients=4, d=3, n=40, seed=0, dims=None):
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n_clients):
        dk = dims[k] if dims else d
        X = rng.standard_normal((n, dk))
        y = X @ rng.standard_normal(dk) + rng.normal(0, 0.1, n)
        out.append(ClientData(X[:30], y[:30], X[30:], y[30:], client_id=k))
    return out


def classification_clients(n_clients=6, d=5, n=60, seed=0, dims=None):
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n_clients):
        dk = dims[k] if dims else d
        X = rng.standard_normal((n, dk))
        y = np.argmax(X[:, :2] @ rng.standard_normal((2, 3)) + rng.normal(0, 0.3, (n, 3)), axis=1).astype(float)
        out.append(ClientData(X[:45], y[:45], X[45:], y[45:], client_id=k))
    return out


def thetas(algo):
    return [p.theta.copy() for p in algo.peers]


def spread(algo) -> float:
    th = thetas(algo)
    return max(np.linalg.norm(t - th[0]) for t in th)


def test_identity_maps_with_large_lambda_reach_consensus():
    """P_ij = I: the disagreement between connected clients shrinks like 1/λ (Remark 1)."""
    clients = regression_clients()
    g = make_graph("ring", 4)
    local = build("local-peers", {"lr": 0.05, "batch_size": 1000, "l2": 0.0})
    run_decentralised(clients, g, local, 1500, seed=0, task="regression")
    spreads = []
    for lam in (2.0, 8.0, 32.0):
        algo = build("sheaf", {"gamma": 1.0, "map_init": "scaled_identity", "eta": 0.0, "lam": lam, "lr": 0.2 / lam, "batch_size": 1000, "l2": 0.0})
        run_decentralised(clients, g, algo, 1500, seed=0, task="regression")
        spreads.append(spread(algo))
    assert spreads[0] > 3 * spreads[1] > 9 * spreads[2]
    assert spreads[2] < 0.05 * spread(local)


@pytest.mark.parametrize("a", [0.5, 1.0, 2.0])
def test_scaled_identity_maps_reproduce_dfedu_exactly_with_fixed_maps(a):
    """P_ij = √a·I and η = 0 make Eq. 27 the dFedU update θ_i − α(∇f_i + λ a Σ_j (θ_i − θ_j)): dFedU
    (Eq. 18, a_ij = 1) with coupling λ·a. With η > 0 the maps move and the two part."""
    clients = classification_clients()
    g = make_graph("erdos_renyi", 6, seed=1, p=0.5)
    lam = 0.3
    hp = {"gamma": 1.0, "map_init": "scaled_identity", "map_scale": np.sqrt(a), "eta": 0.0, "lam": lam, "lr": 0.1}
    sheaf, learning = build("sheaf", hp), build("sheaf", {**hp, "eta": 0.05})
    dfedu = build("dfedu", {"lam": lam * a, "lr": 0.1})
    hs = run_decentralised(clients, g, sheaf, 25, seed=3, n_classes=3)
    hd = run_decentralised(clients, g, dfedu, 25, seed=3, n_classes=3)
    run_decentralised(clients, g, learning, 25, seed=3, n_classes=3)
    for a_, b_ in zip(thetas(sheaf), thetas(dfedu), strict=True):
        np.testing.assert_allclose(a_, b_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(hs.curve("loss"), hd.curve("loss"), atol=1e-12)
    gap = max(np.abs(x - y).max() for x, y in zip(thetas(learning), thetas(dfedu), strict=True))
    assert gap > 1e-6  # learned maps are no longer √a·I: not dFedU
    off = build("dfedu", {"lam": lam, "lr": 0.1}) if a != 1.0 else build("dfedu", {"lam": 2 * lam, "lr": 0.1})
    run_decentralised(clients, g, off, 25, seed=3, n_classes=3)
    assert max(np.abs(x - y).max() for x, y in zip(thetas(sheaf), thetas(off), strict=True)) > 1e-6  # the correspondence is λ·a


def test_server_node_with_identity_maps_solves_the_personalised_objective():
    """Star graph, data-less server node 0... here the last node, P = I, η = 0: the fixed point
    minimises Σ f_i(θ_i) + λ/2 Σ ‖θ_i − θ̄‖² (paper Eq. 24, Hanzely et al. 2020)."""
    clients = regression_clients(n_clients=3, d=2)
    n = len(clients)
    g = nx.star_graph(n)  # node 0 is the hub; relabel so the server is node n
    g = nx.relabel_nodes(g, {0: n, **{k: k - 1 for k in range(1, n + 1)}})
    lam = 0.7
    algo = build("sheaf", {"gamma": 1.0, "map_init": "scaled_identity", "map_scale": 1.0, "eta": 0.0, "lam": lam, "lr": 0.05, "batch_size": 1000, "l2": 0.0})
    run_decentralised(clients, g, algo, 6000, seed=0, task="regression", server_node=True)
    # analytic optimum of Eq. 24 for least squares f_i(θ) = ½ mean((Zθ − y)²)
    d = 3
    A = np.zeros(((n + 1) * d, (n + 1) * d))
    b = np.zeros((n + 1) * d)
    for k, c in enumerate(clients):
        Z = np.hstack([c.X_train, np.ones((c.n_train, 1))])
        s = slice(k * d, (k + 1) * d)
        A[s, s] += Z.T @ Z / c.n_train + lam * np.eye(d)
        b[s] += Z.T @ c.y_train / c.n_train
        srv = slice(n * d, (n + 1) * d)
        A[s, srv] -= lam * np.eye(d)
        A[srv, s] -= lam * np.eye(d)
        A[srv, srv] += lam * np.eye(d)
    opt = np.linalg.solve(A, b).reshape(n + 1, d)
    np.testing.assert_allclose(np.vstack(thetas(algo)), opt, atol=1e-6)


@pytest.mark.parametrize("dims", [None, [5, 7, 6, 9, 5, 8]])
def test_compact_maps_give_the_same_iterates_as_dense(dims):
    clients = classification_clients(dims=dims)
    g = make_graph("erdos_renyi", 6, seed=2, p=0.6)
    hp = {"gamma": 0.5, "map_init": "sparse_sign", "map_scale": 0.5, "eta": 0.05, "lam": 0.2, "lr": 0.05}
    dense, compact = build("sheaf", {**hp, "maps": "dense"}), build("sheaf", {**hp, "maps": "compact"})
    run_decentralised(clients, g, dense, 40, seed=5, n_classes=3)
    run_decentralised(clients, g, compact, 40, seed=5, n_classes=3)
    assert compact.compact and not dense.compact
    for a, b in zip(thetas(dense), thetas(compact), strict=False):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-9)
    for i in dense.maps:
        np.testing.assert_allclose(dense.maps[i].dense(), compact.maps[i].dense(), atol=1e-9)
    np.testing.assert_allclose(dense.frobenius_matrix(), compact.frobenius_matrix(), atol=1e-9)


def test_maps_are_learned_and_heterogeneous_sizes_are_supported():
    clients = classification_clients(dims=[4, 8, 6, 10, 4, 6])
    g = make_graph("complete", 6)
    algo = build("sheaf", {"gamma": 0.5, "eta": 0.05, "lam": 0.05})
    h = run_decentralised(clients, g, algo, 1, seed=0, n_classes=3)
    before = algo.frobenius_matrix()
    algo = build("sheaf", {"gamma": 0.5, "eta": 0.05, "lam": 0.05})
    h = run_decentralised(clients, g, algo, 30, seed=0, n_classes=3)
    assert not np.allclose(before, algo.frobenius_matrix())
    dims = sorted({r["dim"] for r in h.records})
    assert dims == [15, 21, 27, 33]  # (d + 1) * 3 classes for d in {4, 6, 8, 10}
    assert algo.sizes[0][0] == edge_dim(0.5, 15, 27, 0, 1) == 7


def test_bits_count_every_directed_message():
    clients = classification_clients()
    g = make_graph("ring", 6)
    algo = build("sheaf", {"gamma": 0.2})
    h = run_decentralised(clients, g, algo, 3, seed=0, n_classes=3)
    d = 18  # (5 + 1) * 3
    d_e = int(0.2 * d)
    assert h.iterations[0]["bits"] == 2 * (2 * 6) * d_e * 32  # two exchanges × 12 directed edges
    hd = run_decentralised(clients, g, build("dfedu"), 3, seed=0, n_classes=3)
    assert hd.iterations[0]["bits"] == 12 * d * 32
    hl = run_decentralised(clients, g, build("local-peers"), 3, seed=0, n_classes=3)
    assert hl.final["cumulative_bits"] == 0


def test_memory_budget_errors_or_recompresses():
    clients = classification_clients()
    g = make_graph("complete", 6)
    hp = {"gamma": 0.5, "map_init": "sparse_sign", "maps": "compact", "memory_budget": 30_000}
    with pytest.raises(MemoryError, match="above memory_budget"):
        run_decentralised(clients, g, build("sheaf", hp), 50, seed=0, n_classes=3)
    algo = build("sheaf", {**hp, "on_budget": "recompress", "recompress_rank": 2})
    run_decentralised(clients, g, algo, 50, seed=0, n_classes=3)
    assert len(algo.recompressions) >= 2  # re-compressed each time the history outgrew the budget
    assert algo.state_bytes() <= 30_000
    assert all(0.0 <= lost < 1.0 for _, lost in algo.recompressions)


def test_a_run_that_would_outgrow_the_budget_is_refused_up_front_with_the_bytes_it_needs():
    """Compact maps grow by exactly one row of U and V per node and iteration (Eq. 28 is rank one),
    so the bytes a run needs are known before it starts: a budget one byte short is refused before
    the first iteration, naming that number and the iteration the run would have stopped at."""
    clients = classification_clients()
    g = make_graph("complete", 6)
    hp = {"gamma": 0.5, "map_init": "sparse_sign", "maps": "compact"}
    h = run_decentralised(clients, g, build("sheaf", hp), 12, seed=0, n_classes=3)
    need, first = h.final["map_storage_bytes"], h.iterations[0]["map_storage_bytes"]
    per = h.iterations[1]["map_storage_bytes"] - first
    assert need == first + 11 * per  # linear growth: the projection is exact
    rounds_run = []
    needed = re.escape(f"{need:.4g}")
    with pytest.raises(MemoryError, match=rf"grow to .* over 12 iterations .* the run would stop at iteration 12\. Set memory_budget >= {needed}"):
        run_decentralised(clients, g, build("sheaf", {**hp, "memory_budget": need - 1}), 12, seed=0, n_classes=3,
                          on_round=lambda hist, row: rounds_run.append(row["round"]))
    assert rounds_run == []  # refused before the first iteration
    with pytest.raises(MemoryError, match=r"the run would stop at iteration 8\."):  # the maps hold first + 6·per after 7 iterations
        run_decentralised(clients, g, build("sheaf", {**hp, "memory_budget": first + 6 * per}), 12, seed=0, n_classes=3)
    run_decentralised(clients, g, build("sheaf", {**hp, "memory_budget": first + 6 * per}), 7, seed=0, n_classes=3)
    exact = run_decentralised(clients, g, build("sheaf", {**hp, "memory_budget": need}), 12, seed=0, n_classes=3)
    assert exact.final["map_storage_bytes"] == need
    run_decentralised(clients, g, build("sheaf", {**hp, "memory_budget": need - 1, "on_budget": "recompress"}), 12, seed=0, n_classes=3)


def test_model_init_common_starts_every_client_of_an_architecture_from_one_vector():
    """θ_i⁰ (Algorithm 1, line 1): independent starts by default (the authors' code builds one network
    per client), one start per architecture with ``model_init="common"``."""
    pytest.importorskip("torch")
    from topofl.models.registry import build_model

    clients = classification_clients(n_clients=5, d=64)  # 8×8 images for the CNN
    g = make_graph("ring", 5)
    names = ["cnn-small", "mlp", "cnn-small", "mlp", "cnn-small"]
    starts = {}
    for init in ("independent", "common"):
        algo = build("local-peers", {"model_init": init})
        original = algo.setup

        def setup(peers, graph, rng, original=original, init=init):
            original(peers, graph, rng)
            starts[init] = [p.theta.copy() for p in peers]

        algo.setup = setup
        models = [build_model(m, task="multiclass", n_features=64, n_classes=3) for m in names]
        run_decentralised(clients, g, algo, 1, seed=2, n_classes=3, models=models)
    ind, com = starts["independent"], starts["common"]
    assert not np.array_equal(ind[0], ind[2]) and not np.array_equal(ind[1], ind[3])
    assert np.array_equal(com[0], com[2]) and np.array_equal(com[2], com[4]) and np.array_equal(com[1], com[3])
    assert all(np.abs(t).max() > 0 for t in com)  # a random start, not zeros
    lin = build("dpsgd", {"model_init": "common"})
    run_decentralised(clients, g, lin, 1, seed=2, n_classes=3)  # linear models start at zero either way
    with pytest.raises(ValueError, match="model_init must be one of"):
        build("dpsgd", {"model_init": "shared"})


def test_divergence_is_reported_with_the_step_sizes():
    clients = classification_clients()
    g = make_graph("complete", 6)
    with pytest.raises(FloatingPointError, match=r"sheaf diverged at iteration \d+.*eta=5.0, lam=5.0"):
        run_decentralised(clients, g, build("sheaf", {"eta": 5.0, "lam": 5.0, "lr": 1.0, "gamma": 0.5}), 200, seed=0, n_classes=3)


@pytest.mark.parametrize(
    "kind, kw, message",
    [
        ("edges", {"edges": [(0, 1), (2, 3)]}, "disconnected graph with 2 components"),
        ("edges", {"edges": [(0, 9)]}, "names a node outside 0..3"),
        ("erdos_renyi", {"p": 0.0}, "p must be in (0.0, 1.0]"),
        ("erdos_renyi", {"p": 0.01, "max_tries": 3}, "no connected erdos_renyi graph on 4 nodes"),
        ("hypercube", {}, "graph kind must be one of"),
    ],
)
def test_graph_errors(kind, kw, message):
    with pytest.raises(ValueError) as err:
        make_graph(kind, 4, **kw)
    assert message in str(err.value)


def test_graphs_are_seeded_and_connected():
    for kind in ("erdos_renyi", "watts_strogatz", "barabasi_albert", "complete", "ring"):
        a, b = make_graph(kind, 12, seed=3), make_graph(kind, 12, seed=3)
        assert nx.is_connected(a) and sorted(a.edges) == sorted(b.edges)


@pytest.mark.parametrize(
    "hp, message",
    [
        ({"gamma": 0.0}, "gamma must be in (0.0, 1.0]"),
        ({"gamma": 1.5}, "gamma must be in (0.0, 1.0]"),
        ({"lr": -0.1}, "lr must be in (0.0, 100.0]; got -0.1"),
        ({"eta": -1.0}, "eta must be in [0.0, inf); got -1.0"),
        ({"map_scale": 0.0}, "map_scale must be in (0.0, inf); got 0.0"),
        ({"maps": "compact", "map_init": "gaussian"}, "maps='compact' needs map_init='sparse_sign'"),
    ],
)
def test_bad_sheaf_hyperparameters(hp, message):
    with pytest.raises(ValueError) as err:
        build("sheaf", hp)
    assert message in str(err.value)


def test_empty_edge_space_and_size_mismatches_are_refused():
    clients = classification_clients(dims=[2, 2, 2, 2, 2, 2])
    g = make_graph("ring", 6)
    with pytest.raises(ValueError, match=r"gets d_ij = floor\(0.01 \* min\(9, 9\)\) = 0; raise gamma"):
        run_decentralised(clients, g, build("sheaf", {"gamma": 0.01}), 1, seed=0, n_classes=3)
    mixed = classification_clients(dims=[3, 4, 3, 4, 3, 4])
    with pytest.raises(ValueError, match="dfedu needs equal model sizes"):
        run_decentralised(mixed, g, build("dfedu"), 1, seed=0, n_classes=3)
    with pytest.raises(ValueError, match="the graph must have nodes 0..5"):
        run_decentralised(clients, make_graph("ring", 5), build("local-peers"), 1, seed=0, n_classes=3)


def test_float32_compact_factors_track_float64_to_float32_precision():
    clients = classification_clients()
    g = make_graph("erdos_renyi", 6, seed=2, p=0.6)
    hp = {"gamma": 0.5, "map_init": "sparse_sign", "map_scale": 0.5, "eta": 0.05, "lam": 0.2, "lr": 0.05, "maps": "compact"}
    a, b = build("sheaf", hp), build("sheaf", {**hp, "map_precision": "float32"})
    run_decentralised(clients, g, a, 40, seed=5, n_classes=3)
    run_decentralised(clients, g, b, 40, seed=5, n_classes=3)
    for x, y in zip(thetas(a), thetas(b), strict=False):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)
        assert not np.array_equal(x, y)
    assert b.state_bytes() < 0.6 * a.state_bytes()


def test_data_model_dimension_mismatch_and_disconnected_graph_are_refused():
    from topofl.models.linear import make_model

    clients = classification_clients(n_clients=4, d=5)
    with pytest.raises(ValueError, match="client 0 has 5 features but its model expects 7"):
        run_decentralised(clients, make_graph("ring", 4), build("sheaf", {"gamma": 0.5}), 1, seed=0, n_classes=3,
                          models=[make_model("multiclass", 7, 3)] * 4)
    split = nx.Graph([(0, 1), (2, 3)])
    with pytest.raises(ValueError, match="the communication graph is disconnected"):
        run_decentralised(clients, split, build("sheaf", {"gamma": 0.5}), 1, seed=0, n_classes=3)
