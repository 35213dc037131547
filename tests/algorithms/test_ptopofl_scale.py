"""pTopoFL's server at many clients (issue 25): the K × K work without the K × K matrix, and not redone while
the descriptors stay the same — with the values of before.

The reference code of before the change is kept here verbatim (the full distance matrix, scikit-learn's
clustering, the trust computed every round), and the new code is checked against it: bit for bit where the
arithmetic is the same, to rounding where a block of rows is multiplied on its own.
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import topofl
from bit_identity import fingerprint
from topofl.algorithms.ptopofl import algorithm as ptopofl_algorithm
from topofl.algorithms.ptopofl import maths
from topofl.tda import distances
from topofl.tda.distances import (
    condensed_descriptor_distances,
    condensed_euclidean,
    euclidean_row_blocks,
    normalise_rows,
    pairwise_descriptor_distances,
    pairwise_euclidean,
)


# ---- the code of before, verbatim -------------------------------------------------------------
def old_cluster_clients(D: np.ndarray, n_clusters: int) -> np.ndarray:
    K = D.shape[0]
    if n_clusters == 1:
        return np.zeros(K, dtype=int)
    if n_clusters == K:
        return np.arange(K)
    from sklearn.cluster import AgglomerativeClustering

    raw = AgglomerativeClustering(n_clusters=n_clusters, metric="precomputed", linkage="average").fit_predict(D)
    _, first = np.unique(raw, return_index=True)
    order = {lab: i for i, lab in enumerate(raw[np.sort(first)])}
    return np.array([order[lab] for lab in raw])


def old_pairwise_euclidean(V: np.ndarray) -> np.ndarray:
    V = np.asarray(V, dtype=np.float64)
    sq = (V**2).sum(axis=1)
    D2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * V @ V.T, 0.0)
    np.fill_diagonal(D2, 0.0)
    return np.sqrt(D2)


def old_anomaly_scores(phi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    K = phi.shape[0]
    if K < 2:
        return np.zeros(K), np.zeros(K)
    delta = old_pairwise_euclidean(phi).sum(axis=1) / (K - 1)
    sd = delta.std()
    z = (delta - delta.mean()) / sd if sd > 1e-12 * max(1.0, abs(delta.mean())) else np.zeros(K)
    return delta, z


def old_trust(self):  # PTopoFL._trust of before: the z-scores from every descriptor, every round
    ids = sorted(self.phi)
    Phi = np.vstack([self.phi[i] for i in ids])
    if self.config.trust_space == "normalised":
        Phi = normalise_rows(Phi)
    _, z = old_anomaly_scores(Phi)
    t, flagged = maths.trust_from_z(z, self.config.tau, self.config.trust_gate)
    if not self.config.use_trust:
        t = np.ones_like(t)
    return (
        dict(zip(ids, t.tolist(), strict=True)),
        dict(zip(ids, z.tolist(), strict=True)),
        [i for i, f in zip(ids, flagged, strict=True) if f],
    )


def old_cluster_centroids(phi, labels):
    out: dict[int, list[np.ndarray]] = {}
    for cid, lab in labels.items():
        if cid in phi:
            out.setdefault(lab, []).append(normalise_rows(phi[cid])[0])
    return {j: np.mean(v, axis=0) for j, v in out.items()}


def old_assign_in_turn(phi, labels, new):  # the loop of _cluster_round over PTopoFL._assign_nearest, before
    for cid in new:
        others = {k: v for k, v in labels.items() if k != cid}
        cents = old_cluster_centroids(phi, others) or old_cluster_centroids(phi, labels)
        labels[cid] = maths.nearest_cluster(normalise_rows(phi[cid])[0], cents)


def old_params_for(self, cid):
    if cid in self.labels:
        return self.cluster_models[self.labels[cid]]
    if self.cluster_models:
        sizes = {}
        for lab in self.labels.values():
            sizes[lab] = sizes.get(lab, 0) + 1
        K = sum(sizes.values())
        return sum(sizes[j] / K * self.cluster_raw[j] for j in self.cluster_raw)
    return self.init_params


def old_dp_aggregate(self, members, base, size, robust):  # PTopoFL._dp_aggregate and its DP-FedAvg, before
    from topofl.privacy.dp import l2_norm

    c = self.config
    D = (np.vstack([np.asarray(u.params, dtype=np.float64) - self.sent[u.client_id] for u in members])
         if members else np.zeros((0, base.size)))
    norms = tuple(l2_norm(row) for row in D)
    total, clipped = np.zeros(D.shape[1]), []
    for k in range(D.shape[0]):
        row = D[k]
        if norms[k] > c.dp_clip:
            row = row * (c.dp_clip / norms[k])
            clipped.append(k)
        total += 1.0 * row
    noise_std = c.dp_noise_multiplier * c.dp_clip
    if noise_std > 0:
        total += self._dp_rng.normal(0.0, noise_std, size=D.shape[1])
    robust.setdefault("dp_clipped", []).extend(int(members[i].client_id) for i in clipped)
    return base + total / float(size)


def descriptors(rng: np.random.Generator, K: int, ties: bool) -> np.ndarray:
    """K descriptor-like rows; with ``ties``, rounded values and repeated rows (distances tie exactly)."""
    phi = np.abs(rng.normal(size=(K, int(rng.integers(2, 9)))))
    if ties:
        phi = np.round(phi, 1)
        phi[rng.integers(0, K, K // 3)] = phi[0]
    return phi


# ---- distances a block of rows at a time --------------------------------------------------------
@pytest.mark.parametrize("K", [1, 2, 7, 60])
def test_one_block_is_the_full_matrix_bit_for_bit(K):
    V = np.random.default_rng(K).normal(size=(K, 48))
    (start, block), = list(euclidean_row_blocks(V))
    assert start == 0
    np.testing.assert_array_equal(block, old_pairwise_euclidean(V))
    np.testing.assert_array_equal(pairwise_euclidean(V), old_pairwise_euclidean(V))
    np.testing.assert_array_equal(condensed_euclidean(V), old_pairwise_euclidean(V)[np.triu_indices(K, 1)])


@pytest.mark.parametrize("max_numbers", [1, 37, 100, 1000])
def test_blocks_of_rows_are_the_full_matrix_to_rounding(max_numbers):
    V = np.random.default_rng(3).normal(size=(45, 48))
    D = old_pairwise_euclidean(V)
    blocks = list(euclidean_row_blocks(V, max_numbers))
    assert len(blocks) == -(-45 // max(1, max_numbers // 45))  # ceil(K / rows per block)
    rows = np.vstack([b for _, b in blocks])
    assert [s for s, _ in blocks] == sorted({s for s, _ in blocks})
    np.testing.assert_allclose(rows, D, rtol=1e-12, atol=1e-12)
    assert np.all(np.diag(rows) == 0.0)
    np.testing.assert_allclose(condensed_euclidean(V, max_numbers), D[np.triu_indices(45, 1)], rtol=1e-12,
                               atol=1e-12)


def test_condensed_descriptor_distances_are_the_matrix_upper_triangle():
    phi = np.abs(np.random.default_rng(4).normal(size=(30, 48)))
    np.testing.assert_array_equal(condensed_descriptor_distances(phi),
                                  old_pairwise_euclidean(normalise_rows(phi))[np.triu_indices(30, 1)])


def test_anomaly_scores_are_those_of_before_bit_for_bit_in_one_block_and_to_rounding_in_many(monkeypatch):
    rng = np.random.default_rng(5)
    for K in (1, 2, 3, 17, 80):
        phi = rng.normal(size=(K, 48))
        for new, old in zip(maths.anomaly_scores(phi), old_anomaly_scores(phi), strict=True):
            np.testing.assert_array_equal(new, old)
    phi = rng.normal(size=(80, 48))
    monkeypatch.setattr(distances, "EUCLIDEAN_BLOCK", 200)  # two rows a block
    monkeypatch.setattr(maths, "euclidean_row_blocks",
                        lambda V: distances.euclidean_row_blocks(V, distances.EUCLIDEAN_BLOCK))
    for new, old in zip(maths.anomaly_scores(phi), old_anomaly_scores(phi), strict=True):
        np.testing.assert_allclose(new, old, rtol=1e-11, atol=1e-11)


# ---- clustering -------------------------------------------------------------------------------
def test_clusters_are_scikit_learns_of_before_ties_included():
    rng = np.random.default_rng(6)
    checked = 0
    for trial in range(300):
        K = int(rng.integers(2, 90))
        D = pairwise_descriptor_distances(descriptors(rng, K, ties=trial % 2 == 0))
        for m in sorted({1, 2, 3, 4, int(rng.integers(1, K + 1))}):
            if m <= K:
                np.testing.assert_array_equal(maths.cluster_clients(D, m), old_cluster_clients(D, m))
                checked += 1
    assert checked > 1000


def test_fastcluster_above_the_limit_gives_the_same_clusters_without_ties(monkeypatch):
    """Above :data:`SCIPY_LINKAGE_MAX_CLIENTS` fastcluster runs in place: the same average linkage (exact ties
    aside, which the two libraries may break differently), and the condensed input is consumed.
    """
    monkeypatch.setattr(maths, "SCIPY_LINKAGE_MAX_CLIENTS", 0)
    rng = np.random.default_rng(7)
    for _ in range(150):
        K = int(rng.integers(3, 90))
        phi = descriptors(rng, K, ties=False)
        D = pairwise_descriptor_distances(phi)
        y = condensed_descriptor_distances(phi)
        for m in (2, 3, 4):
            if m <= K:
                np.testing.assert_array_equal(maths.cluster_condensed(y.copy(), K, m), old_cluster_clients(D, m))


def test_fastcluster_runs_in_place_and_falls_back_to_its_copying_linkage(monkeypatch):
    monkeypatch.setattr(maths, "SCIPY_LINKAGE_MAX_CLIENTS", 0)
    phi = descriptors(np.random.default_rng(8), 40, ties=False)
    want = old_cluster_clients(pairwise_descriptor_distances(phi), 3)
    y = condensed_descriptor_distances(phi)
    before = y.copy()
    np.testing.assert_array_equal(maths.cluster_condensed(y, 40, 3), want)
    assert not np.array_equal(y, before), "the linkage worked on a copy (400 MB more at 10,000 clients)"
    monkeypatch.setattr(maths, "_fastcluster_routine", lambda: None)
    y = before.copy()
    np.testing.assert_array_equal(maths.cluster_condensed(y, 40, 3), want)


def test_cluster_condensed_refuses_bad_input():
    with pytest.raises(ValueError, match="n_clusters must be in"):
        maths.cluster_condensed(np.zeros(3), 3, 4)
    with pytest.raises(ValueError, match="condensed, of shape"):
        maths.cluster_condensed(np.zeros(4), 3, 2)


# ---- the trust of §3.4 cached while the descriptors stay the same -----------------------------
def _counting(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = maths.anomaly_scores

    def counted(phi):
        calls.append(phi.shape[0])
        return real(phi)

    monkeypatch.setattr(maths, "anomaly_scores", counted)
    return calls


@pytest.mark.parametrize("hps", [{}, {"descriptor_every": 2, "drift_threshold": 0.25}, {"trust_space": "normalised"},
                                 {"client_fraction": 0.5}, {"client_fraction": 0.3, "n_clusters": 3},
                                 {"recluster_every": 2}, {"dp_noise_multiplier": 0.5, "dp_clip": 1.0},
                                 {"dp_noise_multiplier": 0.1, "dp_clip": 0.05, "client_fraction": 0.5}])
def test_runs_are_those_of_before_bit_for_bit(monkeypatch, hps):
    fed = topofl.make_scenario("healthcare", 0, n_clients=12)
    kwargs = {"rounds": 6, "seed": 0, "threads": 1, **hps}
    new = fingerprint(topofl.simulate(fed, "ptopofl", **kwargs))
    monkeypatch.setattr(ptopofl_algorithm.PTopoFL, "_trust", old_trust)
    monkeypatch.setattr(ptopofl_algorithm.PTopoFL, "_params_for", old_params_for)
    monkeypatch.setattr(maths, "assign_in_turn", old_assign_in_turn)
    monkeypatch.setattr(maths, "cluster_centroids", old_cluster_centroids)
    monkeypatch.setattr(ptopofl_algorithm.PTopoFL, "_dp_aggregate", old_dp_aggregate)
    monkeypatch.setattr(maths, "cluster_condensed",
                        lambda y, K, n: old_cluster_clients(distances_from_condensed(y, K), n))
    assert fingerprint(topofl.simulate(fed, "ptopofl", **kwargs)) == new


def distances_from_condensed(y: np.ndarray, K: int) -> np.ndarray:
    from scipy.spatial.distance import squareform

    return squareform(y, checks=False) if K > 1 else np.zeros((1, 1))


def test_trust_is_computed_again_only_when_a_descriptor_changes(monkeypatch):
    fed = topofl.make_scenario("healthcare", 0, n_clients=8)
    calls = _counting(monkeypatch)
    topofl.simulate(fed, "ptopofl", rounds=5, seed=0, threads=1)
    assert calls == [8], "descriptors are sent once (static data): one computation for five rounds"
    calls.clear()
    topofl.simulate(fed, "ptopofl", rounds=5, seed=0, threads=1, descriptor_every=2, drift_threshold=0.25)
    assert calls == [8, 8, 8], "fresh descriptors in rounds 1, 3 and 5"


def test_a_checkpointed_server_of_before_resumes_with_an_empty_cache():
    fed = topofl.make_scenario("healthcare", 0, n_clients=6)

    from topofl.methods import build_server
    from topofl.models.registry import build_model

    server = build_server("ptopofl", {})
    server.setup(build_model(task=fed.task, n_features=fed.n_features + 4), list(range(6)),
                 np.random.default_rng(0))
    from topofl.federation.messages import ClientUpdate

    rng = np.random.default_rng(2)
    for rnd in (1, 2):  # two rounds, then the server is checkpointed as an earlier release pickled it
        msgs = server.configure_fit(rnd, list(range(6)))
        server.aggregate_fit(rnd, [ClientUpdate(i, m.params + rng.normal(size=m.params.size), 30,
                                                descriptor=np.abs(rng.normal(size=48)) if rnd == 1 else None)
                                   for i, m in msgs.items()])
    state = dict(server.__dict__)
    for name in ("phi_version", "_anomaly", "labels_version", "_sizes_memo", "_consensus_memo"):
        del state[name]
    old = pickle.loads(pickle.dumps(server))
    old.__dict__.clear()
    old.__setstate__(pickle.loads(pickle.dumps(state)))
    assert old.phi_version == 0 and old._anomaly is None and old._consensus_memo is None
    msgs = old.configure_fit(3, list(range(6)))  # and it runs on, with the trust of before
    log = old.aggregate_fit(3, [ClientUpdate(i, m.params, 30) for i, m in msgs.items()])
    assert log["trust"] == server.trust and set(log["clusters"]) == set(range(6))


# ---- no per-cluster stack of the replies ---------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_cluster_mean_above_the_stacking_limit_never_stacks_the_replies(monkeypatch, dtype):
    """pTopoFL's Eq. 6 mean is FedAvg's: above the limit a block at a time (float64 replies included, which
    were stacked at any size before), so a cluster of deep-model replies is never copied into one matrix.
    """
    import tracemalloc

    from topofl.algorithms import base
    from topofl.federation.messages import ClientUpdate

    rng = np.random.default_rng(9)
    K, d = 20, 100_000
    members = [ClientUpdate(i, rng.normal(size=d).astype(dtype), 10) for i in range(K)]
    w = rng.random(K)
    w /= w.sum()
    server = ptopofl_algorithm.PTopoFL(ptopofl_algorithm.PTopoFLConfig())
    monkeypatch.setattr(base, "_STACK_LIMIT", K * d - 1)
    tracemalloc.start()
    try:
        got = server._aggregate(members, w, {}, "0", members)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < K * d * 8 / 4, f"{peak} bytes held: a stack of the cluster's replies is {K * d * 8}"
    one_by_one = w[0] * members[0].params.astype(np.float64)
    for s, u in zip(w[1:], members[1:], strict=True):
        one_by_one += s * u.params.astype(np.float64)
    np.testing.assert_array_equal(got, one_by_one)


def test_new_clients_join_clusters_in_turn_as_before():
    rng = np.random.default_rng(10)
    for trial in range(200):
        K = int(rng.integers(3, 60))
        phi = dict(enumerate(descriptors(rng, K, ties=trial % 2 == 0)))
        first = sorted(rng.choice(K, size=int(rng.integers(1, K)), replace=False).tolist())
        labels = {cid: int(rng.integers(0, 3)) for cid in first}
        new = [cid for cid in phi if cid not in labels]
        want = dict(labels)
        old_assign_in_turn(phi, want, new)
        maths.assign_in_turn(phi, labels, new)
        assert labels == want and list(labels) == list(want)
        got, ref = maths.cluster_centroids(phi, labels), old_cluster_centroids(phi, labels)
        assert list(got) == list(ref) and all(np.array_equal(got[j], ref[j]) for j in ref)


def test_unassigned_clients_share_one_consensus_until_the_clusters_change():
    fed = topofl.make_scenario("healthcare", 0, n_clients=12)
    from topofl.methods import build_server
    from topofl.models.registry import build_model

    server = build_server("ptopofl", {})
    server.setup(build_model(task=fed.task, n_features=fed.n_features + 4), list(range(12)), np.random.default_rng(0))
    rng = np.random.default_rng(1)
    server.labels = {0: 0, 1: 1, 2: 1}
    server.labels_version += 1
    server.cluster_raw = {0: rng.normal(size=25), 1: rng.normal(size=25)}
    server.cluster_models = dict(server.cluster_raw)
    a, b = server.message_for(7).params, server.message_for(8).params
    assert a is b
    np.testing.assert_array_equal(a, old_params_for(server, 7))
    server.cluster_raw = {0: server.cluster_raw[0], 1: rng.normal(size=25)}  # a new aggregate of cluster 1
    c = server.message_for(7).params
    assert c is not a
    np.testing.assert_array_equal(c, old_params_for(server, 7))
    server.labels[2] = 0  # a re-assignment (as _track_drift does it)
    server.labels_version += 1
    np.testing.assert_array_equal(server.message_for(7).params, old_params_for(server, 7))
    assert not np.array_equal(server.message_for(7).params, c)


def old_reassign(phi, labels, drifted):  # the loop of PTopoFL._track_drift over _assign_nearest, before
    moved = []
    for cid in drifted:
        others = {k: v for k, v in labels.items() if k != cid}
        cents = old_cluster_centroids(phi, others) or old_cluster_centroids(phi, labels)
        new = maths.nearest_cluster(normalise_rows(phi[cid])[0], cents)
        if new != labels[cid]:
            labels[cid] = new
            moved.append(cid)
    return moved


def test_drifted_clients_move_as_before_from_running_sums():
    rng = np.random.default_rng(11)
    moves = 0
    for _ in range(300):
        K = int(rng.integers(2, 40))
        phi = dict(enumerate(descriptors(rng, K, ties=False)))
        labels = {cid: int(rng.integers(0, 3)) for cid in phi}
        drifted = sorted(rng.choice(K, size=int(rng.integers(1, K + 1)), replace=False).tolist())
        want = dict(labels)
        want_moved = old_reassign(phi, want, drifted)
        assert maths.reassign(phi, labels, drifted) == want_moved and labels == want
        moves += len(want_moved)
    assert moves > 100  # clients did move, clusters emptied and refilled


def test_a_cluster_emptied_by_drift_weighs_nothing_in_the_consensus():
    """Review of issue 25 (a KeyError since before): a cluster whose only member drifted away keeps its model
    in cluster_raw with no member; the consensus a newcomer gets (Eq. 7) gives it weight 0, as the blend does."""
    from topofl.methods import build_server
    from topofl.models.registry import build_model

    fed = topofl.make_scenario("healthcare", 0, n_clients=12)
    server = build_server("ptopofl", {})
    server.setup(build_model(task=fed.task, n_features=fed.n_features + 4), list(range(12)), np.random.default_rng(0))
    rng = np.random.default_rng(1)
    server.labels = {0: 1, 1: 1, 2: 1}  # cluster 0 lost its only member
    server.labels_version += 1
    server.cluster_raw = {0: rng.normal(size=25), 1: rng.normal(size=25)}
    server.cluster_models = dict(server.cluster_raw)
    np.testing.assert_array_equal(server.message_for(7).params, server.cluster_raw[1])
    np.testing.assert_array_equal(server.server_params(), server.cluster_raw[1])
