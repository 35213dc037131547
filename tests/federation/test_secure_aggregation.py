"""Secure aggregation (SecAgg+, topofl.federation.secure, topofl.privacy.secagg): the primitives, the
protocol's result against the plain mode, what the server receives (the inversion attack on it), small
groups, dropouts before and after masking, and refused outsiders, replays and out-of-order requests."""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from helpers import blob_client
from topofl import Federation
from topofl.algorithms.base import cap_shares
from topofl.algorithms.ptopofl import maths
from topofl.data.scenarios import make_scenario
from topofl.federation import secure
from topofl.federation.pool import InProcessPool
from topofl.federation.runner import run_federation, run_rounds
from topofl.methods import build_server
from topofl.privacy import secagg
from topofl.privacy.inversion import invert_single_gradient, update_to_gradient

# the quantiser's default step (secure_clip 64, 40 bits): a coordinate's rounding error is at most half of it
STEP = 128.0 / (2**40 - 1)


# ---------------------------------------------------------------- primitives
def test_any_threshold_of_shares_rebuilds_the_secret_and_fewer_do_not():
    secret = secagg.new_secret()
    shares = secagg.share_secret(secret, 3, 5)
    assert all(len(s) == secagg.SHARE_BYTES for s in shares)
    for subset in itertools.combinations(shares, 3):
        assert secagg.combine_secret(list(subset)) == secret
    assert secagg.combine_secret(shares[:2]) != secret
    with pytest.raises(ValueError, match="distinct"):
        secagg.combine_secret([shares[0], shares[0], shares[1]])
    with pytest.raises(ValueError, match="threshold"):
        secagg.share_secret(secret, 1, 5)
    with pytest.raises(ValueError, match="16 bytes"):
        secagg.share_secret(secret + secret, 3, 5)


def test_a_masking_key_rebuilt_from_its_seed_matches_the_public_key_advertised():
    seed = secagg.new_secret()
    pk = secagg.public_key(secagg.masking_key(seed))
    shares = secagg.share_secret(seed, 3, 4)
    assert secagg.public_key(secagg.masking_key(secagg.combine_secret(shares[1:]))) == pk
    assert secagg.public_key(secagg.masking_key(secagg.combine_secret(shares[:2]))) != pk   # below the threshold


def test_sealed_shares_open_only_with_their_round_group_and_pair():
    a, b = secagg.new_private_key(), secagg.new_private_key()
    k_ab = secagg.share_key(a, secagg.public_key(b))
    assert k_ab == secagg.share_key(b, secagg.public_key(a))   # both ends derive the same key
    blob = secagg.seal(k_ab, b"x" * 68, secagg.associated(3, 0, 1, 2))
    assert secagg.open_sealed(k_ab, blob, secagg.associated(3, 0, 1, 2)) == b"x" * 68
    for aad in (secagg.associated(2, 0, 1, 2), secagg.associated(3, 1, 1, 2), secagg.associated(3, 0, 2, 1)):
        with pytest.raises(ValueError, match="authentication"):
            secagg.open_sealed(k_ab, blob, aad)
    tampered = blob[:-1] + bytes([blob[-1] ^ 1])
    with pytest.raises(ValueError, match="authentication"):
        secagg.open_sealed(k_ab, tampered, secagg.associated(3, 0, 1, 2))


def test_pairwise_masks_cancel_and_the_sum_is_exact_mod_2_64():
    rng = np.random.default_rng(0)
    ids = [2, 5, 7, 11]
    sk = {c: secagg.new_private_key() for c in ids}
    pk = {c: secagg.public_key(sk[c]) for c in ids}
    levels = {c: rng.integers(0, 2**40, 9, dtype=np.uint64) for c in ids}
    seeds = {c: secagg.new_secret() for c in ids}
    total = np.zeros(9, dtype=np.uint64)
    for c in ids:
        pairs = {v: secagg.mask_seed(sk[c], pk[v], 4, 0, (c, v)) for v in ids if v != c}
        y = secagg.masked_input(levels[c], seeds[c], pairs, c)
        assert not np.array_equal(y, levels[c])
        total += y
    for c in ids:
        total -= secagg.self_mask(seeds[c], 9)
    assert np.array_equal(total, sum((levels[c] for c in ids), np.zeros(9, dtype=np.uint64)))


def test_the_prg_is_the_full_seed_keystream():
    s = secagg.new_private_key()
    a = secagg.prg(s, 1000)
    assert a.dtype == np.uint64 and np.array_equal(a, secagg.prg(s, 1000))
    assert np.array_equal(secagg.prg(s, 10), a[:10])
    other = bytearray(s)
    other[31] ^= 1   # the last byte matters (Flower 1.41's pseudo_rand_gen folds a seed to 32 bits)
    assert not np.array_equal(secagg.prg(bytes(other), 1000), a)


def test_quantiser_rounds_within_half_a_step_and_counts_clipping():
    q = secagg.Quantiser(2.0, 20)
    x = np.array([-2.5, -2.0, -0.3, 0.0, 1e-7, 1.99, 3.0])
    levels, clipped = q.encode(x)
    assert clipped == 2
    back = q.decode(levels, 1)
    assert np.all(np.abs(back - np.clip(x, -2, 2)) <= q.step / 2 + 1e-15)
    three = q.decode(levels + levels + levels, 3)
    assert np.all(np.abs(three - 3 * np.clip(x, -2, 2)) <= 3 * q.step / 2 + 1e-12)
    for bad in ({"clip": 0.0, "bits": 20}, {"clip": float("inf"), "bits": 20}, {"clip": 1.0, "bits": 60}):
        with pytest.raises(ValueError, match="secure_"):
            secagg.Quantiser(**bad)


def test_the_neighbour_graph_is_symmetric_and_sparse_when_asked():
    full = secagg.neighbour_graph(range(6), 0, (0,))
    assert all(len(v) == 5 for v in full.values())
    g = secagg.neighbour_graph(range(40), 6, (1, 2))
    assert all(len(v) == 6 for v in g.values())
    assert all(u in g[v] for u, near in g.items() for v in near)


# ---------------------------------------------------------------- the protocol against the plain mode
def _federation(n_clients=6, seed=0, n=60):
    rng = np.random.default_rng(seed)
    return Federation.from_arrays([blob_client(rng, n + 7 * k, shift=0.8 * (k % 2)) for k in range(n_clients)])


@pytest.mark.parametrize("method", ["fedavg", "fedprox", "ditto", "perfedavg", "ptopofl"])
def test_secure_mode_gives_the_plain_mode_results_to_quantisation_error(method):
    # pTopoFL on the healthcare scenario: two clusters of four clients, none below secure_min_group
    fed = make_scenario("healthcare", 0) if method == "ptopofl" else _federation()
    hp = {"n_clusters": 2} if method == "ptopofl" else {}
    plain = run_federation(fed, build_server(method, hp), rounds=4, seed=1)
    sec = run_federation(fed, build_server(method, {**hp, "secure_aggregation": True}), rounds=4, seed=1)
    assert not sec.failures
    diff = np.max(np.abs(sec.server_params - plain.server_params))
    assert 0 < diff < 1e-8   # quantisation only (a step is 1.2e-10; 4 rounds of training amplify it a little)
    for a, b in zip(plain.rounds, sec.rounds, strict=True):
        assert abs(a.auc - b.auc) < 1e-6
    if method == "ptopofl":
        for a, b in zip(plain.server_logs, sec.server_logs, strict=True):
            assert a["clusters"] == b["clusters"] and a["flagged"] == b["flagged"]
            assert a["trust"] == pytest.approx(b["trust"])
            assert "secure_merged" not in b and sorted(map(len, b["secure_groups"].values())) == [1, 1]
    for entry in sec.server_logs:   # every group summed has at least secure_min_group survivors
        for group in entry["secure"].values():
            assert "abandoned" not in group and group["clipped"] == 0
            assert group["reported_weight"] == pytest.approx(group["weight"], abs=1e-8)


class Recorder(InProcessPool):
    """An in-process pool that keeps everything the server received, and each client's trained model."""

    def __init__(self, *args):
        super().__init__(*args)
        self.received: list = []
        self.trained: dict[tuple[int, int], np.ndarray] = {}

    def fit(self, rnd, messages):
        updates, failures = super().fit(rnd, messages)
        self.received += updates
        self.trained.update({(rnd, u.client_id): u.params.copy() for u in updates})
        return updates, failures

    def secure(self, rnd, stage, requests):
        replies, failures = super().secure(rnd, stage, requests)
        self.received += replies
        if stage == "advertise":
            self.trained.update({(rnd, c): self.states[c]["secagg"]["params"].copy() for c in requests})
        return replies, failures


def _run(fed, method, hp, rounds=1, seed=0, pool_type=Recorder, wrap=None):
    algorithm = build_server(method, hp)
    model = algorithm.build_model(None, fed.task, fed.n_features, fed.n_classes)
    pool = pool_type(fed, algorithm, model, seed)
    history = run_rounds(wrap(pool) if wrap else pool, algorithm, model, rounds, seed)
    return history, pool


def _small_federation(n_clients=40, d=4, seed=3):
    rng = np.random.default_rng(seed)
    clients = []
    for _ in range(n_clients):
        X = rng.normal(0, 1.5, (5, d))
        y = np.array([1.0, 0.0, 1.0, 0.0, 1.0])
        clients.append((X[:3], y[:3], X[3:], y[3:]))
    return Federation.from_arrays(clients)


def _error(x_hat, rows):
    """Relative error of a reconstruction against the nearest of a client's training rows."""
    return min(np.linalg.norm(x_hat - r) / np.linalg.norm(r) for r in rows)


def test_inversion_recovers_each_example_in_the_clear_and_fails_on_everything_a_secure_server_receives():
    """One SGD step on one example per client, from the zero model: the plain server reads each update and the
    closed-form attack (iDLG's sign rule) recovers that training example exactly; the secure server
    receives metadata without a model, encrypted shares and masked vectors, and the same attack on
    every vector it holds (a masked input read as a model) is as far off as a guess."""
    fed = _small_federation()
    lr = 0.1
    hp = {"lr": lr, "batch_size": 1, "local_steps": 1, "l2": 0.0}
    truth = {c.client_id: c.X_train for c in fed.clients}
    plain, pool = _run(fed, "fedavg", hp)
    errors_plain = []
    for u in pool.received:
        x_hat, _ = invert_single_gradient(update_to_gradient(u.params, lr), np.zeros_like(u.params))
        errors_plain.append(_error(x_hat, truth[u.client_id]))
    assert max(errors_plain) < 1e-9
    sec, pool = _run(fed, "fedavg", {**hp, "secure_aggregation": True})
    assert np.max(np.abs(sec.server_params - plain.server_params)) < 1e-9   # the same aggregate
    # nothing the server received holds a model: stage 1's update is empty, the rest are bytes or masked vectors
    vectors = []
    for r in pool.received:
        if isinstance(r, secure.Advertised):
            assert r.update.params.size == 0
        elif isinstance(r, secure.MaskedInput):
            vectors.append((r.client_id, r.vector))
    assert len(vectors) == len(fed.clients)
    q = secagg.Quantiser(64.0, 40)
    errors = []
    for cid, y in vectors:   # the attacker's best reading of a masked input: dequantised, the trailer dropped
        guess = q.decode(y[:-2], 1)
        x_hat, _ = invert_single_gradient(update_to_gradient(guess, lr), np.zeros_like(guess))
        errors.append(_error(x_hat, truth[cid]))
    # chance level: the same attack on uniform random vectors of the masked inputs' range. The masks are
    # fresh random bytes, so this is a statistical claim: with 40 clients, a median below 0.5 (each error
    # is below 0.5 with probability 0.024 at chance) has probability below 1e-20
    rng = np.random.default_rng(0)
    chance = []
    for cid in truth:
        guess = rng.uniform(-64.0, 64.0, fed.n_features + 1)
        chance.append(_error(invert_single_gradient(update_to_gradient(guess, lr), np.zeros_like(guess))[0], truth[cid]))
    assert np.median(errors) > 0.5 and np.median(chance) > 0.5
    assert np.median(errors_plain) < 1e-9 * np.median(errors)


def test_ptopofl_server_receives_descriptors_and_masked_vectors_only():
    fed = _federation(6)
    hp = {"n_clusters": 2, "secure_aggregation": True, "secure_min_group": 2}
    history, pool = _run(fed, "ptopofl", hp, rounds=2)
    kinds = {type(r).__name__ for r in pool.received}
    assert kinds == {"Advertised", "SharedKeys", "MaskedInput", "Unmasked"}
    models = [m for m in pool.trained.values()]
    for r in pool.received:
        if isinstance(r, secure.Advertised):
            assert r.update.params.size == 0
        if isinstance(r, secure.MaskedInput):
            dq = secagg.Quantiser(64.0, 40).decode(r.vector[:-2], 1)
            assert min(np.linalg.norm(dq - m) / np.linalg.norm(m) for m in models) > 100   # noise, not a model


# ---------------------------------------------------------------- small groups
def test_small_clusters_are_merged_with_the_nearest_or_excluded():
    cents = {0: np.array([0.0, 0.0]), 1: np.array([5.0, 0.0]), 2: np.array([0.5, 0.0]), 3: np.array([9.0, 0.0])}
    groups, log = maths.small_groups({0: 4, 1: 5, 2: 1, 3: 3}, cents, 3, "merge")
    assert groups == {0: [0, 2], 1: [1], 3: [3]} and log == {"secure_merged": {0: [0, 2]}}
    groups, log = maths.small_groups({0: 4, 1: 5, 2: 1, 3: 1}, cents, 3, "merge")
    assert groups == {0: [0, 2], 1: [1, 3]}
    groups, log = maths.small_groups({0: 1, 1: 1}, cents, 3, "merge")
    assert groups == {0: [0, 1]}   # still too small: the protocol abandons it unrevealed
    groups, log = maths.small_groups({0: 4, 1: 5, 2: 1, 3: 2}, cents, 3, "exclude")
    assert groups == {0: [0], 1: [1]} and log == {"secure_excluded": [2, 3]}


@pytest.mark.parametrize("policy", ["merge", "exclude"])
def test_a_cluster_below_the_minimum_never_exposes_its_members(policy):
    fed = _federation(6)
    hp = {"n_clusters": 2, "secure_aggregation": True, "secure_min_group": 4, "secure_small_groups": policy}
    history, _ = _run(fed, "ptopofl", hp, rounds=3)
    for entry in history.server_logs[1:]:
        sizes = {}
        for j in entry["clusters"].values():
            sizes[j] = sizes.get(j, 0) + 1
        assert min(sizes.values()) < 4   # the premise: some cluster is too small on its own
        for info in entry["secure"].values():
            if "abandoned" not in info:
                assert len(info["survivors"]) >= 4
        key = "secure_merged" if policy == "merge" else "secure_excluded"
        assert key in entry


def test_a_group_below_the_minimum_is_abandoned_before_anything_is_revealed():
    fed = _federation(3)
    history, pool = _run(fed, "fedavg", {"secure_aggregation": True, "secure_min_group": 4}, rounds=2)
    assert all("abandoned" in e["secure"]["0"] for e in history.server_logs)
    assert not any(isinstance(r, (secure.SharedKeys, secure.MaskedInput, secure.Unmasked)) for r in pool.received)
    assert np.array_equal(history.server_params, np.zeros_like(history.server_params))   # never moved


# ---------------------------------------------------------------- dropouts
@pytest.mark.parametrize("stage,gone", [("share", [2]), ("mask", [1]), ("mask", [0, 3, 5]), ("unmask", [2]),
                                        ("unmask", [0, 4, 6])])
def test_dropouts_before_or_after_masking_leave_exactly_the_survivors_sum(stage, gone):
    """Clients vanish before sharing their keys (``share``), after sharing but before their masked input
    (``mask``: their pairwise masks are rebuilt from their shares and removed), or after their masked input
    (``unmask``: it is in the sum, and their self masks are rebuilt from the others' shares)."""
    fed = _federation(8)
    schedule = {1: {c: stage for c in gone}}
    history, pool = _run(fed, "fedavg", {"secure_aggregation": True, "secure_threshold": 0.5}, rounds=1,
                         wrap=lambda p: secure.Vanishing(p, schedule))
    entry = history.server_logs[0]["secure"]["0"]
    survivors = list(range(8)) if stage == "unmask" else sorted(set(range(8)) - set(gone))
    assert entry["survivors"] == survivors
    assert entry["dropped"] == (gone if stage == "mask" else [])
    assert entry["left_before_masking"] == (gone if stage == "share" else [])
    assert {f.client for f in history.failures} == set(gone)
    n = np.array([c.n_train for c in fed.clients], float)
    w = cap_shares(n, 1.0)
    w = w / w.max()
    expected = sum(w[c] * pool.trained[(1, c)] for c in survivors) / sum(w[c] for c in survivors)
    assert np.max(np.abs(history.server_params - expected)) <= len(survivors) * STEP   # to quantisation error


def test_sparse_neighbour_graph_with_dropouts_recovers_the_sum():
    fed = _federation(12)
    schedule = {1: {3: "unmask", 7: "mask"}}
    hp = {"secure_aggregation": True, "secure_neighbours": 4, "secure_threshold": 0.6}
    history, pool = _run(fed, "fedavg", hp, wrap=lambda p: secure.Vanishing(p, schedule))
    survivors = [c for c in range(12) if c != 7]   # 3 sent its masked input before it vanished
    n = np.array([c.n_train for c in fed.clients], float)
    w = n / n.max()
    expected = sum(w[c] * pool.trained[(1, c)] for c in survivors) / sum(w[c] for c in survivors)
    assert np.max(np.abs(history.server_params - expected)) <= 12 * STEP


def test_too_many_dropouts_abandon_the_group_and_keep_the_model():
    fed = _federation(5)
    schedule = {2: {0: "unmask", 1: "unmask", 2: "mask"}}
    history, _ = _run(fed, "fedavg", {"secure_aggregation": True}, rounds=2,
                      wrap=lambda p: secure.Vanishing(p, schedule))
    assert "abandoned" in history.server_logs[1]["secure"]["0"]
    one, _ = _run(fed, "fedavg", {"secure_aggregation": True}, rounds=1)
    assert np.array_equal(history.server_params, one.server_params)   # round 2 changed nothing


# ---------------------------------------------------------------- outsiders, replays, order
class Hostile(InProcessPool):
    """Adds a reply from a client that was not asked, replays the previous round's replies, or duplicates one."""

    def __init__(self, *args, mode):
        super().__init__(*args)
        self.mode, self.last = mode, {}

    def secure(self, rnd, stage, requests):
        replies, failures = super().secure(rnd, stage, requests)
        extra = []
        if self.mode == "outsider" and stage == "mask" and replies:
            extra.append(dataclasses.replace(replies[0], client_id=99))
        if self.mode == "replay" and stage in self.last and rnd > 1:
            old = {r.client_id: r for r in self.last[stage]}
            replies = [old.get(r.client_id, r) if r.client_id == 0 else r for r in replies]
        if self.mode == "duplicate" and stage == "mask":
            extra.append(replies[1])
        self.last[stage] = replies
        return replies + extra, failures


@pytest.mark.parametrize("mode,who,reason", [
    ("outsider", None, "which was not asked"),
    ("replay", 0, "replayed or misrouted"),
    ("duplicate", 1, "a second mask reply"),
])
def test_outsiders_replays_and_duplicates_are_refused_and_the_round_completes(mode, who, reason):
    fed = _federation(6)
    hp = {"secure_aggregation": True}
    history, _ = _run(fed, "fedavg", hp, rounds=2, pool_type=lambda *a: Hostile(*a, mode=mode))
    assert any(reason in f.reason and f.client == who for f in history.failures), history.failures
    clean, _ = _run(fed, "fedavg", hp, rounds=2)
    for entry in history.server_logs:
        assert "abandoned" not in entry["secure"]["0"]
    if mode == "outsider":   # the outsider is ignored: the same aggregate as without it
        assert np.max(np.abs(history.server_params - clean.server_params)) == 0.0


def _client(fed, hp, cid=0):
    from topofl.federation.pool import client_context

    algorithm = build_server("fedavg", hp)
    model = algorithm.build_model(None, fed.task, fed.n_features, fed.n_classes)
    algorithm.setup(model, fed.client_ids, np.random.default_rng(0))
    state: dict = {}
    data = fed.clients[cid]
    return algorithm, (lambda rnd: client_context(data, state, model, rnd, 0)), algorithm.message_for(cid)


def test_a_client_refuses_out_of_order_replayed_and_unsafe_requests():
    fed = _federation(4)
    algorithm, ctx, message = _client(fed, {"secure_aggregation": True, "secure_min_group": 3})
    step = secure.client_step
    with pytest.raises(ValueError, match="did not advertise"):
        step(algorithm, ctx(1), secure.MaskInput(1, {}))
    adv = step(algorithm, ctx(1), secure.Advertise(1, message))
    with pytest.raises(ValueError, match="out of order"):
        step(algorithm, ctx(1), secure.Unmask(1, (0, 1, 2), ()))
    private = {v: secagg.new_private_key() for v in (1, 2, 3)}
    others = {v: (secagg.public_key(private[v]), secagg.public_key(secagg.new_private_key())) for v in (1, 2, 3)}
    members = (0, 1, 2, 3)
    with pytest.raises(ValueError, match="own public keys"):
        step(algorithm, ctx(1), secure.ShareKeys(1, 0, 1.0, others, members))
    keys = {0: (adv.c_pk, adv.s_pk), **others}
    with pytest.raises(ValueError, match="weight"):
        step(algorithm, ctx(1), secure.ShareKeys(1, 0, 1.5, keys, members))
    with pytest.raises(ValueError, match="cannot hide its members"):   # a group below secure_min_group
        step(algorithm, ctx(1), secure.ShareKeys(1, 0, 0.5, {k: keys[k] for k in (0, 1)}, (0, 1)))
    with pytest.raises(ValueError, match="not this client's neighbours"):   # the graph says everyone; keys say less
        step(algorithm, ctx(1), secure.ShareKeys(1, 0, 0.5, {k: keys[k] for k in (0, 1, 2)}, members))
    shared = step(algorithm, ctx(1), secure.ShareKeys(1, 0, 0.5, keys, members))
    assert set(shared.sealed) == {1, 2, 3}

    def sealed(src, rnd, dst=0):   # a share pair that client src really sealed for dst in round rnd
        key = secagg.share_key(private[src], adv.c_pk)
        return secagg.seal(key, b"\1" * (2 * secagg.SHARE_BYTES), secagg.associated(rnd, 0, src, dst))

    with pytest.raises(ValueError, match="outside this client's share set"):
        step(algorithm, ctx(1), secure.MaskInput(1, {1: sealed(1, 1), 7: sealed(2, 1)}))
    # replayed from round 0, or sealed for another recipient: authentication fails and the client leaves
    for bad in (sealed(1, 0), sealed(1, 1, dst=2)):
        with pytest.raises(ValueError, match="authentication"):
            step(algorithm, ctx(1), secure.MaskInput(1, {1: bad, 2: sealed(2, 1)}))
    masked = step(algorithm, ctx(1), secure.MaskInput(1, {1: sealed(1, 1), 2: sealed(2, 1)}))
    assert masked.vector.dtype == np.uint64 and masked.vector.size == fed.n_features + 1 + secagg.TRAILER


def test_a_client_reveals_once_and_never_for_a_sum_below_the_minimum():
    fed = _federation(4)
    hp = {"secure_aggregation": True, "secure_min_group": 3}
    history, pool = _run(fed, "fedavg", hp, rounds=1)
    algorithm, cid = pool.algorithm, 0
    from topofl.federation.pool import client_context

    ctx = client_context(fed.clients[cid], pool.states[cid], pool.model, 1, 0)
    with pytest.raises(ValueError, match="out of order"):   # a replayed unmask request: already answered
        secure.client_step(algorithm, ctx, secure.Unmask(1, (0, 1, 2, 3), ()))
    # a fresh round in which the server asks to reveal a sum of two inputs
    pool.states[cid]["secagg"].update(stage="masked", threshold=2, peers=(1, 2, 3), held={}, members=(0, 1, 2, 3),
                                      graph=None)
    with pytest.raises(ValueError, match="refusing to reveal a sum of 2"):
        secure.client_step(algorithm, ctx, secure.Unmask(1, (0, 1), (2, 3)))
    # survivors that are no longer connected in a sparse graph: each piece's sum would be revealed
    ring = {c: ((c - 1) % 6, (c + 1) % 6) for c in range(6)}
    pool.states[cid]["secagg"].update(stage="masked", threshold=2, peers=(1, 5), held={}, members=tuple(range(6)),
                                      graph=ring)
    with pytest.raises(ValueError, match="not one connected piece"):
        secure.client_step(algorithm, ctx, secure.Unmask(1, (0, 1, 3, 4), (2, 5)))


# ---------------------------------------------------------------- configuration
@pytest.mark.parametrize("method,hp,match", [
    ("fedavg", {"aggregator": "median"}, "aggregator='median' cannot be combined with secure_aggregation"),
    ("fedavg", {"dp_noise_multiplier": 1.0}, "dp_noise_multiplier"),
    ("ptopofl", {"intra_aggregator": "krum"}, "intra_aggregator='krum'"),
    ("scaffold", {}, "implemented for fedavg"),
    ("ifca", {}, "implemented for fedavg"),
    ("pfedme", {}, "implemented for fedavg"),
    ("fedavg", {"secure_bits": 60}, "secure_bits"),
    ("fedavg", {"secure_min_group": 1}, "secure_min_group"),
    ("ptopofl", {"secure_small_groups": "keep"}, "secure_small_groups"),
])
def test_secure_aggregation_refuses_what_it_cannot_hide(method, hp, match):
    with pytest.raises(ValueError, match=match):
        build_server(method, {"secure_aggregation": True, **hp})


# ---------------------------------------------------------------- a PyTorch model
@pytest.mark.deep
@pytest.mark.parametrize("method", ["fedavg", "ptopofl"])
def test_secure_mode_with_a_float32_cnn_gives_the_plain_results(method):
    """cnn-small (float32): the masked inputs carry the float32 model's values in 40-bit fixed point, the sum
    is decoded in float64 and sent back rounded to float32, as in the plain mode."""
    pytest.importorskip("torch")
    from topofl.data.loaders.mnist10k import mnist_federation

    fed = mnist_federation(6, n_samples=900, seed=0, partition_kind="iid")
    hp = {"lr": 0.05, "batch_size": 32, "local_epochs": 1, **({"n_clusters": 2, "secure_min_group": 2}
                                                             if method == "ptopofl" else {})}
    plain = run_federation(fed, build_server(method, hp), rounds=2, seed=0, model="cnn-small")
    sec = run_federation(fed, build_server(method, {**hp, "secure_aggregation": True}), rounds=2, seed=0,
                         model="cnn-small")
    assert not sec.failures
    assert np.max(np.abs(sec.server_params - plain.server_params)) < 1e-5
    for a, b in zip(plain.rounds, sec.rounds, strict=True):
        assert abs(a.accuracy - b.accuracy) <= 1 / 150 + 1e-12   # at most one test image of 150 changes its class
    assert all(g["clipped"] == 0 for e in sec.server_logs for g in e["secure"].values())


# ---------------------------------------------------------------- hostile clients (review of issue 23)
class Tamper(InProcessPool):
    """``hook(pool, rnd, stage, requests, replies) -> replies`` edits what reaches the server."""

    def __init__(self, *args, hook):
        super().__init__(*args)
        self.hook = hook

    def secure(self, rnd, stage, requests):
        replies, failures = super().secure(rnd, stage, requests)
        return self.hook(self, rnd, stage, requests, replies), failures


def _tampered(fed, hook, hp=None, rounds=1):
    return _run(fed, "fedavg", {"secure_aggregation": True, **(hp or {})}, rounds=rounds,
                pool_type=lambda *a: Tamper(*a, hook=hook))


def _replace(replies, cid, **changes):
    return [dataclasses.replace(r, **changes) if r.client_id == cid else r for r in replies]


def test_survivors_split_into_pieces_of_a_sparse_graph_are_never_unmasked():
    """Two dropouts cut a ring (2 neighbours each) into two pieces: unmasking would give each piece's sum
    (as few as 2 inputs), so the group is abandoned before stage 4."""
    fed = _federation(10)
    ring = _ring(10)
    cut = {ring[0]: "mask", ring[3]: "mask"}   # leaves pieces of 2 and 6
    hp = {"secure_aggregation": True, "secure_neighbours": 2}
    history, pool = _run(fed, "fedavg", hp, wrap=lambda p: secure.Vanishing(p, {1: cut}))
    entry = history.server_logs[0]["secure"]["0"]
    assert "split into pieces" in entry["abandoned"]
    assert not any(isinstance(r, secure.Unmasked) for r in pool.received)
    assert np.array_equal(history.server_params, np.zeros_like(history.server_params))


def test_a_low_order_public_key_is_refused_at_advertise_and_the_round_completes():
    def hook(pool, rnd, stage, requests, replies):
        return _replace(replies, 2, c_pk=bytes(32)) if stage == "advertise" else replies

    history, _ = _tampered(_federation(6), hook)
    assert any(f.client == 2 and "non-zero secret" in f.reason for f in history.failures)
    entry = history.server_logs[0]["secure"]["0"]
    assert "abandoned" not in entry and entry["survivors"] == [0, 1, 3, 4, 5]


def test_wrong_shamir_shares_from_a_hostile_client_do_not_abandon_the_group():
    """Client 1 reveals garbage shares at unmask; the others' shares still rebuild every secret (a share
    that is not the one its dealer committed to is dropped), and the sum is exact."""
    def hook(pool, rnd, stage, requests, replies):
        if stage == "unmask":
            return [dataclasses.replace(r, seeds={v: s[:2] + bytes(16) for v, s in r.seeds.items()})
                    if r.client_id == 1 else r for r in replies]
        return replies

    fed = _federation(6)
    history, pool = _tampered(fed, hook)
    assert "abandoned" not in history.server_logs[0]["secure"]["0"]
    clean, _ = _run(fed, "fedavg", {"secure_aggregation": True})
    assert np.array_equal(history.server_params, clean.server_params)


def test_a_non_finite_model_makes_its_client_leave_instead_of_corrupting_the_sum():
    def hook(pool, rnd, stage, requests, replies):
        if stage == "share":
            pool.states[3]["secagg"]["params"] = np.full_like(pool.states[3]["secagg"]["params"], np.nan)
        return replies

    history, _ = _tampered(_federation(6), hook)
    assert any(f.client == 3 and "non-finite" in f.reason for f in history.failures)
    entry = history.server_logs[0]["secure"]["0"]
    assert entry["dropped"] == [3] and "abandoned" not in entry
    assert np.all(np.abs(history.server_params) < 10)


def test_an_inconsistent_trailer_abandons_the_group_and_keeps_the_model():
    """A hostile client adds 2^62 levels to its weight: the decoded weights no longer sum to the server's."""
    def hook(pool, rnd, stage, requests, replies):
        if stage == "mask":
            out = []
            for r in replies:
                if r.client_id == 0:
                    v = r.vector.copy()
                    v[-2:-1] += np.array([2**62], dtype=np.uint64)   # mod 2^64, as an array (no scalar warning)
                    r = dataclasses.replace(r, vector=v)
                out.append(r)
            return out
        return replies

    history, _ = _tampered(_federation(6), hook, rounds=2)
    assert all("inconsistent sum" in e["secure"]["0"]["abandoned"] for e in history.server_logs)
    assert np.array_equal(history.server_params, np.zeros_like(history.server_params))


@pytest.mark.parametrize("stage,change", [
    ("share", {"round": np.array([1, 1])}),
    ("share", {"sealed": "not a mapping"}),
    ("mask", {"round": 1.0}),
    ("unmask", {"seeds": {object(): b"x"}}),
])
def test_malformed_replies_are_refused_without_crashing_the_server(stage, change):
    def hook(pool, rnd, s, requests, replies):
        return _replace(replies, 1, **change) if s == stage else replies

    history, _ = _tampered(_federation(6), hook)
    entry = history.server_logs[0]["secure"]["0"]
    assert "abandoned" not in entry
    assert stage == "unmask" or any(f.client == 1 for f in history.failures)


def test_a_reply_sent_three_times_is_refused_every_time():
    def hook(pool, rnd, stage, requests, replies):
        if stage == "mask":
            extra = [r for r in replies if r.client_id == 1]
            return replies + extra + extra
        return replies

    history, _ = _tampered(_federation(6), hook)
    entry = history.server_logs[0]["secure"]["0"]
    assert 1 not in entry["survivors"] and entry["dropped"] == [1]


def _ring(n, k=2):
    graph = secagg.neighbour_graph(range(n), k, (0, 1, 0, 0x5EC))   # the graph the server draws (seed 0, round 1)
    ring = [0]
    while len(ring) < n:
        ring.append(next(v for v in graph[ring[-1]] if v not in ring))
    return ring


@pytest.mark.parametrize("forge", ["index 0", "another holder's index", "garbage"])
def test_forged_or_relabelled_shares_are_dropped_by_index_and_digest(forge):
    """Client 1 reveals forged shares at unmask: index 0, the index of an honest holder, or garbage; each
    is dropped (wrong index, or not the share its dealer committed to), and the sum is exact, also at a
    threshold that leaves no spare share."""
    def hook(pool, rnd, stage, requests, replies):
        if stage != "unmask":
            return replies
        def bad(s):
            return {"index 0": b"\0\0" + s[2:], "another holder's index": b"\0\x03" + s[2:],
                    "garbage": s[:2] + bytes(16)}[forge]
        return [dataclasses.replace(r, seeds={v: bad(s) for v, s in r.seeds.items()}) if r.client_id == 1 else r
                for r in replies]

    fed = _federation(6)
    for threshold in (0.6, 0.8):
        history, _ = _tampered(fed, hook, {"secure_threshold": threshold})
        assert "abandoned" not in history.server_logs[0]["secure"]["0"]
        clean, _ = _run(fed, "fedavg", {"secure_aggregation": True, "secure_threshold": threshold})
        assert np.array_equal(history.server_params, clean.server_params)


def test_a_disguised_copy_of_another_clients_key_is_refused():
    """X25519 ignores a key's top bit: a copy of client 1's masking key with it set is the same key in disguise."""
    def hook(pool, rnd, stage, requests, replies):
        if stage != "advertise":
            return replies
        victim = next(r for r in replies if r.client_id == 1).s_pk
        return _replace(replies, 4, s_pk=victim[:31] + bytes([victim[31] | 0x80]))

    history, _ = _tampered(_federation(6), hook)
    assert any(f.client == 4 and "X25519" in f.reason for f in history.failures)
    assert history.server_logs[0]["secure"]["0"]["survivors"] == [0, 1, 2, 3, 5]


def test_a_secret_without_enough_surviving_holders_stops_the_group_before_anything_is_revealed():
    fed = _federation(10)
    ring = _ring(10)
    schedule = {1: {ring[0]: "share", ring[1]: "mask"}}   # ring[1]'s key is held by ring[2] alone among survivors
    hp = {"secure_aggregation": True, "secure_neighbours": 2}
    history, pool = _run(fed, "fedavg", hp, wrap=lambda p: secure.Vanishing(p, schedule))
    entry = history.server_logs[0]["secure"]["0"]
    assert "surviving holder" in entry["abandoned"] and "nothing revealed" in entry["abandoned"]
    assert not any(isinstance(r, secure.Unmasked) for r in pool.received)


def test_an_advertised_update_naming_another_client_is_refused():
    def hook(pool, rnd, stage, requests, replies):
        if stage != "advertise":
            return replies
        return [dataclasses.replace(r, update=dataclasses.replace(r.update, client_id=2)) if r.client_id == 1 else r
                for r in replies]

    history, _ = _tampered(_federation(6), hook)
    assert [(f.client, "names another client" in f.reason) for f in history.failures] == [(1, True)]
    assert history.server_logs[0]["secure"]["0"]["survivors"] == [0, 2, 3, 4, 5]
