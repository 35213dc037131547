"""FedAvg (McMahan et al., 2017) and the global-model server it shares with several baselines.

The server averages by sample size, or aggregates by the robust rule ``aggregator`` of
:class:`GlobalModelConfig`, or, with ``dp_noise_multiplier`` > 0, as DP-FedAvg (McMahan, Ramage, Talwar and
Zhang 2018, Algorithm 1). See docs/internals.md#topofl.algorithms.fedavg for which methods offer which rule.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from topofl.algorithms.base import (
    AGGREGATOR_HELP,
    AGGREGATORS,
    Algorithm,
    AlgorithmConfig,
    ClientContext,
    DPAggregateConfig,
    RobustRuleConfig,
    SecureAggConfig,
    UpdateReputation,
    cap_shares,
    dp_server_rng,
    hp,
    robust_entries,
    robust_round,
    weighted_average,
)
from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.federation.secure_client import GroupSum, SecurePlan
from topofl.models.base import Model
from topofl.privacy.dp import DPConfig, dp_fedavg_aggregate, privacy_report

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GlobalModelConfig(SecureAggConfig, DPAggregateConfig, RobustRuleConfig, AlgorithmConfig):
    """Hyper-parameters of a method whose server holds one global model: local training and the
    server's checks (:class:`AlgorithmConfig`), and its aggregation rule composed of the robust
    rules' parameters (:class:`RobustRuleConfig`) and client-level DP (:class:`DPAggregateConfig`).
    """

    aggregator: str = hp("mean", "server's aggregation rule: " + AGGREGATOR_HELP, choices=AGGREGATORS)

    #: whether the method implements client-level DP of its aggregate (DP-FedAvg); IFCA and SCAFFOLD do not
    supports_dp: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check_dp_rule("aggregator", self.aggregator)
        self.check_secure_rule("aggregator", self.aggregator)
        if self.dp_updates and not self.supports_dp:
            raise ValueError(f"dp_noise_multiplier={self.dp_noise_multiplier!r}: client-level DP is implemented for "
                             "FedAvg, FedProx, Ditto, pFedMe, Per-FedAvg and pTopoFL, not for this method")


class GlobalModelAlgorithm(Algorithm):
    """Server holding one global model, averaged with sample-size weights (FedAvg's server), or
    aggregated by the robust rule its config names (:class:`GlobalModelConfig` ``aggregator``).
    """

    def setup(self, model: Model, client_ids: list[int], rng: np.random.Generator) -> None:
        super().setup(model, client_ids, rng)
        self.global_params = model.init(rng)  # zeros for linear models (rng untouched); a torch model draws its init
        self.warned: set[str] = set()  # robust aggregation's fallback notes already logged as warnings
        self.reputation = UpdateReputation()  # guarded_mean: each client's cosines so far
        dp = self.config.dp if isinstance(self.config, GlobalModelConfig) else None
        # the server's own noise generator (never a client's seed); spawned only for DP runs
        self._dp_rng = dp_server_rng(rng) if dp is not None else None

    def configure_fit(self, rnd: int, selected: list[int]) -> dict[int, ServerMessage]:
        return {cid: self.message_for(cid) for cid in selected}

    def message_for(self, client_id: int) -> ServerMessage:
        return ServerMessage(self.global_params)

    def server_params(self) -> np.ndarray:
        """The global model."""
        return self.global_params

    def aggregate_fit(self, rnd: int, updates: list[ClientUpdate]) -> dict[str, Any]:
        """θ ← the weighted average of the clients' models (``aggregator="mean"``, in place for deep
        models), or the robust rule of ``aggregator`` with weights capped by ``max_client_weight``
        and the global model as norm clipping's reference. The round's log names the clients a
        rule ``excluded`` and any ``aggregation_fallback``.

        With ``dp_noise_multiplier`` > 0: DP-FedAvg (:meth:`_dp_aggregate`).
        """
        c = self.config
        dp = c.dp if isinstance(c, GlobalModelConfig) else None
        if dp is not None:
            return self._dp_aggregate(rnd, updates, dp)
        if not updates:
            return {}
        weights = np.array([u.n_examples for u in updates], dtype=float)
        if not isinstance(c, GlobalModelConfig) or c.aggregator == "mean":
            self.global_params = weighted_average([u.params for u in updates], weights, c.max_client_weight)
            return {}
        ids = [u.client_id for u in updates]
        result, note = robust_round(c.aggregator, [u.params for u in updates], cap_shares(weights, c.max_client_weight),
                                    self.global_params, c, self.warned, client_ids=ids, reputation=self.reputation)
        self.global_params = result.vector
        entry = robust_entries(ids, result, c.aggregator, note)
        return entry

    def secure_plan(self, rnd: int, updates: list[ClientUpdate]) -> SecurePlan:
        """Secure aggregation (:mod:`topofl.federation.secure`): one group of every participant, weighted
        by its declared size (capped by ``max_client_weight`` over the participants).
        """
        if not updates:
            return SecurePlan({})
        w = cap_shares(np.array([u.n_examples for u in updates], dtype=float), self.config.max_client_weight)
        return SecurePlan({0: {u.client_id: float(x) for u, x in zip(updates, w, strict=True)}})

    def secure_aggregate(self, rnd: int, plan: SecurePlan, sums: dict[int, GroupSum]) -> dict[str, Any]:
        """θ ← Σ w_k θ_k / Σ w_k over the survivors (the same weighted average as in the clear, to
        quantisation error); the global model stays when the group was abandoned.
        """
        if 0 in sums:
            self.global_params = sums[0].mean
        return {}

    def _dp_aggregate(self, rnd: int, updates: list[ClientUpdate], dp: DPConfig) -> dict[str, Any]:
        """θ ← θ_sent + (Σ_k clip(θ_k − θ_sent, C) + N(0, (zC)² I)) / N (McMahan et al. 2018,
        Algorithm 1, fixed-denominator estimator with q = 1): uniform weights — sample-size weights
        would make a client's influence, hence the sensitivity, depend on its private n_k — and N
        the number of clients of the run, which does not depend on who replied. A round with no
        valid reply still releases θ_sent + noise / N.

        The log carries :func:`~topofl.privacy.dp.privacy_report` after ``rnd`` rounds (every
        round up to this one counts as a release, including any the round loop skipped for too
        few replies: the skip itself depends on who replied) and the ids of the clients whose
        change was clipped (``dp_clipped``).
        """
        assert self._dp_rng is not None, "setup() first"
        sent = self.global_params
        deltas = (np.vstack([np.asarray(u.params, dtype=np.float64) - sent for u in updates]) if updates
                  else np.zeros((0, sent.size)))
        agg = dp_fedavg_aggregate(deltas, dp.clip, dp.noise_multiplier, self._dp_rng,
                                  dp.expected_clients(len(self.client_ids)))
        self.global_params = sent + agg.update
        entry: dict[str, Any] = dict(privacy_report(dp, rnd))
        entry["dp_clipped"] = [int(updates[i].client_id) for i in agg.clipped]
        log.debug("round %d: DP-FedAvg over %d update(s), %d clipped, epsilon=%.4g", rnd, len(updates),
                  len(agg.clipped), entry["dp_epsilon"])
        return entry


class FedAvg(GlobalModelAlgorithm):
    """θ ← Σ_k n_k θ_k / Σ_k n_k over the round's participants (McMahan et al. 2017, Alg. 1)."""

    name = "fedavg"
    Config = GlobalModelConfig
    config: GlobalModelConfig

    def client_fit(self, ctx: ClientContext, message: ServerMessage) -> ClientUpdate:
        theta = self.local_sgd(ctx, message.params, ctx.data.X_train)
        return ClientUpdate(ctx.client_id, theta, ctx.data.n_train)
