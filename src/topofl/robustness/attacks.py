"""Hostile clients as wrappers of a method's client side (methods layer).

:func:`attacked` wraps any server-based method so that the clients :func:`choose_adversaries` picks misbehave
from round ``start_round`` on, the server and honest clients unchanged (the wrapper is an ``Algorithm``; wrappers
compose). A kind (:data:`KINDS`; :class:`AttackConfig`) alters what an adversary trains on (label flips, feature
poisoning, descriptor forgeries) or sends (sign flip, scaled replacement, noise, collusion, free riding); peers:
:mod:`topofl.robustness.peer_attacks`. See docs/internals.md#topofl.robustness.attacks for each kind and paper.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from topofl._validation import check_int, check_range
from topofl.config import Config, hp, parse_assignments
from topofl.data.federation import ClientData
from topofl.federation.algorithm import Algorithm, ClientContext
from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.federation.pool import client_rng
from topofl.federation.validation import ClientInfo, ReplySchema
from topofl.limits import MAX_ROUNDS, MAX_SEED
from topofl.models.base import Model

__all__ = ["KINDS", "AttackConfig", "AttackedAlgorithm", "attacked", "choose_adversaries", "parse_attack"]

log = logging.getLogger(__name__)

#: attacks on the training data (the client trains on an altered copy of its data)
DATA_KINDS = ("label_flip", "feature_poison", "descriptor_forgery", "crude_forgery")
#: attacks on the reply (the client trains honestly and alters what it sends)
UPDATE_KINDS = ("sign_flip", "scaled_replacement", "gaussian_noise", "collusion", "free_rider")
KINDS = DATA_KINDS + UPDATE_KINDS

#: the parameters each kind reads, besides kind, fraction, start_round and seed
USES: dict[str, tuple[str, ...]] = {
    "label_flip": ("flip_rate",),
    "feature_poison": ("feature_scale", "shift"),
    "descriptor_forgery": ("feature_scale", "shift"),
    "crude_forgery": ("feature_scale", "shift"),
    "sign_flip": ("scale",),
    "scaled_replacement": ("boost",),
    "gaussian_noise": ("noise_std",),
    "collusion": ("noise_std",),
    "free_rider": (),
}
_COMMON = ("kind", "fraction", "start_round", "seed")
#: pTopoFL's persistence diagrams, sent beside its descriptor (forged with it)
DESCRIPTOR_EXTRAS = ("dgm0", "dgm1")
#: largest magnitude of boost, scale, noise_std, feature_scale and shift (keeps every reply finite)
MAX_MAGNITUDE = 1e6

# stream tags of the attack's own generators (never the client's training generator)
_ADVERSARIES, _FLIPS, _NOISE, _COLLUSION, _CRUDE = 0xAD7, 0xF11B, 0x6A55, 0xC011, 0xC7DE


@dataclass(frozen=True)
class AttackConfig(Config):
    """A validated attack: its kind, who and when, and the parameters its kind reads.

    A parameter the kind does not read must keep its default (a ``ValueError`` names it), so a
    misspelt or misplaced setting is never silently ignored. See
    docs/internals.md#topofl.robustness.attacks for each kind and its paper.
    """

    kind: str = hp(dataclasses.MISSING, f"the attack: {', '.join(KINDS)}", choices=KINDS)
    fraction: float = hp(
        0.25, "fraction of the clients that are adversaries, in [0, 1) (floor(fraction·K) clients)",
        low=0.0, high=1.0, high_open=True,
    )
    start_round: int = hp(
        1, "first round in which the adversaries attack (>= 1; honest before)",
        low=1, high=MAX_ROUNDS, integer=True,
    )
    seed: int = hp(
        0, "seed of the choice of adversaries and of the attack's noise (shared by colluders)",
        low=0, high=MAX_SEED, integer=True,
    )
    scale: float = hp(
        1.0, "sign_flip: s in θ_sent − s·(θ_k − θ_sent) (> 0)",
        low=0.0, high=MAX_MAGNITUDE, low_open=True,
    )
    boost: float = hp(
        10.0, "scaled_replacement: γ in θ_sent + γ·(θ_k − θ_sent) (>= 1; Bagdasaryan et al.: γ = n/η)",
        low=1.0, high=MAX_MAGNITUDE,
    )
    noise_std: float = hp(
        1.0, "gaussian_noise, collusion: σ of the noise sent as the update (> 0)",
        low=0.0, high=MAX_MAGNITUDE, low_open=True,
    )
    feature_scale: float = hp(
        3.0, "feature_poison, descriptor_forgery: the training features are multiplied by this (> 0)",
        low=0.0, high=MAX_MAGNITUDE, low_open=True,
    )
    shift: float = hp(
        0.0, "feature_poison, descriptor_forgery: then this is added to every training feature",
        low=-MAX_MAGNITUDE, high=MAX_MAGNITUDE,
    )
    flip_rate: float = hp(
        1.0, "label_flip: fraction of the training labels flipped, in (0, 1]",
        low=0.0, high=1.0, low_open=True,
    )

    def __post_init__(self) -> None:
        super().__post_init__()  # the declared bounds of every field; the rules joining fields follow
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name in defaults:
            if name not in _COMMON and name not in USES[self.kind] and getattr(self, name) != defaults[name]:
                raise ValueError(f"{name}={getattr(self, name)!r} is not used by kind={self.kind!r} (it reads: "
                                 f"{', '.join(_COMMON + USES[self.kind])})")
        if (self.kind in ("feature_poison", "descriptor_forgery", "crude_forgery") and self.feature_scale == 1.0
                and self.shift == 0.0):
            raise ValueError(f"kind={self.kind!r} with feature_scale=1.0 and shift=0.0 changes nothing; set either")

    @property
    def spec(self) -> str:
        """The attack as ``kind:key=value,...`` (non-default values only), as :func:`parse_attack` reads it."""
        changed = [f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)
                   if f.name != "kind" and getattr(self, f.name) != f.default]
        return self.kind + (":" + ",".join(changed) if changed else "")

    def adversaries(self, client_ids: Iterable[int]) -> frozenset[int]:
        """:func:`choose_adversaries` of ``client_ids`` with this attack's fraction and seed."""
        return choose_adversaries(client_ids, self.fraction, self.seed)


def parse_attack(text: str | AttackConfig) -> AttackConfig:
    """An :class:`AttackConfig` from ``"kind"`` or ``"kind:key=value,key=value"``.

    Examples: ``"sign_flip:fraction=0.25,start_round=2"``, ``"scaled_replacement:boost=8"``.
    A bad kind, key or value is a ``ValueError`` naming it.
    """
    if isinstance(text, AttackConfig):
        return text
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"attack must be 'kind' or 'kind:key=value,...' with kind one of {', '.join(KINDS)}; "
                         f"got {text!r}")
    kind, _, rest = text.strip().partition(":")
    values = parse_assignments([p for p in rest.split(",") if p.strip()], "attack")
    if "kind" in values:
        raise ValueError(f"attack: give the kind before ':', not as kind=...; got {text!r}")
    return AttackConfig.from_dict({"kind": kind.strip(), **values})


def choose_adversaries(client_ids: Iterable[int], fraction: float, seed: int = 0) -> frozenset[int]:
    """The adversaries among ``client_ids``: ``floor(fraction · K)`` of the K clients.

    Parameters
    ----------
    client_ids : iterable of int
        The federation's client ids (distinct, non-negative).
    fraction : float
        In [0, 1), so at least one client stays honest.
    seed : int
        Seed of the choice.

    Returns
    -------
    frozenset of int
        A prefix of one random order of the sorted ids, fixed by ``seed`` and K: the adversaries
        at a lower fraction are a subset of those at a higher one (an attack-rate sweep is
        paired), and every runtime that knows the ids and the seed picks the same ones.
    """
    ids = list(client_ids)
    for cid in ids:
        check_int("client id", cid, 0)
    if len(set(ids)) != len(ids):
        raise ValueError(f"client ids must be distinct; got {sorted(ids)}")
    check_range("fraction", fraction, 0.0, 1.0, high_open=True)
    check_int("seed", seed, 0, MAX_SEED)
    ordered = sorted(int(c) for c in ids)
    m = min(max(len(ordered) - 1, 0), math.floor(fraction * len(ordered) + 1e-9))
    if fraction > 0 and m == 0:
        log.warning("attack fraction %g of %d client(s) is no client: nobody attacks", fraction, len(ordered))
    order = np.random.default_rng(np.random.SeedSequence([int(seed), _ADVERSARIES])).permutation(len(ordered))
    return frozenset(ordered[i] for i in order[:m])


# ---- what an adversary trains on ---------------------------------------------------------------
def flip_labels(y: np.ndarray, model: Model, rate: float, rng: np.random.Generator) -> np.ndarray:
    """``y`` with a ``rate`` fraction of its labels flipped (the first rows of one order drawn
    from ``rng``): binary y → 1 − y, C classes y → C − 1 − y (Tolpegin et al. 2020; Fang et al. 2020).
    Regression has no label to flip.
    """
    if model.task == "regression":
        raise ValueError("attack kind='label_flip' needs a classification task; the model's task is 'regression'")
    n_classes = 2 if model.task == "binary" else int(model.n_outputs)
    out = np.array(y, dtype=np.float64, copy=True)
    rows = rng.permutation(out.size)[: int(round(rate * out.size))]
    out[rows] = n_classes - 1 - out[rows]
    return out


def poisoned_data(data: ClientData, attack: AttackConfig, model: Model) -> ClientData:
    """The training data an adversary uses (its test split unchanged): deterministic per client,
    so the data — and a pTopoFL descriptor — stay fixed from round to round.
    """
    X, y = data.X_train, data.y_train
    if attack.kind == "label_flip":
        rng = np.random.default_rng(np.random.SeedSequence([attack.seed, data.client_id, _FLIPS]))
        y = flip_labels(y, model, attack.flip_rate, rng)
    else:
        X = attack.feature_scale * X + attack.shift
    return ClientData(X, y, data.X_test, data.y_test, data.client_id, data.meta)


# ---- what an adversary sends -------------------------------------------------------------------
def innermost(algorithm: Algorithm) -> Algorithm:
    """The method under any number of :class:`AttackedAlgorithm` wrappers."""
    while isinstance(algorithm, AttackedAlgorithm):
        algorithm = algorithm.inner
    return algorithm


def sent_and_trained(method: Algorithm, update: ClientUpdate, message: ServerMessage) -> tuple[np.ndarray, np.ndarray]:
    """(θ_sent, θ_k): the model a reply started from and the model it stands for — the method's own
    :meth:`~topofl.federation.algorithm.Algorithm.reply_models` (SCAFFOLD sends Δy = θ_k − x; IFCA
    starts from the cluster model it names; the others send θ_k, started from the parameters they received).
    """
    return method.reply_models(update, message)


def with_trained(method: Algorithm, ctx: ClientContext, update: ClientUpdate, message: ServerMessage,
                 theta: np.ndarray) -> ClientUpdate:
    """``update`` standing for model ``theta`` instead, every array consistent with it — the method's own
    :meth:`~topofl.federation.algorithm.Algorithm.reply_for_model` (SCAFFOLD: Δy = θ − x and
    Δc = −c − Δy/(K·η_l), its option-II control-variate change).
    """
    return method.reply_for_model(ctx, update, message, theta)


def _gaussian(seed_words: list[int], size: int, std: float) -> np.ndarray:
    noise: np.ndarray = std * np.random.default_rng(np.random.SeedSequence(seed_words)).standard_normal(size)
    return noise


class AttackedAlgorithm(Algorithm):
    """``inner`` with ``adversaries`` attacking from ``attack.start_round`` on (see :func:`attacked`).

    The server side and every honest client's calls go to ``inner`` unchanged; attributes the
    wrapper does not define (``model``, a method's server state) are ``inner``'s.
    """

    def __init__(self, inner: Algorithm, attack: AttackConfig, adversaries: Iterable[int]) -> None:
        if not isinstance(inner, Algorithm):
            raise ValueError(f"attacked() wraps a server-based topofl Algorithm; got {type(inner).__name__}")
        self.inner = inner
        self.attack = attack
        self.adversaries = frozenset(int(a) for a in adversaries)
        for a in self.adversaries:
            check_int("adversary", a, 0)
        self.config = inner.config
        self._depth: int = 1 + (inner._depth if isinstance(inner, AttackedAlgorithm) else 0)
        # The method's identity, on the instance (class variables of Algorithm): the run is
        # recorded under the method's name, and personalised methods stay personalised.
        vars(self).update(name=inner.name, personalised=inner.personalised, Config=inner.Config,
                          client_state_recovery=inner.client_state_recovery)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("inner", "attack", "adversaries", "_depth"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"attacked({self.inner!r}, {self.attack.spec!r}, adversaries={sorted(self.adversaries)})"

    def attacks(self, ctx: ClientContext) -> bool:
        """Whether this client attacks in this round."""
        return ctx.client_id in self.adversaries and ctx.round >= self.attack.start_round

    def _view(self, ctx: ClientContext) -> ClientContext:
        """The context the method sees: poisoned training data for an attacking adversary of a
        data kind; the client's own otherwise. State, model and generator are the client's.
        """
        if self.attack.kind not in DATA_KINDS or not self.attacks(ctx):
            return ctx
        return dataclasses.replace(ctx, data=poisoned_data(ctx.data, self.attack, ctx.model))

    # ---- server side: the method's own ---------------------------------------------------------
    def input_dim(self, n_features: int, deep: bool = False) -> int:
        return self.inner.input_dim(n_features, deep)

    def build_model(self, spec: Any, task: str, n_features: int, n_classes: int, **options: Any) -> Any:
        return self.inner.build_model(spec, task, n_features, n_classes, **options)

    def setup(self, model: Model, client_ids: list[int], rng: np.random.Generator) -> None:
        self.inner.setup(model, client_ids, rng)

    def configure_fit(self, rnd: int, selected: list[int]) -> dict[int, ServerMessage]:
        return self.inner.configure_fit(rnd, selected)

    def aggregate_fit(self, rnd: int, updates: list[ClientUpdate]) -> dict[str, Any]:
        return self.inner.aggregate_fit(rnd, updates)

    def message_for(self, client_id: int) -> ServerMessage:
        return self.inner.message_for(client_id)

    def server_params(self) -> np.ndarray | None:
        return self.inner.server_params()

    def update_size(self) -> int:
        return self.inner.update_size()

    def reply_schema(self, client_id: int, message: ServerMessage, info: ClientInfo) -> ReplySchema:
        return self.inner.reply_schema(client_id, message, info)

    def reply_problem(self, update: ClientUpdate, message: ServerMessage, info: ClientInfo) -> str | None:
        return self.inner.reply_problem(update, message, info)

    def local_steps(self, n: int) -> int:
        return self.inner.local_steps(n)

    # ---- client side: the adversaries' is altered ----------------------------------------------
    def client_features(self, ctx: ClientContext, X: np.ndarray) -> np.ndarray:
        return self.inner.client_features(self._view(ctx), X)

    def client_feature_state(self, ctx: ClientContext) -> dict[str, np.ndarray]:
        return self.inner.client_feature_state(self._view(ctx))

    def client_params(self, ctx: ClientContext, message: ServerMessage) -> np.ndarray:
        return self.inner.client_params(self._view(ctx), message)

    def client_fit(self, ctx: ClientContext, message: ServerMessage) -> ClientUpdate:
        """The method's reply, or an attacking adversary's: a data kind's on its poisoned data (forged
        descriptor: :meth:`_forge`, :meth:`_crude`), or θ sent as ``sign_flip`` θ_sent − s·(θ_k − θ_sent) (Li et
        al. 2019), ``scaled_replacement`` θ_sent + γ·(θ_k − θ_sent) (Bagdasaryan et al. 2020), ``gaussian_noise``
        θ_sent + ε (Blanchard et al. 2017), ``collusion`` θ_sent + δ_r shared by all (Blanchard et al. 2017;
        Baruch et al. 2019) or ``free_rider`` θ_sent (Fraboni et al. 2021).
        """
        if not self.attacks(ctx):
            return self.inner.client_fit(ctx, message)
        kind = self.attack.kind
        if kind in DATA_KINDS:
            update = self.inner.client_fit(self._view(ctx), message)
            if kind == "crude_forgery":
                return self._crude(ctx, update)
            return self._forge(ctx, message, update) if kind == "descriptor_forgery" else update
        update = self.inner.client_fit(ctx, message)
        method = innermost(self.inner)
        sent, trained = sent_and_trained(method, update, message)
        a = self.attack
        if kind == "sign_flip":
            theta = sent - a.scale * (trained - sent)
        elif kind == "scaled_replacement":
            theta = sent + a.boost * (trained - sent)
        elif kind == "gaussian_noise":
            theta = sent + _gaussian([a.seed, ctx.round, ctx.client_id, _NOISE], sent.size, a.noise_std)
        elif kind == "collusion":
            theta = sent + _gaussian([a.seed, ctx.round, _COLLUSION], sent.size, a.noise_std)
        else:  # free_rider
            theta = np.array(sent, dtype=np.float64, copy=True)
        return with_trained(method, ctx, update, message, theta)

    def _crude(self, ctx: ClientContext, poisoned: ClientUpdate) -> ClientUpdate:
        """``poisoned`` with a random non-negative descriptor of the same norm (seeded by the
        attack and the client, so it is the same every round: a forger with one made-up answer).
        """
        phi = poisoned.descriptor
        if phi is None:
            return poisoned
        rng = np.random.default_rng(np.random.SeedSequence([self.attack.seed, ctx.client_id, _CRUDE]))
        fake = np.abs(rng.standard_normal(phi.shape))
        fake *= float(np.linalg.norm(phi)) / max(float(np.linalg.norm(fake)), 1e-300)
        return dataclasses.replace(poisoned, descriptor=fake)

    def _forge(self, ctx: ClientContext, message: ServerMessage, poisoned: ClientUpdate) -> ClientUpdate:
        """``poisoned`` with the descriptor (and its diagrams) the client would send were it
        honest: a shadow run of the method's client side on the clean data, with the client's
        honest generator and a shadow of its state taken when the attack began.
        """
        key = f"attack_shadow_{self._depth}"
        if key not in ctx.state:
            ctx.state[key] = copy.deepcopy({k: v for k, v in ctx.state.items()
                                            if not str(k).startswith("attack_shadow_")})
        shadow_ctx = ClientContext(ctx.data, ctx.state[key], ctx.model, client_rng(ctx.seed, ctx.round, ctx.client_id),
                                   ctx.round, ctx.seed)
        honest = self.inner.client_fit(shadow_ctx, message)
        extras = {k: v for k, v in poisoned.extras.items() if k not in DESCRIPTOR_EXTRAS}
        extras.update({k: v for k, v in honest.extras.items() if k in DESCRIPTOR_EXTRAS})
        return dataclasses.replace(poisoned, descriptor=honest.descriptor, extras=extras)


def attacked(algorithm: Algorithm, attack: AttackConfig | str, adversaries: Iterable[int]) -> Algorithm:
    """``algorithm`` with the clients ``adversaries`` attacking as ``attack`` says.

    Parameters
    ----------
    algorithm : Algorithm
        Any configured server-based method (or an already attacked one: attacks compose).
    attack : AttackConfig or str
        The attack, or its spec ``"kind:key=value,..."`` (:func:`parse_attack`).
    adversaries : iterable of int
        The attacking clients' ids, usually ``attack.adversaries(federation.client_ids)``
        (:func:`choose_adversaries`).

    Returns
    -------
    Algorithm
        A wrapper whose server side and honest clients are ``algorithm``'s, unchanged; it holds
        no state of its own, so one wrapper serves every client and runtime.
    """
    config = parse_attack(attack)
    wrapped = AttackedAlgorithm(algorithm, config, adversaries)
    log.info("attack %s by client(s) %s from round %d", config.spec, sorted(wrapped.adversaries), config.start_round)
    return wrapped
