"""Ditto (Li, Hu, Beirami, Smith, ICML 2021): a FedAvg global model plus personal models
v_k trained on f_k(v) + λ/2 ‖v − w^t‖² (their Eq. 2, Alg. 1). Clients are evaluated with v_k.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topofl.algorithms.base import ClientContext, hp, personal_rng
from topofl.algorithms.fedavg import GlobalModelAlgorithm, GlobalModelConfig
from topofl.config import floats
from topofl.federation.local import AffineGrad
from topofl.federation.messages import ClientUpdate, ServerMessage


@dataclass(frozen=True)
class DittoConfig(GlobalModelConfig):
    """Hyper-parameters of Ditto: the pull λ of each personal model towards the global one."""

    lam: float = hp(
        0.1, "pull λ of the personal model towards the global one (>= 0; 0 = local training)", low=0.0,
        space=floats(1e-3, 10.0, log=True),
    )


class Ditto(GlobalModelAlgorithm):
    """Global FedAvg update, then a personal update regularised towards the received model."""

    client_state_recovery = (
        "its personal model v_k restarts from the model's initialisation, as in round 1 "
        "(the global model is the server's, unaffected)"
    )

    name = "ditto"
    Config = DittoConfig
    personalised = True
    config: DittoConfig

    def client_fit(self, ctx: ClientContext, message: ServerMessage) -> ClientUpdate:
        w_t = message.params
        theta = self.local_sgd(ctx, w_t, ctx.data.X_train)
        v = ctx.state.get("personal")
        if v is None:
            v = ctx.model.init()
        lam = self.config.lam
        ctx.state["personal"] = self.local_sgd(
            ctx, v, ctx.data.X_train, extra_grad=AffineGrad(lam, w_t) if lam > 0 else None, rng=personal_rng(ctx),
            continues="personal",
        )
        return ClientUpdate(ctx.client_id, theta, ctx.data.n_train)

    def client_params(self, ctx: ClientContext, message: ServerMessage) -> np.ndarray:
        params: np.ndarray = ctx.state.get("personal", message.params)
        return params
