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

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from topofl.algorithms.base import (
    Algorithm,
    ClientContext,
    UpdateReputation,
    cap_shares,
    hp,
    mean_of,
    robust_entries,
    robust_round,
)
from topofl.algorithms.fedavg import GlobalModelConfig
from topofl.config import OPTIMIZERS, floats
from topofl.federation.local import AffineGrad
from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.federation.validation import ArraySpec, ClientInfo, ReplySchema
from topofl.models.base import Model


@dataclass(frozen=True)
class ScaffoldConfig(GlobalModelConfig):
    """Hyper-parameters of SCAFFOLD: the server step size η_g, and the rule ``aggregator`` that
    aggregates the clients' Δy (the mean by default).
    """

    supports_secure = False   # its server reads each reply (see SecureAggConfig)

    supports_dp = False

    global_lr: float = hp(
        1.0, "server step size η_g (> 0)",
        low=0.0, high=10.0, low_open=True, space=floats(0.25, 2.0, log=True),
    )

    optimizer: str = hp("sgd", "local update rule: sgd only (the control variates are defined by plain SGD steps)",
                        choices=OPTIMIZERS)   # no search space: the others are refused below, with the reason

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.optimizer != "sgd":   # option II reads the mean gradient off K plain steps: c_i − c + (x − y)/(Kη)
            raise ValueError(f"optimizer={self.optimizer!r}: SCAFFOLD's control variates (Karimireddy et al. "
                             "2020, Algorithm 1 option II) assume plain SGD steps, and the server checks each c_i⁺ "
                             "against them; use optimizer='sgd'")


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
        self.warned: set[str] = set()  # robust aggregation's fallback notes already logged as warnings
        self.reputation = UpdateReputation()  # guarded_mean: each client's cosines so far

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
        dy = np.subtract(y, x, dtype=np.float64)   # a difference of float32 models is taken in float64
        c_new = c_i - c - dy / (K * self.config.lr)
        ctx.state["c_i"] = c_new
        return ClientUpdate(ctx.client_id, dy, ctx.data.n_train, extras={"dc": c_new - c_i})

    def reply_schema(self, client_id: int, message: ServerMessage, info: ClientInfo) -> ReplySchema:
        """Δy (a difference: its norm is bounded relative to ‖x‖) and the control-variate change Δc."""
        n = self.update_size()
        dy = dataclasses.replace(self.params_spec(n), dtypes=("float64",))   # a difference: float64 (client_fit)
        return ReplySchema(dy, centers=None, scale=float(np.linalg.norm(message.params)),
                           extras={"dc": ArraySpec((n,))})

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

    def reply_models(self, update: ClientUpdate, message: ServerMessage) -> tuple[np.ndarray, np.ndarray]:
        """SCAFFOLD replies Δy = θ_k − x: ``(x, x + Δy)``."""
        return message.params, message.params + update.params

    def reply_for_model(self, ctx: ClientContext, update: ClientUpdate, message: ServerMessage,
                        theta: np.ndarray) -> ClientUpdate:
        """Δy = θ − x and Δc = −c − Δy/(K·η_l), the option-II control-variate change consistent with it."""
        dy = np.asarray(theta, dtype=np.float64) - message.params
        K = self.local_steps(ctx.data.n_train)
        dc = -message.extras["c"] - dy / (K * self.config.lr)
        return dataclasses.replace(update, params=dy, extras={**update.extras, "dc": dc})

    def aggregate_fit(self, rnd: int, updates: list[ClientUpdate]) -> dict[str, Any]:
        """X ← x + η_g · mean Δy and c ← c + |S|/N · mean Δc (Karimireddy et al. 2020, Alg. 1). With a
        robust ``aggregator`` the Δy (changes from x, so the reference is 0) are aggregated by it, and c
        by the mean Δc of the clients whose Δy it kept (S: its ``selected``).
        """
        c = self.config
        entry: dict[str, Any] = {}
        if updates and c.aggregator == "mean":
            self.x = self.x + c.global_lr * mean_of([u.params for u in updates])
            self.c = self.c + len(updates) / len(self.client_ids) * mean_of([u.extras["dc"] for u in updates])
        elif updates:
            ids = [u.client_id for u in updates]
            result, note = robust_round(c.aggregator, [u.params for u in updates],
                                        cap_shares(np.ones(len(updates)), c.max_client_weight),
                                        np.zeros_like(self.x), c, self.warned, client_ids=ids,
                                        reputation=self.reputation)
            kept = [updates[i] for i in result.selected]
            self.x = self.x + c.global_lr * result.vector
            self.c = self.c + len(kept) / len(self.client_ids) * mean_of([u.extras["dc"] for u in kept])
            entry = robust_entries(ids, result, c.aggregator, note)
        return {"control_norm": float(np.linalg.norm(self.c)), **entry}
