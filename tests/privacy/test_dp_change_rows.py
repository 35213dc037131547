"""DP-FedAvg over changes computed a row at a time (issue 25): the same release as over the stacked matrix, bit
for bit, without the clients × parameters copy."""
import tracemalloc

import numpy as np
import pytest

from topofl.privacy.dp import ChangeRows, dp_fedavg_aggregate


def test_rows_computed_when_read_give_the_stacked_release_bit_for_bit():
    rng = np.random.default_rng(0)
    sent = [rng.normal(size=300) for _ in range(6)]
    replies = [s + rng.normal(scale=float(k), size=300) for k, s in enumerate(sent)]
    stacked = np.vstack([r - s for r, s in zip(replies, sent, strict=True)])
    weights = rng.random(6)
    for z in (0.0, 1.3):
        a = dp_fedavg_aggregate(stacked, 2.0, z, np.random.default_rng(5), 4.0, weights=weights)
        b = dp_fedavg_aggregate(ChangeRows(replies, sent, 300), 2.0, z, np.random.default_rng(5), 4.0, weights=weights)
        assert np.array_equal(a.update, b.update) and a.norms == b.norms and a.clipped == b.clipped
        assert a.clipped  # some rows were clipped: the check covers both branches
    empty = dp_fedavg_aggregate(ChangeRows([], [], 300), 1.0, 1.0, np.random.default_rng(1), 2.0)
    assert empty.update.shape == (300,) and empty.norms == ()


def test_float32_replies_are_not_stacked():
    rng = np.random.default_rng(1)
    K, d = 16, 200_000
    sent = [np.zeros(d)] * K
    replies = [rng.normal(size=d).astype(np.float32) for _ in range(K)]
    tracemalloc.start()
    try:
        dp_fedavg_aggregate(ChangeRows(replies, sent, d), 1.0, 1.0, np.random.default_rng(0), K)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < K * d * 8 / 3, f"{peak} bytes: a stack of the changes is {K * d * 8}"


def test_bad_rows_are_named():
    with pytest.raises(ValueError, match="2 replies but 1 models sent"):
        ChangeRows([np.zeros(3)] * 2, [np.zeros(3)], 3)
    with pytest.raises(ValueError, match=r"deltas row 1 has shape \(2,\); expected \(3,\)"):
        dp_fedavg_aggregate(ChangeRows([np.zeros(3), np.zeros(2)], [np.zeros(3), np.zeros(2)], 3), 1.0, 0.0,
                            np.random.default_rng(0), 1.0)
    with pytest.raises(ValueError, match="deltas row 1 holds non-finite values"):
        dp_fedavg_aggregate(ChangeRows([np.zeros(3), np.array([0.0, np.nan, 0.0])], [np.zeros(3)] * 2, 3), 1.0,
                            0.0, np.random.default_rng(0), 1.0)
