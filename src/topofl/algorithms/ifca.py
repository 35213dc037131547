"""IFCA (Ghosh, Chung, Yin, Ramchandran, NeurIPS 2020), model-averaging variant (their Alg. 2).

The server keeps k cluster models and sends all of them; each client picks the one with the
lowest loss on its training data, trains it locally and sends it back with its choice; the server
averages each cluster's returns with sample-size weights. Cluster 0 starts at the zero model (so k = 1 is
exactly FedAvg); the others start at small N(0, init_scale²) weights: their losses are close to the zero
model's, so clients split by how their data align with each random direction (random models far from zero
are never picked, and IFCA then degenerates to FedAvg).
Clients are evaluated with the cluster model they would pick.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from topofl.algorithms.base import (
    Algorithm,
    ClientContext,
    UpdateReputation,
    cap_shares,
    hp,
    robust_entries,
    robust_round,
    round_change_stats,
    weighted_average,
)
from topofl.algorithms.fedavg import GlobalModelConfig
from topofl.config import ints
from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.federation.validation import ArraySpec, ClientInfo, ReplySchema
from topofl.models.base import Model


@dataclass(frozen=True)
class IFCAConfig(GlobalModelConfig):
    """Hyper-parameters of IFCA: the number of cluster models and the scale of their random initialisation, and
    the rule ``aggregator`` that aggregates each cluster (the weighted mean by default).
    """

    supports_secure = False   # its server reads each reply (see SecureAggConfig)

    supports_dp = False

    k: int = hp(2, "number of cluster models (>= 1; 1 = FedAvg)", low=1, high=100, integer=True, space=ints(1, 4))
    init_scale: float = hp(
        0.05, "std of the random initial weights of clusters 1..k-1 (small: near-zero models split clients by gradient "
        "alignment; large random models are never picked)",
        low=0.0,
    )


class IFCA(Algorithm):
    """Iterative federated clustering algorithm (see module docstring)."""

    name = "ifca"
    Config = IFCAConfig
    personalised = True
    config: IFCAConfig

    def setup(self, model: Model, client_ids: list[int], rng: np.random.Generator) -> None:
        super().setup(model, client_ids, rng)
        self.models = np.vstack([model.init(rng)]
                                + [model.init(rng, self.config.init_scale) for _ in range(self.config.k - 1)])
        self.warned: set[str] = set()  # robust aggregation's fallback notes already logged as warnings
        self.reputation = UpdateReputation()  # guarded_mean: each client's cosines so far

    def server_params(self) -> np.ndarray:
        """The k cluster models, stacked (row j: cluster j)."""
        return self.models

    def message_for(self, client_id: int) -> ServerMessage:
        return ServerMessage(self.models.ravel())

    def configure_fit(self, rnd: int, selected: list[int]) -> dict[int, ServerMessage]:
        return {cid: self.message_for(cid) for cid in selected}

    def reply_schema(self, client_id: int, message: ServerMessage, info: ClientInfo) -> ReplySchema:
        """One model, near one of the k cluster models sent, and the index of the chosen cluster."""
        k, n = self.config.k, self.update_size()
        return ReplySchema(
            self.params_spec(n), centers=message.params.reshape(k, n),
            extras={"cluster": ArraySpec((1,), low=0, high=k - 1, integer=True)},
        )

    def _choose(self, ctx: ClientContext, models: np.ndarray) -> int:
        losses = [ctx.model.loss(m, ctx.data.X_train, ctx.data.y_train) for m in models]
        return int(np.argmin(losses))

    def client_fit(self, ctx: ClientContext, message: ServerMessage) -> ClientUpdate:
        models = message.params.reshape(self.config.k, -1)
        j = self._choose(ctx, models)
        theta = self.local_sgd(ctx, models[j], ctx.data.X_train)
        return ClientUpdate(ctx.client_id, theta, ctx.data.n_train, extras={"cluster": np.array([float(j)])})

    def reply_models(self, update: ClientUpdate, message: ServerMessage) -> tuple[np.ndarray, np.ndarray]:
        """IFCA starts from the cluster model its reply names: ``(models[j], θ_k)``."""
        rows = message.params.reshape(self.config.k, -1)
        return rows[int(update.extras["cluster"][0])], update.params

    def aggregate_fit(self, rnd: int, updates: list[ClientUpdate]) -> dict[str, Any]:
        """Each cluster model ← the weighted average of the models of the clients that chose it, or
        the robust rule ``aggregator`` with that cluster's model as the reference; the guarded mean
        checks every cluster against the whole round's changes (:func:`~topofl.algorithms.base.round_change_stats`).
        """
        c = self.config
        choice = {u.client_id: int(u.extras["cluster"][0]) for u in updates}
        entry: dict[str, Any] = {"clusters": choice}
        stats = None
        if c.aggregator == "guarded_mean":
            stats = round_change_stats([np.asarray(u.params, dtype=np.float64) - self.models[choice[u.client_id]]
                                        for u in updates])
        for j in range(c.k):
            members = [u for u in updates if choice[u.client_id] == j]
            if not members:
                continue
            weights = np.array([u.n_examples for u in members], float)
            if c.aggregator == "mean":
                self.models[j] = weighted_average([u.params for u in members], weights, c.max_client_weight)
                continue
            ids = [u.client_id for u in members]
            result, note = robust_round(c.aggregator, [u.params for u in members],
                                        cap_shares(weights, c.max_client_weight), self.models[j].copy(), c,
                                        self.warned, direction=stats[0] if stats else None,
                                        norm_scale=stats[1] if stats else None, client_ids=ids,
                                        reputation=self.reputation)
            self.models[j] = result.vector
            for key, value in robust_entries(ids, result, c.aggregator, note).items():
                if key == "aggregation_fallback":
                    entry.setdefault(key, {})[str(j)] = value
                else:
                    entry[key] = sorted([*entry.get(key, []), *value])
        return entry

    def client_params(self, ctx: ClientContext, message: ServerMessage) -> np.ndarray:
        models = message.params.reshape(self.config.k, -1)
        chosen: np.ndarray = models[self._choose(ctx, models)]
        return chosen
