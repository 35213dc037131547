"""DP mechanisms (topofl.privacy.dp): clipping, DP-FedAvg's aggregate, the descriptor's Gaussian
mechanism and its sensitivity bound, and the noise actually added against the accountant's ε."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from topofl.privacy import dp
from topofl.tda.descriptor import descriptor

DELTA = 1e-5
finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


# --- clipping -----------------------------------------------------------------------------------

def test_clip_by_norm_by_hand():
    v = np.array([3.0, 4.0])  # norm 5
    np.testing.assert_array_equal(dp.clip_by_norm(v, 10.0), v)
    np.testing.assert_allclose(dp.clip_by_norm(v, 1.0), [0.6, 0.8], rtol=1e-15)
    np.testing.assert_array_equal(dp.clip_by_norm(np.zeros(3), 1.0), np.zeros(3))
    out = dp.clip_by_norm(v, 1.0)
    assert out is not v and v[0] == 3.0  # a copy; the input is untouched


@given(arrays(np.float64, st.integers(1, 50), elements=finite), st.floats(1e-3, 1e3))
def test_clip_by_norm_stays_in_the_ball_and_keeps_the_direction(v, c):
    out = dp.clip_by_norm(v, c)
    assert dp.l2_norm(out) <= c * (1 + 1e-12)
    norm = dp.l2_norm(v)
    if norm > 0:
        np.testing.assert_allclose(out, v * min(1.0, c / norm), rtol=1e-12, atol=1e-300)


def test_clip_by_norm_of_huge_and_tiny_vectors():
    big = np.full(4, 1e300)  # the plain sum of squares overflows
    np.testing.assert_allclose(dp.clip_by_norm(big, 2.0), np.full(4, 1.0), rtol=1e-12)
    tiny = np.full(4, 1e-300)
    assert dp.l2_norm(tiny) == pytest.approx(2e-300, rel=1e-12)


def test_clip_refuses_bad_input():
    with pytest.raises(ValueError, match=r"clip must be in \(0.0, inf\); got 0.0"):
        dp.clip_by_norm(np.ones(2), 0.0)
    with pytest.raises(ValueError, match="non-finite"):
        dp.clip_by_norm(np.array([1.0, np.nan]), 1.0)


# --- DP-FedAvg's aggregate --------------------------------------------------------------------

def test_dp_fedavg_aggregate_without_noise_by_hand():
    deltas = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, -2.0]])  # norms 5, 0.5, 2
    agg = dp.dp_fedavg_aggregate(deltas, clip=1.0, noise_multiplier=0.0, rng=np.random.default_rng(0), expected_clients=4.0)
    # clipped: [0.6, 0.8], [0.3, 0.4], [0, -1]; sum [0.9, 0.2]; divided by the fixed denominator 4
    np.testing.assert_allclose(agg.update, [0.225, 0.05], rtol=1e-14)
    assert agg.clipped == (0, 2) and agg.sensitivity == 1.0 and agg.noise_std == 0.0
    np.testing.assert_allclose(agg.norms, [5.0, 0.5, 2.0])
    w = np.array([1.0, 0.5, 0.0])
    agg_w = dp.dp_fedavg_aggregate(deltas, 1.0, 0.0, np.random.default_rng(0), 2.0, weights=w)
    np.testing.assert_allclose(agg_w.update, [(0.6 + 0.15) / 2, (0.8 + 0.2) / 2], rtol=1e-14)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 8), st.integers(1, 6)), elements=finite), st.floats(0.01, 100.0))
def test_one_client_moves_the_noiseless_sum_by_at_most_c(deltas, c):
    """Add/remove one client: the sum moves by ≤ C (the sensitivity reported); replace: by ≤ 2C."""
    rng = np.random.default_rng(0)
    full = dp.dp_fedavg_aggregate(deltas, c, 0.0, rng, 1.0)
    assert full.sensitivity == c
    without_last = dp.dp_fedavg_aggregate(deltas[:-1], c, 0.0, rng, 1.0)
    assert dp.l2_norm(full.update - without_last.update) <= c * (1 + 1e-9)
    replaced = deltas.copy()
    replaced[-1] = -deltas[-1] * 1e3
    other = dp.dp_fedavg_aggregate(replaced, c, 0.0, rng, 1.0)
    assert dp.l2_norm(full.update - other.update) <= 2 * c * (1 + 1e-9)


def test_noise_on_the_update_has_the_stated_scale():
    z, c, m, d = 1.7, 0.5, 8.0, 200_000
    deltas = np.random.default_rng(1).normal(size=(8, d))
    clean = dp.dp_fedavg_aggregate(deltas, c, 0.0, np.random.default_rng(2), m)
    noisy = dp.dp_fedavg_aggregate(deltas, c, z, np.random.default_rng(2), m)
    assert noisy.noise_std == pytest.approx(z * c) and noisy.noise_std_update == pytest.approx(z * c / m)
    noise = noisy.update - clean.update
    assert noise.std() == pytest.approx(z * c / m, rel=0.01)  # 200 000 draws: 0.16 % standard error
    assert abs(noise.mean()) < 5 * z * c / m / math.sqrt(d)
    again = dp.dp_fedavg_aggregate(deltas, c, z, np.random.default_rng(2), m)
    np.testing.assert_array_equal(again.update, noisy.update)  # the server's generator decides


def test_an_empty_round_releases_noise_alone():
    agg = dp.dp_fedavg_aggregate(np.empty((0, 5)), 1.0, 2.0, np.random.default_rng(0), 4.0)
    assert agg.update.shape == (5,) and agg.clipped == () and np.all(agg.update != 0)


@pytest.mark.parametrize("kwargs,match", [
    (dict(deltas=np.ones(3)), r"deltas must be a 2-D array .* got shape \(3,\)"),
    (dict(clip=-1.0), r"clip must be in \(0.0, inf\); got -1.0"),
    (dict(noise_multiplier=-0.5), r"noise_multiplier must be in \[0.0, inf\); got -0.5"),
    (dict(expected_clients=0.0), r"expected_clients must be in \(0.0, inf\); got 0.0"),
    (dict(weights=np.array([1.0, 2.0])), r"weights must be 2 numbers in \[0, 1\]"),
    (dict(weights=np.array([1.0])), r"weights must be 2 numbers in \[0, 1\]"),
    (dict(deltas=np.array([[1.0, 2.0, 3.0], [0.0, np.inf, 1.0]])), r"deltas row 1 holds non-finite values"),
])
def test_dp_fedavg_aggregate_refuses_bad_input(kwargs, match):
    args = dict(deltas=np.ones((2, 3)), clip=1.0, noise_multiplier=1.0, rng=np.random.default_rng(0), expected_clients=2.0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        dp.dp_fedavg_aggregate(**args)


def test_measured_noise_scale_gives_the_accountants_epsilon():
    """Acceptance (issue 13.5): a known configuration — 8 clients, q = 1, C = 1, z = 2, 15 rounds,
    δ = 1e-5. The noise the aggregate actually adds, measured, is z·C on the sum; the accountant's ε
    at the measured z equals its ε at the configured z, and both equal the closed form for 15
    composed Gaussian releases (one release at z/√15; Balle and Wang 2018, Thm 8)."""
    pytest.importorskip("dp_accounting")
    from scipy import optimize, stats

    from topofl.privacy.accounting import dp_fedavg_epsilon

    cfg = dp.DPConfig(clip=1.0, noise_multiplier=2.0, delta=DELTA, sampling_rate=1.0, accountant="pld")
    n_clients, rounds, d = 8, 15, 20_000
    m = cfg.expected_clients(n_clients)
    rng = np.random.default_rng(0)
    deltas = rng.normal(size=(n_clients, d))
    clean = dp.dp_fedavg_aggregate(deltas, cfg.clip, 0.0, rng, m).update
    noise = np.concatenate([
        dp.dp_fedavg_aggregate(deltas, cfg.clip, cfg.noise_multiplier, rng, m).update - clean for _ in range(rounds)
    ])
    z_measured = noise.std() * m / cfg.clip
    assert z_measured == pytest.approx(cfg.noise_multiplier, rel=0.01)
    eps = dp.privacy_report(cfg, rounds)["dp_epsilon"]
    assert dp_fedavg_epsilon(z_measured, 1.0, rounds, DELTA, "pld") == pytest.approx(eps, rel=0.03)

    s = cfg.noise_multiplier / math.sqrt(rounds)
    exact = optimize.brentq(
        lambda e: stats.norm.cdf(1 / (2 * s) - e * s) - math.exp(e) * stats.norm.cdf(-1 / (2 * s) - e * s) - DELTA, 0.0, 100.0
    )
    assert eps == pytest.approx(exact, rel=2e-3)
    assert 9.0 < eps < 10.5  # with 8 clients and full participation z = 2 is far from a small ε


# --- the descriptor's sensitivity -------------------------------------------------------------

@given(arrays(np.float64, 48, elements=finite), arrays(np.float64, 48, elements=finite), st.floats(1e-3, 1e4))
def test_bounded_descriptors_are_at_most_sqrt2_b_apart(x, y, b):
    """Δ₂ = √2·B holds for any inputs (negatives included): both projections lie in {x ≥ 0, ‖x‖ ≤ B}."""
    bx, by = dp.bound_descriptor(x, b), dp.bound_descriptor(y, b)
    assert (bx >= 0).all() and dp.l2_norm(bx) <= b * (1 + 1e-12)
    assert dp.l2_norm(bx - by) <= dp.descriptor_sensitivity(b) * (1 + 1e-12)


def test_the_sensitivity_bound_is_attained_and_needs_the_non_negativity():
    b = 3.0
    e1, e2 = np.eye(48)[0] * 10, np.eye(48)[1] * 10
    assert dp.l2_norm(dp.bound_descriptor(e1, b) - dp.bound_descriptor(e2, b)) == pytest.approx(math.sqrt(2) * b)
    # a plain ball projection (no step 1) lets x and -x through: 2B apart
    assert dp.l2_norm(dp.clip_by_norm(e1, b) - dp.clip_by_norm(-e1, b)) == pytest.approx(2 * b)
    np.testing.assert_array_equal(dp.bound_descriptor(-e1, b), np.zeros(48))


clouds = st.tuples(st.integers(3, 24), st.integers(1, 4)).flatmap(
    lambda nd: arrays(np.float64, nd, elements=st.floats(-1.0, 1.0, allow_nan=False, allow_infinity=False))
)


@settings(max_examples=40, deadline=None)
@given(clouds, clouds, st.sampled_from([2.0, 20.0, 200.0]))
def test_descriptors_of_any_two_datasets_after_bounding_are_within_the_sensitivity(X, Y, b):
    """Client-level adjacency: the whole dataset changes (even its size and dimension)."""
    px, py = descriptor(X, n_sub=80), descriptor(Y, n_sub=80)
    assert (px >= 0).all() and (py >= 0).all()  # the premise of the bound
    gap = dp.l2_norm(dp.bound_descriptor(px, b) - dp.bound_descriptor(py, b))
    assert gap <= dp.descriptor_sensitivity(b) * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(clouds, st.sampled_from([5, 20]))
def test_descriptor_norm_bound_holds_so_bounding_at_it_changes_nothing(X, n_thresholds):
    phi = descriptor(X, n_sub=80, n_thresholds=n_thresholds)
    diam = max(dp.l2_norm(a - b_) for a in X for b_ in X)
    bound = dp.descriptor_norm_bound(X.shape[0], n_thresholds, diam)
    assert dp.l2_norm(phi) <= bound
    np.testing.assert_array_equal(dp.bound_descriptor(phi, bound), phi)


def test_descriptor_norm_bound_by_hand():
    # n = 3: β0 ≤ 2, β1 ≤ 1; L = 1; D = 1 — ‖φ‖² ≤ (2·4 + ln2² + 2 + 1) + (2·1 + 0 + 1 + 0)
    D = 1.0 * (1 + 1e-5)
    expected = math.sqrt(2 * 4 + math.log(2) ** 2 + 2 * D**2 + 1 + 2 * 1 + 1 * D**2 + 0)
    assert dp.descriptor_norm_bound(3, 1, 1.0) == pytest.approx(expected, rel=1e-14)
    assert 1.4e4 < dp.descriptor_norm_bound(80, 20, math.sqrt(20)) < 1.5e4  # the paper's n_sub and L: loose


# --- the descriptor mechanism -----------------------------------------------------------------

def test_descriptor_mechanism_noise_scale_and_its_epsilon():
    pytest.importorskip("dp_accounting")
    from topofl.privacy.accounting import analytic_gaussian_sigma, gaussian_epsilon

    phi = descriptor(np.random.default_rng(0).uniform(size=(60, 3)))
    b, eps = 100.0, 1.0
    releases = [dp.descriptor_mechanism(phi, b, eps, DELTA, np.random.default_rng(k)) for k in range(400)]
    r = releases[0]
    assert r.sensitivity == pytest.approx(math.sqrt(2) * b)
    assert r.sigma == pytest.approx(math.sqrt(2) * b * analytic_gaussian_sigma(eps, DELTA), rel=1e-12)
    noise = np.stack([x.phi for x in releases]) - dp.bound_descriptor(phi, b)
    assert noise.std() == pytest.approx(r.sigma, rel=0.02)  # 19 200 draws
    # the accountant gives back the ε the noise was calibrated for
    assert gaussian_epsilon(r.sigma / r.sensitivity, DELTA, 1, "pld") == pytest.approx(eps, rel=2e-3)
    assert r.clipped == (dp.l2_norm(phi) > b)


def test_descriptor_mechanism_classic_calibration_and_clipping_flag():
    pytest.importorskip("dp_accounting")
    phi = np.arange(48.0)  # norm ≈ 191
    r = dp.descriptor_mechanism(phi, 10.0, 0.5, DELTA, np.random.default_rng(0), method="classic")
    assert r.sigma == pytest.approx(math.sqrt(2) * 10.0 * math.sqrt(2 * math.log(1.25 / DELTA)) / 0.5, rel=1e-14)
    assert r.clipped and (r.epsilon, r.delta) == (0.5, DELTA)
    with pytest.raises(ValueError, match=r"epsilon must be in \(0.0, 1.0\); got 2.0"):
        dp.descriptor_mechanism(phi, 10.0, 2.0, DELTA, np.random.default_rng(0), method="classic")
    with pytest.raises(ValueError, match=r"radius must be in \(0.0, inf\); got 0.0"):
        dp.descriptor_mechanism(phi, 0.0, 0.5, DELTA, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"phi must be a non-empty 1-D descriptor"):
        dp.descriptor_mechanism(np.ones((2, 3)), 1.0, 0.5, DELTA, np.random.default_rng(0))


# --- configuration and per-run report ---------------------------------------------------------

@pytest.mark.parametrize("field,value,match", [
    ("clip", 0.0, r"clip must be in \(0.0, inf\); got 0.0"),
    ("noise_multiplier", 0.0, r"noise_multiplier must be in \(0.0, inf\); got 0.0"),
    ("delta", 1.0, r"delta must be in \(0.0, 1.0\); got 1.0"),
    ("sampling_rate", 0.0, r"sampling_rate must be in \(0.0, 1.0\]; got 0.0"),
    ("accountant", "moments", r"accountant must be one of rdp, pld; got 'moments'"),
    ("descriptor_radius", -1.0, r"descriptor_radius must be in \[0.0, inf\); got -1.0"),
    ("descriptor_epsilon", 0.0, r"descriptor_epsilon must be in \(0.0, inf\); got 0.0"),
    ("descriptor_method", "laplace", r"descriptor_method must be one of analytic, classic; got 'laplace'"),
])
def test_dp_config_validates_every_field(field, value, match):
    with pytest.raises(ValueError, match=match):
        dp.DPConfig(**{field: value})


def test_dp_config_classic_needs_epsilon_below_one_and_parses_strings():
    with pytest.raises(ValueError, match=r"descriptor_epsilon must be in \(0.0, 1.0\); got 1.0"):
        dp.DPConfig(descriptor_method="classic", descriptor_epsilon=1.0)
    cfg = dp.DPConfig.from_dict({"clip": "0.5", "noise_multiplier": "4", "descriptor_radius": "50"})
    assert (cfg.clip, cfg.noise_multiplier, cfg.private_descriptors) == (0.5, 4.0, True)
    assert cfg.expected_clients(8) == 8.0 and dp.DPConfig(sampling_rate=0.25).expected_clients(8) == 2.0
    assert not dp.DPConfig().private_descriptors
    with pytest.raises(ValueError, match="unknown hyper-parameter"):
        dp.DPConfig.from_dict({"sigma": 1})


def test_privacy_report_of_both_channels():
    pytest.importorskip("dp_accounting")
    from topofl.privacy.accounting import combined_epsilon, dp_fedavg_epsilon, gaussian_epsilon

    cfg = dp.DPConfig(noise_multiplier=4.0, accountant="pld", descriptor_radius=100.0, descriptor_epsilon=0.5)
    rep = dp.privacy_report(cfg, rounds=15, descriptor_releases=1)
    assert rep["dp_epsilon"] == pytest.approx(dp_fedavg_epsilon(4.0, 1.0, 15, DELTA, "pld"))
    assert rep["dp_delta"] == DELTA
    assert rep["dp_epsilon_descriptor"] == pytest.approx(0.5, rel=2e-3)
    s = dp.gaussian_sigma(1.0, 0.5, DELTA)
    assert rep["dp_epsilon_total"] == pytest.approx(combined_epsilon(DELTA, [(2.0, 15), (s, 1)], "pld"))
    assert rep["dp_epsilon_total"] > max(rep["dp_epsilon"], rep["dp_epsilon_descriptor"])
    assert gaussian_epsilon(2.0, DELTA, 15, "pld") < rep["dp_epsilon_total"]
    # updates only, or partial participation: no total
    assert set(dp.privacy_report(dp.DPConfig(), 3)) == {"dp_epsilon", "dp_delta", "dp_noise_multiplier", "dp_clip", "dp_sampling_rate"}
    partial = dp.privacy_report(dp.DPConfig(sampling_rate=0.5, descriptor_radius=10.0), 3, descriptor_releases=2)
    assert "dp_epsilon_descriptor" in partial and "dp_epsilon_total" not in partial
