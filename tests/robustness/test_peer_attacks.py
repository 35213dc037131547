"""Hostile peers (topofl.robustness.peer_attacks): honest nodes untouched until an attacked message
reaches them, each reply kind's message checked by hand or by its defining property, data kinds
on exactly the adversaries' training data, and a smoke run of every peer method."""
from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import networkx as nx
import numpy as np
import pytest

from topofl.data.federation import ClientData
from topofl.decentralised import run_decentralised
from topofl.decentralised.protocol import Peer, PeerAlgorithm
from topofl.decentralised.runner import build_peers
from topofl.decentralised.transport import InProcessTransport
from topofl.methods import build_peer
from topofl.robustness.attacks import AttackConfig
from topofl.robustness.peer_attacks import AttackedPeerNode, attacked_peers

N_CLASSES = 3
HP: dict[str, dict[str, Any]] = {
    "sheaf": {"gamma": 0.5, "eta": 0.05, "lam": 0.2, "lr": 0.05, "batch_size": 16},
    "dfedu": {"lam": 0.5, "lr": 0.1, "batch_size": 16},
    "dpsgd": {"lr": 0.1, "batch_size": 16},
    "local-peers": {"lr": 0.1, "batch_size": 16},
}


def clients(k: int = 4, n: int = 40, d: int = 4, seed: int = 0) -> list[ClientData]:
    rng = np.random.default_rng(seed)
    out = []
    for c in range(k):
        X = rng.standard_normal((n, d))
        y = np.argmax(X[:, :2] @ rng.standard_normal((2, N_CLASSES)), axis=1).astype(float)
        out.append(ClientData(X[:30], y[:30], X[30:], y[30:], client_id=c))
    return out


def run(algo: PeerAlgorithm, rounds: int, graph: nx.Graph | None = None, k: int = 4) -> Any:
    graph = graph if graph is not None else nx.path_graph(k)
    return run_decentralised(clients(k), graph, algo, rounds, seed=3, task="multiclass", n_classes=N_CLASSES)


class Recorder(InProcessTransport):
    """A transport that keeps a copy of every payload, per (src, dst, tag), in order."""

    def __init__(self, graph: nx.Graph) -> None:
        super().__init__(graph)
        self.log: dict[tuple[int, int, str], list[np.ndarray]] = {}
        self.hook: Any = None

    def send(self, src: int, dst: int, tag: str, payload: np.ndarray) -> None:
        self.log.setdefault((src, dst, tag), []).append(np.array(payload, copy=True))
        if self.hook is not None:
            self.hook(src, dst, tag, payload)
        super().send(src, dst, tag, payload)


def drive(algo: PeerAlgorithm, graph: nx.Graph, rounds: int, k: int | None = None, hook: Any = None) -> tuple[list[Peer], Recorder]:
    """Run ``algo`` by hand (as run_decentralised seeds it), recording every message."""
    k = graph.number_of_nodes() if k is None else k
    rng = np.random.default_rng(np.random.SeedSequence([3, 0xDEC]))
    peers = build_peers(clients(k), "multiclass", N_CLASSES, algo.config.l2, None, False, rng, seed=3)
    algo.setup(peers, graph, rng)
    transport = Recorder(graph)
    transport.hook = hook
    for r in range(1, rounds + 1):
        algo.iterate(r, transport, [np.random.default_rng(np.random.SeedSequence([3, r, p.node])) for p in peers])
    return peers, transport


@pytest.mark.parametrize("kind", ["descriptor_forgery", "crude_forgery"])
def test_descriptor_kinds_are_refused(kind: str) -> None:
    with pytest.raises(ValueError, match=kind):
        attacked_peers(build_peer("dfedu"), kind, [0])


def test_bad_wrappers_are_refused() -> None:
    with pytest.raises(ValueError, match="PeerAlgorithm"):
        attacked_peers(object(), "sign_flip", [0])  # type: ignore[arg-type]
    compact = build_peer("sheaf", {"exchange": "compact", "map_init": "sparse_sign", "maps": "compact"})
    with pytest.raises(ValueError, match="exchange='compact'"):
        attacked_peers(compact, "sign_flip", [0])
    attacked_peers(compact, "label_flip", [0])  # data kinds do not touch the messages
    with pytest.raises(ValueError, match="adversaries"):
        run(attacked_peers(build_peer("dfedu", HP["dfedu"]), "sign_flip", [9]), 1)


@pytest.mark.parametrize("name", ["sheaf", "dfedu", "dpsgd"])
def test_identical_to_clean_run_before_start_round(name: str) -> None:
    clean2, clean3 = run(build_peer(name, HP[name]), 2), run(build_peer(name, HP[name]), 3)
    attack = AttackConfig("sign_flip", start_round=3, scale=2.0)
    hit2 = run(attacked_peers(build_peer(name, HP[name]), attack, [0]), 2)
    hit3 = run(attacked_peers(build_peer(name, HP[name]), attack, [0]), 3)
    for i in range(4):
        np.testing.assert_array_equal(hit2.client_models[i], clean2.client_models[i])
    # round 3: the attacked message reaches node 1 (path 0-1-2-3); node 0 keeps its honest model
    assert not np.allclose(hit3.client_models[1], clean3.client_models[1])
    np.testing.assert_array_equal(hit3.client_models[0], clean3.client_models[0])
    if name != "sheaf":  # one phase: node 1's altered model reaches nodes 2, 3 only from round 4
        for i in (2, 3):
            np.testing.assert_array_equal(hit3.client_models[i], clean3.client_models[i])
    assert [r["bits"] for r in hit3.iterations] == [r["bits"] for r in clean3.iterations]


def test_sign_flip_on_two_nodes_is_the_hand_computed_message() -> None:
    graph = nx.path_graph(2)
    clean, _ = drive(build_peer("dfedu", HP["dfedu"]), graph, 1)
    theta1 = clean[0].theta  # node 0's model after one honest iteration
    peers, t = drive(attacked_peers(build_peer("dfedu", HP["dfedu"]), "sign_flip:start_round=2", [0]), graph, 2)
    m1, m2 = t.log[(0, 1, "theta")]
    np.testing.assert_array_equal(m1, np.zeros_like(theta1))  # linear models start at 0: θ^0 = 0
    np.testing.assert_allclose(m2, m1 - 1.0 * (theta1 - m1))  # θ^0 − s(θ^1 − θ^0) = −θ^1
    np.testing.assert_allclose(m2, -theta1)
    clean2, _ = drive(build_peer("dfedu", HP["dfedu"]), graph, 2)
    np.testing.assert_array_equal(peers[0].theta, clean2[0].theta)  # its own model stays honest


def test_free_rider_messages_are_constant() -> None:
    graph = nx.cycle_graph(4)
    _, t = drive(attacked_peers(build_peer("sheaf", HP["sheaf"]), "free_rider", [2]), graph, 4)
    for (src, _dst, _tag), msgs in t.log.items():
        same = all(np.array_equal(m, msgs[0]) for m in msgs)
        assert same == (src == 2), (src, _dst, _tag)
    assert t.log[(2, 1, "proj")][0].shape != () and len(t.log[(2, 1, "proj")]) == 4


def test_colluders_send_one_shared_offset() -> None:
    graph = nx.complete_graph(4)
    algo = attacked_peers(build_peer("dfedu", HP["dfedu"]), "collusion:noise_std=0.5", [0, 3])
    offsets: dict[tuple[int, int], list[np.ndarray]] = {}

    def hook(src: int, dst: int, tag: str, payload: np.ndarray) -> None:
        node = algo.nodes[src]
        if isinstance(node, AttackedPeerNode):  # offset = sent − the honest payload: dFedU sends its model θ
            offsets.setdefault((src, dst), []).append(payload - node.peer.theta)

    drive(algo, graph, 3, hook=hook)
    assert sorted(offsets) == [(0, 1), (0, 2), (0, 3), (3, 0), (3, 1), (3, 2)]
    ref = offsets[(0, 1)]
    for series in offsets.values():
        for r in range(3):
            np.testing.assert_allclose(series[r], ref[r], rtol=0, atol=1e-12)  # (p + δ) − p: rounding only
    assert not np.allclose(ref[0], ref[1]) and np.all(ref[0] != 0)


def test_gaussian_noise_is_independent_per_edge() -> None:
    algo = attacked_peers(build_peer("dfedu", HP["dfedu"]), "gaussian_noise", [1])
    _, t = drive(algo, nx.path_graph(3), 1)
    assert not np.allclose(t.log[(1, 0, "theta")][0], t.log[(1, 2, "theta")][0])


def test_label_flip_trains_exactly_the_adversaries_on_flipped_labels_from_its_start_round() -> None:
    """The attacked run is, bit for bit, a clean run in which nodes 1 and 2 hold flipped training
    labels from iteration 2 on (full batches: the gradients see every label)."""
    graph, hp = nx.path_graph(4), {**HP["dfedu"], "batch_size": 64}
    data = clients(4)
    flipped = {i: dataclasses.replace(data[i], y_train=N_CLASSES - 1 - data[i].y_train) for i in (1, 2)}

    def drive_by_hand(algo: PeerAlgorithm, swap: bool) -> list[Peer]:
        rng = np.random.default_rng(np.random.SeedSequence([3, 0xDEC]))
        peers = build_peers(data, "multiclass", N_CLASSES, algo.config.l2, None, False, rng, seed=3)
        algo.setup(peers, graph, rng)
        transport = InProcessTransport(graph)
        for r in (1, 2, 3):
            if swap:
                for i, c in flipped.items():
                    peers[i].data = c if r >= 2 else data[i]
            algo.iterate(r, transport, [np.random.default_rng(r + p.node) for p in peers])
        return peers

    attacked = drive_by_hand(attacked_peers(build_peer("dfedu", hp), "label_flip:start_round=2", [1, 2]), swap=False)
    by_hand = drive_by_hand(build_peer("dfedu", hp), swap=True)
    clean = drive_by_hand(build_peer("dfedu", hp), swap=False)
    for i, c in enumerate(data):
        np.testing.assert_array_equal(attacked[i].theta, by_hand[i].theta)
        assert attacked[i].data is c  # the node's own data object is restored; test labels untouched
    assert not np.allclose(attacked[1].theta, clean[1].theta)


@pytest.mark.parametrize("name", ["sheaf", "dfedu", "dpsgd", "local-peers"])
def test_wrappers_compose_and_run_every_peer_method(name: str) -> None:
    clean = run(build_peer(name, HP[name]), 3)
    inner = attacked_peers(build_peer(name, HP[name]), "feature_poison:feature_scale=2.0", [1])
    algo = attacked_peers(inner, "gaussian_noise:noise_std=0.1", [1])
    hit = run(algo, 3)
    assert hit.method == clean.method == name
    assert [r["bits"] for r in hit.iterations] == [r["bits"] for r in clean.iterations]
    assert all(np.isfinite(m).all() for m in hit.client_models.values())
    assert not np.allclose(hit.client_models[1], clean.client_models[1])
    if name == "local-peers":  # nothing sent: only the adversary's own data attack changes anything
        for i in (0, 2, 3):
            np.testing.assert_array_equal(hit.client_models[i], clean.client_models[i])
        replies = run(attacked_peers(build_peer(name, HP[name]), "sign_flip", [1]), 3)
        for i in range(4):
            np.testing.assert_array_equal(replies.client_models[i], clean.client_models[i])
    node = pickle.loads(pickle.dumps(algo.nodes[1]))  # a relay ships nodes between processes
    assert isinstance(node, AttackedPeerNode) and isinstance(node.inner, AttackedPeerNode)


# ---- the public entry points: simulate_decentralised(attack=) and the Flower relay ---------------
SMALL = {"n_clients": 4, "adversarial": (1,)}
SHEAF = {"gamma": 0.3, "lam": 0.01}  # healthcare's 21 parameters: d_ij = 6


@pytest.mark.parametrize("method, spec", [
    ("dfedu", "sign_flip:fraction=0.5,start_round=2"),
    ("sheaf", "collusion:fraction=0.5,noise_std=0.5"),
    ("dpsgd", "label_flip:fraction=0.25"),
])
def test_simulate_decentralised_attack_is_attacked_peers_on_the_chosen_nodes(method: str, spec: str) -> None:
    import topofl
    from topofl.decentralised import make_graph
    from topofl.robustness.attacks import parse_attack

    fed = topofl.make_scenario("healthcare", seed=1, **SMALL)
    hps = SHEAF if method == "sheaf" else {}
    got = topofl.simulate_decentralised(fed, method, rounds=3, seed=1, graph="ring", attack=spec, **hps)
    attack = parse_attack(spec)
    chosen = attack.adversaries(range(4))
    assert chosen and chosen == attack.adversaries(fed.client_ids)  # node k is client k
    ref = run_decentralised(fed.clients, make_graph("ring", 4, seed=1), attacked_peers(build_peer(method, hps), attack, chosen), 3, seed=1,
                            task=fed.task, n_classes=fed.n_classes)
    clean = topofl.simulate_decentralised(fed, method, rounds=3, seed=1, graph="ring", **hps)
    for i in range(4):
        np.testing.assert_array_equal(got.client_models[i], ref.client_models[i])
    assert any(not np.array_equal(got.client_models[i], clean.client_models[i]) for i in range(4))


@pytest.mark.parametrize("method, spec", [
    ("dfedu", "sign_flip:fraction=0.5,start_round=2"),
    ("sheaf", "gaussian_noise:fraction=0.25,noise_std=0.3"),
    ("dpsgd", "feature_poison:fraction=0.5"),
])
def test_flower_relay_attacked_run_equals_in_process(method: str, spec: str) -> None:
    """The adversaries' SuperNodes wrap their own node (the relay is not told who attacks): the
    relayed run's per-node metrics and bits equal simulate_decentralised(attack=) exactly."""
    pytest.importorskip("flwr")
    import topofl
    from fake_grid import FakeGrid
    from topofl.flower.relay import relay_main
    from topofl.flower.settings import FlowerSettings

    hps = SHEAF if method == "sheaf" else {}
    h = relay_main(FakeGrid(4), FlowerSettings.from_flat(method=method, rounds=3, seed=1, scenario_params=SMALL, graph="ring", attack=spec,
                                               hyperparameters=hps))
    fed = topofl.make_scenario("healthcare", seed=1, **SMALL)
    ref = topofl.simulate_decentralised(fed, method, rounds=3, seed=1, graph="ring", attack=spec, **hps)
    clean = topofl.simulate_decentralised(fed, method, rounds=3, seed=1, graph="ring", **hps)
    key = lambda records: {(r["round"], r["client"]): (r["accuracy"], r["loss"]) for r in records}  # noqa: E731
    assert key(h.records) == key(ref.records) != key(clean.records)
    assert [r["bits"] for r in h.iterations] == [r["bits"] for r in ref.iterations]
    assert not h.failures
