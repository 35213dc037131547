"""Where the clients' local work happens: the one seam between the round loop and a runtime.

A :class:`ClientPool` takes the round's server messages and returns client updates and evaluations;
:class:`InProcessPool` runs them in this process. A pool never raises for one client's failure: it
returns a :class:`Failure`. See docs/internals.md#topofl.federation.pool.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from topofl.data.federation import ClientData, Federation
from topofl.federation.algorithm import Algorithm, ClientContext, client_rng
from topofl.federation.messages import ClientUpdate, ServerMessage
from topofl.federation.validation import ClientInfo, declared_infos
from topofl.metrics import evaluate, evaluate_clients
from topofl.models.base import Model

__all__ = ["ClientEvaluation", "ClientPool", "Failure", "InProcessPool", "client_context", "client_rng",
           "evaluate_client"]


@dataclass(frozen=True)
class Failure:
    """A client that did not deliver in a round: ``stage`` is ``"fit"`` or ``"evaluate"``."""

    round: int
    client: int | None
    stage: str
    reason: str
    node_id: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class ClientEvaluation:
    """One client's test metrics with the model it would use; ``y_true``/``scores`` only when
    the runtime shares predictions for pooled metrics.
    """

    client_id: int
    metrics: dict[str, float]
    y_true: np.ndarray | None = None
    scores: np.ndarray | None = None


def client_context(data: ClientData, state: dict[str, Any], model: Model, rnd: int, seed: int) -> ClientContext:
    """The context a client's code runs in, identical in every runtime; its generator
    (:func:`client_rng`) is made when the client's code first draws from it (:meth:`ClientContext.seeded`).
    """
    return ClientContext.seeded(data, state, model, rnd, seed)


def evaluate_client(algorithm: Algorithm, ctx: ClientContext,
                    message: ServerMessage) -> tuple[dict[str, float], np.ndarray]:
    """Score a client on its own test split with the model it would use (DESIGN: evaluation is explicit)."""
    theta = algorithm.client_params(ctx, message)
    return evaluate(ctx.model, theta, algorithm.client_features(ctx, ctx.data.X_test), ctx.data.y_test)


def _base_methods(algorithm: Algorithm, *names: str) -> bool:
    """Whether ``algorithm``'s methods ``names`` are :class:`Algorithm`'s own: neither its class nor the instance
    replaces them.
    """
    kind, own = type(algorithm), vars(algorithm)
    return all(getattr(kind, name) is getattr(Algorithm, name) and name not in own for name in names)


class ClientPool(ABC):
    """The clients of a run, wherever they live.

    ``infos`` holds what each client declared when it joined (:class:`ClientInfo`): the server
    weights and checks every reply by it, never by what the reply itself claims.
    """

    client_ids: list[int]
    infos: dict[int, ClientInfo]

    @abstractmethod
    def fit(self, rnd: int, messages: dict[int, ServerMessage]) -> tuple[list[ClientUpdate], list[Failure]]:
        """Local work of the addressed clients; updates in client order, and who failed."""

    @abstractmethod
    def evaluate(self, rnd: int, messages: dict[int, ServerMessage]) -> tuple[list[ClientEvaluation], list[Failure]]:
        """Test metrics of the addressed clients; evaluations in client order, and who failed."""

    def secure(self, rnd: int, stage: str, requests: dict[int, Any]) -> tuple[list[Any], list[Failure]]:
        """One stage of a secure-aggregation round (:mod:`topofl.federation.secure`): each addressed
        client's answer to its request (:func:`~topofl.federation.secure.client_step`), and who failed.
        """
        raise ValueError(f"secure aggregation is not available on the {type(self).__name__} runtime")

    def final_models(
        self, rnd: int, messages: dict[int, ServerMessage]
    ) -> tuple[dict[int, np.ndarray], dict[int, dict[str, np.ndarray]]]:
        """Every client's final model — the parameters it would use (:meth:`Algorithm.client_params`)
        — and what it needs to map raw features to the model's input; empty where the clients'
        models stay with them (a real deployment).
        """
        return {}, {}

    def close(self) -> None:
        """Release resources (nothing by default)."""
        return


class InProcessPool(ClientPool):
    """Clients as Python objects in this process; their state dicts persist between rounds.

    Exceptions propagate (an in-process error is a bug or bad input, not a network fault).
    """

    def __init__(self, federation: Federation, algorithm: Algorithm, model: Model, seed: int) -> None:
        self.federation, self.algorithm, self.model, self.seed = federation, algorithm, model, seed
        self.client_ids = federation.client_ids
        self.infos = declared_infos(federation.clients)
        self.states: dict[int, dict[str, Any]] = {cid: {} for cid in self.client_ids}

    def fit(self, rnd: int, messages: dict[int, ServerMessage]) -> tuple[list[ClientUpdate], list[Failure]]:
        data = {c.client_id: c for c in self.federation.at_round(rnd)}
        updates = [
            self.algorithm.client_fit(client_context(data[cid], self.states[cid], self.model, rnd, self.seed),
                                      messages[cid])
            for cid in sorted(messages)
        ]
        return updates, []

    def _one_model(self, messages: dict[int, ServerMessage]) -> np.ndarray | None:
        """The parameters every message carries (one array: a global model's round) when the algorithm's clients
        evaluate the parameters sent on their own features (:meth:`Algorithm.client_params` and
        :meth:`Algorithm.client_features` as the base class has them) — what :func:`evaluate_client` then scores for
        each; else ``None``.
        """
        if len(messages) < 2 or not _base_methods(self.algorithm, "client_params", "client_features"):
            return None
        sent = iter(messages.values())
        theta = next(sent).params
        return theta if all(m.params is theta for m in sent) else None

    def secure(self, rnd: int, stage: str, requests: dict[int, Any]) -> tuple[list[Any], list[Failure]]:
        """A client that refuses a request (``ValueError``: out of order, unsound) leaves the round: a
        :class:`Failure`, as a vanished node would be; any other exception propagates (a bug).
        """
        from topofl.federation.secure_client import client_step

        data = {c.client_id: c for c in self.federation.at_round(rnd)}
        replies: list[Any] = []
        failures: list[Failure] = []
        for cid in sorted(requests):
            ctx = client_context(data[cid], self.states[cid], self.model, rnd, self.seed)
            try:
                replies.append(client_step(self.algorithm, ctx, requests[cid]))
            except ValueError as exc:
                failures.append(Failure(rnd, cid, "fit", f"secure aggregation ({stage}): client refused: {exc}"))
        return replies, failures

    def final_models(
        self, rnd: int, messages: dict[int, ServerMessage]
    ) -> tuple[dict[int, np.ndarray], dict[int, dict[str, np.ndarray]]]:
        data = {c.client_id: c for c in self.federation.at_round(rnd)}
        models, states = {}, {}
        # clients that use the same array (FedAvg's global model) share one copy
        copies: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # the base class's client_params (the parameters sent) and client_feature_state (none) need no context
        as_sent = _base_methods(self.algorithm, "client_params", "client_feature_state")
        for cid in sorted(messages):
            if as_sent:
                params, state = messages[cid].params, {}
            else:
                ctx = client_context(data[cid], self.states[cid], self.model, rnd, self.seed)
                params = self.algorithm.client_params(ctx, messages[cid])
                state = self.algorithm.client_feature_state(ctx)
            if id(params) not in copies:
                copy = np.array(params, copy=True)   # in the dtype it came in (float32 for a torch model)
                copy.flags.writeable = False
                copies[id(params)] = (params, copy)
            models[cid], states[cid] = copies[id(params)][1], state
        return models, states

    def evaluate(self, rnd: int, messages: dict[int, ServerMessage]) -> tuple[list[ClientEvaluation], list[Failure]]:
        data = {c.client_id: c for c in self.federation.at_round(rnd)}
        theta = self._one_model(messages)
        if theta is not None:   # every client scores the model sent, as sent: the round's evaluations at once
            ids = sorted(messages)
            clients = [data[cid] for cid in ids]
            results = evaluate_clients(self.model, theta, [(c.X_test, c.y_test) for c in clients])
            return [ClientEvaluation(cid, metrics, c.y_test, scores)
                    for cid, c, (metrics, scores) in zip(ids, clients, results, strict=True)], []
        out: list[ClientEvaluation] = []
        for cid in sorted(messages):
            ctx = client_context(data[cid], self.states[cid], self.model, rnd, self.seed)
            metrics, scores = evaluate_client(self.algorithm, ctx, messages[cid])
            out.append(ClientEvaluation(cid, metrics, ctx.data.y_test, scores))
        return out, []
