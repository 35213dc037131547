"""Secure aggregation on Flower (the in-memory grid runs the real ClientApp handlers): the same sums, bit
for bit, as in process; a node that fails mid-protocol is recovered from; malformed replies are
refused before they are decoded; a node never answers an unmask request twice with other survivors."""
import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict  # noqa: E402

import topofl  # noqa: E402
from fake_grid import FakeGrid  # noqa: E402
from topofl.flower.server_app import federated_main  # noqa: E402
from topofl.flower.settings import FlowerSettings  # noqa: E402

SMALL = {"n_clients": 6}


def _settings(method, rounds=3, **hp):
    return FlowerSettings.from_flat(method=method, rounds=rounds, seed=3, scenario_params=SMALL,
                                    hyperparameters={"secure_aggregation": True, **hp})


@pytest.mark.parametrize("method", ["fedavg", "fedprox", "ptopofl"])
def test_secure_flower_run_equals_the_in_process_secure_run_bit_for_bit(method):
    settings = _settings(method, n_clusters=2, secure_min_group=2) if method == "ptopofl" else _settings(method)
    flower = federated_main(FakeGrid(6), settings)
    assert not flower.failures
    assert settings.job.hyperparameters["max_client_weight"] == 0.3   # the deployment's cap stays
    assert "aggregator" not in settings.job.hyperparameters            # its robust rule does not: the mean
    ref = topofl.simulate(topofl.make_scenario("healthcare", seed=3, **SMALL), method, rounds=3, seed=3,
                          **settings.job.hyperparameters)
    assert [(r["round"], r["client"], r["auc"], r["loss"]) for r in flower.records] == \
        [(r["round"], r["client"], r["auc"], r["loss"]) for r in ref.records]
    assert np.array_equal(flower.server_params, ref.server_params)
    for a, b in zip(flower.server_logs, ref.server_logs, strict=True):
        assert a["secure"] == b["secure"]
    plain = topofl.simulate(topofl.make_scenario("healthcare", seed=3, **SMALL), method, rounds=3, seed=3,
                            **{**settings.job.hyperparameters, "secure_aggregation": False})
    assert np.max(np.abs(flower.server_params - plain.server_params)) < 1e-8


def _stage(m):
    return m.content["secagg"]["stage"] if "secagg" in m.content else None


@pytest.mark.parametrize("stage", ["share", "mask", "unmask"])
def test_a_node_that_fails_mid_protocol_leaves_the_round_and_the_sum_is_recovered(stage):
    grid = FakeGrid(6)
    grid.raise_on = lambda m: m.metadata.dst_node_id == grid.node_ids[2] and _stage(m) == stage and \
        m.metadata.group_id == "2"
    h = federated_main(grid, _settings("fedavg"))
    entry = h.server_logs[1]["secure"]["0"]
    assert "abandoned" not in entry
    if stage == "share":
        assert entry["left_before_masking"] == [2]
    elif stage == "mask":
        assert entry["dropped"] == [2] and 2 not in entry["survivors"]
    else:
        assert 2 in entry["survivors"]   # its masked input is in the sum; its self mask came from the others' shares
    assert [(f.round, f.client) for f in h.failures] == [(2, 2)]


def test_malformed_secure_replies_are_refused_before_decoding():
    grid = FakeGrid(6)

    def tamper(m, content):
        if _stage(m) == "mask" and m.metadata.dst_node_id == grid.node_ids[1]:
            content = RecordDict({**{k: content[k] for k in content.keys()},
                                  "masked": ArrayRecord({"y": Array(np.zeros(5, dtype=np.float64))})})
        if _stage(m) == "share" and m.metadata.dst_node_id == grid.node_ids[4]:
            rec = dict(content["secagg"])
            rec["sealed"] = [b"x" * 3 for _ in rec["sealed"]]
            content = RecordDict({**{k: content[k] for k in content.keys()}, "secagg": ConfigRecord(rec)})
        return content

    grid.tamper = tamper
    h = federated_main(grid, _settings("fedavg", rounds=1))
    reasons = {f.client: f.reason for f in h.failures}
    assert "refused before decoding" in reasons[1] and "uint64" in reasons[1]
    assert "byte strings of" in reasons[4]
    entry = h.server_logs[0]["secure"]["0"]
    assert entry["survivors"] == [0, 2, 3, 5] and "abandoned" not in entry


def test_a_node_refuses_a_second_unmask_request_with_other_survivors():
    from topofl.federation.secure_client import Unmask
    from topofl.flower import node
    from topofl.flower.secure_records import encode_request

    grid = FakeGrid(6)
    federated_main(grid, _settings("fedavg", rounds=1))
    ctx = grid.contexts[grid.node_ids[0]]
    job = {k: v for k, v in dict(grid.sent[-1].content["config"]).items()} if "config" in grid.sent[-1].content else {}
    again = encode_request(Unmask(1, (0, 1, 2, 3), (4, 5)), job, 1, {})
    with pytest.raises(ValueError, match="second unmask request"):
        node.secure(ctx.node_config, ctx.state, again)
