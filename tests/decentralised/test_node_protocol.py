"""The node-local protocol: driving the nodes by hand, as a relay between processes would (specs
shipped as JSON, every node pickled between phases, payloads routed by destination), gives the
same iterates, maps and bits as the in-process runner."""
import json
import pickle

import numpy as np
import pytest

from topofl.data.federation import ClientData
from topofl.decentralised import NodeSpec, make_graph, run_decentralised
from topofl.decentralised.runner import build_peers
from topofl.methods import build_peer as build

N_CLASSES = 3
SEED = 7
ROUNDS = 12


def clients_with(dims, n=60, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for k, dk in enumerate(dims):
        X = rng.standard_normal((n, dk))
        y = np.argmax(X[:, :2] @ rng.standard_normal((2, N_CLASSES)) + rng.normal(0, 0.3, (n, N_CLASSES)), axis=1).astype(float)
        out.append(ClientData(X[:45], y[:45], X[45:], y[45:], client_id=k))
    return out


def roundtrip(obj):
    return pickle.loads(pickle.dumps(obj))


def relay(name, hp, clients, graph, rounds, seed):
    """Run the protocol the way a relay would; returns the final nodes and the bits sent."""
    coordinator = build(name, hp)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0xDEC]))  # as run_decentralised seeds it
    peers = build_peers(clients, "multiclass", N_CLASSES, coordinator.config.l2, None, False, rng)
    specs = coordinator.node_specs({p.node: p.dim for p in peers}, graph, rng)
    wire = json.dumps({i: s.to_dict() for i, s in specs.items()})
    specs = {int(i): NodeSpec.from_dict(d) for i, d in json.loads(wire).items()}
    # every node builds its state on its own algorithm instance; stored pickled between messages
    store = {i: pickle.dumps(build(name, hp).make_node(specs[i], roundtrip(peers[i]))) for i in specs}
    phases = coordinator.phases
    bits = 0
    for k in range(1, rounds + 1):
        gens = {i: np.random.default_rng(np.random.SeedSequence([int(seed), k, i])) for i in specs}
        for phase in phases:
            inbox: dict[int, dict[int, np.ndarray]] = {i: {} for i in specs}
            for i in specs:
                node = pickle.loads(store[i])
                for j, payload in node.outgoing(phase).items():
                    assert j in specs[i].neighbours
                    inbox[j][i] = np.array(payload, copy=True)  # over the wire
                    bits += payload.size * 32
                store[i] = pickle.dumps(node)
            for i in specs:
                node = pickle.loads(store[i])
                node.incoming(phase, inbox[i], gens[i])
                store[i] = pickle.dumps(node)
                gens[i] = roundtrip(gens[i])
    return {i: pickle.loads(b) for i, b in store.items()}, bits


CASES = {
    "sheaf-dense": ("sheaf", {"gamma": 0.5, "eta": 0.05, "lam": 0.2, "lr": 0.05, "batch_size": 16}, [5] * 6),
    "sheaf-compact": ("sheaf", {"gamma": 0.5, "map_init": "sparse_sign", "map_scale": 0.5, "maps": "compact",
                                "eta": 0.05, "lam": 0.2, "lr": 0.05, "batch_size": 16}, [5] * 6),
    "sheaf-dense-two-sizes": ("sheaf", {"gamma": 0.4, "eta": 0.05, "lam": 0.1, "lr": 0.05, "batch_size": 16}, [4, 7, 4, 7, 4, 7]),
    "sheaf-compact-two-sizes": ("sheaf", {"gamma": 0.4, "map_init": "sparse_sign", "maps": "compact",
                                          "eta": 0.05, "lam": 0.1, "lr": 0.05, "batch_size": 16}, [4, 7, 4, 7, 4, 7]),
    "sheaf-auto-local-steps": ("sheaf", {"gamma": 0.5, "map_init": "sparse_sign", "dense_limit": 0.0, "local_steps": 2,
                                         "eta": 0.05, "lam": 0.2, "lr": 0.05, "batch_size": 16}, [5, 6, 5, 6, 5, 6]),
    "dfedu": ("dfedu", {"lam": 0.3, "lr": 0.1, "batch_size": 16}, [5] * 6),
    "dpsgd": ("dpsgd", {"lr": 0.1, "batch_size": 16}, [5] * 6),
    "local": ("local-peers", {"lr": 0.1, "batch_size": 16}, [4, 7, 4, 7, 4, 7]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_relayed_nodes_match_the_in_process_runner(case):
    name, hp, dims = CASES[case]
    clients = clients_with(dims)
    graph = make_graph("erdos_renyi", len(dims), seed=2, p=0.6)
    algo = build(name, hp)
    history = run_decentralised(clients, graph, algo, ROUNDS, seed=SEED, n_classes=N_CLASSES)
    nodes, bits = relay(name, hp, clients, graph, ROUNDS, SEED)
    assert sorted(nodes) == [p.node for p in algo.peers]
    for p in algo.peers:
        np.testing.assert_allclose(nodes[p.node].peer.theta, p.theta, rtol=0, atol=1e-12)
    assert bits == history.final["cumulative_bits"]
    assert sum(n.state_bytes() for n in nodes.values()) == algo.state_bytes()
    assert sum(n.flops(16) for n in nodes.values()) == algo.flops(16)
    if name == "sheaf":
        assert all(n.maps.compact == algo.compact for n in nodes.values())
        assert algo.compact == (hp.get("maps") == "compact" or "dense_limit" in hp)
        for i, m in algo.maps.items():
            np.testing.assert_allclose(nodes[i].maps.dense(), m.dense(), rtol=0, atol=1e-12)


def test_phases_and_node_specs():
    g = make_graph("ring", 5)
    dims = {i: 12 for i in range(5)}
    assert build("sheaf").phases == ("proj", "proj_new")
    assert build("dfedu").phases == build("dpsgd").phases == ("theta",)
    assert build("local-peers").phases == ("step",)
    specs = build("dpsgd").node_specs(dims, g, np.random.default_rng(0))
    assert list(specs) == [0, 1, 2, 3, 4]
    assert specs[0].neighbours == (1, 4) and specs[0].neighbour_dims == (12, 12)
    assert specs[0].weights == pytest.approx((1 / 3, 1 / 3, 1 / 3)) and sum(specs[2].weights) == pytest.approx(1.0)
    # seeds: one draw per node in sorted order, the same for every algorithm
    rng = np.random.default_rng(0)
    assert [s.seed for s in specs.values()] == [int(rng.integers(2**31)) for _ in range(5)]
    sheaf = build("sheaf", {"gamma": 0.5}).node_specs(dims, g, np.random.default_rng(0))
    assert [s.seed for s in sheaf.values()] == [s.seed for s in specs.values()]
    assert {s.mode for s in sheaf.values()} == {"dense"} and sheaf[0].weights == ()


def test_node_spec_round_trips_through_json():
    spec = NodeSpec(3, (0, 5, 9), (12, 7, 30), 12, 123456789, (0.1, 1 / 3, 0.2, 1 - 0.1 - 1 / 3 - 0.2), "compact")
    d = spec.to_dict()
    assert d["neighbours"] == [0, 5, 9] and isinstance(d["weights"], list)
    back = NodeSpec.from_dict(json.loads(json.dumps(d)))
    assert back == spec and back.weights == spec.weights and hash(back) == hash(spec)
    assert NodeSpec.from_dict({k: v for k, v in d.items() if k not in ("weights", "mode")}) == NodeSpec(3, (0, 5, 9), (12, 7, 30), 12, 123456789)
    coerced = NodeSpec(np.int64(1), [np.int64(0), 2], [4, np.int64(4)], np.int64(4), np.int64(5), [np.float64(0.5)] * 3)
    assert json.dumps(coerced.to_dict()) and coerced.neighbours == (0, 2)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"neighbours": (2, 0), "neighbour_dims": (4, 4)}, "sorted and distinct"),
        ({"neighbours": (0, 2), "neighbour_dims": (4,)}, "2 neighbours but 1 neighbour sizes"),
        ({"neighbours": (1,), "neighbour_dims": (4,)}, "lists itself"),
        ({"neighbours": (0,), "neighbour_dims": (0,)}, "model sizes must be >= 1"),
    ],
)
def test_bad_node_specs(kw, message):
    with pytest.raises(ValueError, match=message):
        NodeSpec(node=1, dim=4, seed=0, **kw)


def test_make_node_validates_its_spec():
    clients = clients_with([2, 2, 2])
    rng = np.random.default_rng(0)
    peers = build_peers(clients, "multiclass", N_CLASSES, 0.0, None, False, rng)
    spec = NodeSpec(1, (0, 2), (9, 9), 9, 0, mode="dense")
    with pytest.raises(ValueError, match=r"gets d_ij = floor\(0.01 \* min\(9, 9\)\) = 0"):
        build("sheaf", {"gamma": 0.01}).make_node(spec, peers[1])
    with pytest.raises(ValueError, match="needs its map storage"):
        build("sheaf", {"gamma": 0.5}).make_node(NodeSpec(1, (0, 2), (9, 9), 9, 0), peers[1])
    with pytest.raises(ValueError, match="needs weights"):
        build("dpsgd").make_node(spec, peers[1])
    with pytest.raises(ValueError, match="given the peer of node 0"):
        build("local-peers").make_node(spec, peers[0])
    with pytest.raises(ValueError, match="spec says model size 10"):
        build("local-peers").make_node(NodeSpec(1, (0, 2), (9, 9), 10, 0), peers[1])
    with pytest.raises(ValueError, match="neighbours of sizes"):
        build("dfedu").make_node(NodeSpec(1, (0, 2), (9, 12), 9, 0), peers[1])
    node = build("dfedu").make_node(spec, peers[1])
    with pytest.raises(RuntimeError, match="expected a 'theta' message from 2"):
        node.incoming("theta", {0: np.zeros(9)}, np.random.default_rng(0))
    with pytest.raises(ValueError, match="has shape"):
        node.incoming("theta", {0: np.zeros(9), 2: np.zeros(4)}, np.random.default_rng(0))
    with pytest.raises(ValueError, match="has phases"):
        node.outgoing("proj")
    sheaf = build("sheaf", {"gamma": 0.5}).make_node(spec, peers[1])
    with pytest.raises(RuntimeError, match="before outgoing"):
        sheaf.incoming("proj", {0: np.zeros(4), 2: np.zeros(4)}, np.random.default_rng(0))
    assert build("local-peers").make_node(spec, peers[1]).outgoing("step") == {}
