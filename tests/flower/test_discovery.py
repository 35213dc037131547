"""Discovery and declarations (audit, issue 20): no node can take another's partition, abort the
run, or redefine its classes, and no reply is decoded before its size is checked.

The audit's figures: a registered node claiming another node's partition-id got the honest node
excluded too; a 2–2 split on the feature count aborted the run telling the operator to "set it in
the run config" with no such key; one node declaring 1,000 classes cost everyone 0.061 AUC and
6× slower rounds; a 10⁷-float reply was fully decoded (+245 MB) before its shape was refused.
"""
import tracemalloc

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict  # noqa: E402

from fake_grid import FakeGrid, tamper_discovery  # noqa: E402
from topofl.flower.discovery import CLASS_FACTOR, CLASS_SLACK, reconcile  # noqa: E402
from topofl.flower.records import PayloadError, array_problem, decode_evaluation, decode_update  # noqa: E402
from topofl.flower.relay import relay_main  # noqa: E402
from topofl.flower.server_app import federated_main  # noqa: E402
from topofl.flower.settings import FlowerSettings  # noqa: E402

THREE = {"n_clients": 3, "adversarial": (1,)}
FOUR = {"n_clients": 4, "adversarial": (1,)}


# ---- who holds a partition ---------------------------------------------------------------------
def test_the_first_node_to_connect_keeps_a_claimed_partition():
    """An impostor connecting after the honest node is left out; the honest node stays."""
    grid = FakeGrid(3)
    impostor = grid.node_ids[2]
    grid.contexts[impostor].node_config["partition-id"] = 0
    grid.arrivals[impostor] = 1  # listed from the second poll on: it connected later
    h = federated_main(grid, FlowerSettings.from_flat(method="fedavg", rounds=1, scenario_params=THREE, min_nodes=3))
    assert {r["client"] for r in h.records} == {0, 1}
    out = [f for f in h.failures if f.stage == "discover"]
    assert [f.node_id for f in out] == [impostor]
    assert f"partition-id=0 was claimed first by node(s) {grid.node_ids[0]}" in out[0].reason


def test_an_impostor_that_connected_first_keeps_it_unless_partition_nodes_pins_the_honest_node():
    grid = FakeGrid(3)
    honest, impostor = grid.node_ids[0], grid.node_ids[2]
    grid.contexts[impostor].node_config["partition-id"] = 0
    grid.arrivals[honest] = 1
    settings = FlowerSettings.from_run_config({"method": "fedavg", "num-server-rounds": 1, "min-nodes": 3,
                                               "scenario-params": "n_clients=3,adversarial=(1,)", "partition-nodes": f"0={honest}"})
    h = federated_main(grid, settings)
    assert {r["client"] for r in h.records} == {0, 1}
    out = [f for f in h.failures if f.stage == "discover"]
    assert [f.node_id for f in out] == [impostor] and f"pins to node {honest}" in out[0].reason


def test_a_pinned_node_claiming_another_partition_is_left_out():
    grid = FakeGrid(3)
    settings = FlowerSettings.from_flat(method="fedavg", rounds=1, scenario_params=THREE, partition_nodes={1: grid.node_ids[0]})
    h = federated_main(grid, settings)
    out = [f for f in h.failures if f.stage == "discover"]
    assert {f.node_id for f in out} == {grid.node_ids[0], grid.node_ids[1]}
    assert any("pins this node to partition-id=1, but it claims partition-id=0" in f.reason for f in out)
    assert {r["client"] for r in h.records} == {2}


@pytest.mark.parametrize("text, words", [
    ("0=5,1=5", "pins one node to several partitions"), ("x=1", "partition-id=node-id"), ("0=1,0=2", "partition-id=0 twice"),
])
def test_bad_partition_nodes_names_the_key(text, words):
    with pytest.raises(ValueError, match=f"partition-nodes.*{words}|{words}.*partition-nodes"):
        FlowerSettings.from_run_config({"partition-nodes": text})


# ---- feature count -------------------------------------------------------------------------------
def _declare(grid, index_changes):
    tampers = [tamper_discovery(grid.node_ids[k], changes) for k, changes in index_changes.items()]

    def tamper(msg, content):
        for t in tampers:
            content = t(msg, content)
        return content

    grid.tamper = tamper


def test_an_even_split_on_features_names_the_n_features_key_that_settles_it():
    grid = FakeGrid(4)
    _declare(grid, {2: {"n_features": 30}, 3: {"n_features": 30}})
    with pytest.raises(ValueError, match="split evenly on the number of features .*set n-features in the run config"):
        federated_main(grid, FlowerSettings.from_flat(method="fedavg", rounds=1, scenario_params=FOUR))
    grid = FakeGrid(4)
    _declare(grid, {2: {"n_features": 30}, 3: {"n_features": 30}})
    n = grid.contexts[grid.node_ids[0]]  # the honest nodes' real count
    from topofl.flower.node import node_data

    real = node_data(n.node_config, FlowerSettings.from_flat(scenario_params=FOUR).node_config())[0].n_features
    h = federated_main(grid, FlowerSettings.from_run_config({"method": "fedavg", "num-server-rounds": 1, "n-features": real,
                                                             "scenario-params": "n_clients=4,adversarial=(1,)"}))
    assert {r["client"] for r in h.records} == {0, 1}
    out = [f for f in h.failures if f.stage == "discover"]
    assert {f.client for f in out} == {2, 3} and all(f"n-features={real} in the run config" in f.reason for f in out)


def test_n_features_is_validated():
    with pytest.raises(ValueError, match="n-features must be in"):
        FlowerSettings.from_run_config({"n-features": -3})


# ---- classes --------------------------------------------------------------------------------------
def _infos(classes, n=(50, 20)):
    return {cid: {"client": cid, "n_train": n[0], "n_test": n[1], "task": "binary" if c <= 2 else "multiclass",
                  "n_features": 5, "n_classes": c} for cid, c in enumerate(classes)}


@pytest.mark.parametrize("settings, classes, out, run_classes", [
    (FlowerSettings.from_flat(), [2, 2, 2, 1000], {3}, 2),                          # the audit's figure
    (FlowerSettings.from_flat(), [10, 4, 5, 8], set(), 10),                          # label skew is no inflation
    (FlowerSettings.from_flat(), [10, 10, 10, 4 * 10 + 1], {3}, 10),
    (FlowerSettings.from_flat(), [3, 3, 3, 3 + CLASS_SLACK], set(), 3 + CLASS_SLACK),
    (FlowerSettings.from_flat(), [2, 2, 2, 2 + CLASS_SLACK + 1], {3}, 2),
    (FlowerSettings.from_flat(task="binary"), [2, 2, 2, 3], {3}, 2),                 # a binary run takes no third class
    (FlowerSettings.from_flat(classes="0,1,2"), [3, 2, 3, 4], {3}, 3),               # bounded by classes
    (FlowerSettings.from_flat(classes="0,1,2"), [3, 3, 3, 1000], {3}, 3),
])
def test_no_node_can_inflate_the_runs_classes(settings, classes, out, run_classes):
    infos = _infos(classes)
    nodes = {cid: 100 + cid for cid in infos}
    task, n_classes, _, failures = reconcile(nodes, infos, settings, shared_features=True)
    assert {f.client for f in failures} == out and set(nodes) == set(range(4)) - out
    assert n_classes == run_classes
    assert all("classes" in f.reason for f in failures)
    assert CLASS_FACTOR == 4


def test_a_node_declaring_more_classes_than_examples_is_left_out():
    infos = _infos([3, 3, 3, 40], n=(20, 10))
    nodes = {cid: 100 + cid for cid in infos}
    _, n_classes, _, failures = reconcile(nodes, infos, FlowerSettings.from_flat(), shared_features=True)
    assert [f.client for f in failures] == [3] and "only 30 examples" in failures[0].reason and n_classes == 3


def test_a_node_declaring_1000_classes_changes_nothing_for_the_others():
    """End to end: the inflating node is left out at discovery; the others run as if it had never answered."""
    grid = FakeGrid(4)
    _declare(grid, {3: {"n_classes": 1000, "task": "multiclass"}})
    h = federated_main(grid, FlowerSettings.from_flat(method="fedavg", rounds=2, scenario_params=FOUR))
    silent = FakeGrid(4)
    silent.raise_on = lambda m: m.metadata.message_type == "query" and m.metadata.dst_node_id == silent.node_ids[3]
    ref = federated_main(silent, FlowerSettings.from_flat(method="fedavg", rounds=2, scenario_params=FOUR))
    assert [r["client"] for r in h.records] == [r["client"] for r in ref.records]
    np.testing.assert_allclose([r["auc"] for r in h.records], [r["auc"] for r in ref.records], rtol=0, atol=1e-12)
    assert [f.client for f in h.failures] == [3] and "declared 1000 classes" in h.failures[0].reason


def test_a_relayed_run_leaves_an_inflating_node_out_too():
    grid = FakeGrid(4)
    _declare(grid, {1: {"n_classes": 1000, "task": "multiclass"}})
    h = relay_main(grid, FlowerSettings.from_flat(method="dfedu", rounds=1, scenario_params=FOUR))
    assert [f.client for f in h.failures] == [1] and {r["client"] for r in h.records} == {0, 2, 3}


# ---- sizes before decoding ------------------------------------------------------------------------
def _update(params: Array, extras: dict | None = None) -> RecordDict:
    return RecordDict({
        "params": ArrayRecord({"params": params}), "extras": ArrayRecord(extras or {}),
        "metrics": MetricRecord({"num-examples": 10}), "meta": ConfigRecord({"client": 1}),
    })


def _schema(n=21, **kw):
    from topofl.federation.validation import ArraySpec, ReplySchema

    return ReplySchema(ArraySpec((n,)), **kw)


def test_an_oversized_reply_is_refused_before_it_is_decoded(monkeypatch):
    """10⁷ floats where the server's model has 21 parameters: refused from the record's metadata,
    with no array built (the audit measured +245 MB when it was decoded first)."""
    big = Array(np.zeros(10**7))
    content = _update(big)
    decoded = []
    monkeypatch.setattr(Array, "numpy", lambda self: decoded.append(1) or np.zeros(0))
    tracemalloc.start()
    try:
        with pytest.raises(PayloadError, match=r"must have shape \(21,\); its record declares \(10000000,\) \(refused before decoding\)"):
            decode_update(content, _schema())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert decoded == [] and peak < 1_000_000


def test_a_record_whose_bytes_disagree_with_its_declared_shape_is_refused():
    honest = Array(np.zeros(21))
    lying = Array(dtype="float64", shape=(21,), stype="numpy.ndarray", data=Array(np.zeros(10**6)).data)
    assert array_problem(honest, (21,)) is None
    assert "carries data of shape (1000000,)" in array_problem(lying, (21,))
    short = Array(dtype="float64", shape=(21,), stype="numpy.ndarray", data=honest.data[:-8])
    assert "bytes of data" in array_problem(short, (21,))
    f32 = Array(np.zeros(21, dtype=np.float32))
    assert "must be float64" in array_problem(f32, (21,))
    assert "at most 1000" in array_problem(Array(np.zeros((600, 2))), (None, 2), free_values=1000)
    with pytest.raises(PayloadError, match="unexpected array"):
        decode_update(_update(honest, {"junk": Array(np.zeros(5))}), _schema())
    with pytest.raises(PayloadError, match="holds unexpected array"):
        decode_update(RecordDict({**dict(_update(honest)), "params": ArrayRecord({"params": honest, "x": honest})}), _schema())
    assert decode_update(_update(honest), _schema()).params.shape == (21,)


def test_oversized_pooled_predictions_are_refused_before_decoding():
    content = RecordDict({"metrics": MetricRecord({"auc": 0.5, "accuracy": 0.5, "loss": 1.0}), "meta": ConfigRecord({"client": 1}),
                          "predictions": ArrayRecord({"y_true": Array(np.zeros(10)), "scores": Array(np.zeros(10**6))})})
    with pytest.raises(PayloadError, match="scores.*must have shape \\(10,\\)"):
        decode_evaluation(content, n_test=10, n_classes=2)
    assert decode_evaluation(content).scores.shape == (10**6,)  # without the declaration: the server's screening refuses it


def test_a_node_sending_a_huge_update_fails_its_round_and_nothing_of_it_is_decoded(monkeypatch):
    grid = FakeGrid(4)

    def tamper(msg, content):
        if msg.metadata.message_type == "train" and msg.metadata.dst_node_id == grid.node_ids[1]:
            content["params"] = ArrayRecord({"params": Array(np.zeros(10**6))})
        return content

    grid.tamper = tamper
    h = federated_main(grid, FlowerSettings.from_flat(method="ptopofl", rounds=1, scenario_params=FOUR))
    bad = [f for f in h.failures if f.client == 1]
    assert len(bad) == 1 and "refused before decoding" in bad[0].reason


def test_a_relayed_payload_to_a_non_neighbour_is_refused_before_decoding():
    grid = FakeGrid(5)

    def tamper(msg, content):
        if msg.metadata.message_type == "train.peer" and msg.metadata.dst_node_id == grid.node_ids[0] and "outbox" in content:
            content["outbox"] = ArrayRecord({**dict(content["outbox"]), "2": Array(np.zeros(10**6))})
        return content

    grid.tamper = tamper
    h = relay_main(grid, FlowerSettings.from_flat(method="dfedu", rounds=2, scenario_params={"n_clients": 5, "adversarial": (1,)}, graph="ring"))
    bad = [f for f in h.failures if f.client == 0]
    assert len(bad) == 1 and "unexpected array(s) '2'" in bad[0].reason and "refused" not in bad[0].reason.split("unexpected")[0]
