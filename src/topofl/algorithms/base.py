"""Helpers shared by the server-based methods of :mod:`topofl.algorithms`: the aggregation maths
(:func:`weighted_average`, :func:`cap_shares`), the server's rules as composable config parts —
robust aggregation (:class:`RobustRuleConfig`, :func:`robust_round`, :func:`excluded_ids`) and
client-level DP of the aggregate (:class:`DPAggregateConfig`, :func:`dp_server_rng`; DP-FedAvg) —
and the personal-model generator. The contract they implement (:class:`Algorithm`,
:class:`AlgorithmConfig`, :class:`ClientContext`) lives in :mod:`topofl.federation.algorithm`.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from topofl._validation import check_range
from topofl.config import Config, hp
from topofl.federation.algorithm import Algorithm, AlgorithmConfig, ClientContext
from topofl.privacy.accounting import ACCOUNTANTS
from topofl.privacy.dp import DPConfig
from topofl.robustness.aggregators import (
    AGGREGATORS,
    AUTO,
    GUARD_MIN_GROUP,
    AggregateResult,
    cap_shares,
    required_updates,
    robust_aggregate,
)

__all__ = [
    "AGGREGATORS", "Algorithm", "AlgorithmConfig", "ClientContext", "DPAggregateConfig", "RobustRuleConfig",
    "SecureAggConfig",
    "cap_shares", "dp_server_rng",
    "UpdateReputation", "excluded_ids", "hp", "robust_entries", "round_change_stats", "personal_rng",
    "robust_round", "weighted_average",
]

log = logging.getLogger(__name__)

#: the help text of a method's choice of aggregation rule (``aggregator``, ``intra_aggregator``)
AGGREGATOR_HELP = (
    "mean (the weighted average) | median, trimmed_mean (coordinate-wise; Yin et al. 2018) | "
    "krum, multi_krum (Blanchard et al. 2017) | bulyan (El Mhamdi et al. 2018) | norm_clip (Sun et al. 2019) | "
    "guarded_mean (opposed changes left out, the rest clipped to "
    "guard_clip × the median norm, then the mean; the deployments' default); see topofl.robustness.aggregators"
)


@dataclass(frozen=True)
class RobustRuleConfig(Config):
    """The parameters of the robust aggregation rules (:mod:`topofl.robustness.aggregators`), a part
    of the config of every method that offers them; each method adds the field that names its rule
    (FedAvg's ``aggregator``, pTopoFL's ``intra_aggregator``).
    """

    byzantine_f: int = hp(
        AUTO, "krum, multi_krum, bulyan: number f of Byzantine clients tolerated (-1: the most the rule tolerates at "
        "the round's n, (n-3)//2 for krum and multi_krum, (n-3)//4 for bulyan); they need >= 2f+3, 2f+3, 4f+3 "
        "updates, and a round with fewer is aggregated by the coordinate-wise median (logged)",
        low=AUTO, high=10_000, integer=True,
    )
    trim_fraction: float = hp(
        0.25, "trimmed_mean: fraction β in [0, 0.5) of the values cut from each end of every coordinate (⌊β·n⌋ of n; "
        "0.25 cuts one from each end from n = 4 on)",
        low=0.0, high=0.5, high_open=True,
    )
    clip_norm: float = hp(
        1.0, "norm_clip: largest norm M (> 0) of a client's change θ_k − θ from the model it was sent",
        low=0.0, low_open=True,
    )
    guard_min_cosine: float = hp(
        -0.2, "guarded_mean: a change whose cosine with the coordinate-wise median change is below this, in [-1, 1), "
        "is flagged and left out (the update-space detector)",
        low=-1.0, high=1.0, high_open=True,
    )
    guard_clip: float = hp(
        2.0, "guarded_mean: kept changes are clipped to this (> 0) × the median change norm",
        low=0.0, low_open=True,
    )
    guard_max_norm: float = hp(
        4.0, "guarded_mean: a change longer than this (>= guard_clip) × the median change norm is flagged and left out "
        "(inf: never)",
    )
    multi_krum_m: int = hp(
        0, "multi_krum: number m of the lowest-score updates averaged (0: n − f of the round's n updates)",
        low=0, high=10_000, integer=True,
    )
    def __post_init__(self) -> None:
        super().__post_init__()  # the declared bounds of every field
        # guard_max_norm's lower bound is another field: >= guard_clip, or inf (never flag by norm)
        if not (isinstance(self.guard_max_norm, float) and self.guard_max_norm == float("inf")):
            check_range("guard_max_norm", self.guard_max_norm, self.guard_clip)


@dataclass(frozen=True)
class SecureAggConfig(Config):
    """Secure aggregation of the models (SecAgg+, Bell et al. 2020; :mod:`topofl.federation.secure`), a
    part of the config of every method whose server needs only weighted sums of the models (FedAvg,
    FedProx, Ditto, Per-FedAvg: one sum per round; pTopoFL: one per cluster). The server then learns
    those sums and nothing about one client's model beyond what they reveal; it needs the mean as the
    aggregation rule (a robust rule reads each model) and no DP of the updates (DP-FedAvg clips each
    change on the server). See docs/secure-aggregation.md for what it enforces and what it gives up.
    """

    secure_aggregation: bool = hp(
        False, "secure aggregation (SecAgg+): the server learns only weighted sums of the models (per cluster for "
        "ptopofl), never one client's model; needs the mean as the aggregation rule and no dp_noise_multiplier",
        space=None,
    )
    secure_clip: float = hp(
        64.0, "secure aggregation: every coordinate of a client's weighted model w_k·θ_k is clipped to [-c, c] "
        "before quantisation (clipped coordinates are counted in the round log; >= 1: the weight, in (0, 1], is "
        "quantised with the model)", low=1.0, high=1e12,
    )
    secure_bits: int = hp(
        40, "secure aggregation: fixed-point levels 2^bits - 1 over [-secure_clip, secure_clip] (8..48; a sum of up "
        "to 2^(64 - bits) inputs is exact)", low=8, high=48, integer=True,
    )
    secure_threshold: float = hp(
        0.6, "secure aggregation: fraction of a client's share set (its neighbours and itself) needed to rebuild "
        "its secrets (Shamir threshold, at least 2)", low=0.0, high=1.0, low_open=True,
    )
    secure_neighbours: int = hp(
        0, "secure aggregation: neighbours each client shares its secrets with (SecAgg+'s sparse graph; 0: every "
        "member of its group, the original SecAgg)", low=0, high=65534, integer=True,
    )
    secure_min_group: int = hp(
        3, "secure aggregation: fewest inputs whose sum the server may learn; a smaller group is merged or "
        "excluded (secure_small_groups) and a group with fewer survivors is abandoned unrevealed (>= 2)",
        low=2, high=65535, integer=True,
    )
    secure_small_groups: str = hp(
        "merge", "secure aggregation, ptopofl: a cluster with fewer than secure_min_group participants is summed "
        "with its nearest cluster (merge) or left out of aggregation that round (exclude)",
        choices=("merge", "exclude"),
    )

    #: whether the method's server can aggregate from sums (``secure_plan`` / ``secure_aggregate``)
    supports_secure: ClassVar[bool] = True

    def check_secure_rule(self, field: str, rule: str) -> None:
        """``ValueError`` naming the fields when secure aggregation is asked of a method or rule that reads
        each model, or combined with DP of the updates.
        """
        if not self.secure_aggregation:
            return
        if not self.supports_secure:
            raise ValueError("secure_aggregation=True: this method's server reads each client's reply; secure "
                             "aggregation is implemented for fedavg, fedprox, ditto, perfedavg and ptopofl")
        if rule != "mean":
            raise ValueError(f"{field}={rule!r} cannot be combined with secure_aggregation=True: a robust rule reads "
                             f"each client's model, which secure aggregation hides; use {field}='mean'")
        if getattr(self, "dp_updates", False):
            raise ValueError("secure_aggregation=True cannot be combined with dp_noise_multiplier > 0: DP-FedAvg "
                             "clips each client's change on the server, which secure aggregation hides")


@dataclass(frozen=True)
class DPAggregateConfig(Config):
    """Client-level differential privacy of the aggregate, a part of the config of every method that
    offers it: DP-FedAvg (McMahan, Ramage, Talwar and Zhang 2018, "Learning differentially private
    recurrent language models", ICLR, Algorithm 1; :func:`topofl.privacy.dp.dp_fedavg_aggregate`).
    With ``dp_noise_multiplier`` z > 0 every client's change from the model it was sent is clipped to
    L2 norm ``dp_clip`` C, the clipped changes are summed with uniform weights, N(0, (zC)² I) is
    added and the sum is divided by the expected number of participants; the rounds are accounted
    by ``dp_accountant`` (:func:`topofl.privacy.dp.privacy_report`) and (ε, ``dp_delta``) is
    written to every round's server log. DP needs the mean as the aggregation rule (a robust rule
    is not a clipped sum, and its sensitivity is not C); :meth:`check_dp_rule` says so.
    """

    dp_noise_multiplier: float = hp(
        0.0, "client-level DP (DP-FedAvg, McMahan et al. 2018): noise multiplier z >= 0 of the Gaussian noise N(0, "
        "(z·dp_clip)²) on the sum of clipped client changes (0: DP off); needs the mean as the aggregation rule",
        low=0.0,
    )
    dp_clip: float = hp(
        1.0, "client-level DP: L2 clip norm C (> 0) of each client's change θ_k − θ_sent",
        low=0.0, low_open=True,
    )
    dp_delta: float = hp(
        1e-5, "client-level DP: δ of the reported (ε, δ), in (0, 1); conventionally < 1 / number of clients",
        low=0.0, high=1.0, low_open=True, high_open=True,
    )
    dp_accountant: str = hp(
        "rdp", "client-level DP: accountant of dp-accounting that reports ε: rdp | pld",
        choices=ACCOUNTANTS,
    )

    @property
    def dp_updates(self) -> bool:
        """Whether the model updates are aggregated by DP-FedAvg (``dp_noise_multiplier`` > 0)."""
        return self.dp_noise_multiplier > 0

    def dp_descriptor_fields(self) -> tuple[float, float]:
        """``(descriptor_radius, descriptor_epsilon)`` of :class:`~topofl.privacy.dp.DPConfig`: (0, 1), the
        descriptor channel off (pTopoFL overrides it).
        """
        return 0.0, 1.0

    @property
    def dp(self) -> DPConfig | None:
        """The run's :class:`~topofl.privacy.dp.DPConfig` when the updates are privatised, else ``None``.

        Full participation is accounted (``sampling_rate`` = 1): the server's client sampling
        (``client_fraction`` of the round loop) is not Poisson sampling and claims no
        amplification, so the ε reported is an upper bound for any participation.
        """
        if not self.dp_updates:
            return None
        radius, epsilon = self.dp_descriptor_fields()
        return DPConfig(clip=self.dp_clip, noise_multiplier=self.dp_noise_multiplier, delta=self.dp_delta,
                        sampling_rate=1.0, accountant=self.dp_accountant, descriptor_radius=radius,
                        descriptor_epsilon=epsilon)

    def check_dp_rule(self, field: str, rule: str) -> None:
        """``ValueError`` naming ``field`` and ``dp_noise_multiplier`` when DP is on and ``rule`` is not the mean."""
        if self.dp_updates and rule != "mean":
            raise ValueError(
                f"{field}={rule!r} cannot be combined with dp_noise_multiplier={self.dp_noise_multiplier!r}: "
                f"client-level DP (DP-FedAvg) adds noise to the clipped sum of the updates and needs {field}='mean'"
            )


class UpdateReputation:
    """Each client's running (sum, count) of the guarded mean's cosines (its update-space reputation),
    kept by the server across rounds (:func:`~topofl.robustness.aggregators.guarded_mean` ``history``).
    """

    def __init__(self) -> None:
        self.totals: dict[int, tuple[float, int]] = {}

    def history(self, client_ids: Sequence[int]) -> np.ndarray:
        """``(sum, count)`` rows for ``client_ids`` (zeros for a client not yet scored)."""
        return np.array([self.totals.get(int(c), (0.0, 0)) for c in client_ids],
                        dtype=np.float64).reshape(len(client_ids), 2)

    def record(self, client_ids: Sequence[int], result: AggregateResult) -> None:
        """Add the round's cosines of ``result`` (rows in ``client_ids`` order; NaN ones skipped)."""
        for cid, c in zip(client_ids, result.cosines, strict=False):
            if np.isfinite(c):
                total, count = self.totals.get(int(cid), (0.0, 0))
                self.totals[int(cid)] = (total + float(c), count + 1)


class RuleParameters(Protocol):
    """What :func:`robust_round` reads of a method's config: the robust rules' parameters
    (:class:`RobustRuleConfig`) and the cap on one client's share (:class:`AlgorithmConfig`).
    """

    @property
    def byzantine_f(self) -> int: ...

    @property
    def trim_fraction(self) -> float: ...

    @property
    def clip_norm(self) -> float: ...

    @property
    def guard_min_cosine(self) -> float: ...

    @property
    def guard_clip(self) -> float: ...

    @property
    def guard_max_norm(self) -> float: ...

    @property
    def multi_krum_m(self) -> int: ...

    @property
    def max_client_weight(self) -> float: ...


def robust_round(
    rule: str,
    vectors: Sequence[np.ndarray],
    weights: np.ndarray,
    reference: np.ndarray | None,
    config: RuleParameters,
    warned: set[str] | None = None,
    direction: np.ndarray | None = None,
    norm_scale: float | None = None,
    client_ids: Sequence[int] | None = None,
    reputation: UpdateReputation | None = None,
) -> tuple[AggregateResult, str | None]:
    """:func:`~topofl.robustness.aggregators.robust_aggregate` in the round loop: a round with
    too few updates for ``rule`` with the configured f never stops the server.

    When the round has fewer updates than the rule needs (:func:`~topofl.robustness.aggregators.required_updates`)
    the coordinate-wise median is used instead, and a Multi-Krum ``multi_krum_m`` above the
    round's n is lowered to n; either is returned as a note for the round's server log, and
    logged as a warning the first time (a note not in ``warned``; later ones are logged at debug
    level).

    Parameters
    ----------
    rule : str
        One of :data:`~topofl.robustness.aggregators.AGGREGATORS`.
    vectors : sequence of numpy.ndarray
        The clients' models, one per update.
    weights : numpy.ndarray
        Their aggregation weights (already capped by ``max_client_weight``).
    reference : numpy.ndarray or None
        The model(s) the clients were sent (needed by ``norm_clip``).
    config : RuleParameters
        The method's configuration (f, trim fraction, clip norm, m, the share cap).
    warned : set of str, optional
        The notes already logged as warnings by the caller; a new note is added to it.
    direction, norm_scale : optional
        ``guarded_mean``'s reference change and norm (the whole round's, for a clustered method;
        :func:`round_change_stats`).
    client_ids, reputation : optional
        The updates' clients and the server's :class:`UpdateReputation`: ``guarded_mean`` judges
        each client by its mean cosine so far, and the round's cosines are added to it.

    Returns
    -------
    tuple of (AggregateResult, str or None)
        The aggregate with the indices of the updates that entered it, and the fallback note.
    """
    n = len(vectors)
    note = None
    need = required_updates(rule, config.byzantine_f)
    m = config.multi_krum_m
    if n < need:
        note = (f"{rule} with byzantine_f={config.byzantine_f} needs at least {need} updates; got {n}: "
                "coordinate-wise median used")
        rule = "median"
    elif rule == "multi_krum" and m > n:
        note = f"multi_krum_m={m} exceeds the round's {n} updates: m={n} used"
        m = n
    if note is not None:
        if warned is None or note not in warned:
            log.warning("robust aggregation: %s", note)
            if warned is not None:
                warned.add(note)
        else:
            log.debug("robust aggregation: %s", note)
    tracked = rule == "guarded_mean" and reputation is not None and client_ids is not None
    history = reputation.history(client_ids) if tracked and reputation is not None and client_ids is not None else None
    # float64 whatever the replies' dtype: the rules' means and medians are computed at the server's precision
    stack = np.vstack(vectors, dtype=np.float64)
    result = robust_aggregate(rule, stack, weights, reference=reference, f=config.byzantine_f,
                              trim_fraction=config.trim_fraction, clip_norm=config.clip_norm, m=m,
                              min_cosine=config.guard_min_cosine, clip_multiplier=config.guard_clip,
                              direction=direction, norm_scale=norm_scale, history=history,
                              max_norm_ratio=config.guard_max_norm, max_share=config.max_client_weight)
    if tracked and reputation is not None and client_ids is not None:
        reputation.record(client_ids, result)
    return result, note


def round_change_stats(changes: Sequence[np.ndarray]) -> tuple[np.ndarray, float] | None:
    """The coordinate-wise median change and the median change norm of a round's valid replies
    (each change from the model its client was sent), against which ``guarded_mean`` checks every
    group of a clustered method (pTopoFL's clusters, IFCA's): hostile clients that are a minority
    of the round can be half of a small group. ``None`` with fewer than three replies.
    """
    if len(changes) < GUARD_MIN_GROUP:
        return None
    D = np.vstack(changes)
    return np.median(D, axis=0), float(np.median(np.linalg.norm(D, axis=1)))


def robust_entries(client_ids: Sequence[int], result: AggregateResult, rule: str, note: str | None) -> dict[str, Any]:
    """A robust aggregate's entries for the round's server log: ``excluded`` (when any), the
    guarded mean's ``update_flagged`` and ``clipped`` (every round, empty or not) and the fallback note.
    """
    entry: dict[str, Any] = {}
    excluded = excluded_ids(client_ids, result)
    if excluded:
        entry["excluded"] = excluded
    if rule == "guarded_mean":
        entry["update_flagged"] = sorted(int(client_ids[i]) for i in result.flagged)
        entry["clipped"] = sorted(int(client_ids[i]) for i in result.clipped)
    if note is not None:
        entry["aggregation_fallback"] = note
    return entry


def excluded_ids(client_ids: Sequence[int], result: AggregateResult) -> list[int]:
    """The ids of the clients (``client_ids[i]`` for row i of the aggregated updates) whose update
    did not enter ``result`` — for the round's server log, ``"excluded"``.
    """
    kept = set(result.selected)
    return [int(cid) for i, cid in enumerate(client_ids) if i not in kept]


def dp_server_rng(rng: np.random.Generator) -> np.random.Generator:
    """The server's private source of DP noise: a child of the seed sequence of the run's server
    generator ``rng`` (``SeedSequence.spawn``), so that it never shares a stream with a client's
    seed and never advances ``rng`` (client selection and model initialisation are unchanged).
    """
    seq = rng.bit_generator.seed_seq
    if not isinstance(seq, np.random.SeedSequence):
        raise ValueError("the server generator must be seeded by a numpy SeedSequence to spawn the DP noise "
                         f"generator; got {seq!r}")
    return np.random.default_rng(seq.spawn(1)[0])


def personal_rng(ctx: ClientContext) -> np.random.Generator:
    """The generator of a client's *personal-model* training in a round (shared by Local and Ditto,
    so that Ditto with λ = 0 reproduces local training exactly).
    """
    return np.random.default_rng(np.random.SeedSequence([ctx.seed, ctx.round, ctx.client_id, 0xD1770]))



#: above this many numbers (clients × parameters), :func:`weighted_average` accumulates instead of stacking
_STACK_LIMIT = 1 << 24
#: coordinates of the sum accumulated at a time (128 K float64: 1 MB, in cache)
_BLOCK = 1 << 17


def weighted_average(vectors: list[np.ndarray], weights: np.ndarray, max_share: float = 1.0) -> np.ndarray:
    """Σ_k s_k v_k with shares s = :func:`cap_shares` (weights, max_share) (weights need not be
    normalised; they must have a positive sum).
    """
    return weighted_sum(vectors, cap_shares(weights, max_share))


def weighted_sum(vectors: list[np.ndarray], w: np.ndarray, stack_limit: float | None = None) -> np.ndarray:
    """Σ_k w_k v_k in float64, whatever the vectors' dtype (a sum of many float32 replies is taken in
    float64, then read exactly by a float32 model: DESIGN, parameters). Up to ``stack_limit``
    numbers (clients × parameters; default :data:`_STACK_LIMIT`) it is one matrix product over the
    float64 stack (at most 128 MB at the default limit); above, it is accumulated in place, a block
    at a time (no K × d stack and no float64 copy of it: two blocks of working memory; the sum's
    rounding then differs from the stacked product's in the last bits).
    """
    limit = _STACK_LIMIT if stack_limit is None else stack_limit
    if len(vectors) * (vectors[0].size if vectors else 0) <= limit:
        # the stack: np.vstack's, made as one array of the vectors when they are plain 1-d arrays of one size of real
        # numbers (np.array casts anything; vstack refuses what float64 is not of the same kind as)
        size = vectors[0].shape if vectors else ()
        plain = len(size) == 1 and all(type(v) is np.ndarray and v.shape == size and v.dtype.kind in "biuf"
                                       for v in vectors)
        out: np.ndarray = w @ (np.array(vectors, dtype=np.float64) if plain else np.vstack(vectors, dtype=np.float64))
        return out
    # block by block (a block of the sum stays in cache while every reply adds to it): each reply is
    # read once, and each element sees the same additions in the same order as a reply-by-reply sum
    acc: np.ndarray = np.empty(vectors[0].size)
    tmp = np.empty(min(_BLOCK, acc.size))
    for start in range(0, acc.size, _BLOCK):
        stop = min(start + _BLOCK, acc.size)
        block, t = acc[start:stop], tmp[: stop - start]
        np.multiply(vectors[0][start:stop], w[0], out=block, dtype=np.float64)
        for s, v in zip(w[1:], vectors[1:], strict=True):
            block += np.multiply(v[start:stop], s, out=t, dtype=np.float64)
    return acc


def mean_of(vectors: Sequence[np.ndarray]) -> np.ndarray:
    """``numpy.mean(vectors, axis=0)`` bit for bit, without its K × d stack for float64 vectors of two or more
    numbers: added one at a time into one buffer (NumPy sums a stack's rows in that order). Other vectors
    (one number each, where NumPy sums pairwise; another dtype, whose mean NumPy keeps in it) go to NumPy.
    """
    if not vectors:
        raise ValueError("mean_of needs at least one vector")
    if any(np.ndim(v) != 1 or np.size(v) < 2 or np.asarray(v).dtype != np.float64 for v in vectors):
        out: np.ndarray = np.mean(vectors, axis=0)
        return out
    acc: np.ndarray = np.array(vectors[0], dtype=np.float64, copy=True)
    for v in vectors[1:]:
        acc += v
    acc /= len(vectors)
    return acc
