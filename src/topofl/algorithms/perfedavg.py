"""Per-FedAvg (Fallah, Mokhtari, Ozdaglar, NeurIPS 2020): MAML-style personalisation.

Each local step, with independent mini-batches D, D', D'':
    w̃ = w − α ∇f(w; D)
    first-order (FO):  w ← w − β ∇f(w̃; D')
    Hessian-free (HF): w ← w − β (I − α ∇²f(w; D'')) ∇f(w̃; D'), the Hessian-vector product by
                       central differences (their Eq. 10 with δ).
A client is evaluated after one step of adaptation on its training data: θ_k = w − α ∇f_k(w).
β is the ``lr`` hyper-parameter. Server: FedAvg.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topofl.algorithms.base import ClientContext, hp
from topofl.algorithms.fedavg import GlobalModelAlgorithm, GlobalModelConfig
from topofl.config import choice, floats
from topofl.federation.local import ensure_finite
from topofl.federation.messages import ClientUpdate, ServerMessage


@dataclass(frozen=True)
class PerFedAvgConfig(GlobalModelConfig):
    """Hyper-parameters of Per-FedAvg: adaptation step α, first-order or Hessian-free variant, and δ."""

    alpha: float = hp(
        0.05, "adaptation step size α (> 0)",
        low=0.0, high=10.0, low_open=True, space=floats(1e-3, 0.5, log=True),
    )
    variant: str = hp("fo", "'fo' (first-order) or 'hf' (Hessian-free)", choices=("fo", "hf"), space=choice("fo", "hf"))
    delta: float = hp(
        1e-3, "finite-difference step δ of the Hessian-vector product (HF)",
        low=0.0, high=1.0, low_open=True,
    )


class PerFedAvg(GlobalModelAlgorithm):
    """Personalised FedAvg (see module docstring)."""

    name = "perfedavg"
    Config = PerFedAvgConfig
    personalised = True
    config: PerFedAvgConfig

    def client_fit(self, ctx: ClientContext, message: ServerMessage) -> ClientUpdate:
        c, model = self.config, ctx.model
        X, y = ctx.data.X_train, ctx.data.y_train
        n = X.shape[0]
        bs = max(1, min(c.batch_size, n))
        w = np.array(message.params, dtype=np.float64, copy=True)
        n_batches = 3 if c.variant == "hf" else 2
        optimizer = self.local_optimizer(ctx, c.lr)   # the meta-update of w (Fallah et al. 2020, Alg. 1 line 9)
        with np.errstate(over="ignore", invalid="ignore"):
            for _ in range(self.local_steps(n)):
                D = [ctx.rng.choice(n, size=bs, replace=False) for _ in range(n_batches)]
                w_tilde = w - c.alpha * model.grad(w, X[D[0]], y[D[0]])
                g = model.grad(w_tilde, X[D[1]], y[D[1]])
                if c.variant == "hf":
                    hv = (model.grad(w + c.delta * g, X[D[2]], y[D[2]])
                          - model.grad(w - c.delta * g, X[D[2]], y[D[2]])) / (2 * c.delta)
                    g = g - c.alpha * hv
                optimizer.step(w, g)
        ensure_finite("Per-FedAvg", w, lr=c.lr, alpha=c.alpha)
        self.keep_optimizer(ctx, optimizer)
        return ClientUpdate(ctx.client_id, w, n)

    def client_params(self, ctx: ClientContext, message: ServerMessage) -> np.ndarray:
        w = message.params
        return w - self.config.alpha * ctx.model.grad(w, ctx.data.X_train, ctx.data.y_train)
