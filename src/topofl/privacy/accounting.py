"""Privacy-loss accounting of the DP mechanisms of :mod:`topofl.privacy.dp`, through Google's
``dp-accounting`` library (never a hand-rolled accountant).

The ``"rdp"`` and ``"pld"`` accountants of that library; every function states its neighbouring
relation. The library is optional (``pip install 'topofl[privacy]'``), imported on first use.
See docs/internals.md#topofl.privacy.accounting for the accountants and the relations.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

from topofl._validation import check_choice, check_int, check_range

log = logging.getLogger(__name__)

#: the accountants of ``dp-accounting`` offered here
ACCOUNTANTS = ("rdp", "pld")
#: neighbouring relations of :func:`dp_fedavg_epsilon` (see its docstring)
ADJACENCIES = ("add_remove", "replace")
#: PLD discretisation of the privacy loss (the library's default, 1e-4, is a pessimistic grid)
PLD_DISCRETISATION = 1e-4
#: smallest noise multiplier searched by :func:`noise_for_epsilon`, and its tolerance on z
_MIN_NOISE = 1e-3
_CALIBRATION_TOL = 1e-6
_INSTALL_HINT = "pip install 'topofl[privacy]'  (or: pip install dp-accounting)"


def dp_accounting() -> Any:
    """Import and return the ``dp_accounting`` package, or raise ``ImportError`` saying how to install it."""
    try:
        import dp_accounting as dpa
    except ImportError as exc:  # pragma: no cover - exercised by monkeypatching sys.modules in the tests
        raise ImportError(
            "differential-privacy accounting needs Google's dp-accounting library, which is not installed: "
            f"{_INSTALL_HINT}"
        ) from exc
    return dpa


def _accountant(name: str, pld_interval: float = PLD_DISCRETISATION) -> Any:
    """A fresh accountant of the library (add-or-remove-one relation)."""
    check_choice("accountant", name, ACCOUNTANTS)
    dpa = dp_accounting()
    if name == "rdp":
        return dpa.rdp.RdpAccountant()
    return dpa.pld.PLDAccountant(value_discretization_interval=pld_interval)


def _check_delta(delta: float) -> None:
    check_range("delta", delta, 0.0, 1.0, low_open=True, high_open=True)


def _pld_interval(releases: Sequence[tuple[float, int]]) -> float:
    """PLD grid for compositions of *unsampled* Gaussians ``(s, count)``: 1e-4 relative to the
    privacy loss's mean μ = 1/(2 s_eff²) when μ > 1 (s_eff = (Σ count / s²)^(-1/2), the single
    Gaussian they compose to). A fixed 1e-4 grid needs ~μ·10⁴ points: gigabytes at s ≈ 0.01.
    The PLD stays a pessimistic (upper) bound at any grid.
    """
    mu = 0.5 * sum(count / (s * s) for s, count in releases)
    return PLD_DISCRETISATION * max(1.0, mu)


def _gaussian_rounds_event(noise_multiplier: float, sampling_rate: float, rounds: int) -> Any:
    """``rounds`` compositions of a (Poisson-subsampled, if q < 1) Gaussian event."""
    dpa = dp_accounting()
    event = dpa.GaussianDpEvent(noise_multiplier)
    if sampling_rate < 1.0:
        event = dpa.PoissonSampledDpEvent(sampling_rate, event)
    return dpa.SelfComposedDpEvent(event, rounds)


def epsilon_of_event(event: Any, delta: float, accountant: str = "pld",
                     pld_interval: float = PLD_DISCRETISATION) -> float:
    """ε at ``delta`` of any ``dp_accounting`` event, by a fresh accountant of the named kind.

    Parameters
    ----------
    event : dp_accounting.DpEvent
        What was released (compose several with ``dp_accounting.ComposedDpEvent``).
    delta : float
        Target δ in (0, 1).
    accountant : {"rdp", "pld"}
        Which accountant of the library.
    pld_interval : float
        Discretisation of the privacy loss for ``"pld"`` (> 0; coarser is faster and more pessimistic).

    Returns
    -------
    float
        ε (``inf`` when the event is not private, e.g. a noise multiplier of 0).
    """
    _check_delta(delta)
    check_range("pld_interval", pld_interval, 0.0, low_open=True)
    acc = _accountant(accountant, pld_interval)
    if not acc.supports(event):
        raise ValueError(f"the {accountant!r} accountant of dp-accounting does not support the event {event!r}")
    return float(acc.compose(event).get_epsilon(delta))


def dp_fedavg_epsilon(
    noise_multiplier: float,
    sampling_rate: float,
    rounds: int,
    delta: float,
    accountant: str = "rdp",
    adjacency: str = "add_remove",
) -> float:
    """ε of DP-FedAvg after ``rounds`` rounds (McMahan et al. 2018, Algorithm 1 and Theorem 1).

    Each round samples every client independently with probability q (Poisson sampling), sums
    their deltas clipped to L2 norm C and adds N(0, (z·C)² I) to the sum
    (:func:`topofl.privacy.dp.dp_fedavg_aggregate`); the rounds compose adaptively. The event
    accounted is ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), rounds)``
    (``GaussianDpEvent(z)`` alone when q = 1).

    Parameters
    ----------
    noise_multiplier : float
        z = σ / C, the noise standard deviation on the sum over the clip norm (> 0).
    sampling_rate : float
        q in (0, 1], the probability that a client takes part in a round (1: full participation).
    rounds : int
        Number of rounds released (>= 1; every noisy aggregate counts, including the last).
    delta : float
        Target δ in (0, 1); conventionally below 1 / (number of clients).
    accountant : {"rdp", "pld"}
        Which accountant of ``dp-accounting``.
    adjacency : {"add_remove", "replace"}
        ``"add_remove"`` (the paper's and the library's): neighbouring federations differ by the
        presence of one client, the sum moves by at most C. ``"replace"``: the set of clients is
        public and one client's data may be replaced by anything; both clipped deltas lie in the
        C-ball, so the sum moves by up to 2C and the effective noise multiplier is z / 2. Only
        for full participation (q = 1), where it is the exact Gaussian mechanism.

    Returns
    -------
    float
        The ε of the run at ``delta``.
    """
    check_range("noise_multiplier", noise_multiplier, 0.0, low_open=True)
    check_range("sampling_rate", sampling_rate, 0.0, 1.0, low_open=True)
    check_int("rounds", rounds, 1)
    check_choice("adjacency", adjacency, ADJACENCIES)
    z = noise_multiplier
    if adjacency == "replace":
        if sampling_rate < 1.0:
            raise ValueError(
                "adjacency='replace' is accounted only for full participation (sampling_rate = 1); "
                f"got sampling_rate={sampling_rate!r}"
            )
        z = noise_multiplier / 2.0
    interval = _pld_interval([(z, rounds)]) if sampling_rate == 1.0 else PLD_DISCRETISATION
    return epsilon_of_event(_gaussian_rounds_event(z, sampling_rate, rounds), delta, accountant, interval)


def gaussian_epsilon(sigma_over_sensitivity: float, delta: float, compositions: int = 1,
                     accountant: str = "pld") -> float:
    """ε of ``compositions`` releases of a Gaussian mechanism with noise σ = s·Δ (no subsampling).

    The descriptor channel (:func:`topofl.privacy.dp.descriptor_mechanism`): each release adds
    N(0, σ² I) to a vector whose L2 sensitivity is Δ; ``compositions`` is the number of fresh
    releases (a cached noisy descriptor sent again costs nothing more: post-processing).

    Parameters
    ----------
    sigma_over_sensitivity : float
        s = σ / Δ (> 0).
    delta : float
        Target δ in (0, 1).
    compositions : int
        Number of independent releases (>= 1).
    accountant : {"rdp", "pld"}
        Which accountant of ``dp-accounting``.

    Returns
    -------
    float
        ε at ``delta``.
    """
    check_range("sigma_over_sensitivity", sigma_over_sensitivity, 0.0, low_open=True)
    check_int("compositions", compositions, 1)
    event = _gaussian_rounds_event(sigma_over_sensitivity, 1.0, compositions)
    return epsilon_of_event(event, delta, accountant, _pld_interval([(sigma_over_sensitivity, compositions)]))


def combined_epsilon(
    delta: float,
    gaussian_releases: Sequence[tuple[float, int]],
    accountant: str = "pld",
) -> float:
    """ε of several Gaussian channels released about the same client, composed (no subsampling).

    pTopoFL with full participation releases, about each client, a noisy cluster aggregate per
    round and a noisy descriptor per descriptor computation. Under one neighbouring relation
    (e.g. "one client's data replaced": updates at s = z / 2, descriptors at s = σ_φ / Δ_φ),
    each channel is a list of Gaussian releases with its own s = σ / Δ; this composes them.

    Parameters
    ----------
    delta : float
        Target δ in (0, 1).
    gaussian_releases : sequence of (float, int)
        ``(s, count)`` per channel: σ / Δ under the chosen relation, and how many releases.
        A count of 0 leaves the channel out.
    accountant : {"rdp", "pld"}
        Which accountant of ``dp-accounting``.

    Returns
    -------
    float
        ε at ``delta`` (0 when nothing was released).
    """
    _check_delta(delta)
    events, used = [], []
    for i, (s, count) in enumerate(gaussian_releases):
        check_range(f"gaussian_releases[{i}] noise multiplier", s, 0.0, low_open=True)
        check_int(f"gaussian_releases[{i}] count", count, 0)
        if count:
            events.append(_gaussian_rounds_event(s, 1.0, count))
            used.append((s, count))
    if not events:
        return 0.0
    return epsilon_of_event(dp_accounting().ComposedDpEvent(events), delta, accountant, _pld_interval(used))


def analytic_gaussian_sigma(epsilon: float, delta: float) -> float:
    """Smallest σ / Δ for which one Gaussian release is (ε, δ)-DP: the analytic Gaussian
    mechanism (Balle and Wang 2018, "Improving the Gaussian mechanism for differential privacy",
    ICML, Theorem 8 and Algorithm 1), as computed by ``dp_accounting.get_sigma_gaussian``.

    Valid for every ε > 0 (the classic σ = Δ·sqrt(2 ln(1.25/δ))/ε needs ε < 1 and is larger).
    """
    check_range("epsilon", epsilon, 0.0, low_open=True)
    _check_delta(delta)
    return float(dp_accounting().get_sigma_gaussian(epsilon, delta))


def noise_for_epsilon(
    target_epsilon: float,
    delta: float,
    rounds: int = 1,
    sampling_rate: float = 1.0,
    accountant: str = "pld",
) -> float:
    """Smallest noise multiplier z for which ``rounds`` rounds of DP-FedAvg (sampling rate q)
    stay within (ε, δ), by the library's calibration (``dp_accounting.calibrate_dp_mechanism``:
    Brent's method on the accountant's ε, returning a z whose ε does not exceed the target).

    With ``rounds = 1`` and ``sampling_rate = 1`` this is σ / Δ of one Gaussian release
    (:func:`analytic_gaussian_sigma` up to the PLD's discretisation). The search starts with the
    RDP accountant, whose z brackets the PLD's from above, and is accurate to 1e-6 in z.

    Parameters
    ----------
    target_epsilon : float
        ε > 0 to meet.
    delta : float
        δ in (0, 1).
    rounds : int
        Number of rounds (>= 1).
    sampling_rate : float
        q in (0, 1].
    accountant : {"rdp", "pld"}
        Which accountant of ``dp-accounting`` calibrates.

    Returns
    -------
    float
        z (add-or-remove-one-client relation, as :func:`dp_fedavg_epsilon` by default).
    """
    check_range("target_epsilon", target_epsilon, 0.0, low_open=True)
    _check_delta(delta)
    check_int("rounds", rounds, 1)
    check_range("sampling_rate", sampling_rate, 0.0, 1.0, low_open=True)
    check_choice("accountant", accountant, ACCOUNTANTS)
    dpa = dp_accounting()

    def event(z: float) -> Any:
        return _gaussian_rounds_event(z, sampling_rate, rounds)

    # RDP first: cheap at any z, and (an upper bound looser than the PLD's) it brackets the PLD's z from above
    if epsilon_of_event(event(_MIN_NOISE), delta, "rdp") <= target_epsilon:
        return _MIN_NOISE  # (e.g. q < δ): almost no noise meets the target
    z_rdp = float(dpa.calibrate_dp_mechanism(
        lambda: _accountant("rdp"), event, target_epsilon, delta,
        bracket_interval=dpa.LowerEndpointAndGuess(_MIN_NOISE, 1.0), tol=_CALIBRATION_TOL,
    ))
    z = z_rdp
    if accountant == "pld":
        # one PLD grid over the search (1e-4 relative to the target); a lower end a few halvings down
        interval = PLD_DISCRETISATION * max(1.0, target_epsilon)
        hi = z_rdp
        while epsilon_of_event(event(hi), delta, "pld", interval) > target_epsilon:  # grid pessimism near the RDP z
            hi *= 1.01
        lo = hi
        for _ in range(4):
            lo /= 2.0
            if epsilon_of_event(event(lo), delta, "pld", interval) > target_epsilon:
                z = float(dpa.calibrate_dp_mechanism(
                    lambda: _accountant("pld", interval), event, target_epsilon, delta,
                    bracket_interval=dpa.ExplicitBracketInterval(lo, hi), tol=_CALIBRATION_TOL,
                ))
                break
        else:
            z = hi  # meets the target; not searched below hi / 16
    log.debug("noise_for_epsilon: z=%.6g for epsilon=%g, delta=%g, rounds=%d, q=%g (%s)", z, target_epsilon, delta,
              rounds, sampling_rate, accountant)
    return z


def classic_gaussian_sigma(epsilon: float, delta: float) -> float:
    """σ / Δ = sqrt(2 ln(1.25/δ)) / ε of the classic Gaussian mechanism (Dwork and Roth 2014,
    "The algorithmic foundations of differential privacy", Theorem A.1; requires 0 < ε < 1).

    A closed-form calibration, not an accountant; kept for comparison with the analytic one.
    """
    check_range("epsilon", epsilon, 0.0, 1.0, low_open=True, high_open=True)
    _check_delta(delta)
    return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
