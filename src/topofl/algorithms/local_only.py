"""Local-only training: every client trains its own model and communicates nothing."""
from __future__ import annotations

from typing import Any

import numpy as np

from topofl.algorithms.base import Algorithm, AlgorithmConfig, ClientContext, personal_rng
from topofl.federation.messages import ClientUpdate, ServerMessage

_EMPTY = np.empty(0)


class LocalOnly(Algorithm):
    """Each client continues SGD on its own model; zero bytes move either way."""

    client_state_recovery = (
        "its local model restarts from the model's initialisation, as in round 1"
    )

    name = "local"
    Config = AlgorithmConfig
    personalised = True

    def configure_fit(self, rnd: int, selected: list[int]) -> dict[int, ServerMessage]:
        return {cid: ServerMessage(_EMPTY) for cid in selected}

    def message_for(self, client_id: int) -> ServerMessage:
        return ServerMessage(_EMPTY)

    def client_fit(self, ctx: ClientContext, message: ServerMessage) -> ClientUpdate:
        theta = ctx.state.get("personal")
        if theta is None:
            theta = ctx.model.init()
        ctx.state["personal"] = self.local_sgd(ctx, theta, ctx.data.X_train, rng=personal_rng(ctx),
                                               continues="personal")
        return ClientUpdate(ctx.client_id, _EMPTY, ctx.data.n_train)

    def aggregate_fit(self, rnd: int, updates: list[ClientUpdate]) -> dict[str, Any]:
        return {}

    def update_size(self) -> int:
        return 0

    def client_params(self, ctx: ClientContext, message: ServerMessage) -> np.ndarray:
        params: np.ndarray | None = ctx.state.get("personal")
        if params is None:
            params = ctx.model.init()
        return params
