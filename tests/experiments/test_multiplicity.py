"""Raw and Holm-adjusted p-values of every paired comparison (issue 19: multiplicity)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import ttest_rel

from topofl.experiments.analysis import add_holm, against, holm, paired_differences, paired_t_p
from topofl.experiments.compare import add_paired


def test_holm_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4*0.005=0.02, 3*0.01=0.03, 2*0.03=0.06, max(0.06, 1*0.04)=0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, float("nan"), 0.01]) == pytest.approx([0.5, float("nan"), 0.02], nan_ok=True)  # NaN does not count in m
    assert holm([0.9, 0.3]) == pytest.approx([0.9, 0.6])
    assert holm([0.02, 0.03]) == pytest.approx([0.04, 0.04])  # monotone: a larger raw p never gets a smaller adjusted one
    assert holm([0.6, 0.7, 0.8]) == pytest.approx([1.0, 1.0, 1.0])  # capped at 1
    assert holm([]) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30))
def test_holm_properties(p):
    a = np.array(holm(p))
    raw = np.array(p)
    assert np.all(a >= raw - 1e-15) and np.all(a <= 1.0)
    order = np.argsort(raw, kind="stable")
    assert np.all(np.diff(a[order]) >= -1e-15)  # same order as the raw p-values
    assert a.min() == pytest.approx(min(1.0, len(p) * raw.min()))  # the smallest is Bonferroni's


def test_paired_t_p_matches_scipy_and_degenerate_cases():
    rng = np.random.default_rng(0)
    a, b = rng.normal(0.8, 0.05, 10), rng.normal(0.78, 0.05, 10)
    assert paired_t_p(a - b) == pytest.approx(ttest_rel(a, b).pvalue, rel=1e-12)
    assert paired_t_p(np.zeros(5)) == 1.0          # identical runs: no evidence of a difference
    assert paired_t_p(np.full(5, 0.01)) == 0.0     # a constant non-zero difference: t is infinite
    assert np.isnan(paired_t_p(np.array([0.1])))   # one seed: no test


def _done(values):
    return [{"geometry": g, "method": m, "seed": s, "final": {"auc": v}} for (g, m), vs in values.items() for s, v in enumerate(vs)]


def test_paired_differences_adjust_within_each_group_and_metric():
    rng = np.random.default_rng(1)
    base = rng.normal(0.8, 0.05, 8)
    values = {}
    for g, shift in (("coupled", 0.03), ("shared", 0.0)):
        values[(g, "ptopofl")] = base + shift
        for j, m in enumerate(("fedavg", "ditto", "ifca")):
            values[(g, m)] = base + rng.normal(0.0, 0.02, 8) + 0.002 * j
    rows = paired_differences(_done(values), ("geometry",), "ptopofl", "auc")
    for g in ("coupled", "shared"):
        fam = [r for r in rows if r["geometry"] == g]
        assert [r["n_comparisons"] for r in fam] == [3, 3, 3]
        assert [r["p_holm"] for r in fam] == pytest.approx(holm([r["p_value"] for r in fam]))
        for r in fam:  # the raw p is the paired t-test of the two methods' per-seed scores
            assert r["p_value"] == pytest.approx(ttest_rel(values[(g, "ptopofl")], values[(g, r["method"])]).pvalue, rel=1e-10)
    flipped = {(r["geometry"], r["method"]): r for r in against(_done(values), ("geometry",), "ptopofl", "auc")}
    for r in rows:  # "method − ptopofl" carries the same test as "ptopofl − method"
        f = flipped[(r["geometry"], r["method"])]
        assert (f["p_value"], f["p_holm"], f["diff_mean"]) == (r["p_value"], r["p_holm"], -r["diff_mean"])


def test_add_holm_counts_only_finite_p_values():
    rows = [{"g": 1, "p_value": 0.01}, {"g": 1, "p_value": float("nan")}, {"g": 1, "p_value": 0.02}, {"g": 2, "p_value": 0.04}]
    add_holm(rows, ("g",))
    assert [r["n_comparisons"] for r in rows] == [2, 2, 2, 1]
    assert rows[0]["p_holm"] == pytest.approx(0.02) and rows[2]["p_holm"] == pytest.approx(0.02) and rows[3]["p_holm"] == pytest.approx(0.04)
    assert np.isnan(rows[1]["p_holm"])


class _H:
    def __init__(self, auc):
        self.final = {"auc": auc}


def test_compare_summary_carries_raw_and_holm_p_per_column():
    rng = np.random.default_rng(2)
    base = rng.normal(0.8, 0.05, 6)
    runs = {"ptopofl": base + 0.02 + rng.normal(0, 0.002, 6), "fedavg": base, "ditto": base + 0.001 + rng.normal(0, 0.01, 6)}
    summary = [{"method": m, "auc_mean": float(v.mean())} for m, v in runs.items()]
    add_paired(summary, {m: {s: _H(v[s]) for s in range(6)} for m, v in runs.items()}, "auc")
    by = {r["method"]: r for r in summary}
    raw = [by[m]["auc_vs_fedavg_p"] for m in ("ptopofl", "ditto")]
    assert raw[0] == pytest.approx(ttest_rel(runs["ptopofl"], runs["fedavg"]).pvalue, rel=1e-10)
    assert [by[m]["auc_vs_fedavg_p_holm"] for m in ("ptopofl", "ditto")] == pytest.approx(holm(raw))
    assert np.isnan(by["fedavg"]["auc_vs_fedavg_p"]) and np.isnan(by["fedavg"]["auc_vs_fedavg_p_holm"])
    assert by["ptopofl"]["auc_vs_fedavg_p_holm"] < 0.05  # a consistent +0.02 on six seeds survives the correction


def test_a_family_may_be_the_whole_table_and_near_equal_differences_raise_no_warning():
    values = {(g, m): np.array([0.8, 0.81, 0.79]) + (0.01 if m == "ptopofl" else 0.0) + 1e-12 * np.arange(3) * (m == "fedavg")
              for g in ("a", "b") for m in ("ptopofl", "fedavg")}
    per_group = paired_differences(_done(values), ("geometry",), "ptopofl", "auc")
    whole = paired_differences(_done(values), ("geometry",), "ptopofl", "auc", family=())
    assert [r["n_comparisons"] for r in per_group] == [1, 1] and [r["n_comparisons"] for r in whole] == [2, 2]
    assert [r["p_holm"] for r in whole] == pytest.approx(holm([r["p_value"] for r in per_group]))
    assert all(r["p_value"] < 1e-6 for r in per_group)  # a constant 0.01 lead, up to 1e-12 noise: no SciPy precision warning (an error here)


def test_two_methods_that_are_each_others_best_other_are_one_test():
    rng = np.random.default_rng(3)
    base = rng.normal(0.8, 0.05, 6)
    runs = {"ptopofl": base + 0.02 + rng.normal(0, 0.003, 6), "fedavg": base + 0.015 + rng.normal(0, 0.003, 6),
            "ditto": base + rng.normal(0, 0.003, 6)}
    summary = [{"method": m, "auc_mean": float(v.mean())} for m, v in runs.items()]
    add_paired(summary, {m: {s: _H(v[s]) for s in range(6)} for m, v in runs.items()}, "auc")
    by = {r["method"]: r for r in summary}
    assert (by["ptopofl"]["best_other"], by["fedavg"]["best_other"], by["ditto"]["best_other"]) == ("fedavg", "ptopofl", "ptopofl")
    assert by["ptopofl"]["auc_vs_best_other_p"] == pytest.approx(by["fedavg"]["auc_vs_best_other_p"])  # the same test, twice
    unique = [by["ptopofl"]["auc_vs_best_other_p"], by["ditto"]["auc_vs_best_other_p"]]
    assert [by[m]["auc_vs_best_other_p_holm"] for m in ("ptopofl", "ditto")] == pytest.approx(holm(unique))  # m = 2, not 3
    assert by["fedavg"]["auc_vs_best_other_p_holm"] == by["ptopofl"]["auc_vs_best_other_p_holm"]
