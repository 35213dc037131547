"""Shared fixtures: small federations built in the tests (no downloads); the settings of a
pytest-xdist worker (the default run is ``-n auto``, see pyproject.toml)."""
from __future__ import annotations

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    # one BLAS/OpenMP/torch thread per worker: two workers of two threads each on two cores are
    # many times slower than two of one (set before NumPy and torch load their thread pools)
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = "1"
    # a worker inherits COLUMNS/LINES from execnet; rich would then fix the CLI console at 80
    # columns when it is built, and the CLI tests' own COLUMNS would be ignored
    for _var in ("COLUMNS", "LINES"):
        os.environ.pop(_var, None)

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from helpers import blob_client  # noqa: E402
from topofl import Federation  # noqa: E402


@pytest.fixture
def small_federation() -> Federation:
    rng = np.random.default_rng(0)
    return Federation.from_arrays([blob_client(rng, 60 + 10 * k) for k in range(4)])


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """A run of the Flower or slow tests (``-m flower``, ``-m slow``) stays in one process: two
    deployments side by side on two cores starve each other's heartbeats, and the slow tests run
    their own worker pools."""
    if config.getoption("markexpr", "").strip() in ("flower", "slow") and config.getoption("numprocesses", None):
        config.option.numprocesses = 0
