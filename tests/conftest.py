"""Shared fixtures: small federations built in the tests (no downloads)."""
from __future__ import annotations

import numpy as np
import pytest

from helpers import blob_client
from topofl import Federation


@pytest.fixture
def small_federation() -> Federation:
    rng = np.random.default_rng(0)
    return Federation.from_arrays([blob_client(rng, 60 + 10 * k) for k in range(4)])
