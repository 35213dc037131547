"""The algorithm contract: one object holds the server side, and stateless client-side methods.

The same object serves every runtime. The in-process runner (``topofl.federation.runner``) and,
later, Flower adapters call:

server side   ``setup`` → per round ``configure_fit`` → ``aggregate_fit``; ``message_for`` gives
              the message the server would send a client now (used for evaluation)
client side   ``client_fit(ctx, message)`` → :class:`ClientUpdate`;
              ``client_params(ctx, message)`` → the parameters that client would use;
              ``client_features(ctx, X)`` → the features the client's model sees

Client state lives in ``ctx.state`` (a dict the runtime persists per client), never on the server.
"""
from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

import numpy as np

from topofl._validation import check_int, check_range
from topofl.data.federation import ClientData
from topofl.federation.local import sgd
from topofl.federation.messages import ClientUpdate, ServerMessage, validate_update
from topofl.models.linear import LinearModel


def hp(default: Any, help: str, **kw: Any) -> Any:
    """A config field with a help text (shown by ``topofl methods`` and ``--help``)."""
    return field(default=default, metadata={"help": help, **kw})


@dataclass(frozen=True)
class AlgorithmConfig:
    """Local-training hyper-parameters shared by every algorithm (validated at construction)."""

    lr: float = hp(0.1, "local SGD step size (> 0)")
    local_epochs: int = hp(2, "local epochs per round (>= 1)")
    batch_size: int = hp(32, "local mini-batch size (>= 1)")
    l2: float = hp(1e-3, "L2 penalty on model weights (>= 0)")

    def __post_init__(self) -> None:
        check_range("lr", self.lr, 0.0, 100.0, low_open=True)
        check_int("local_epochs", self.local_epochs, 1, 10_000)
        check_int("batch_size", self.batch_size, 1)
        check_range("l2", self.l2, 0.0)

    @classmethod
    def field_help(cls) -> dict[str, tuple[Any, str]]:
        """``{name: (default, help)}`` for every hyper-parameter."""
        return {f.name: (f.default, f.metadata.get("help", "")) for f in dataclasses.fields(cls)}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "AlgorithmConfig":
        """Build from a mapping, rejecting unknown names with the list of known ones."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(
                f"unknown hyper-parameter(s) {', '.join(unknown)} for {cls.__name__}; known: {', '.join(known)}"
            )
        return cls(**{k: _coerce(k, v, known[k].default) for k, v in values.items()})


def _coerce(name: str, value: Any, default: Any) -> Any:
    """Coerce strings from the CLI/TOML to the type of the field's default."""
    if not isinstance(value, str) or isinstance(default, str):
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value
    try:
        if isinstance(default, bool):
            low = value.lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return low in ("true", "1", "yes")
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
    except ValueError:
        raise ValueError(f"{name} must be a {type(default).__name__}; got {value!r}") from None
    return value


@dataclass
class ClientContext:
    """What client-side code may use: its own data, its persistent state, the model, a generator."""

    data: ClientData
    state: dict[str, Any]
    model: LinearModel
    rng: np.random.Generator
    round: int
    seed: int

    @property
    def client_id(self) -> int:
        return self.data.client_id


class Algorithm(ABC):
    """Base class of every federated algorithm (see module docstring)."""

    name: ClassVar[str]
    Config: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig
    personalised: ClassVar[bool] = False

    def __init__(self, config: AlgorithmConfig | None = None) -> None:
        self.config = config if config is not None else self.Config()
        if not isinstance(self.config, self.Config):
            raise ValueError(f"{self.name} needs a {self.Config.__name__}; got {type(self.config).__name__}")
        self.model: LinearModel | None = None

    # ---- dimensions ---------------------------------------------------------------------------
    def input_dim(self, n_features: int) -> int:
        """Dimension of the features the model sees (augmentation may add columns)."""
        return n_features

    # ---- server side --------------------------------------------------------------------------
    def setup(self, model: LinearModel, client_ids: list[int], rng: np.random.Generator) -> None:
        """Initialise server state before round 1."""
        self.model = model
        self.client_ids = list(client_ids)

    @abstractmethod
    def configure_fit(self, rnd: int, selected: list[int]) -> dict[int, ServerMessage]:
        """Messages for the clients selected in round ``rnd``."""

    @abstractmethod
    def aggregate_fit(self, rnd: int, updates: list[ClientUpdate]) -> dict[str, Any]:
        """Fold the round's updates into server state; return a log for the round."""

    @abstractmethod
    def message_for(self, client_id: int) -> ServerMessage:
        """The message the server would send ``client_id`` now."""

    def update_size(self) -> int:
        """Length of the parameter vector a client sends back (the model's size by default)."""
        assert self.model is not None, "setup() first"
        return self.model.n_params

    def descriptor_size(self) -> int | None:
        """Length of the descriptor clients send, or ``None`` when the method sends none."""
        return None

    def check_update(self, update: ClientUpdate) -> str | None:
        """Why a client's reply must be dropped before aggregation, or ``None`` (see
        :func:`topofl.federation.messages.validate_update`); also rejects unknown client ids."""
        if update.client_id not in self.client_ids:
            return f"client_id {update.client_id!r} is not a client of this run"
        return validate_update(update, self.update_size(), self.descriptor_size())

    # ---- client side --------------------------------------------------------------------------
    def client_features(self, ctx: ClientContext, X: np.ndarray) -> np.ndarray:
        """Features the client's model sees for samples ``X``."""
        return X

    @abstractmethod
    def client_fit(self, ctx: ClientContext, message: ServerMessage) -> ClientUpdate:
        """Local work of one client in one round."""

    def client_params(self, ctx: ClientContext, message: ServerMessage) -> np.ndarray:
        """Parameters the client would use for prediction (personalised methods override)."""
        return message.params

    # ---- shared helpers -----------------------------------------------------------------------
    def local_sgd(
        self, ctx: ClientContext, theta: np.ndarray, X: np.ndarray, lr_scale: float = 1.0,
        extra_grad=None, rng: np.random.Generator | None = None,
    ) -> np.ndarray:
        """Mini-batch SGD with this algorithm's local hyper-parameters."""
        c = self.config
        return sgd(
            ctx.model, theta, X, ctx.data.y_train,
            epochs=c.local_epochs, lr=c.lr * lr_scale, batch_size=c.batch_size, rng=ctx.rng if rng is None else rng,
            extra_grad=extra_grad,
        )

    def local_steps(self, n: int) -> int:
        """Number of SGD steps one client with ``n`` samples takes in one round."""
        return self.config.local_epochs * int(np.ceil(n / max(1, min(self.config.batch_size, n))))


def personal_rng(ctx: ClientContext) -> np.random.Generator:
    """The generator of a client's *personal-model* training in a round (shared by Local and Ditto,
    so that Ditto with λ = 0 reproduces local training exactly)."""
    return np.random.default_rng(np.random.SeedSequence([ctx.seed, ctx.round, ctx.client_id, 0xD1770]))


def weighted_average(vectors: list[np.ndarray], weights: np.ndarray) -> np.ndarray:
    """Σ_k w_k v_k / Σ_k w_k (weights need not be normalised; must have a positive sum)."""
    w = np.asarray(weights, dtype=np.float64)
    total = w.sum()
    if not np.isfinite(total) or total <= 0:
        raise ValueError(f"aggregation weights must have a positive finite sum; got {w.tolist()}")
    return (w / total) @ np.vstack(vectors)
