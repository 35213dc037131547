"""Sheaf-FMTL's compact exchange (one message of d_ij + 1 numbers per directed edge and iteration
instead of two of d_ij) gives the paper exchange's iterates; the bits count what is sent; shared
initial maps; FLOPs count the projections actually computed; storage includes the models."""
import numpy as np
import pytest

from helpers import multiclass_peers
from topofl.decentralised import make_graph, run_decentralised
from topofl.methods import build_peer as build

DIMS = [5, 7, 6, 9, 5, 8]  # model sizes (d + 1)·3 = 18, 24, 21, 30, 18, 27: they differ
HP = {"gamma": 0.5, "map_scale": 0.5, "eta": 0.05, "lam": 0.2, "lr": 0.05, "batch_size": 16}
CASES = {
    "dense-gaussian": {**HP, "map_init": "gaussian"},
    "dense-shared": {**HP, "map_init": "shared"},
    "compact-maps": {**HP, "map_init": "sparse_sign", "maps": "compact"},
    "compact-float32": {**HP, "map_init": "sparse_sign", "maps": "compact", "map_precision": "float32"},
    "eta-zero": {**HP, "map_init": "gaussian", "eta": 0.0},
    "local-steps": {**HP, "map_init": "uniform", "local_steps": 3},
    "recompress": {**HP, "map_init": "sparse_sign", "maps": "compact", "memory_budget": 30_000, "on_budget": "recompress", "recompress_rank": 2},
}


def clients(dims=DIMS, n=60, seed=0):
    return multiclass_peers(dims, n, seed)


def run(hp, rounds=30, graph=None, server_node=False, dims=DIMS):
    algo = build("sheaf", hp)
    g = graph or make_graph("erdos_renyi", len(dims), seed=2, p=0.6)
    h = run_decentralised(clients(dims), g, algo, rounds, seed=3, n_classes=3, server_node=server_node)
    return algo, h


@pytest.mark.parametrize("case", list(CASES))
def test_compact_exchange_gives_the_paper_exchanges_iterates(case):
    paper, hp_ = run(CASES[case])
    compact, hc = run({**CASES[case], "exchange": "compact"})
    for i in paper.nodes:
        np.testing.assert_allclose(compact.nodes[i].peer.theta, paper.nodes[i].peer.theta, rtol=0, atol=1e-12)
        np.testing.assert_allclose(compact.maps[i].dense(), paper.maps[i].dense(), rtol=0, atol=1e-12)
        # the neighbour rebuilds with node i's own arithmetic (float32 factors' rounding included): bit for bit
        np.testing.assert_array_equal(compact.nodes[i].peer.theta, paper.nodes[i].peer.theta)
    np.testing.assert_allclose(hc.curve("loss"), hp_.curve("loss"), rtol=0, atol=1e-12)
    assert hc.final["cumulative_bits"] < 0.6 * hp_.final["cumulative_bits"]
    if case == "recompress":
        assert paper.recompressions and compact.recompressions


def test_bits_count_what_each_exchange_sends():
    """Paper: 2·d_ij per directed edge and iteration. Compact: d_ij + 1, plus P_ij⁰ θ_i⁰ (d_ij) in the
    first iteration; and after a re-compression the node's next ``proj`` message again."""
    paper, hp_ = run(CASES["dense-gaussian"], rounds=4)
    compact, hc = run({**CASES["dense-gaussian"], "exchange": "compact"}, rounds=4)
    S = sum(sum(s) for s in paper.sizes.values())  # Σ over directed edges of d_ij
    E = sum(len(s) for s in paper.sizes.values())  # directed edges
    assert [r["bits"] for r in hp_.iterations] == [2 * S * 32] * 4
    assert [r["bits"] for r in hc.iterations] == [(2 * S + E) * 32] + [(S + E) * 32] * 3
    first = [r for r in hc.records if r["round"] == 2]  # per client: d_ij + 1 floats to each neighbour
    assert {r["client"]: r["floats_up"] for r in first} == {i: sum(s) + len(s) for i, s in compact.sizes.items()}
    _, rc = run({**CASES["recompress"], "exchange": "compact"}, rounds=30)
    later = [r["bits"] for r in rc.iterations[1:]]
    assert min(later) == (S + E) * 32 and max(later) > (S + E) * 32  # a re-compressed node re-sends its projections


def test_compact_exchange_with_a_data_less_server_node_and_messages_only_between_neighbours():
    g, same = make_graph("ring", 5), [6] * 4  # a server node needs one model size
    paper, _ = run(CASES["dense-gaussian"], rounds=6, graph=g, server_node=True, dims=same)
    compact, _ = run({**CASES["dense-gaussian"], "exchange": "compact"}, rounds=6, graph=g, server_node=True, dims=same)
    for i in paper.nodes:
        np.testing.assert_allclose(compact.nodes[i].peer.theta, paper.nodes[i].peer.theta, rtol=0, atol=1e-12)
    node = compact.nodes[0]
    assert node.outgoing("proj") == {}  # carried over: the neighbours rebuild it
    msgs = node.outgoing("proj_new")
    assert tuple(sorted(msgs)) == node.spec.neighbours and [v.size for v in msgs.values()] == [d + 1 for d in node.sizes]
    assert msgs[node.spec.neighbours[0]][-1] == pytest.approx(float(node.peer.theta @ node.peer.theta), rel=1e-15)
    node.incoming("proj", {}, np.random.default_rng(0))  # the projections rebuilt from the last proj_new
    with pytest.raises(RuntimeError, match="expected a 'proj' message from"):
        node.incoming("proj", {}, np.random.default_rng(0))  # used once: nothing is rebuilt twice


def test_compact_exchange_through_the_relay_equals_the_paper_exchange_in_process():
    pytest.importorskip("flwr")
    import topofl
    from fake_grid import FakeGrid
    from topofl.flower.relay import relay_main
    from topofl.flower.settings import FlowerSettings

    small = {"n_clients": 4, "adversarial": (1,)}
    hps = {"gamma": 0.3, "lam": 0.01, "exchange": "compact"}
    h = relay_main(FakeGrid(4), FlowerSettings.from_flat(method="sheaf", rounds=4, seed=1, scenario_params=small, hyperparameters=hps, graph="ring"))
    fed = topofl.make_scenario("healthcare", seed=1, **small)
    ref = topofl.simulate_decentralised(fed, "sheaf", rounds=4, seed=1, graph="ring", **{**hps, "exchange": "paper"})
    same = topofl.simulate_decentralised(fed, "sheaf", rounds=4, seed=1, graph="ring", **hps)
    ours = {(r["round"], r["client"]): (r["accuracy"], r["loss"]) for r in h.records}
    theirs = {(r["round"], r["client"]): (r["accuracy"], r["loss"]) for r in ref.records}
    assert ours.keys() == theirs.keys()
    for key in ours:
        np.testing.assert_allclose(ours[key], theirs[key], rtol=0, atol=1e-12, err_msg=str(key))
    assert [r["bits"] for r in h.iterations] == [r["bits"] for r in same.iterations]
    assert h.iterations[1]["bits"] < 0.6 * ref.iterations[1]["bits"]


def edge_blocks(algo):
    """(i, j) → P_ij as node i holds it."""
    out = {}
    for i, n in algo.nodes.items():
        P, off = n.maps.dense(), n.maps.offsets
        for b, j in enumerate(n.spec.neighbours):
            out[i, j] = P[off[b] : off[b + 1]]
    return out


def test_shared_maps_agree_at_both_ends_of_every_edge():
    hp = {**CASES["dense-shared"], "eta": 0.0}
    blocks = edge_blocks(run(hp, rounds=1)[0])
    for (i, j), P_ij in blocks.items():
        P_ji = blocks[j, i]
        m = min(P_ij.shape[1], P_ji.shape[1])
        assert P_ij.shape[0] == P_ji.shape[0] and P_ij.shape[1] == DIMS[i] * 3 + 3
        np.testing.assert_array_equal(P_ij[:, :m], P_ji[:, :m])
        assert abs(P_ij.std() - 0.5) < 0.25  # N(0, σ²) entries in every column, σ = map_scale
    first, second = list(blocks)[:2]
    assert not np.array_equal(blocks[first][:, :5], blocks[second][:, :5])  # edges draw independently
    reseeded = build("sheaf", hp)
    run_decentralised(clients(), make_graph("erdos_renyi", len(DIMS), seed=2, p=0.6), reseeded, 1, seed=4, n_classes=3)
    assert not np.array_equal(edge_blocks(reseeded)[first], blocks[first])  # the run seed changes the maps
    independent = edge_blocks(run({**CASES["dense-gaussian"], "eta": 0.0}, rounds=1)[0])
    i, j = first
    assert not np.allclose(independent[i, j][:, :18], independent[j, i][:, :18])  # the paper's maps: independent ends


def test_flops_count_the_projections_computed():
    algo, h = run(CASES["dense-gaussian"], rounds=5)
    assert all(n.maps.products == 6 for n in algo.nodes.values())  # K + 1 projections each: one is carried per iteration
    flops = np.diff([0.0] + [r["cumulative_flops"] for r in h.iterations])
    grad = sum(6 * 16 * n.peer.dim for n in algo.nodes.values())
    maps = sum(2 * sum(n.sizes) * n.peer.dim for n in algo.nodes.values())
    vec = sum(4 * sum(n.sizes) + 2 * n.peer.dim for n in algo.nodes.values())
    assert flops[0] == grad + 4 * maps + vec  # two projections, back-projection, update
    assert list(flops[1:]) == [grad + 3 * maps + vec] * 4  # the first projection is carried over
    _, h0 = run(CASES["eta-zero"], rounds=3)
    assert np.diff([r["cumulative_flops"] for r in h0.iterations]).tolist() == [grad + 2 * maps] * 2  # no map step


def test_storage_includes_the_models():
    algo, h = run(CASES["dense-gaussian"], rounds=1)
    models = 8 * sum(n.peer.dim for n in algo.nodes.values())
    maps = 8 * sum(sum(n.sizes) * n.peer.dim for n in algo.nodes.values())  # Table 3: d_i + Σ_j d_ij·d_i per client
    assert (h.final["model_bytes"], h.final["map_storage_bytes"], h.final["storage_bytes"]) == (models, maps, models + maps)
    hl = run_decentralised(clients(), make_graph("ring", len(DIMS)), build("local-peers"), 1, seed=0, n_classes=3)
    assert hl.final["storage_bytes"] == hl.final["model_bytes"] == models and hl.final["map_storage_bytes"] == 0


def test_bad_exchange_and_shared_without_a_spec_are_refused():
    with pytest.raises(ValueError, match="exchange must be one of"):
        build("sheaf", {"exchange": "half"})
    from topofl.decentralised.sheaf.maps import initial_maps

    with pytest.raises(ValueError, match="map_init='shared' draws each edge's map from the edge's seed"):
        initial_maps("shared", [2], 5, 1.0, np.random.default_rng(0))
