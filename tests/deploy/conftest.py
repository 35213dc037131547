"""Fixtures for the deployment-tooling tests: a SuperLink and SuperNodes on loopback.

Deployments are secure unless a test asks for ``secure=False``: TLS, SuperNode keys
registered before the nodes start, the SuperLink on 127.0.0.1 and the Fleet-only proxy.
Every process is started by :class:`topofl.deploy.deployment.LocalDeployment` and
stopped by PID at teardown (SIGTERM, bounded wait, SIGKILL), also when a test fails.
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from topofl.deploy.deployment import LocalDeployment

FLOWER_APP_DIR = Path(__file__).resolve().parents[2] / "examples" / "flower-app"


def _deployment_class() -> type[LocalDeployment]:
    if sys.platform == "win32":
        pytest.skip("LocalDeployment needs POSIX process groups")
    pytest.importorskip("flwr")
    from topofl.deploy.deployment import LocalDeployment

    return LocalDeployment


@pytest.fixture(scope="session")
def flower_app_dir() -> Path:
    """The example Flower app (``examples/flower-app``) that ``flwr run`` deploys."""
    return FLOWER_APP_DIR


@pytest.fixture(scope="module")
def flower_deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalDeployment]:
    """One secure SuperLink and 3 SuperNodes (partition-id 0..2), shared by a test module."""
    deployment_class = _deployment_class()
    with deployment_class(3, tmp_path_factory.mktemp("flower-deployment")) as dep:
        yield dep


@pytest.fixture
def flower_deployment_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., LocalDeployment]]:
    """Start a fresh deployment: ``make(num_nodes, **LocalDeployment kwargs)``."""
    deployment_class = _deployment_class()
    started: list[LocalDeployment] = []

    def make(num_nodes: int, **kwargs: Any) -> LocalDeployment:
        dep = deployment_class(num_nodes, tmp_path_factory.mktemp("flower-deployment"), **kwargs)
        started.append(dep)
        return dep.start()

    yield make
    for dep in started:
        dep.stop()
