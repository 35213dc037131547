"""The Flower adapters driven through an in-memory grid (fast, no Ray): same numbers as the
in-process runner, faults and invalid payloads never end a run and are never aggregated."""
import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, MetricRecord  # noqa: E402

import topofl  # noqa: E402
from bit_identity import assert_golden  # noqa: E402
from fake_grid import FakeGrid  # noqa: E402
from topofl.flower.relay import relay_main  # noqa: E402
from topofl.flower.server_app import federated_main  # noqa: E402
from topofl.flower.settings import FlowerSettings  # noqa: E402

SMALL = {"n_clients": 4, "adversarial": (1,)}


def by_client(records, keys=("auc", "accuracy", "loss")):
    return {(r["round"], r["client"]): np.array([r[k] for k in keys], float) for r in records}


def assert_same_records(a, b, keys=("auc", "accuracy", "loss"), atol=1e-12):
    ra, rb = by_client(a, keys), by_client(b, keys)
    assert ra.keys() == rb.keys()
    for k in ra:
        np.testing.assert_allclose(ra[k], rb[k], atol=atol, equal_nan=True, err_msg=str(k))


@pytest.mark.parametrize("method", ["ptopofl", "fedavg", "scaffold", "ditto", "pfedme", "fedprox", "local", "perfedavg", "ifca"])
def test_flower_federated_run_equals_in_process(method):
    settings = FlowerSettings.from_flat(method=method, rounds=3, seed=3, scenario_params=SMALL)
    flower = federated_main(FakeGrid(4), settings)
    # the Flower run applies the deployment defaults (robust-defaults): the in-process run gets the same hyper-parameters
    ref = topofl.simulate(topofl.make_scenario("healthcare", seed=3, **SMALL), method, rounds=3, seed=3, **settings.job.hyperparameters)
    assert_same_records(flower.records, ref.records)
    assert_golden(f"flower-grid-{method}", flower)  # bit for bit what it gave before issue 21
    assert not flower.failures
    papers = FlowerSettings.from_flat(method=method, rounds=3, seed=3, scenario_params=SMALL, robust_defaults=False)
    assert_same_records(federated_main(FakeGrid(4), papers).records,
                        topofl.simulate(topofl.make_scenario("healthcare", seed=3, **SMALL), method, rounds=3, seed=3).records)
    np.testing.assert_allclose([r.bytes_up for r in flower.rounds], [r.bytes_up for r in ref.rounds])


@pytest.mark.parametrize("method", ["local", "ditto", "fedavg"])
def test_a_kept_optimiser_state_and_a_step_budget_give_the_in_process_numbers(method):
    """Adam's moments live in the client's state, which a Flower node keeps between rounds."""
    hps = {"optimizer": "adam", "lr": 0.01, "local_steps": 3}
    settings = FlowerSettings.from_flat(method=method, rounds=3, seed=3, scenario_params=SMALL, hyperparameters=hps)
    flower = federated_main(FakeGrid(4), settings)
    ref = topofl.simulate(topofl.make_scenario("healthcare", seed=3, **SMALL), method, rounds=3, seed=3, **settings.job.hyperparameters)
    assert_same_records(flower.records, ref.records)
    assert not flower.failures


def test_pooled_metrics_only_when_asked():
    ref = topofl.simulate(topofl.make_scenario("healthcare", seed=0, **SMALL), "fedavg", rounds=2, seed=0)
    kept = federated_main(FakeGrid(4), FlowerSettings.from_flat(method="fedavg", rounds=2, scenario_params=SMALL))
    shared = federated_main(FakeGrid(4), FlowerSettings.from_flat(method="fedavg", rounds=2, scenario_params=SMALL, pooled_metrics=True))
    assert np.isnan(kept.final["pooled_auc"])
    assert shared.final["pooled_auc"] == pytest.approx(ref.final["pooled_auc"], abs=1e-12)


def test_client_error_and_dead_node_do_not_end_the_run(tmp_path):
    grid = FakeGrid(4)
    grid.raise_on = lambda m: m.metadata.dst_node_id == grid.node_ids[2] and m.metadata.message_type == "train" and m.metadata.group_id == "2"
    settings = FlowerSettings.from_flat(method="ptopofl", rounds=3, scenario_params=SMALL, out_dir="out", round_timeout=1.0)
    grid.die_at(2, 3)
    h = federated_main(grid, settings, run_id=7, root=tmp_path)
    run_dir = tmp_path / "out" / "run-7"
    assert h.out_dir == str(run_dir.resolve())
    assert len(h.rounds) == 3
    fails = {(f.round, f.client, f.stage) for f in h.failures}
    assert (2, 2, "fit") in fails                       # the ClientApp raised
    assert {(2, 3, "fit"), (2, 3, "evaluate"), (3, 3, "fit")} <= fails   # the node went silent
    reasons = {f.reason for f in h.failures}
    assert any("injected failure" in r for r in reasons) and any("no reply" in r for r in reasons)
    assert sorted({r["client"] for r in h.records if r["round"] == 3}) == [0, 1, 2]
    result = __import__("json").loads((run_dir / "result.json").read_text())
    assert result["rounds"] == 3 and len(result["failures"]) == len(h.failures)
    assert (run_dir / "failures.jsonl").read_text().count("\n") == len(h.failures)


def _poison(field):
    def tamper(msg, content):
        if msg.metadata.message_type != "train" or msg.metadata.dst_node_id != 1001:
            return content
        if field == "nan":
            p = content["params"]["params"].numpy().copy()
            p[0] = np.nan
            content["params"] = ArrayRecord({"params": Array(p)})
        elif field == "shape":
            content["params"] = ArrayRecord({"params": Array(np.zeros(3))})
        elif field == "count":
            m = dict(content["metrics"])
            m["num-examples"] = -5
            content["metrics"] = MetricRecord(m)
        elif field == "descriptor":
            content["descriptor"] = ArrayRecord({"phi": Array(np.ones(7))})
        elif field == "missing":
            del content["params"]
        return content
    return tamper


@pytest.mark.parametrize("field, words", [
    ("nan", "non-finite"), ("shape", "shape"), ("count", "differs from the count declared"), ("descriptor", "shape (48,)"),
    ("missing", "'params' is missing"),
])
def test_invalid_payload_is_dropped_with_reason_and_never_aggregated(field, words):
    grid = FakeGrid(4)
    grid.tamper = _poison(field)
    h = federated_main(grid, FlowerSettings.from_flat(method="ptopofl", rounds=2, scenario_params=SMALL))
    bad = [f for f in h.failures if f.client == 1 and f.stage == "fit"]
    assert len(bad) == 2 and all("invalid payload" in f.reason and words in f.reason for f in bad), [f.reason for f in h.failures]
    for r in h.records:
        assert np.isfinite(r["loss"])  # the NaN model never reached anyone
    # the round aggregates exactly what it would have had client 1 not replied at all
    silent = FakeGrid(4)
    silent.raise_on = lambda m: m.metadata.message_type == "train" and m.metadata.dst_node_id == 1001
    assert_same_records(h.records, federated_main(silent, FlowerSettings.from_flat(method="ptopofl", rounds=2, scenario_params=SMALL)).records)


def test_min_replies_skips_aggregation_and_logs_it():
    grid = FakeGrid(4)
    grid.raise_on = lambda m: m.metadata.message_type == "train" and m.metadata.dst_node_id != 1000
    h = federated_main(grid, FlowerSettings.from_flat(method="fedavg", rounds=2, scenario_params=SMALL, min_replies=2))
    assert all("skipped" in log for log in h.server_logs)
    assert len({tuple(np.round([r["loss"] for r in h.records if r["round"] == k], 12)) for k in (1, 2)}) == 1  # model unchanged


def test_nodes_claiming_one_partition_are_left_out_and_the_run_goes_on():
    grid = FakeGrid(3, node_config=lambda k: {})
    grid.contexts[grid.node_ids[2]].node_config["partition-id"] = 0
    h = federated_main(grid, FlowerSettings.from_flat(method="fedavg", rounds=1, scenario_params={"n_clients": 3, "adversarial": (1,)}))
    assert {r["client"] for r in h.records} == {1}
    assert {f.node_id for f in h.failures if "partition-id=0 is claimed by nodes" in f.reason} == {grid.node_ids[0], grid.node_ids[2]}
    only = FakeGrid(2, node_config=lambda k: {})
    only.contexts[only.node_ids[1]].node_config["partition-id"] = 0
    with pytest.raises(RuntimeError, match="no SuperNode answered"):
        federated_main(only, FlowerSettings.from_flat(method="fedavg", rounds=1, scenario_params={"n_clients": 2, "adversarial": (1,)}))


@pytest.mark.parametrize("method, hps", [("sheaf", {"gamma": 0.3, "lam": 0.01}), ("dfedu", {}), ("dpsgd", {}), ("local-peers", {})])
def test_relay_run_equals_in_process(method, hps):
    settings = FlowerSettings.from_flat(method=method, rounds=4, seed=1, scenario_params=SMALL, hyperparameters=hps, graph="ring")
    h = relay_main(FakeGrid(4), settings)
    assert_golden(f"flower-relay-{method}", h)
    ref = topofl.simulate_decentralised(topofl.make_scenario("healthcare", seed=1, **SMALL), method, rounds=4, seed=1, graph="ring", **hps)
    assert_same_records(h.records, ref.records, keys=("accuracy", "loss"))
    assert [r["bits"] for r in h.iterations] == [r["bits"] for r in ref.iterations]
    assert [r["map_storage_bytes"] for r in h.iterations] == [r["map_storage_bytes"] for r in ref.iterations]


@pytest.mark.parametrize("method, hps", [("sheaf", {"gamma": 0.3}), ("dpsgd", {})])
def test_a_relay_node_keeps_its_optimiser_across_iterations(method, hps):
    """Adam's moments live on the node, which the SuperNode keeps between the relay's messages."""
    hps = {**hps, "optimizer": "adam", "lr": 0.02, "local_steps": 2}
    settings = FlowerSettings.from_flat(method=method, rounds=3, seed=1, scenario_params=SMALL, hyperparameters=hps, graph="ring")
    h = relay_main(FakeGrid(4), settings)
    ref = topofl.simulate_decentralised(topofl.make_scenario("healthcare", seed=1, **SMALL), method, rounds=3, seed=1, graph="ring", **hps)
    assert_same_records(h.records, ref.records, keys=("accuracy", "loss"))


def test_relay_never_sends_a_node_anything_but_its_neighbours_payloads():
    grid = FakeGrid(5)
    relay_main(grid, FlowerSettings.from_flat(method="dfedu", rounds=2, scenario_params={"n_clients": 5, "adversarial": (1,)}, graph="ring"))
    steps = [m for m in grid.sent if m.metadata.message_type == "train.peer"]
    k_of = {nid: k for k, nid in enumerate(grid.node_ids)}
    for m in steps:
        k = k_of[m.metadata.dst_node_id]
        assert {int(j) for j in m.content["inbox"]} <= {(k - 1) % 5, (k + 1) % 5}
        assert set(m.content) == {"config", "inbox"}  # no model, no aggregate


def test_relay_drops_a_dead_node_and_removes_its_edges():
    """Echoing a node's own payload for a dead neighbour equals running without that neighbour."""
    grid = FakeGrid(4)
    grid.die_at(3, 2)
    h = relay_main(grid, FlowerSettings.from_flat(method="dfedu", rounds=5, scenario_params=SMALL, graph="complete", round_timeout=1.0))
    assert len(h.rounds) == 5
    assert any(f.client == 2 for f in h.failures)
    # a node reports iteration k's metrics with its first message of iteration k + 1, so the node
    # that died in iteration 3 never reported iteration 2
    assert [r["n_clients"] for r in h.iterations] == [4, 3, 3, 3, 3]
    assert np.all(np.isfinite([r["accuracy"] for r in h.iterations]))


@pytest.mark.parametrize("method", ["sheaf", "dfedu"])
def test_dropping_a_node_equals_the_graph_without_it(method):
    """Node 2 fails at setup: the others run exactly as on the complete graph of nodes 0, 1, 3
    (full-batch gradients, so mini-batch draws cannot differ)."""
    hps = {"batch_size": 100000, "lr": 0.05, **({"gamma": 1.0, "map_init": "scaled_identity", "eta": 0.0, "lam": 0.05} if method == "sheaf" else {})}
    grid = FakeGrid(4)
    grid.raise_on = lambda m: m.metadata.message_type == "query.peer" and m.metadata.dst_node_id == grid.node_ids[2]
    h = relay_main(grid, FlowerSettings.from_flat(method=method, rounds=4, scenario_params=SMALL, graph="complete", hyperparameters=hps))
    fed = topofl.make_scenario("healthcare", seed=0, **SMALL)
    three = [(c.X_train, c.y_train, c.X_test, c.y_test) for c in fed.clients if c.client_id != 2]
    ref = topofl.simulate_decentralised(three, method, rounds=4, seed=0, graph="complete", task="binary", n_classes=2, **hps)
    ours = {(r["round"], r["client"]): (r["accuracy"], r["loss"]) for r in h.records}
    theirs = {(r["round"], [0, 1, 3][r["client"]]): (r["accuracy"], r["loss"]) for r in ref.records}
    assert ours.keys() == theirs.keys()
    for key in ours:
        np.testing.assert_allclose(ours[key], theirs[key], rtol=1e-12, err_msg=str(key))


class PushPullGrid:
    """A grid with Flower's push/pull API whose nodes answer after ``delays[node]`` pulls (None: never)."""

    def __init__(self, delays):
        self.delays, self.pulls, self.pushed = delays, 0, {}

    def push_messages(self, messages):
        ids = []
        for k, m in enumerate(messages):
            m.metadata.__dict__["_message_id"] = f"m{k}"
            self.pushed[f"m{k}"] = m
            ids.append(f"m{k}")
        return ids

    def pull_messages(self, ids):
        from flwr.app import Message, RecordDict

        self.pulls += 1
        out = []
        for mid in list(ids):
            due = self.delays[self.pushed[mid].metadata.dst_node_id]
            if due is not None and self.pulls >= due:
                out.append(Message(RecordDict(), reply_to=self.pushed[mid]))
        return out


def test_replies_are_pulled_until_all_arrived_or_the_timeout_passed():
    from flwr.app import Message, RecordDict

    from topofl.flower.exchange import send_and_receive

    FakeGrid(1)  # sets the run identity a Message needs, as a ServerApp process has it
    grid = PushPullGrid({1: 1, 2: 4, 3: 2})
    msgs = [Message(RecordDict(), dst_node_id=n, message_type="query", group_id="0") for n in (1, 2, 3)]
    replies = send_and_receive(grid, msgs, timeout=30.0)
    assert sorted(r.metadata.reply_to_message_id for r in replies) == ["m0", "m1", "m2"]
    assert grid.pulls == 4  # stops at the pull that completes the set
    silent = PushPullGrid({1: 1, 2: None})
    msgs = [Message(RecordDict(), dst_node_id=n, message_type="query", group_id="0") for n in (1, 2)]
    replies = send_and_receive(silent, msgs, timeout=0.3)
    assert [r.metadata.reply_to_message_id for r in replies] == ["m0"]  # node 2 never answers: the timeout ends the wait


@pytest.mark.parametrize("method", ["ptopofl", "fedavg"])
def test_partial_participation_selects_the_clients_the_in_process_run_selects(method):
    settings = FlowerSettings.from_flat(method=method, rounds=3, seed=3, scenario_params={"n_clients": 8}, client_fraction=0.5)
    flower = federated_main(FakeGrid(8), settings)
    ref = topofl.simulate(topofl.make_scenario("healthcare", seed=3, n_clients=8), method, rounds=3, seed=3, client_fraction=0.5,
                          **settings.job.hyperparameters)
    assert_same_records(flower.records, ref.records)
    assert [r.bytes_up for r in flower.rounds] == [r.bytes_up for r in ref.rounds]
    for rnd in (1, 2, 3):  # half of the 8 clients upload in each round
        assert sum(1 for r in flower.records if r["round"] == rnd and r["bytes_up"] > 0) == 4
    with pytest.raises(ValueError, match="client-fraction"):
        FlowerSettings.from_flat(client_fraction=0.0)


def test_a_push_the_restarted_superlink_refused_is_tried_again(monkeypatch, caplog):
    from flwr.app import Message, RecordDict

    import topofl.flower.exchange as exchange_mod

    FakeGrid(1)
    grid = PushPullGrid({1: 1, 2: 1})
    push, failures = grid.push_messages, []

    def flaky(messages):
        if not failures:
            failures.append(1)
            raise RuntimeError("Failed to push object: the push session may have expired")
        return push(messages)

    grid.push_messages = flaky
    monkeypatch.setattr(exchange_mod.time, "sleep", lambda s: None)
    msgs = [Message(RecordDict(), dst_node_id=n, message_type="query", group_id="0") for n in (1, 2)]
    replies = exchange_mod.send_and_receive(grid, msgs, timeout=30.0)
    assert sorted(r.metadata.reply_to_message_id for r in replies) == ["m0", "m1"]
    assert "pushing messages to the SuperLink failed (RuntimeError" in caplog.text
    grid.push_messages = lambda messages: (_ for _ in ()).throw(RuntimeError("down for good"))
    with pytest.raises(RuntimeError, match="down for good"):  # after GRID_TRIES, the error ends the exchange
        exchange_mod.send_and_receive(grid, msgs, timeout=30.0)
