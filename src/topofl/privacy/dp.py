"""Differential-privacy mechanisms of the two channels a pTopoFL client transmits (paper §3.6).

Model updates: client-level DP-FedAvg (McMahan et al. 2018, Algorithm 1), :func:`clip_by_norm` and
:func:`dp_fedavg_aggregate` (central DP, fixed denominator). Descriptors: the Gaussian mechanism on φ,
:func:`descriptor_mechanism`, after :func:`bound_descriptor` projects φ onto {x ≥ 0, ‖x‖₂ ≤ B}, which bounds
its sensitivity by √2·B (:func:`descriptor_sensitivity`). Pure functions over arrays; ε via
:func:`privacy_report`. See docs/internals.md#topofl.privacy.dp for the mechanisms and the sensitivity proof.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from topofl._validation import check_choice, check_int, check_range
from topofl.config import Config, hp

log = logging.getLogger(__name__)

#: calibrations of the Gaussian mechanism: analytic (Balle and Wang 2018) or classic (Dwork and Roth 2014)
GAUSSIAN_METHODS = ("analytic", "classic")
#: relative slack on the diameter in :func:`descriptor_norm_bound`: the PH library computes in float32
_FLOAT32_SLACK = 1e-5


def l2_norm(x: np.ndarray) -> float:
    """Euclidean norm of a finite vector, computed as m·‖x/m‖ (m = max |x_i|) so that it neither
    overflows nor underflows; ``ValueError`` if ``x`` holds a non-finite value.
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    if not np.isfinite(x).all():
        raise ValueError("vector to clip holds non-finite values")
    m = float(np.max(np.abs(x))) if x.size else 0.0
    if m == 0.0:
        return 0.0
    if 1e-150 < m < 1e150:
        return float(np.sqrt(x @ x))
    y = x / m
    return m * float(np.sqrt(y @ y))


def clip_by_norm(delta: np.ndarray, clip: float) -> np.ndarray:
    """Δ · min(1, C / ‖Δ‖₂): the vector scaled into the L2 ball of radius C (McMahan et al. 2018,
    Algorithm 1, ``ClipFn``, flat clipping).

    Parameters
    ----------
    delta : array
        A client's model delta (any shape; finite).
    clip : float
        C > 0.

    Returns
    -------
    ndarray
        A float64 copy, unchanged when ‖Δ‖ ≤ C, else of norm C (to rounding: at most C·(1 + 1e-15)).
    """
    check_range("clip", clip, 0.0, low_open=True)
    d = np.array(delta, dtype=np.float64)
    norm = l2_norm(d)
    if norm <= clip:
        return d
    out: np.ndarray = d * (clip / norm)
    return out


@dataclass(frozen=True)
class DPAggregate:
    """What :func:`dp_fedavg_aggregate` released and the numbers needed to account for it.

    Attributes
    ----------
    update : ndarray of shape (d,)
        The noisy mean delta, (Σ_k w_k·clip(Δ_k) + N(0, (zC)² I)) / expected_clients; the server
        adds it to the model it sent.
    sensitivity : float
        L2 sensitivity of the noised sum under add/remove-one-client: C (weights are at most 1).
    noise_std : float
        Standard deviation of the noise on the sum, z·C.
    noise_std_update : float
        Standard deviation of the noise on ``update``, z·C / expected_clients.
    norms : tuple of float
        ‖Δ_k‖ before clipping, per row (kept on the server; not released).
    clipped : tuple of int
        Rows whose delta was clipped.
    """

    update: np.ndarray
    sensitivity: float
    noise_std: float
    noise_std_update: float
    norms: tuple[float, ...]
    clipped: tuple[int, ...]


@dataclass(frozen=True)
class ChangeRows:
    """Clients' changes θ_k − θ_sent,k as the rows of a (n, d) matrix that is never built: row k is computed in
    float64 when read (:func:`dp_fedavg_aggregate` reads each row once), so a round of deep-model replies
    is not copied into one K × d stack.
    """

    replies: Sequence[np.ndarray]
    sent: Sequence[np.ndarray]
    size: int

    def __post_init__(self) -> None:
        if len(self.replies) != len(self.sent):
            raise ValueError(f"{len(self.replies)} replies but {len(self.sent)} models sent")

    ndim = 2

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.replies), self.size

    def __getitem__(self, k: int) -> np.ndarray:
        row: np.ndarray = np.asarray(self.replies[k], dtype=np.float64) - self.sent[k]
        if row.shape != (self.size,):
            raise ValueError(f"deltas row {k} has shape {row.shape}; expected ({self.size},)")
        return row


def dp_fedavg_aggregate(
    deltas: np.ndarray | ChangeRows,
    clip: float,
    noise_multiplier: float,
    rng: np.random.Generator,
    expected_clients: float,
    weights: np.ndarray | None = None,
) -> DPAggregate:
    """One round of DP-FedAvg's server (McMahan et al. 2018, Algorithm 1, fixed-denominator
    estimator f̃_f): clip each delta to L2 ≤ C, sum, add N(0, (z·C)² I), divide by the expected
    number of participants.

    Parameters
    ----------
    deltas : array of shape (n, d), or :class:`ChangeRows`
        One row per participating client: its model minus the model the server sent it. ``n`` may
        be 0 (nobody sampled: the release is noise alone, and it still counts as a round). Each row
        is read once, in order (a :class:`ChangeRows` computes it then: no n × d copy).
    clip : float
        C > 0, the clip norm.
    noise_multiplier : float
        z >= 0; the noise on the sum has standard deviation z·C (z = 0: no noise, no privacy).
    rng : numpy.random.Generator
        Source of the noise (the server's; never one a client could predict).
    expected_clients : float
        The fixed denominator q·N (N clients, sampling rate q); with ``weights``, q·Σ_k w_k over
        all N clients. Must not depend on who took part this round.
    weights : array of shape (n,), optional
        McMahan et al.'s w_k in [0, 1] (e.g. min(n_k / ŵ, 1)), fixed before the round; default 1.
        They must not be computed from private data of this round.

    Returns
    -------
    DPAggregate
        The noisy mean delta and the sensitivity and noise scales to account for it.
    """
    D = deltas if isinstance(deltas, ChangeRows) else np.asarray(deltas, dtype=np.float64)
    if D.ndim != 2:
        raise ValueError(f"deltas must be a 2-D array (clients × parameters); got shape {D.shape}")
    check_range("clip", clip, 0.0, low_open=True)
    check_range("noise_multiplier", noise_multiplier, 0.0)
    check_range("expected_clients", expected_clients, 0.0, low_open=True)
    n, d = D.shape
    if weights is None:
        w = np.ones(n)
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (n,) or not np.isfinite(w).all() or (w < 0).any() or (w > 1).any():
            raise ValueError(f"weights must be {n} numbers in [0, 1] (one per row of deltas); "
                             f"got {np.asarray(weights).tolist()}")
    total = np.zeros(d)
    norms: list[float] = []
    clipped = []
    for k in range(n):  # one pass, a row at a time: clip, weigh, add
        row = D[k]
        if not np.isfinite(row).all():
            raise ValueError(f"deltas row {k} holds non-finite values")
        norms.append(l2_norm(row))
        if norms[k] > clip:
            row = row * (clip / norms[k])
            clipped.append(k)
        total += w[k] * row
    noise_std = noise_multiplier * clip
    if noise_std > 0:
        total += rng.normal(0.0, noise_std, size=d)
    if clipped:
        log.debug("dp_fedavg_aggregate: %d of %d deltas clipped to C=%g", len(clipped), n, clip)
    return DPAggregate(
        update=total / expected_clients,
        sensitivity=float(clip),
        noise_std=float(noise_std),
        noise_std_update=float(noise_std / expected_clients),
        norms=tuple(norms),
        clipped=tuple(clipped),
    )


def bound_descriptor(phi: np.ndarray, radius: float) -> np.ndarray:
    """Euclidean projection of φ onto {x ≥ 0, ‖x‖₂ ≤ B}: negative entries to 0, then scaling into
    the ball of radius B (docs/internals.md#topofl.privacy.dp, step 2). An honest descriptor is ≥ 0, so only the
    scaling can change it, and only when ‖φ‖ > B.
    """
    check_range("radius", radius, 0.0, low_open=True)
    x = np.maximum(np.array(phi, dtype=np.float64), 0.0)
    return clip_by_norm(x, radius)


def descriptor_sensitivity(radius: float) -> float:
    """Δ₂ = √2·B, the L2 sensitivity of :func:`bound_descriptor` (φ, B) when a client's whole data
    may change (docs/internals.md#topofl.privacy.dp, step 3; tight).
    """
    check_range("radius", radius, 0.0, low_open=True)
    return math.sqrt(2.0) * radius


def descriptor_norm_bound(n_points: int, n_thresholds: int, diameter: float) -> float:
    """Upper bound on ‖φ‖₂ for the descriptor of any n points of diameter ≤ D
    (``topofl.tda.descriptor``, Eq. 5 and Appendix B).

    With n points, β₀ ≤ n − 1 finite H0 pairs and β₁ ≤ (n−1)(n−2)/2 H1 pairs (each H1 birth is an
    edge that closes a cycle: at most C(n, 2) − (n − 1) of them); every death is at most the
    diameter (the full Rips complex is a cone). Hence, per dimension j: the count β_j; the entropy
    ≤ ln β_j; the amplitude (Σ pers²)^{1/2} ≤ √β_j·D; the persistent count ≤ ⌊β_j/2⌋; and each of
    the L Betti-curve values ≤ β_j. Every term grows with β_j, so
    ‖φ‖² ≤ Σ_j [(1 + L)·β_j² + (ln β_j)² + β_j·D² + ⌊β_j/2⌋²] at the largest β_j.

    Parameters
    ----------
    n_points : int
        Points that persistent homology sees (the subsample: min(n_k, n_sub)), >= 3.
    n_thresholds : int
        Betti-curve resolution L (>= 1).
    diameter : float
        Upper bound D >= 0 on the diameter of those points after the descriptor's scaling (for
        ``scale="unit_box"`` in d features, √d). A relative slack of 1e-5 covers the PH library's
        float32 filtration values.

    Returns
    -------
    float
        The bound (loose: the β₁ term dominates and real clouds have far fewer H1 pairs).
    """
    check_int("n_points", n_points, 3)
    check_int("n_thresholds", n_thresholds, 1)
    check_range("diameter", diameter, 0.0)
    D = diameter * (1.0 + _FLOAT32_SLACK)
    total = 0.0
    for beta in (n_points - 1, (n_points - 1) * (n_points - 2) // 2):
        b = float(beta)
        total += (1 + n_thresholds) * b * b + (math.log(b) if b > 1 else 0.0) ** 2 + b * D * D + float(beta // 2) ** 2
    return math.sqrt(total)


def gaussian_sigma(sensitivity: float, epsilon: float, delta: float, method: str = "analytic") -> float:
    """Noise standard deviation σ for one (ε, δ)-DP Gaussian release of L2 sensitivity Δ.

    ``"analytic"``: the smallest σ (Balle and Wang 2018, Theorem 8; computed by
    ``dp_accounting.get_sigma_gaussian``, needs the ``privacy`` extra), any ε > 0.
    ``"classic"``: σ = Δ·sqrt(2 ln(1.25/δ))/ε (Dwork and Roth 2014, Theorem A.1), 0 < ε < 1; it
    is never below the analytic σ, so it is (ε, δ)-DP as well (tested).
    """
    check_range("sensitivity", sensitivity, 0.0, low_open=True)
    check_choice("method", method, GAUSSIAN_METHODS)
    from topofl.privacy import accounting

    unit = (accounting.analytic_gaussian_sigma(epsilon, delta) if method == "analytic"
            else accounting.classic_gaussian_sigma(epsilon, delta))
    return sensitivity * unit


@dataclass(frozen=True)
class DescriptorRelease:
    """A descriptor released by the Gaussian mechanism (:func:`descriptor_mechanism`).

    Attributes
    ----------
    phi : ndarray
        bound_descriptor(φ, B) + N(0, σ² I): what the client sends.
    sigma : float
        Noise standard deviation σ.
    sensitivity : float
        Δ₂ = √2·B.
    epsilon, delta : float
        The (ε, δ) of this one release.
    clipped : bool
        Whether the projection changed φ (an honest φ with ‖φ‖ > B).
    """

    phi: np.ndarray
    sigma: float
    sensitivity: float
    epsilon: float
    delta: float
    clipped: bool


def descriptor_mechanism(
    phi: np.ndarray,
    radius: float,
    epsilon: float,
    delta: float,
    rng: np.random.Generator,
    *,
    method: str = "analytic",
) -> DescriptorRelease:
    """(ε, δ)-DP release of a client's descriptor under client-level adjacency: project φ onto
    {x ≥ 0, ‖x‖ ≤ B} (:func:`bound_descriptor`), then add N(0, σ² I) with σ from
    :func:`gaussian_sigma` at Δ₂ = √2·B (:func:`descriptor_sensitivity`).

    Parameters
    ----------
    phi : array of shape (m,)
        The client's descriptor (``topofl.tda.descriptor.descriptor``).
    radius : float
        B > 0, a public constant (docs/internals.md#topofl.privacy.dp: :func:`descriptor_norm_bound` never clips).
    epsilon, delta : float
        Privacy of this one release; δ in (0, 1).
    rng : numpy.random.Generator
        The client's private source of noise.
    method : {"analytic", "classic"}
        Calibration of σ (:func:`gaussian_sigma`).

    Returns
    -------
    DescriptorRelease
        The noisy φ and the numbers to account for it (each fresh release composes:
        :func:`topofl.privacy.accounting.gaussian_epsilon` with σ / Δ).
    """
    x = np.asarray(phi, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"phi must be a non-empty 1-D descriptor; got shape {x.shape}")
    bounded = bound_descriptor(x, radius)
    sens = descriptor_sensitivity(radius)
    sigma = gaussian_sigma(sens, epsilon, delta, method)
    noisy = bounded + rng.normal(0.0, sigma, size=bounded.shape)
    return DescriptorRelease(noisy, sigma, sens, float(epsilon), float(delta), bool(not np.array_equal(bounded, x)))


@dataclass(frozen=True)
class DPConfig(Config):
    """Differential-privacy settings of a run (validated at construction; ``ValueError`` names the field).

    The update channel is DP-FedAvg (``clip``, ``noise_multiplier``, ``sampling_rate``); the
    descriptor channel is off unless ``descriptor_radius`` > 0.
    """

    clip: float = hp(1.0, "C: L2 clip norm of each client's model delta (> 0)", low=0.0, low_open=True)
    noise_multiplier: float = hp(1.0, "z: noise std on the sum of clipped deltas over C (> 0)", low=0.0, low_open=True)
    delta: float = hp(
        1e-5, "δ of the reported (ε, δ), in (0, 1); conventionally < 1 / number of clients",
        low=0.0, high=1.0, low_open=True, high_open=True,
    )
    sampling_rate: float = hp(
        1.0, "q: probability that a client takes part in a round, in (0, 1] (Poisson sampling)",
        low=0.0, high=1.0, low_open=True,
    )
    accountant: str = hp("rdp", "accountant of dp-accounting: rdp | pld", choices=("rdp", "pld"))
    descriptor_radius: float = hp(
        0.0, "B: descriptors projected onto {x >= 0, ||x|| <= B} before noise (0: descriptors not privatised)", low=0.0
    )
    descriptor_epsilon: float = hp(1.0, "ε of each descriptor release (> 0; < 1 for the classic calibration)")
    descriptor_method: str = hp(
        "analytic", "calibration of the descriptor noise: analytic | classic",
        choices=GAUSSIAN_METHODS,
    )

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared bounds of every field
        # descriptor_epsilon's upper bound depends on descriptor_method
        high = 1.0 if self.descriptor_method == "classic" else None
        check_range("descriptor_epsilon", self.descriptor_epsilon, 0.0, high, low_open=True, high_open=high is not None)

    @property
    def private_descriptors(self) -> bool:
        """Whether descriptors go through :func:`descriptor_mechanism`."""
        return self.descriptor_radius > 0

    def expected_clients(self, n_clients: int) -> float:
        """The fixed denominator q·N of :func:`dp_fedavg_aggregate` for N clients."""
        check_int("n_clients", n_clients, 1)
        return self.sampling_rate * n_clients


def privacy_report(config: DPConfig, rounds: int, descriptor_releases: int = 0) -> dict[str, float]:
    """(ε, δ) of a run, from the accountant named in ``config`` (``dp-accounting``).

    Parameters
    ----------
    config : DPConfig
        The run's DP settings.
    rounds : int
        Noisy aggregates released so far (>= 1).
    descriptor_releases : int
        Fresh noisy descriptors each client has sent (a re-sent cached one does not count).

    Returns
    -------
    dict
        ``dp_epsilon`` — updates alone, add/remove-one-client (DP-FedAvg's statement);
        ``dp_delta``; ``dp_noise_multiplier``; ``dp_clip``; ``dp_sampling_rate``; and when
        descriptors are privatised (``descriptor_releases`` > 0):
        ``dp_epsilon_descriptor`` — descriptors alone, and ``dp_epsilon_total`` — both
        channels composed under "one client's data replaced" (updates at z / 2, descriptors at
        σ / Δ₂), only for full participation (q = 1; otherwise left out, with a warning).
    """
    from topofl.privacy import accounting

    check_int("descriptor_releases", descriptor_releases, 0)
    acc = config.accountant
    out = {
        "dp_epsilon": accounting.dp_fedavg_epsilon(config.noise_multiplier, config.sampling_rate, rounds,
                                                   config.delta, acc),
        "dp_delta": config.delta,
        "dp_noise_multiplier": config.noise_multiplier,
        "dp_clip": config.clip,
        "dp_sampling_rate": config.sampling_rate,
    }
    if config.private_descriptors and descriptor_releases > 0:
        s = gaussian_sigma(1.0, config.descriptor_epsilon, config.delta, config.descriptor_method)
        out["dp_epsilon_descriptor"] = accounting.gaussian_epsilon(s, config.delta, descriptor_releases, acc)
        if config.sampling_rate < 1.0:
            log.warning("privacy_report: no total ε of both channels with sampling_rate=%g < 1 "
                        "(accounted for full participation only)", config.sampling_rate)
        else:
            out["dp_epsilon_total"] = accounting.combined_epsilon(
                config.delta, [(config.noise_multiplier / 2.0, rounds), (s, descriptor_releases)], acc
            )
    return out
