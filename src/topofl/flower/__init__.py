"""Flower runtimes for topofl (extra ``flower``: ``pip install "topofl[flower]"``).

* :func:`simulate_flower` — Flower's Simulation Runtime from Python;
* ``topofl.flower.server_app:app`` / ``topofl.flower.client_app:app`` — the ServerApp and
  ClientApp that ``flwr run`` loads (see ``examples/flower-app``);
* :class:`topofl.deploy.LocalDeployment` (operator tooling, outside this package) — a SuperLink and SuperNodes on
  loopback.

The algorithms are the in-process ones: the adapters only move their messages.
"""
from __future__ import annotations

from typing import Any

from topofl.flower.settings import FlowerSettings


def require_flwr() -> None:
    """Raise an ImportError that says how to install the Flower extra."""
    try:
        import flwr  # noqa: F401
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError('topofl.flower needs Flower: pip install "topofl[flower]"') from None


def simulate_flower(*args: Any, **kwargs: Any) -> Any:
    """See :func:`topofl.flower.simulation.simulate_flower`."""
    require_flwr()
    from topofl.flower.simulation import simulate_flower as run

    return run(*args, **kwargs)


__all__ = ["FlowerSettings", "require_flwr", "simulate_flower"]
