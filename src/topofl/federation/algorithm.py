"""The contract of a server-based (federated) method: one object holds the server side and stateless
client-side methods.

The round loop (:mod:`topofl.federation.runner`) and the Flower adapters are written against
:class:`Algorithm`; every method in :mod:`topofl.algorithms` implements it. Client state lives in
``ctx.state``, never on the server. See docs/internals.md#topofl.federation.algorithm for the calls.
"""
from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from topofl.config import TrainingConfig, hp
from topofl.data.federation import ClientData
from topofl.federation.local import ExtraGrad, sgd
from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.federation.validation import ArraySpec, ClientInfo, ReplySchema
from topofl.models.base import Model
from topofl.models.registry import build_model, spec_is_deep


@dataclass(frozen=True)
class AlgorithmConfig(TrainingConfig):
    """Hyper-parameters shared by every server-based method: local training (:class:`TrainingConfig`)
    and the server's policy towards what clients send (validated at construction).
    """

    max_update_ratio: float = hp(
        10.0,
        "server: drop an update farther from the model sent than this × max(that model's norm, update_norm_floor, "
        "the other updates' median) (>= 1)",
        low=1.0,
    )
    update_norm_floor: float = hp(1.0, "server: smallest reference norm of that bound (> 0)", low=0.0, low_open=True)
    max_client_weight: float = hp(
        1.0, "server: largest share one client may have of an aggregate, in (0, 1] (1: sample sizes decide)",
        low=0.0, high=1.0, low_open=True,
    )


@dataclass
class ClientContext:
    """What client-side code may use: its own data, its persistent state, the model, a generator."""

    data: ClientData
    state: dict[str, Any]
    model: Model
    rng: np.random.Generator
    round: int
    seed: int

    @property
    def client_id(self) -> int:
        return self.data.client_id


class Algorithm(ABC):
    """Base class of every federated algorithm (see docs/internals.md#topofl.federation.algorithm)."""

    name: ClassVar[str]
    Config: ClassVar[type[AlgorithmConfig]] = AlgorithmConfig
    personalised: ClassVar[bool] = False
    #: what the client does when it has lost its state (a restarted node, a resumed run on new
    #: nodes): logged by the node; "" for a method whose clients keep no state between rounds
    client_state_recovery: ClassVar[str] = ""

    def __init__(self, config: AlgorithmConfig | None = None) -> None:
        self.config = config if config is not None else self.Config()
        if not isinstance(self.config, self.Config):
            raise ValueError(f"{self.name} needs a {self.Config.__name__}; got {type(self.config).__name__}")
        self.model: Model | None = None

    # ---- dimensions ---------------------------------------------------------------------------
    def input_dim(self, n_features: int, deep: bool = False) -> int:
        """Dimension of the features the model sees (augmentation may add columns; ``deep``: the
        model is a PyTorch one, whose input cannot take extra columns).
        """
        return n_features

    def build_model(self, spec: Any, task: str, n_features: int, n_classes: int, **options: Any) -> Any:
        """The model of a run: ``spec`` (see :func:`topofl.models.registry.build_model`) on the
        features this method's clients feed it (:meth:`input_dim`), with this method's L2 penalty.
        """
        deep = spec_is_deep(spec)
        return build_model(spec, task=task, n_features=self.input_dim(n_features, deep), n_classes=max(n_classes, 2),
                           l2=self.config.l2, **options)

    # ---- server side --------------------------------------------------------------------------
    def setup(self, model: Model, client_ids: list[int], rng: np.random.Generator) -> None:
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

    def server_params(self) -> np.ndarray | None:
        """The server's model after the run (``None`` when the server keeps none, e.g. Local)."""
        return None

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

    def screens_independently(self) -> bool:
        """Whether the server's norm bound must judge each reply on its own, without widening it
        by the other replies' median (:func:`~topofl.federation.validation.screen_updates`).

        True when the config privatises the updates (``config.dp`` set, DP-FedAvg): under
        differential privacy, whether one client's update enters the aggregate must not depend on
        another client's data, or the accounted ε would not cover the run.
        """
        return getattr(self.config, "dp", None) is not None

    def reply_problem(self, update: ClientUpdate, message: ServerMessage, info: ClientInfo) -> str | None:
        """Checks of a reply beyond its schema (relations between its arrays); ``None`` = sound.

        Called only for replies that match :meth:`reply_schema`, so every array it reads has
        the declared shape and finite values.
        """
        return None

    def reply_models(self, update: ClientUpdate, message: ServerMessage) -> tuple[np.ndarray, np.ndarray]:
        """``(θ_sent, θ_k)``: the model a reply started from and the model it stands for (read by the
        attack wrappers of :mod:`topofl.robustness.attacks`). By default the reply is the model θ_k,
        started from the parameters sent; a method whose reply is something else overrides this
        (SCAFFOLD: Δy; IFCA: one of the k models sent).
        """
        if message.params.shape != update.params.shape:
            raise ValueError(f"attack: cannot tell which model a {self.name} reply starts from "
                             f"(sent {message.params.shape}, replied {update.params.shape})")
        return message.params, update.params

    def reply_for_model(self, ctx: ClientContext, update: ClientUpdate, message: ServerMessage,
                        theta: np.ndarray) -> ClientUpdate:
        """``update`` standing for model ``theta`` instead, every array consistent with it (the inverse
        of :meth:`reply_models`, for the attack wrappers). By default the model replaces the params.
        """
        return dataclasses.replace(update, params=np.asarray(theta, dtype=np.float64))

    # ---- client side --------------------------------------------------------------------------
    def client_features(self, ctx: ClientContext, X: np.ndarray) -> np.ndarray:
        """Features the client's model sees for samples ``X``."""
        return X

    @abstractmethod
    def client_fit(self, ctx: ClientContext, message: ServerMessage) -> ClientUpdate:
        """Local work of one client in one round."""

    def client_feature_state(self, ctx: ClientContext) -> dict[str, np.ndarray]:
        """What a client's model needs, besides its parameters, to map raw features to its input
        (pTopoFL's §3.2 augmentation: the client's centroid, scale and TDA statistics); empty for
        a model that takes the raw features.
        """
        return {}

    def client_params(self, ctx: ClientContext, message: ServerMessage) -> np.ndarray:
        """Parameters the client would use for prediction (personalised methods override)."""
        return message.params

    # ---- shared helpers -----------------------------------------------------------------------
    def local_sgd(
        self, ctx: ClientContext, theta: np.ndarray, X: np.ndarray, lr_scale: float = 1.0,
        extra_grad: ExtraGrad | None = None, rng: np.random.Generator | None = None,
        sample_weight: np.ndarray | None = None,
    ) -> np.ndarray:
        """Mini-batch SGD with this algorithm's local hyper-parameters (``sample_weight``: one
        weight per training sample of the local loss, see :func:`~topofl.federation.local.sgd`).
        """
        c = self.config
        return sgd(
            ctx.model, theta, X, ctx.data.y_train,
            epochs=c.local_epochs, lr=c.lr * lr_scale, batch_size=c.batch_size, rng=ctx.rng if rng is None else rng,
            extra_grad=extra_grad, sample_weight=sample_weight,
        )

    def local_steps(self, n: int) -> int:
        """Number of SGD steps one client with ``n`` samples takes in one round."""
        return self.config.local_epochs * int(np.ceil(n / max(1, min(self.config.batch_size, n))))
