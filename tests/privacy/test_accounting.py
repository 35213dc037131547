"""Privacy accounting through dp-accounting (topofl.privacy.accounting), checked against closed forms.

The oracle is the exact (ε, δ) curve of the Gaussian mechanism (Balle and Wang 2018, Theorem 8):
δ(ε) = Φ(1/(2s) − ε·s) − e^ε·Φ(−1/(2s) − ε·s) for noise σ = s·Δ, and T Gaussian releases at
s compose exactly to one at s/√T (Gaussian DP composition, Dong, Roth and Su 2022). The PLD accountant
must match it to its grid, the RDP accountant must not be below it.
"""
from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import optimize, stats

pytest.importorskip("dp_accounting")

from topofl.privacy import accounting as acc  # noqa: E402

DELTA = 1e-5


def exact_gaussian_epsilon(s: float, delta: float) -> float:
    """ε of one Gaussian release with σ/Δ = s at δ (Balle and Wang 2018, Thm 8), by root finding."""

    def gap(eps: float) -> float:  # e^ε·Φ(·) in log space: ε reaches thousands at s = 0.01
        return stats.norm.cdf(1 / (2 * s) - eps * s) - math.exp(eps + stats.norm.logcdf(-1 / (2 * s) - eps * s)) - delta

    if gap(0.0) <= 0:
        return 0.0
    return optimize.brentq(gap, 0.0, 10.0 + 1.0 / s**2, xtol=1e-12)


@pytest.mark.parametrize("s,count", [(1.0, 1), (3.0, 1), (0.8, 4), (4.0, 15)])
def test_gaussian_epsilon_matches_the_closed_form(s, count):
    exact = exact_gaussian_epsilon(s / math.sqrt(count), DELTA)
    pld = acc.gaussian_epsilon(s, DELTA, count, "pld")
    rdp = acc.gaussian_epsilon(s, DELTA, count, "rdp")
    assert exact <= pld <= exact * (1 + 2e-3) + 1e-3  # pessimistic PLD, within its grid
    assert rdp >= exact - 1e-9  # RDP's conversion is an upper bound
    assert rdp <= 1.5 * exact  # and not a vacuous one


def test_dp_fedavg_with_full_participation_is_the_gaussian_mechanism_composed():
    """q = 1: T rounds at noise multiplier z are one Gaussian release at z/√T (add/remove: Δ = C)."""
    z, T = 2.0, 15
    exact = exact_gaussian_epsilon(z / math.sqrt(T), DELTA)
    assert acc.dp_fedavg_epsilon(z, 1.0, T, DELTA, "pld") == pytest.approx(exact, rel=2e-3)
    # replacing a client's data moves the sum by 2C: the noise multiplier is halved
    exact_replace = exact_gaussian_epsilon(z / 2 / math.sqrt(T), DELTA)
    assert acc.dp_fedavg_epsilon(z, 1.0, T, DELTA, "pld", adjacency="replace") == pytest.approx(exact_replace, rel=2e-3)


def test_subsampled_rounds_rdp_bounds_pld_and_a_published_moments_accountant_figure():
    """DP-SGD on MNIST, q = 256/60000, z = 1.3, 20 epochs (4688 steps), δ = 1e-5: the moments accountant
    (Abadi et al. 2016) gives ε = 1.34 (Bu, Dong, Long and Su 2020, "Deep learning with Gaussian
    differential privacy", Fig. 4). RDP with the library's improved conversion and PLD are tighter, not far off."""
    q, z, steps = 256 / 60000, 1.3, 4688
    rdp = acc.dp_fedavg_epsilon(z, q, steps, DELTA, "rdp")
    pld = acc.dp_fedavg_epsilon(z, q, steps, DELTA, "pld")
    assert 0.7 * 1.34 < pld <= rdp <= 1.34


def test_sampling_amplifies_privacy():
    """A subsampled round is more private than a full one (privacy amplification by sampling)."""
    full = acc.dp_fedavg_epsilon(1.0, 1.0, 10, DELTA, "rdp")
    sampled = acc.dp_fedavg_epsilon(1.0, 0.1, 10, DELTA, "rdp")
    assert sampled < full / 3


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_monotone_in_noise_and_rounds(accountant):
    eps_z = [acc.dp_fedavg_epsilon(z, 1.0, 15, DELTA, accountant) for z in (0.7, 1.0, 2.0, 4.0, 8.0)]
    assert bool(np.all(np.diff(eps_z) < 0))
    eps_t = [acc.dp_fedavg_epsilon(2.0, 1.0, t, DELTA, accountant) for t in (1, 5, 15, 50)]
    assert bool(np.all(np.diff(eps_t) > 0))
    eps_q = [acc.dp_fedavg_epsilon(2.0, q, 15, DELTA, "rdp") for q in (0.05, 0.2, 0.5, 1.0)]
    assert bool(np.all(np.diff(eps_q) > 0))


@pytest.mark.parametrize("accountant,target,rounds,q", [
    ("rdp", 1.0, 15, 1.0), ("pld", 1.0, 15, 1.0), ("pld", 4.0, 1, 1.0), ("rdp", 2.0, 50, 0.2), ("pld", 2.0, 20, 0.25),
])
def test_calibrated_noise_gives_back_the_target_epsilon(accountant, target, rounds, q):
    z = acc.noise_for_epsilon(target, DELTA, rounds, q, accountant)
    eps = acc.dp_fedavg_epsilon(z, q, rounds, DELTA, accountant)
    assert eps <= target + 1e-9  # never less private than asked
    assert eps == pytest.approx(target, rel=2e-3)  # and not wastefully noisy
    assert acc.dp_fedavg_epsilon(z * 0.99, q, rounds, DELTA, accountant) > target


def test_calibration_for_one_release_is_the_analytic_gaussian():
    s = acc.analytic_gaussian_sigma(1.0, DELTA)
    assert exact_gaussian_epsilon(s, DELTA) == pytest.approx(1.0, abs=1e-8)
    assert acc.noise_for_epsilon(1.0, DELTA, 1, 1.0, "pld") == pytest.approx(s, rel=2e-3)
    assert acc.gaussian_epsilon(s, DELTA, 1, "pld") == pytest.approx(1.0, rel=2e-3)


def test_classic_calibration_is_the_closed_form_and_never_below_the_analytic():
    for eps in (0.1, 0.5, 0.99):
        classic = acc.classic_gaussian_sigma(eps, DELTA)
        assert classic == pytest.approx(math.sqrt(2 * math.log(1.25 / DELTA)) / eps, rel=1e-15)
        assert classic >= acc.analytic_gaussian_sigma(eps, DELTA)  # so the classic σ is (ε, δ)-DP too
    with pytest.raises(ValueError, match=r"epsilon must be in \(0.0, 1.0\); got 1.5"):
        acc.classic_gaussian_sigma(1.5, DELTA)


def test_combined_channels_compose_like_one_gaussian():
    """Gaussians at s_i, c_i times each, compose to one at (Σ c_i / s_i²)^(-1/2)."""
    releases = [(4.0, 15), (2.0, 1)]
    s_eff = sum(c / s**2 for s, c in releases) ** -0.5
    exact = exact_gaussian_epsilon(s_eff, DELTA)
    assert acc.combined_epsilon(DELTA, releases, "pld") == pytest.approx(exact, rel=2e-3)
    assert acc.combined_epsilon(DELTA, [(4.0, 15), (2.0, 0)], "pld") == pytest.approx(acc.gaussian_epsilon(4.0, DELTA, 15), rel=1e-9)
    assert acc.combined_epsilon(DELTA, [], "rdp") == 0.0


def test_tiny_noise_is_accounted_without_exhausting_memory():
    """σ/Δ = 0.01 needs ~10^8 grid points at a fixed 1e-4 PLD grid; the grid scales with the loss."""
    exact = exact_gaussian_epsilon(0.01, DELTA)
    assert acc.gaussian_epsilon(0.01, DELTA, 1, "pld") == pytest.approx(exact, rel=2e-3)


@pytest.mark.parametrize("call,match", [
    (lambda: acc.dp_fedavg_epsilon(1.0, 1.0, 10, 0.0), r"delta must be in \(0.0, 1.0\); got 0.0"),
    (lambda: acc.dp_fedavg_epsilon(0.0, 1.0, 10, DELTA), r"noise_multiplier must be in \(0.0, inf\); got 0.0"),
    (lambda: acc.dp_fedavg_epsilon(1.0, 1.5, 10, DELTA), r"sampling_rate must be in \(0.0, 1.0\]; got 1.5"),
    (lambda: acc.dp_fedavg_epsilon(1.0, 1.0, 0, DELTA), r"rounds must be in \[1, inf\); got 0"),
    (lambda: acc.dp_fedavg_epsilon(1.0, 1.0, 5, DELTA, "moments"), r"accountant must be one of rdp, pld; got 'moments'"),
    (lambda: acc.dp_fedavg_epsilon(1.0, 0.5, 5, DELTA, "rdp", "replace"), r"adjacency='replace' .* got sampling_rate=0.5"),
    (lambda: acc.gaussian_epsilon(1.0, DELTA, 0), r"compositions must be in \[1, inf\); got 0"),
    (lambda: acc.noise_for_epsilon(-1.0, DELTA), r"target_epsilon must be in \(0.0, inf\); got -1.0"),
    (lambda: acc.combined_epsilon(DELTA, [(0.0, 3)]), r"gaussian_releases\[0\] noise multiplier must be in"),
])
def test_bad_arguments_name_the_field(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_missing_library_raises_a_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "dp_accounting", None)  # makes `import dp_accounting` fail
    with pytest.raises(ImportError, match=r"dp-accounting.*pip install 'topofl\[privacy\]'"):
        acc.dp_fedavg_epsilon(1.0, 1.0, 10, DELTA)


def test_the_library_is_imported_only_on_first_use():
    code = ("import sys, topofl.privacy, topofl.privacy.dp, topofl.privacy.accounting\n"
            "assert 'dp_accounting' not in sys.modules\n"
            "topofl.privacy.accounting.gaussian_epsilon(2.0, 1e-5)\n"
            "assert 'dp_accounting' in sys.modules\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_epsilon_of_a_non_private_event_is_infinite():
    dpa = acc.dp_accounting()
    assert np.isinf(acc.epsilon_of_event(dpa.NonPrivateDpEvent(), DELTA, "rdp"))
