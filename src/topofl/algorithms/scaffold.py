"""SCAFFOLD (Karimireddy et al., 2020), control variates with option II of their Algorithm 1.

Client i, from the server model x and control variate c, with its own c_i:
    y ← y − η_l (g_i(y) − c_i + c)             for K local steps
    c_i⁺ = c_i − c + (x − y) / (K η_l)          (option II)
    sends Δy = y − x and Δc = c_i⁺ − c_i
Server:
    x ← x + η_g · mean(Δy),   c ← c + (|S|/N) · mean(Δc)
Client control variates live in the client's own state, never on the server.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from topofl._validation import check_range
from topofl.algorithms.base import Algorithm, AlgorithmConfig, ClientContext, hp
from topofl.config import floats
from topofl.federation.local import AffineGrad
from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.federation.validation import ArraySpec, ClientInfo, ReplySchema
from topofl.models.base import Model


@dataclass(frozen=True)
class ScaffoldConfig(AlgorithmConfig):
    """Hyper-parameters of SCAFFOLD: the server step size η_g."""

    global_lr: float = hp(1.0, "server step size η_g (> 0)", space=floats(0.25, 2.0, log=True))

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("global_lr", self.global_lr, 0.0, 10.0, low_open=True)


class Scaffold(Algorithm):
    """Stochastic controlled averaging, option II (see module docstring)."""

    client_state_recovery = (
        "its control variate c_i restarts at 0, as in round 1 (option II rebuilds it from its next update)"
    )

    name = "scaffold"
    Config = ScaffoldConfig
    config: ScaffoldConfig

    def setup(self, model: Model, client_ids: list[int], rng: np.random.Generator) -> None:
        super().setup(model, client_ids, rng)
        self.x = model.init(rng)
        self.c = np.zeros_like(self.x)

    def server_params(self) -> np.ndarray:
        """The server model x."""
        return self.x

    def message_for(self, client_id: int) -> ServerMessage:
        return ServerMessage(self.x, extras={"c": self.c})

    def configure_fit(self, rnd: int, selected: list[int]) -> dict[int, ServerMessage]:
        return {cid: self.message_for(cid) for cid in selected}

    def client_fit(self, ctx: ClientContext, message: ServerMessage) -> ClientUpdate:
        x, c = message.params, message.extras["c"]
        c_i = ctx.state.get("c_i", np.zeros_like(x))
        correction = c - c_i
        y = self.local_sgd(ctx, x, ctx.data.X_train, extra_grad=AffineGrad(offset=correction))
        K = self.local_steps(ctx.data.n_train)
        c_new = c_i - c + (x - y) / (K * self.config.lr)
        ctx.state["c_i"] = c_new
        return ClientUpdate(ctx.client_id, y - x, ctx.data.n_train, extras={"dc": c_new - c_i})

    def reply_schema(self, client_id: int, message: ServerMessage, info: ClientInfo) -> ReplySchema:
        """Δy (a difference: its norm is bounded relative to ‖x‖) and the control-variate change Δc."""
        n = self.update_size()
        return ReplySchema(ArraySpec((n,)), centers=None, scale=float(np.linalg.norm(message.params)), extras={"dc": ArraySpec((n,))})

    def reply_problem(self, update: ClientUpdate, message: ServerMessage, info: ClientInfo) -> str | None:
        """Option II fixes Δc given Δy: c_i⁺ − c_i = −c − Δy / (K η_l), with K the local steps of a
        client of the declared size; a Δc that departs from it (beyond rounding) is refused.
        """
        K = self.local_steps(info.n_train)
        expected = -message.extras["c"] - update.params / (K * self.config.lr)
        gap = float(np.linalg.norm(update.extras["dc"] - expected))
        tol = 1e-6 * (float(np.linalg.norm(expected)) + float(np.linalg.norm(message.extras["c"])) + 1e-12)
        if gap > tol:
            return f"extras['dc'] is not the option-II control-variate change −c − Δy/(K·lr) (off by {gap:.3g})"
        return None

    def aggregate_fit(self, rnd: int, updates: list[ClientUpdate]) -> dict[str, Any]:
        if updates:
            self.x = self.x + self.config.global_lr * np.mean([u.params for u in updates], axis=0)
            self.c = self.c + len(updates) / len(self.client_ids) * np.mean([u.extras["dc"] for u in updates], axis=0)
        return {"control_norm": float(np.linalg.norm(self.c))}
