"""Operator tooling for running a real Flower deployment of topofl (extra ``flower``); not part of the library.

* :class:`LocalDeployment` — a SuperLink, its ServerApp executor, the Fleet proxy and N SuperNodes on one
  machine, for tests and trials (:mod:`.deployment`, :mod:`.launch`, :mod:`.faults`, :mod:`.processes`);
* :func:`generate_credentials` — throwaway TLS certificates and SuperNode keys (:mod:`.credentials`);
* ``python -m topofl.deploy.proxy`` — the Fleet-only TLS proxy SuperNodes connect through (:mod:`.proxy`).

Nothing in ``topofl`` imports this package; names load on first use. See ``docs/deployment.md``.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from topofl.deploy.config import ConfigValue, format_config, toml_document
    from topofl.deploy.credentials import (
        Credentials,
        authorize_key,
        generate_credentials,
        generate_supernode_key,
        write_authorized_keys,
    )
    from topofl.deploy.deployment import MIN_HEARTBEAT_INTERVAL, LocalDeployment
    from topofl.deploy.processes import FLOWER_QUIET_ENV, ManagedProcess, find_free_ports
    from topofl.deploy.proxy import main, serve
    from topofl.deploy.proxy_app import FleetProxy, create_app
    from topofl.deploy.proxy_auth import AuthorizedKeys, NodeAuthenticator, load_authorized_keys, signed_headers
    from topofl.deploy.runs import FlowerRun, FlowerRunResult

#: public name -> the module that defines it
_WHERE = {
    "ConfigValue": "config", "format_config": "config", "toml_document": "config",
    "Credentials": "credentials", "authorize_key": "credentials", "generate_credentials": "credentials",
    "generate_supernode_key": "credentials", "write_authorized_keys": "credentials",
    "MIN_HEARTBEAT_INTERVAL": "deployment", "LocalDeployment": "deployment",
    "FLOWER_QUIET_ENV": "processes", "ManagedProcess": "processes", "find_free_ports": "processes",
    "FlowerRun": "runs", "FlowerRunResult": "runs",
    "FleetProxy": "proxy_app", "create_app": "proxy_app",
    "AuthorizedKeys": "proxy_auth", "NodeAuthenticator": "proxy_auth", "load_authorized_keys": "proxy_auth",
    "signed_headers": "proxy_auth",
    "main": "proxy", "serve": "proxy",
}

__all__ = [
    "FLOWER_QUIET_ENV", "MIN_HEARTBEAT_INTERVAL", "AuthorizedKeys", "ConfigValue", "Credentials", "FleetProxy",
    "FlowerRun", "FlowerRunResult", "LocalDeployment", "ManagedProcess", "NodeAuthenticator", "authorize_key",
    "create_app", "find_free_ports", "format_config", "generate_credentials", "generate_supernode_key",
    "load_authorized_keys", "main", "serve", "signed_headers", "toml_document", "write_authorized_keys",
]


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use (``python -m topofl.deploy.proxy`` loads only the proxy)."""
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
