"""The robust aggregation rules (topofl.robustness.aggregators): hand-checked cases, input checks,
and agreement with Flower's own implementations — its strategies ``FedMedian``,
``FedTrimmedAvg``, ``Krum``, ``MultiKrum`` and ``Bulyan`` (``flwr.serverapp.strategy``) driven
with reply messages, its older pure functions (``flwr.server.strategy.aggregate``) and its
clipping (``flwr.supercore.differential_privacy``) — on random updates, wherever the definitions
coincide (the differences are in the module's docstring and tested at the end)."""
from __future__ import annotations

import math
import types

import numpy as np
import pytest

from topofl.algorithms.base import weighted_average
from topofl.robustness.aggregators import (
    AGGREGATORS,
    bulyan,
    coordinate_median,
    krum,
    krum_scores,
    multi_krum,
    norm_clip,
    required_updates,
    robust_aggregate,
    trimmed_mean,
    weighted_mean,
)

TOL = 1e-9  # the acceptance bound of issue 13: agreement with Flower to 1e-9


def col(*values):
    """Updates of dimension 1, one per value."""
    return np.array(values, dtype=float)[:, None]


# ---- hand-checked cases ---------------------------------------------------------------------
def test_median_of_three_vectors_and_of_an_even_number():
    U = np.array([[1.0, 5.0, 9.0], [2.0, -1.0, 3.0], [10.0, 0.0, 0.0]])
    assert coordinate_median(U).tolist() == [2.0, 0.0, 3.0]
    assert coordinate_median(col(1, 2, 3, 100)).tolist() == [2.5]   # the two middle values' mean


def test_median_ignores_weights_and_one_huge_value():
    res = robust_aggregate("median", col(1, 2, 3, 4, 1e12), [1, 1, 1, 1, 1e6])
    assert res.vector.tolist() == [3.0] and res.selected == (0, 1, 2, 3, 4)


def test_trimmed_mean_cuts_floor_beta_n_from_each_end():
    U = col(4, 100, 1, 3, 2)
    assert trimmed_mean(U, 0.2).tolist() == [3.0]        # ⌊0.2·5⌋ = 1 from each end: mean(2, 3, 4)
    assert trimmed_mean(U, 0.0).tolist() == [22.0]       # β = 0 is the mean
    assert trimmed_mean(U, 0.45).tolist() == [3.0]       # ⌊2.25⌋ = 2 from each end leaves the median
    assert trimmed_mean(col(1, 2, 3, 10), 0.25).tolist() == [2.5]


def test_trimmed_mean_counts_a_beta_n_that_rounding_puts_just_under_an_integer():
    assert 0.29 * 100 < 29                                # 28.999999999999996 in float64
    U = col(*([1000.0] * 29 + [-500.0] * 29 + [1.0] * 42))
    assert trimmed_mean(U, 0.29).tolist() == [1.0]        # 29 cut from each end, as β·n = 29 says
    # cutting 28 would leave one 1000 and one -500: (1000 - 500 + 42) / 44
    assert (1000 - 500 + 42) / 44 > 12


def test_krum_scores_and_choice_on_a_line():
    U = col(0, 1, 2, 4, 100)   # n = 5, f = 1: each score sums the n - f - 2 = 2 smallest squared distances
    assert krum_scores(U, 1).tolist() == [1 + 4, 1 + 1, 1 + 4, 4 + 9, 96**2 + 98**2]
    res = krum(U, 1)
    assert res.vector.tolist() == [1.0] and res.selected == (1,)


def test_krum_is_exact_for_large_nearby_models():
    # the Gram form ‖a‖² + ‖b‖² − 2a·b loses distances of 1 between vectors of norm 1e8 (its rounding is ~2)
    U = 1e8 + col(0, 1, 2, 4, 100)
    assert krum_scores(U, 1).tolist() == [5.0, 2.0, 5.0, 13.0, 96**2 + 98**2]
    assert krum(U, 1).selected == (1,)


def test_multi_krum_averages_the_m_best_with_their_weights():
    U = col(0, 1, 2, 4, 100)   # scores 5, 2, 5, 13, …: the best three are 1, then 0 and 2 (a tie, lower index first)
    res = multi_krum(U, [3, 1, 1, 1, 1], f=1, m=3)
    assert res.selected == (0, 1, 2)
    assert res.vector.tolist() == [pytest.approx((3 * 0 + 1 + 2) / 5, abs=1e-15)]
    assert multi_krum(U, np.ones(5), 1, 1).vector.tolist() == [1.0]                # m = 1 is Krum
    np.testing.assert_allclose(multi_krum(U, [1, 2, 3, 4, 5], 1, 5).vector, [(1 * 0 + 2 * 1 + 3 * 2 + 4 * 4 + 5 * 100) / 15])  # m = n: the mean
    res = robust_aggregate("multi_krum", U, np.ones(5), f=1)                    # m = 0: n − f = 4
    assert res.selected == (0, 1, 2, 3) and res.vector.tolist() == [7 / 4]


def test_bulyan_by_hand():
    # n = 7, f = 1: θ = 5 selected by Krum applied recursively, then per coordinate the mean of the
    # β = 3 selected values closest to their median. Recursive Krum picks 3 (score 63), 2 (69),
    # 1 (82), then with one neighbour 10 (tie with 12, lower index), then 0 (tie with 12):
    # {0, 1, 2, 3, 10}, median 2, closest three 1, 2, 3 → 2. The outlier 1000 never enters.
    U = col(0, 1, 2, 3, 10, 12, 1000)
    res = bulyan(U, 1)
    assert res.selected == (0, 1, 2, 3, 4)
    assert res.vector.tolist() == [2.0]
    # whatever the ties had chosen, the outcome is 2: {0,1,2,3,12} and {1,2,3,10,12} give 2 as well
    for S in ([0, 1, 2, 3, 12], [1, 2, 3, 10, 12]):
        med = np.median(S)
        assert np.mean(sorted(S, key=lambda v: abs(v - med))[:3]) == 2.0


def test_bulyan_second_stage_is_coordinate_wise():
    # f = 0: θ = n, β = n, every update enters every coordinate: the plain mean
    U = np.array([[0.0, 1.0], [2.0, 5.0], [4.0, 0.0]])
    res = bulyan(U, 0)
    assert res.selected == (0, 1, 2) and res.vector.tolist() == [2.0, 2.0]


def test_norm_clip_of_a_known_delta():
    ref = np.array([1.0, 1.0])
    U = np.array([[4.0, 5.0],      # Δ = (3, 4), ‖Δ‖ = 5 → (0.6, 0.8) with M = 1
                  [1.0, 1.5],      # Δ = (0, 0.5), inside the bound: unchanged
                  [1.0, 1.0]])     # Δ = 0: unchanged
    out = norm_clip(U, [1, 3, 0], 1.0, ref)
    np.testing.assert_allclose(out, 0.25 * np.array([1.6, 1.8]) + 0.75 * np.array([1.0, 1.5]), rtol=0, atol=1e-15)
    np.testing.assert_allclose(norm_clip(U[2:], [1], 1.0, ref), ref, rtol=0, atol=0)
    # one reference per client: each change is measured from its own
    out = norm_clip(U[:2], [1, 1], 1.0, np.array([[4.0, 4.0], [1.0, 1.5]]))
    np.testing.assert_allclose(out, [(4.0 + 1.0) / 2, (5.0 + 1.5) / 2], rtol=0, atol=1e-15)


def test_norm_clip_bounds_the_step_by_the_clip_norm():
    rng = np.random.default_rng(3)
    ref = rng.normal(size=30)
    U = ref + rng.normal(scale=50, size=(9, 30))
    out = norm_clip(U, rng.uniform(1, 5, 9), 0.7, ref)
    assert np.linalg.norm(out - ref) <= 0.7 + 1e-12


def test_mean_is_fedavg_bit_for_bit():
    rng = np.random.default_rng(1)
    V = [rng.normal(size=40) for _ in range(6)]
    w = rng.integers(1, 500, 6).astype(float)
    assert np.array_equal(weighted_mean(V, w), weighted_average(V, w))
    res = robust_aggregate("mean", np.vstack(V), w)
    assert np.array_equal(res.vector, weighted_average(V, w)) and res.selected == tuple(range(6))


def test_required_updates_are_the_papers_conditions():
    assert [required_updates("krum", f) for f in (0, 1, 2)] == [3, 5, 7]           # n > 2f + 2
    assert [required_updates("multi_krum", f) for f in (0, 1, 2)] == [3, 5, 7]
    assert [required_updates("bulyan", f) for f in (0, 1, 2)] == [3, 7, 11]         # n >= 4f + 3
    assert {required_updates(r, 5) for r in ("mean", "median", "trimmed_mean", "norm_clip")} == {1}


# ---- input checks -----------------------------------------------------------------------------
@pytest.mark.parametrize("call, words", [
    (lambda: krum(col(1, 2, 3, 4), 1), "krum with f=1 needs n >= 2f \\+ 3 = 5"),
    (lambda: multi_krum(col(1, 2, 3, 4), np.ones(4), 1, 2), "multi_krum with f=1 needs n >= 2f \\+ 3 = 5"),
    (lambda: bulyan(col(1, 2, 3, 4, 5, 6), 1), "bulyan with f=1 needs n >= 4f \\+ 3 = 7"),
    (lambda: krum(col(1, 2, 3), -1), "f must be in"),
    (lambda: multi_krum(col(1, 2, 3, 4, 5), np.ones(5), 1, 6), "m must be in \\[1, 5\\]"),
    (lambda: trimmed_mean(col(1, 2, 3), 0.5), "beta must be in \\[0.0, 0.5\\)"),
    (lambda: norm_clip(col(1, 2), [1, 1], 0.0, np.zeros(1)), "clip_norm must be in \\(0.0"),
    (lambda: norm_clip(col(1, 2), [1, 1], 1.0, np.zeros(3)), "reference must have shape"),
    (lambda: robust_aggregate("norm_clip", col(1, 2), [1, 1]), "norm_clip needs reference"),
    (lambda: robust_aggregate("geomed", col(1, 2), [1, 1]), "aggregator must be one of"),
    (lambda: coordinate_median(np.array([[1.0, np.nan]])), "updates contains a non-finite value"),
    (lambda: coordinate_median(np.zeros(3)), "updates must be an array of shape"),
    (lambda: robust_aggregate("median", col(1, 2), [1, -1]), "weights must be non-negative"),
    (lambda: robust_aggregate("median", col(1, 2), [1, 1, 1]), "weights must have shape \\(2,\\)"),
])
def test_bad_input_is_a_value_error_naming_the_field(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_inputs_are_left_alone():
    rng = np.random.default_rng(2)
    U = rng.normal(size=(7, 4))
    w = rng.uniform(1, 2, 7)
    copy_u, copy_w = U.copy(), w.copy()
    for name in AGGREGATORS:
        robust_aggregate(name, U, w, reference=np.zeros(4))
    assert np.array_equal(U, copy_u) and np.array_equal(w, copy_w)


# ---- Flower as the oracle ---------------------------------------------------------------------
try:  # the oracle: Flower is an optional extra (pip install 'topofl[flower]')
    from flwr.app import Array, ArrayRecord, Message, Metadata, MetricRecord, RecordDict
    from flwr.server.strategy.aggregate import aggregate as flwr_aggregate
    from flwr.server.strategy.aggregate import aggregate_bulyan, aggregate_krum, aggregate_median, aggregate_trimmed_avg
    from flwr.serverapp.strategy import Bulyan, FedMedian, FedTrimmedAvg, Krum, MultiKrum
    from flwr.supercore.differential_privacy import compute_clip_model_update
except ImportError:  # pragma: no cover - CI installs the extra
    Bulyan = None

needs_flower = pytest.mark.skipif(Bulyan is None, reason="Flower, the oracle, is not installed (pip install 'topofl[flower]')")


def oracle(test):
    """A test against Flower: skipped without it, and run without Flower's full garbage collections."""
    return needs_flower(pytest.mark.usefixtures("_no_full_collections")(test))


@pytest.fixture
def _no_full_collections(monkeypatch):
    """Flower runs gc.collect() after unpacking each record without keeping it (Bulyan does, five
    times a call): in a large test process that costs up to a second a call and computes nothing."""
    from flwr.app.message import arrayrecord

    monkeypatch.setattr(arrayrecord, "gc", types.SimpleNamespace(collect=lambda *args: 0))


def replies(U, weights):
    """Training replies as a Flower ServerApp receives them: one ArrayRecord and the example count."""
    out = []
    for i, (u, n) in enumerate(zip(U, weights, strict=True)):
        content = RecordDict({"arrays": ArrayRecord({"w": Array(np.array(u))}), "metrics": MetricRecord({"num-examples": int(n)})})
        md = Metadata(run_id=1, message_id=f"m{i}", src_node_id=i + 1, dst_node_id=0, reply_to_message_id="", group_id="1",
                      created_at=0.0, ttl=3600.0, message_type="train")
        out.append(Message(content, metadata=md))
    return out


def flower(strategy, U, weights):
    arrays, _ = strategy.aggregate_train(1, replies(U, weights))
    return arrays["w"].numpy()


def cases(min_n, extra=(0, 1, 4), fs=(0, 1, 2, 3), ds=(1, 7, 60)):
    """(rng, n, d, f) for several sizes and fault counts, each with its own random updates."""
    seed = 0
    for f in fs:
        for more in extra:
            for d in ds:
                seed += 1
                yield np.random.default_rng(seed), min_n(f) + more, d, f


@oracle
def test_median_agrees_with_flower():
    for rng, n, d, _ in cases(lambda f: 1 + 2 * f, fs=(0, 1, 2)):
        U, w = rng.normal(size=(n, d)), rng.integers(1, 100, n)
        ours = coordinate_median(U)
        assert np.abs(ours - flower(FedMedian(), U, w)).max() <= TOL
        assert np.abs(ours - aggregate_median([([u], int(k)) for u, k in zip(U, w, strict=True)])[0]).max() <= TOL


@oracle
@pytest.mark.parametrize("beta", [0.0, 0.1, 0.2, 0.25, 0.3, 0.45])
def test_trimmed_mean_agrees_with_flower(beta):
    for rng, n, d, _ in cases(lambda f: 2 + 3 * f, extra=(0, 1, 3, 5)):
        assert int(beta * n) == math.floor(beta * n + 1e-9)   # where the cut counts coincide (see the last test)
        U, w = rng.normal(size=(n, d)), rng.integers(1, 100, n)
        ours = trimmed_mean(U, beta)
        assert np.abs(ours - flower(FedTrimmedAvg(beta=beta), U, w)).max() <= TOL
        legacy = aggregate_trimmed_avg([([u], int(k)) for u, k in zip(U, w, strict=True)], beta)[0]
        assert np.abs(ours - legacy).max() <= TOL


@oracle
def test_krum_agrees_with_flower():
    for rng, n, d, f in cases(lambda f: 2 * f + 3):
        U, w = rng.normal(size=(n, d)), rng.integers(1, 100, n)
        ours = krum(U, f).vector
        assert np.abs(ours - flower(Krum(num_malicious_nodes=f), U, w)).max() <= TOL
        legacy = aggregate_krum([([u], int(k)) for u, k in zip(U, w, strict=True)], f, to_keep=0)[0]
        assert np.abs(ours - legacy).max() <= TOL


@oracle
def test_multi_krum_agrees_with_flower_weighted_by_example_counts():
    for rng, n, d, f in cases(lambda f: 2 * f + 3):
        U, w = rng.normal(size=(n, d)), rng.integers(1, 100, n)
        for m in sorted({1, 2, n - f, n}):
            ours = multi_krum(U, w, f, m).vector
            assert np.abs(ours - flower(MultiKrum(num_malicious_nodes=f, num_nodes_to_select=m), U, w)).max() <= TOL
            legacy = aggregate_krum([([u], int(k)) for u, k in zip(U, w, strict=True)], f, to_keep=m)[0]
            assert np.abs(ours - legacy).max() <= TOL


@oracle
def test_bulyan_agrees_with_flowers_recursive_bulyan():
    for rng, n, d, f in cases(lambda f: 4 * f + 3, fs=(0, 1, 2)):
        U, w = rng.normal(size=(n, d)), rng.integers(1, 100, n)
        legacy = aggregate_bulyan([([u.copy()], int(k)) for u, k in zip(U, w, strict=True)], f, aggregate_krum, to_keep=0)[0]
        assert np.abs(bulyan(U, f).vector - legacy).max() <= TOL


@oracle
def test_bulyan_agrees_with_flowers_strategy_given_the_same_selection():
    # Flower's strategy selects in one pass (see the last test); handed the recursive selection,
    # its median and β-closest mean must give our aggregate
    for rng, n, d, f in cases(lambda f: 4 * f + 3, fs=(0, 1, 2)):
        U, w = rng.normal(size=(n, d)), rng.integers(1, 100, n)
        res = bulyan(U, f)
        assert len(res.selected) == n - 2 * f

        def ours(contents, num_malicious, theta, res=res, f=f):
            assert (num_malicious, theta) == (f, len(res.selected))
            return [contents[i] for i in res.selected]

        assert np.abs(res.vector - flower(Bulyan(num_malicious_nodes=f, selection_rule=ours), U, w)).max() <= TOL


@oracle
def test_norm_clip_agrees_with_flowers_clipping_and_weighted_average():
    for rng, n, d, _ in cases(lambda f: 2 + f):
        ref = rng.normal(size=d)
        U = ref + rng.normal(scale=2.0, size=(n, d))
        w = rng.integers(1, 100, n)
        for clip in (0.1, 1.0, 5.0, 1e3):
            clipped = []
            for u in U:
                params = [u.copy()]
                compute_clip_model_update(params, [ref.copy()], clip)
                clipped.append(params)
            theirs = flwr_aggregate([(p, int(k)) for p, k in zip(clipped, w, strict=True)])[0]
            assert np.abs(norm_clip(U, w, clip, ref) - theirs).max() <= TOL


# ---- where the definitions differ -------------------------------------------------------------
@oracle
def test_trimmed_mean_cut_differs_from_flower_only_where_rounding_hides_an_integer():
    U = col(*([1000.0] * 29 + [-500.0] * 29 + [1.0] * 42))
    theirs = flower(FedTrimmedAvg(beta=0.29), U, np.ones(100))
    assert theirs[0] == pytest.approx((1000 - 500 + 42) / 44)    # int(0.29 * 100) = 28 cut from each end
    assert trimmed_mean(U, 0.29)[0] == 1.0                       # ⌊29⌋ = 29


@oracle
def test_flowers_default_bulyan_selects_in_one_pass():
    # Flower 1.41's strategy takes the θ updates of least Krum score over all n at once; recursive
    # Krum (El Mhamdi et al.) re-scores the remaining updates after each pick: on random updates the
    # two selections, and then the aggregates, differ now and then
    selections_differ = aggregates_differ = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        U, w = rng.normal(size=(7, 3)), np.ones(7)
        one_pass = set(np.argsort(krum_scores(U, 1), kind="stable")[:5].tolist())
        selections_differ += one_pass != set(bulyan(U, 1).selected)
        aggregates_differ += np.abs(bulyan(U, 1).vector - flower(Bulyan(num_malicious_nodes=1), U, w)).max() > TOL
    assert selections_differ > 0 and aggregates_differ > 0
