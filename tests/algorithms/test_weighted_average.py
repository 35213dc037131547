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
