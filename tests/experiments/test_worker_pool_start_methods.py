"""The experiment runner's worker pool under every start method of multiprocessing: ``forkserver`` is
Python 3.14's default on Linux, where a worker's parent process is the fork server, not the command."""
import multiprocessing
import time

import pytest

from topofl.experiments.pool import PARENT_POLL_SECONDS, workers


def _slow_double(x: int) -> int:
    time.sleep(2.5 * PARENT_POLL_SECONDS)   # outlives a few checks of the parent
    return 2 * x


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_workers_outlive_their_parent_checks_under_every_start_method(method, monkeypatch):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{method} is not available on this platform")
    from concurrent.futures import ProcessPoolExecutor

    real = ProcessPoolExecutor

    def with_context(*args, **kwargs):
        return real(*args, mp_context=multiprocessing.get_context(method), **kwargs)

    monkeypatch.setattr("topofl.experiments.pool.ProcessPoolExecutor", with_context)
    with workers(2, 1) as pool:
        assert list(pool.map(_slow_double, [1, 2])) == [2, 4]
