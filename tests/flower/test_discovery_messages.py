"""What a newcomer reads when SuperNodes are too slow at discovery (issue 24): the error says which
setting to raise (``node-wait``, or ``round-timeout`` when node-wait is 0) and which logs to read;
a node that did not answer in time is named with the setting that bounded the wait. Runs the real
discovery against the in-memory :class:`FakeGrid` (no Flower runtime started).
"""
import logging

import pytest

pytest.importorskip("flwr")

from fake_grid import FakeGrid  # noqa: E402
from topofl.flower.discovery import discover, discovery_timeout, wait_for_nodes  # noqa: E402
from topofl.flower.settings import FlowerSettings  # noqa: E402

THREE = {"n_clients": 3, "adversarial": (1,)}
LOGS = "supernode-<i>.log in a LocalDeployment's log directory"


def settings(**kw):
    return FlowerSettings.from_flat(method="fedavg", rounds=1, scenario_params=THREE, **kw)


def test_too_few_supernodes_within_node_wait_names_the_setting_and_the_logs():
    grid = FakeGrid(2)
    with pytest.raises(RuntimeError) as err:
        wait_for_nodes(grid, settings(min_nodes=3, node_wait=0.0))
    text = str(err.value)
    assert "\n" not in text   # the command line prints an error's first line only
    assert text.startswith("only 2 of min-nodes=3 SuperNode(s) connected within node-wait=0 s")
    assert "raise node-wait in the run config (e.g. node-wait=300)" in text
    assert LOGS in text and "topofl flower --verbose" in text


def test_no_supernode_answering_in_time_names_node_wait_and_the_logs():
    grid = FakeGrid(3)
    grid.dead = set(grid.node_ids)   # connected, never answering (ClientApps still starting)
    with pytest.raises(RuntimeError) as err:
        discover(grid, settings(min_nodes=3, node_wait=5.0))
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("no SuperNode answered the discovery query within node-wait=5 s (none of the 3 connected)")
    assert "raise node-wait in the run config" in text and LOGS in text


def test_with_node_wait_0_the_query_waits_round_timeout_and_says_so():
    s = settings(min_nodes=3, node_wait=0.0, round_timeout=7.0)
    assert discovery_timeout(s) == ("round-timeout", 7.0)
    grid = FakeGrid(3)
    grid.dead = set(grid.node_ids)
    with pytest.raises(RuntimeError, match=r"within round-timeout=7 s \(none of the 3 connected\): .* raise round-timeout in the run config"):
        discover(grid, s)


def test_a_slow_node_left_out_is_named_with_the_setting_that_bounded_the_wait(caplog):
    grid = FakeGrid(3)
    slow = grid.node_ids[2]
    grid.dead = {slow}
    with caplog.at_level(logging.WARNING, logger="topofl.flower.discovery"):
        nodes, _, failures = discover(grid, settings(min_nodes=3, node_wait=5.0))
    assert sorted(nodes) == [0, 1]
    assert [(f.node_id, f.reason) for f in failures] == [(slow, "no reply within node-wait=5 s")]   # not round-timeout
    hint = [r.getMessage() for r in caplog.records if "did not answer the discovery query" in r.getMessage()]
    assert len(hint) == 1 and "raise node-wait" in hint[0] and LOGS in hint[0]


def test_invalid_declarations_name_the_first_reason_and_the_logs():
    grid = FakeGrid(2)
    grid.raise_on = lambda m: True   # every ClientApp fails
    with pytest.raises(RuntimeError) as err:
        discover(grid, settings(min_nodes=2, node_wait=5.0))
    text = str(err.value)
    assert text.startswith("no SuperNode answered the discovery query with a valid declaration (node ")
    assert "injected failure" in text and LOGS in text and "raise node-wait" not in text
