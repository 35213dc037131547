"""pFedMe (T. Dinh, Tran, Nguyen, NeurIPS 2020): personalised FL with Moreau envelopes.

Client i keeps a local copy w of the global model and a personalised model θ. For each local
mini-batch D it approximately solves (K gradient steps of size ``personal_lr``, their Eq. 7)
    θ ← argmin_θ f_i(θ; D) + λ/2 ‖θ − w‖²
then moves the local model towards it, w ← w − η λ (w − θ) (their Alg. 1, line 8).
Server: w_global ← (1 − β) w_global + β Σ_i (n_i/n) w_i (their Alg. 1, line 11).
Each client is evaluated with its personalised θ.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from topofl.algorithms.base import ClientContext, hp
from topofl.algorithms.fedavg import GlobalModelAlgorithm, GlobalModelConfig
from topofl.config import floats
from topofl.federation.local import ensure_finite
from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.models.optimizers import epoch_batches


@dataclass(frozen=True)
class PFedMeConfig(GlobalModelConfig):
    """Hyper-parameters of pFedMe: step sizes, Moreau-envelope strength λ, inner steps K and server mixing β."""

    supports_secure = False   # its server reads each reply (see SecureAggConfig)

    lr: float = hp(
        0.05, "local-model step size η (> 0); η·λ must stay below 2 for stability",
        space=floats(1e-3, 0.1, log=True),
    )
    lam: float = hp(
        15.0, "Moreau-envelope strength λ (pTopoFL paper: 15)",
        low=0.0, low_open=True, space=floats(0.5, 30.0, log=True),
    )
    personal_lr: float = hp(
        0.05, "step size of the K inner steps solving for θ (> 0)",
        low=0.0, high=10.0, low_open=True, space=floats(5e-3, 0.5, log=True),
    )
    inner_steps: int = hp(5, "inner steps K per mini-batch (>= 1)", low=1, high=1000, integer=True)
    beta: float = hp(
        1.0, "server mixing β in (0, 2] (1 = plain averaging)",
        low=0.0, high=2.0, low_open=True, space=floats(0.5, 2.0),
    )

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared bounds; lr keeps TrainingConfig's (0, 100]
        if self.lr * self.lam >= 2.0:
            raise ValueError("lr*lam must be below 2 for pFedMe's local update to be stable; "
                             f"got lr={self.lr}, lam={self.lam}")


class PFedMe(GlobalModelAlgorithm):
    """Personalised FL with Moreau envelopes (see module docstring)."""

    client_state_recovery = (
        "its personal model θ_k is recomputed by its next fit; until then it is evaluated with the "
        "received global model"
    )

    name = "pfedme"
    Config = PFedMeConfig
    personalised = True
    config: PFedMeConfig

    def client_fit(self, ctx: ClientContext, message: ServerMessage) -> ClientUpdate:
        c, model = self.config, ctx.model
        X, y = ctx.data.X_train, ctx.data.y_train
        w = np.array(message.params, dtype=np.float64, copy=True)
        theta = w.copy()
        n = X.shape[0]
        # the local update of w (Alg. 1 line 8, gradient λ(w − θ̂)) takes the optimiser; θ̂'s inner solver stays plain.
        # Plain SGD keeps the paper's arithmetic, w ← w − (η·λ)(w − θ̂), bit for bit
        plain = c.optimizer == "sgd"
        optimizer = self.local_optimizer(ctx, c.lr * c.lam if plain else c.lr)
        with np.errstate(over="ignore", invalid="ignore"):
            for batches in epoch_batches(n, c.batch_size, c.local_epochs, c.local_steps, ctx.rng):
                for idx in batches:
                    for _ in range(c.inner_steps):
                        theta -= c.personal_lr * (model.grad(theta, X[idx], y[idx]) + c.lam * (theta - w))
                    optimizer.step(w, (w - theta) if plain else c.lam * (w - theta))
        ensure_finite("pFedMe", w, theta, lr=c.lr, lam=c.lam, personal_lr=c.personal_lr)
        self.keep_optimizer(ctx, optimizer)
        ctx.state["personal"] = theta
        return ClientUpdate(ctx.client_id, w, n)

    def aggregate_fit(self, rnd: int, updates: list[ClientUpdate]) -> dict[str, Any]:
        old = self.global_params
        entry = super().aggregate_fit(rnd, updates)  # the round's log (e.g. a robust rule's exclusions), kept
        self.global_params = (1.0 - self.config.beta) * old + self.config.beta * self.global_params
        return entry

    def client_params(self, ctx: ClientContext, message: ServerMessage) -> np.ndarray:
        params: np.ndarray = ctx.state.get("personal", message.params)
        return params
