"""weighted_average: the stacked product for small inputs, in-place accumulation for deep models."""
import numpy as np
import pytest

from topofl.algorithms import base


@pytest.mark.parametrize("max_share", [1.0, 0.4])
def test_accumulating_path_equals_the_stacked_product(monkeypatch, max_share):
    rng = np.random.default_rng(0)
    V = [rng.normal(size=5000) for _ in range(6)]
    w = rng.uniform(1, 50, size=6)
    copies = [v.copy() for v in V]
    stacked = base.weighted_average(V, w, max_share)
    monkeypatch.setattr(base, "_STACK_LIMIT", 0)
    streamed = base.weighted_average(V, w, max_share)
    np.testing.assert_allclose(streamed, stacked, rtol=0, atol=1e-12)
    shares = base.cap_shares(w, max_share)
    np.testing.assert_allclose(streamed, sum(s * v for s, v in zip(shares, V, strict=True)), rtol=0, atol=1e-12)
    assert all(np.array_equal(v, c) for v, c in zip(V, copies, strict=True))   # the inputs are left alone


@pytest.mark.parametrize("K, d", [(1, 7), (2, 5), (9, 48), (50, 300_000)])
def test_mean_of_is_numpy_mean_bit_for_bit_without_the_stack(K, d):
    import tracemalloc

    rng = np.random.default_rng(K)
    V = [rng.normal(size=d) * rng.uniform(1e-3, 1e3) for _ in range(K)]
    copies = [v.copy() for v in V]
    tracemalloc.start()
    try:
        got = base.mean_of(V)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(got, np.mean(V, axis=0))
    assert peak <= d * 8 + 4096  # one buffer, never K × d
    assert all(np.array_equal(v, c) for v, c in zip(V, copies, strict=True))
    with pytest.raises(ValueError, match="at least one vector"):
        base.mean_of([])


def test_mean_of_leaves_to_numpy_what_numpy_sums_otherwise():
    rng = np.random.default_rng(3)
    for V in ([rng.normal(size=1) for _ in range(40)],                       # one number: pairwise in NumPy
              [rng.normal(size=5).astype(np.float32) for _ in range(9)]):    # float32: NumPy's float32 mean
        got, want = base.mean_of(V), np.mean(V, axis=0)
        assert got.dtype == want.dtype and np.array_equal(got, want)
