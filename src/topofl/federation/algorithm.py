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
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from topofl.config import TrainingConfig, hp, ints
from topofl.data.federation import ClientData
from topofl.federation.local import ExtraGrad, sgd
from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.federation.validation import ArraySpec, ClientInfo, ReplySchema
from topofl.models.base import Model, param_dtype, reply_dtypes
from topofl.models.optimizers import STATE_KEY, LocalOptimizer, OptimizerSpec, steps_per_round
from topofl.models.registry import build_model, spec_is_deep

OPTIMIZER_STATE_POLICIES = ("method", "reset", "keep")
_F64, _FLOAT64 = np.dtype(np.float64), ("float64",)


@dataclass(frozen=True)
class AlgorithmConfig(TrainingConfig):
    """Hyper-parameters shared by every server-based method: local training (:class:`TrainingConfig`)
    and the server's policy towards what clients send (validated at construction).
    """

    local_steps: int = hp(
        0, "mini-batch steps per round: a step budget that overrides local_epochs, cycling through freshly shuffled "
        "passes (FLamby's protocol); 0: local_epochs passes (a peer method's local_steps: its steps per iteration)",
        low=0, high=10_000_000, integer=True, space=ints(0, 500, tuned=False),
    )
    optimizer_state: str = hp(
        "method", "whether a client keeps its optimiser state between rounds: method (kept for a model trained on "
        "from round to round — local's model, ditto's personal model —, fresh where training restarts from the "
        "server's model) | reset (fresh every round) | keep (kept per client and model, as FLamby does; a client of "
        "ifca or ptopofl that changes cluster carries its state along)",
        choices=OPTIMIZER_STATE_POLICIES,
    )
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


def client_rng(seed: int, rnd: int, client_id: int) -> np.random.Generator:
    """Generator of client ``client_id`` in round ``rnd`` of a run seeded with ``seed``."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(rnd), int(client_id)]))


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

    @classmethod
    def seeded(cls, data: ClientData, state: dict[str, Any], model: Model, rnd: int, seed: int) -> ClientContext:
        """A context whose ``rng`` is :func:`client_rng` ``(seed, rnd, client_id)``, made when first read: the
        same generator, in the same state, as one made here (nothing can draw from it before), and none made
        for work that draws nothing (evaluating most methods' clients: a seed sequence costs ~10 µs).
        """
        ctx = cls.__new__(cls)
        ctx.data, ctx.state, ctx.model, ctx.round, ctx.seed = data, state, model, rnd, seed
        return ctx

    if not TYPE_CHECKING:  # to type checkers, ``rng`` is the field it always is when read
        def __getattr__(self, name: str) -> Any:
            """The generator of a :meth:`seeded` context, made on first use (only ``rng`` can be missing)."""
            state = self.__dict__
            if name != "rng" or not {"data", "round", "seed"} <= state.keys():
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            rng = state["rng"] = client_rng(state["seed"], state["round"], state["data"].client_id)
            return rng


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

    def secure_plan(self, rnd: int, updates: list[ClientUpdate]) -> Any:
        """Under secure aggregation (:mod:`topofl.federation.secure`): a
        :class:`~topofl.federation.secure.SecurePlan` of round ``rnd`` — which clients are summed
        together, with which weights — from ``updates``, the replies without their models. A method
        whose server reads each model has none (its config refuses ``secure_aggregation``).
        """
        raise ValueError(f"{self.name} does not aggregate from secure sums")

    def secure_aggregate(self, rnd: int, plan: Any, sums: dict[int, Any]) -> dict[str, Any]:
        """Fold the groups' :class:`~topofl.federation.secure.GroupSum` into the server state; return the
        round's log.
        """
        raise ValueError(f"{self.name} does not aggregate from secure sums")

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

        Default: a model of :meth:`update_size` numbers (:meth:`params_spec`), near the model
        sent, no extras, no descriptor, no metrics. Algorithms that receive more override this.
        """
        n = self.update_size()
        centers = message.params[None, :] if message.params.shape == (n,) else None
        return ReplySchema(self.params_spec(n), centers=centers)

    def schema_per_params(self) -> bool:
        """Whether :meth:`reply_schema` is made of the parameters sent alone — the same for every client sent the
        same array in a round, so that :func:`~topofl.federation.validation.screen_updates` makes it once per array:
        true for this class's own, false for a method (or an instance) that declares its replies itself.
        """
        return type(self).reply_schema is Algorithm.reply_schema and "reply_schema" not in vars(self)

    def replies_are_models(self) -> bool:
        """Whether a sound reply is a model alone, judged by nothing but this class's own :meth:`reply_schema`
        (:meth:`schema_per_params`) and :meth:`reply_problem` (no check of its own): then
        :func:`~topofl.federation.validation.screen_updates` may judge a round of such replies at once.
        """
        return (self.schema_per_params() and type(self).reply_problem is Algorithm.reply_problem
                and "reply_problem" not in vars(self))

    def params_spec(self, n: int) -> ArraySpec:
        """A reply's model: ``n`` finite numbers in float64 or the model's own dtype
        (:func:`~topofl.models.base.reply_dtypes`: a PyTorch model replies in float32), with the
        model's layer layout when it has one and ``n`` is its size (a Flower reply then travels layer
        by layer).
        """
        layout = getattr(self.model, "layout", None)
        fits = layout is not None and self.model is not None and n == self.model.n_params
        # a float64 model (NumPy's own descriptor, read without its ~2 µs name): reply_dtypes' ("float64",)
        dtypes = _FLOAT64 if param_dtype(self.model) is _F64 else reply_dtypes(self.model)
        return ArraySpec((n,), dtypes=dtypes, layout=tuple(layout) if layout is not None and fits else None)

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
        sample_weight: np.ndarray | None = None, continues: str = "",
    ) -> np.ndarray:
        """Local training with this algorithm's hyper-parameters: its step budget or epochs, its
        optimiser at ``lr × lr_scale`` (``sample_weight``: one weight per training sample of the local
        loss, see :func:`~topofl.federation.local.sgd`).

        ``continues`` names the model this training continues from round to round (a personal
        model: ``"personal"``), for which the method keeps the client's optimiser state by default;
        a training that restarts from the server's model gets a fresh optimiser. The config's
        ``optimizer_state`` overrides the choice (``reset`` / ``keep``).
        """
        c = self.config
        optimizer = self.local_optimizer(ctx, c.lr * lr_scale, continues)
        theta = sgd(
            ctx.model, theta, X, ctx.data.y_train,
            epochs=c.local_epochs, lr=optimizer.spec.lr, batch_size=c.batch_size, rng=ctx.rng if rng is None else rng,
            extra_grad=extra_grad, sample_weight=sample_weight, local_steps=c.local_steps, optimizer=optimizer,
        )
        self.keep_optimizer(ctx, optimizer, continues)
        return theta

    def local_optimizer(self, ctx: ClientContext, lr: float, continues: str = "") -> LocalOptimizer:
        """The client's optimiser at step size ``lr``: its kept state for the model ``continues``
        names when the policy keeps one (see :meth:`local_sgd`), else a fresh one.
        """
        c = self.config
        spec = OptimizerSpec.of(c, lr)
        key = self._optimizer_key(continues)
        return LocalOptimizer(spec, state=ctx.state.get(key) if key else None)

    def keep_optimizer(self, ctx: ClientContext, optimizer: LocalOptimizer, continues: str = "") -> None:
        """Save ``optimizer``'s state in ``ctx.state`` for the next round if the policy keeps it."""
        key = self._optimizer_key(continues)
        if key and optimizer.spec.name != "sgd":
            ctx.state[key] = optimizer.state()

    def state_recovery(self) -> str:
        """What a client does when it has lost its state (:attr:`client_state_recovery`, and its kept
        optimiser state restarting afresh); ``""`` when it keeps nothing between rounds.
        """
        c = self.config
        notes = [self.client_state_recovery] if self.client_state_recovery else []
        if c.optimizer != "sgd" and (c.optimizer_state == "keep" or (c.optimizer_state == "method" and notes)):
            notes.append(f"its kept {c.optimizer} state, if any, restarts afresh")
        return "; ".join(notes)

    def _optimizer_key(self, continues: str) -> str:
        policy = self.config.optimizer_state
        if policy == "reset" or (policy == "method" and not continues):
            return ""
        return f"{STATE_KEY}.{continues or 'model'}"

    def local_steps(self, n: int) -> int:
        """Number of SGD steps one client with ``n`` samples takes in one round."""
        c = self.config
        return steps_per_round(n, c.batch_size, c.local_epochs, c.local_steps)
