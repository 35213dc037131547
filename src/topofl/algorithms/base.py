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
from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.federation.validation import ArraySpec, ClientInfo, ReplySchema
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
    max_update_ratio: float = hp(10.0, "server: drop an update farther from the model sent than this × max(that model's norm, update_norm_floor, the other updates' median) (>= 1)")
    update_norm_floor: float = hp(1.0, "server: smallest reference norm of that bound (> 0)")
    max_client_weight: float = hp(1.0, "server: largest share one client may have of an aggregate, in (0, 1] (1: sample sizes decide)")

    def __post_init__(self) -> None:
        check_range("lr", self.lr, 0.0, 100.0, low_open=True)
        check_int("local_epochs", self.local_epochs, 1, 10_000)
        check_int("batch_size", self.batch_size, 1)
        check_range("l2", self.l2, 0.0)
        check_range("max_update_ratio", self.max_update_ratio, 1.0)
        check_range("update_norm_floor", self.update_norm_floor, 0.0, low_open=True)
        check_range("max_client_weight", self.max_client_weight, 0.0, 1.0, low_open=True)

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

    def reply_schema(self, client_id: int, message: ServerMessage, info: ClientInfo) -> ReplySchema:
        """What this algorithm accepts in ``client_id``'s reply to ``message`` (DESIGN: every
        payload is checked against the schema its algorithm declares before anything reads it).

        Default: a float64 model of :meth:`update_size` numbers, near the model sent, no extras,
        no descriptor, no metrics. Algorithms that receive more override this.
        """
        n = self.update_size()
        centers = message.params[None, :] if message.params.shape == (n,) else None
        return ReplySchema(ArraySpec((n,)), centers=centers)

    def reply_problem(self, update: ClientUpdate, message: ServerMessage, info: ClientInfo) -> str | None:
        """Checks of a reply beyond its schema (relations between its arrays); ``None`` = sound.

        Called only for replies that match :meth:`reply_schema`, so every array it reads has
        the declared shape and finite values.
        """
        return None

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


def cap_shares(weights: np.ndarray, max_share: float = 1.0) -> np.ndarray:
    """Normalised weights in which no share exceeds ``max_share`` (the server's ``max_client_weight``).

    Water-filling: shares above the cap are set to it and the excess is re-distributed over the
    others in proportion to their weights, until none exceeds it. When the cap cannot hold
    (``max_share · K < 1``) every client gets 1/K, the closest feasible split. With
    ``max_share = 1`` this is ``w / Σ w``.
    """
    w = np.asarray(weights, dtype=np.float64)
    check_range("max_share", max_share, 0.0, 1.0, low_open=True)
    total = w.sum()
    if w.ndim != 1 or w.size == 0 or not np.isfinite(total) or total <= 0 or (w < 0).any():
        raise ValueError(f"aggregation weights must be non-negative with a positive finite sum; got {w.tolist()}")
    s = w / total
    if max_share >= 1.0 or s.max() <= max_share:
        return s
    if max_share * w.size < 1.0:
        return np.full(w.size, 1.0 / w.size)
    capped = np.zeros(w.size, dtype=bool)
    while True:
        over = (s > max_share) & ~capped
        if not over.any():
            return s
        capped |= over
        s[capped] = max_share
        free = ~capped
        rest = 1.0 - max_share * capped.sum()
        mass = w[free].sum()
        s[free] = rest * (w[free] / mass if mass > 0 else np.full(free.sum(), 1.0 / free.sum()))


def weighted_average(vectors: list[np.ndarray], weights: np.ndarray, max_share: float = 1.0) -> np.ndarray:
    """Σ_k s_k v_k with shares s = :func:`cap_shares` (weights, max_share) (weights need not be
    normalised; they must have a positive sum)."""
    return cap_shares(weights, max_share) @ np.vstack(vectors)
