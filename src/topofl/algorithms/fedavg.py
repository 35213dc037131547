"""FedAvg (McMahan et al., 2017) and the global-model server it shares with several baselines."""
from __future__ import annotations

from typing import Any

import numpy as np

from topofl.algorithms.base import Algorithm, AlgorithmConfig, ClientContext, weighted_average
from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.models.base import Model


class GlobalModelAlgorithm(Algorithm):
    """Server holding one global model, averaged with sample-size weights (FedAvg's server)."""

    def setup(self, model: Model, client_ids: list[int], rng: np.random.Generator) -> None:
        super().setup(model, client_ids, rng)
        self.global_params = model.init(rng)  # zeros for linear models (rng untouched); a torch model draws its init

    def configure_fit(self, rnd: int, selected: list[int]) -> dict[int, ServerMessage]:
        return {cid: self.message_for(cid) for cid in selected}

    def message_for(self, client_id: int) -> ServerMessage:
        return ServerMessage(self.global_params)

    def server_params(self) -> np.ndarray:
        """The global model."""
        return self.global_params

    def aggregate_fit(self, rnd: int, updates: list[ClientUpdate]) -> dict[str, Any]:
        if updates:
            self.global_params = weighted_average(
                [u.params for u in updates], np.array([u.n_examples for u in updates], dtype=float),
                self.config.max_client_weight,
            )
        return {}


class FedAvg(GlobalModelAlgorithm):
    """θ ← Σ_k n_k θ_k / Σ_k n_k over the round's participants (McMahan et al. 2017, Alg. 1)."""

    name = "fedavg"
    Config = AlgorithmConfig

    def client_fit(self, ctx: ClientContext, message: ServerMessage) -> ClientUpdate:
        theta = self.local_sgd(ctx, message.params, ctx.data.X_train)
        return ClientUpdate(ctx.client_id, theta, ctx.data.n_train)
