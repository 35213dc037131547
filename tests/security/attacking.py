"""A hostile client in process: an :class:`InProcessPool` whose replies one client tampers with.

The pool runs every client honestly, then replaces the victim's reply (``fit``) or evaluation
(``evaluate``) with what ``tamper`` makes of it — exactly what a hostile site could send. The
server side under test (validation, aggregation) is the real one.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import topofl
from topofl.federation.pool import InProcessPool
from topofl.federation.runner import run_rounds
from topofl.methods import build_server as build
from topofl.models.linear import make_model

VICTIM = 1


def run_attacked(
    method: str,
    fit: Callable[[Any, Any], Any] | None = None,
    evaluate: Callable[[Any], Any] | None = None,
    *,
    rounds: int = 3,
    seed: int = 0,
    scenario: str = "healthcare",
    victim: int | set[int] = VICTIM,
    federation: Any = None,
    client_fraction: float = 1.0,
    **hyperparameters: Any,
):
    """Run ``method`` with client ``victim``'s replies tampered; return ``(history, algorithm)``.

    ``victim`` may be a set of clients (colluders, or every client to read the honest replies on the wire).
    """
    victims = {victim} if isinstance(victim, int) else set(victim)
    fed = federation if federation is not None else topofl.make_scenario(scenario, seed=seed)
    algo = build(method, hyperparameters)
    model = make_model(fed.task, algo.input_dim(fed.n_features), max(fed.n_classes, 2), algo.config.l2)

    class Hostile(InProcessPool):
        def fit(self, rnd, messages):
            updates, failures = super().fit(rnd, messages)
            if fit is not None:
                updates = [fit(u, messages[u.client_id]) if u.client_id in victims else u for u in updates]
            return updates, failures

        def evaluate(self, rnd, messages):
            evaluations, failures = super().evaluate(rnd, messages)
            if evaluate is not None:
                evaluations = [evaluate(e) if e.client_id in victims else e for e in evaluations]
            return evaluations, failures

    history = run_rounds(Hostile(fed, algo, model, seed), algo, model, rounds, seed, client_fraction=client_fraction)
    return history, algo


def replace(obj: Any, **changes: Any) -> Any:
    return dataclasses.replace(obj, **changes)


def victim_failures(history, stage: str = "fit", victim: int = VICTIM):
    return [f for f in history.failures if f.client == victim and f.stage == stage]
