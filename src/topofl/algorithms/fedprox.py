"""FedProx (Li et al., 2020): local objective f_k(θ) + μ/2 ‖θ − θ_global‖² (their Eq. 2)."""
from __future__ import annotations

from dataclasses import dataclass

from topofl.algorithms.base import ClientContext, hp
from topofl.algorithms.fedavg import GlobalModelAlgorithm, GlobalModelConfig
from topofl.config import floats
from topofl.federation.local import AffineGrad
from topofl.federation.messages import ClientUpdate, ServerMessage


@dataclass(frozen=True)
class FedProxConfig(GlobalModelConfig):
    """Hyper-parameters of FedProx: the proximal strength μ (and FedAvg's server, aggregation rule included)."""

    mu: float = hp(
        0.1, "proximal strength μ (>= 0; pTopoFL paper: 0.1; μ = 0 is FedAvg)",
        low=0.0, space=floats(1e-3, 1.0, log=True),
    )


class FedProx(GlobalModelAlgorithm):
    """FedAvg whose local SGD adds the proximal gradient μ(θ − θ_global); same server."""

    name = "fedprox"
    Config = FedProxConfig
    config: FedProxConfig

    def client_fit(self, ctx: ClientContext, message: ServerMessage) -> ClientUpdate:
        anchor, mu = message.params, self.config.mu
        theta = self.local_sgd(ctx, anchor, ctx.data.X_train, extra_grad=AffineGrad(mu, anchor))
        return ClientUpdate(ctx.client_id, theta, ctx.data.n_train)
