"""The remembered projection of Sheaf-FMTL's restriction maps: after the map step (Eq. 28) the next
iteration's P_ij^{k+1} θ_i^{k+1} is carried over from the second exchange instead of recomputed;
it must equal a fresh projection, survive pickling, and be dropped whenever it no longer applies.
The dense rank-one update runs in place."""
import pickle
import tracemalloc

import numpy as np
import pytest

from helpers import multiclass_peers
from topofl.decentralised import make_graph, run_decentralised
from topofl.decentralised.sheaf.maps import NodeMaps, initial_maps
from topofl.methods import build_peer as build


def clients(dims, n=60, seed=0):
    return multiclass_peers(dims, n, seed)


def rel(a, b):
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)


HP = {"gamma": 0.5, "map_init": "sparse_sign", "map_scale": 0.5, "eta": 0.05, "lam": 0.2, "lr": 0.05, "batch_size": 16}
CASES = {
    "dense-gaussian": {**HP, "map_init": "gaussian", "maps": "dense"},
    "dense-sparse-sign": {**HP, "maps": "dense"},
    "compact": {**HP, "maps": "compact"},
    "compact-float32": {**HP, "maps": "compact", "map_precision": "float32"},
    "eta-zero": {**HP, "map_init": "gaussian", "maps": "dense", "eta": 0.0},
}


@pytest.mark.parametrize("case", list(CASES))
def test_cached_projection_equals_a_fresh_one_after_many_iterations(case):
    algo = build("sheaf", CASES[case])
    run_decentralised(clients([5, 7, 6, 9, 5, 8]), make_graph("erdos_renyi", 6, seed=2, p=0.6), algo, 25, seed=3, n_classes=3)
    for node in algo.nodes.values():
        theta, maps = node.peer.theta, node.maps
        cached = maps.cached(theta)
        assert cached is not None, "the map step should carry the projection of θ^{k+1} over"
        fresh = maps.project(theta, use_cache=False)
        assert rel(cached, fresh) < 1e-10
        assert rel(cached, maps.dense() @ theta) < 1e-10
        # it travels with a pickled node (a relay stores nodes pickled between phases)
        again = pickle.loads(pickle.dumps(node))
        np.testing.assert_array_equal(again.maps.cached(again.peer.theta), maps.cached(theta))
        np.testing.assert_array_equal(again.maps.project(again.peer.theta), fresh)


def test_dense_and_compact_stay_together_with_the_cache():
    cl, g = clients([5, 5, 5, 5, 5, 5]), make_graph("erdos_renyi", 6, seed=2, p=0.6)
    dense, compact = build("sheaf", {**HP, "maps": "dense"}), build("sheaf", {**HP, "maps": "compact"})
    run_decentralised(cl, g, dense, 60, seed=1, n_classes=3)
    run_decentralised(cl, g, compact, 60, seed=1, n_classes=3)
    for a, b in zip(dense.peers, compact.peers, strict=False):
        np.testing.assert_allclose(a.theta, b.theta, rtol=0, atol=1e-9)
        np.testing.assert_allclose(dense.nodes[a.node].maps.cached(a.theta), compact.nodes[b.node].maps.cached(b.theta), rtol=0, atol=1e-9)


@pytest.mark.parametrize("compact", [False, True])
def test_cache_is_used_only_while_it_applies(compact):
    rng = np.random.default_rng(0)
    sizes, d = [3, 4], 6
    maps = NodeMaps(initial_maps("sparse_sign", sizes, d, 0.7, rng), sizes, compact)
    x = rng.standard_normal(d)
    y = maps.project(x)
    assert maps.cached(x) is not None and maps.cached(x + 1e-12) is None and maps.cached(x[:3]) is None
    out = maps.project(x)
    out[:] = 0.0  # the caller owns what it gets
    np.testing.assert_array_equal(maps.project(x), y)
    u = rng.standard_normal(sum(sizes))
    maps.update(u, x)  # carried over: P x − u (xᵀx)
    assert rel(maps.cached(x), maps.dense() @ x) < 1e-12
    maps.update(u, rng.standard_normal(d))  # an update along another vector drops it
    assert maps.cached(x) is None
    np.testing.assert_allclose(maps.project(x), maps.dense() @ x, rtol=1e-12, atol=1e-12)
    x_before = x.copy()
    x += 1.0  # changed in place: not a stale hit
    assert maps.cached(x) is None
    np.testing.assert_allclose(maps.project(x), maps.dense() @ (x_before + 1.0), rtol=1e-12, atol=1e-12)
    maps.forget()
    assert maps.cached(x) is None


def test_recompress_drops_the_cache():
    rng = np.random.default_rng(1)
    sizes, d = [3, 4], 6
    maps = NodeMaps(initial_maps("sparse_sign", sizes, d, 0.7, rng), sizes, True)
    for _ in range(4):
        x = rng.standard_normal(d)
        maps.project(x)
        maps.update(rng.standard_normal(sum(sizes)), x)
    assert maps.cached(x) is not None
    maps.recompress(2)
    assert maps.cached(x) is None


@pytest.mark.parametrize("sizes, d", [([3, 4], 6), ([250, 120], 500), ([2000, 1700], 40), ([5, 3], 70_000)],
                         ids=["tiny", "wide", "tall", "rows-longer-than-a-block"])
def test_dense_update_is_in_place_and_exact(sizes, d):
    """Exact for any shape (the update runs block by block: one block, several with a partial last
    one, rows longer than a block), in place, and with no temporary of the maps' size."""
    rng = np.random.default_rng(2)
    maps = NodeMaps(initial_maps("gaussian", sizes, d, 1.0, rng), sizes, False)
    P, before = maps.P, maps.P.copy()
    u, v = rng.standard_normal(sum(sizes)), rng.standard_normal(d)
    u0, v0 = u.copy(), v.copy()
    NodeMaps(initial_maps("gaussian", [1], 2, 1.0, rng), [1], False).update(np.ones(1), np.ones(2))  # loads SciPy's BLAS first
    tracemalloc.start()
    try:
        maps.update(u, v)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < P.nbytes / 4 + 1_000_000, (peak, P.nbytes)
    assert maps.P is P and P.flags.c_contiguous
    np.testing.assert_allclose(P, before - np.outer(u0, v0), rtol=0, atol=1e-13)
    np.testing.assert_array_equal(u, u0)
    np.testing.assert_array_equal(v, v0)
    # a non-contiguous P still updates correctly
    maps.P = np.asfortranarray(P)
    maps.update(u, v)
    np.testing.assert_allclose(maps.P, before - 2 * np.outer(u0, v0), rtol=0, atol=1e-13)
