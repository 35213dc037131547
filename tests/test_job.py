"""One description of a run (:class:`topofl.job.Job`), one runner (:func:`topofl.run`), one result type
for both families, one data-source registry, and defaults stated once."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import topofl
from topofl.api import run
from topofl.federation.history import Result
from topofl.job import DEFAULT_DATA, DEFAULT_GRAPH, DEFAULT_METHOD, DEFAULT_ROUNDS, Job

SMALL = {"n_clients": 4, "adversarial": (1,)}


@pytest.mark.parametrize("kwargs, message", [
    ({"method": "sgd-magic"}, "unknown method 'sgd-magic'"),
    ({"method": "paper:sgd"}, "unknown paper-protocol method 'paper:sgd'"),
    ({"data": "mars"}, "data must be one of"),
    ({"rounds": 0}, "rounds must be in"),
    ({"seed": -1}, "seed must be in"),
    ({"client_fraction": 0.0}, "client_fraction must be in"),
    ({"validation": 0.9}, "validation must be in"),
    ({"device": "tpu"}, "device must be one of"),
    ({"model": " "}, "model must name a model"),
    ({"attack": "sign_flip:scale=-1"}, "scale must be in"),
    ({"hyperparameters": ["lr"]}, "hyperparameters must be a mapping"),
    ({"data": topofl.make_scenario("healthcare", seed=0, **SMALL), "data_params": {"n_clients": 3}}, "data_params apply to a named"),
])
def test_a_bad_job_is_a_value_error_naming_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Job(**kwargs)


def test_unknown_fields_in_a_file_are_refused_by_name():
    with pytest.raises(ValueError, match="unknown job field.*scenery"):
        Job.from_dict({"method": "fedavg", "scenery": "x"})
    assert Job.from_dict({"method": " FedAvg ", "rounds": 2}) == Job(method="fedavg", rounds=2)


def test_the_paper_era_protocol_runs_only_through_its_experiment():
    with pytest.raises(ValueError, match="topofl experiment paper-protocol"):
        run(Job(method="paper:ptopofl", data="paper-healthcare", rounds=1))


def test_a_job_on_data_in_memory_has_no_run_id():
    job = Job(data=topofl.make_scenario("healthcare", seed=0, **SMALL))
    with pytest.raises(ValueError, match="data is an object in memory"):
        _ = job.run_id


def test_defaults_are_stated_once():
    """simulate, simulate_decentralised, the CLI and the Flower run config take Job's defaults."""
    from topofl import cli_common as ui
    from topofl.flower.settings import KEYS

    sim, dec = inspect.signature(topofl.simulate).parameters, inspect.signature(topofl.simulate_decentralised).parameters
    assert sim["rounds"].default == dec["rounds"].default == DEFAULT_ROUNDS
    assert dec["graph"].default == DEFAULT_GRAPH
    assert KEYS["num-server-rounds"][1] == DEFAULT_ROUNDS and KEYS["graph"][1] == DEFAULT_GRAPH
    assert KEYS["method"][1] == DEFAULT_METHOD and KEYS["scenario"][1] == DEFAULT_DATA
    (job,) = ui.jobs_from_options(ui.Options(), {}, [DEFAULT_METHOD], "0")
    assert job == Job()


def test_run_ids_are_those_earlier_versions_gave():
    """Results written before Job replaced the experiment runner's own description still resume
    (ids measured with that runner on commit c2dfcf4)."""
    assert Job(experiment="t", data="healthcare", method="fedavg", seed=0, rounds=3).run_id == "healthcare_fedavg__s0_cdc28588"
    assert Job(experiment="t", data="rotated-digits", method="sheaf", seed=1, rounds=5, graph="ring", hyperparameters={"gamma": 0.3},
               setting={"gamma": 0.3}).run_id == "digits_sheaf_gamma0.3_s1_2b7a652c"
    assert Job(experiment="t", data="healthcare", method="fedavg", seed=2, rounds=3, model="mlp", attack="sign_flip:fraction=0.25",
               validation=0.25, label="FedAvg").run_id == "healthcare_FedAvg__s2_daa975de"
    assert Job(experiment="paper-protocol", data="paper-healthcare", method="paper:fedavg-refit", seed=42, rounds=20,
               label="FedAvg").run_id == "paper-healthcare_FedAvg__s42_aa6e6796"
    # a field that came with Job changes the id only when it leaves its default
    base = Job(experiment="t", method="fedavg", rounds=3)
    assert base.with_(client_fraction=0.5).run_id != base.run_id and base.with_(device="cpu").run_id == base.run_id


def _same(a: Result, b: Result) -> bool:
    return (a.records == b.records and [r.as_dict() for r in a.rounds] == [r.as_dict() for r in b.rounds]
            and all(np.array_equal(a.client_models[k], b.client_models[k]) for k in a.client_models)
            and sorted(a.client_models) == sorted(b.client_models))


def test_run_picks_the_runtime_by_family_and_returns_one_result_type():
    fed = topofl.make_scenario("healthcare", seed=2, **SMALL)
    server = run(Job(method="fedavg", data="healthcare", data_params=SMALL, rounds=2, seed=2))
    peer = run(Job(method="sheaf", data="healthcare", data_params=SMALL, rounds=2, seed=2, graph="ring",
                   hyperparameters={"gamma": 0.3}))
    assert type(server) is type(peer) is Result
    assert (server.family, peer.family) == ("server", "peer")
    assert [r.round for r in server.rounds] == [r.round for r in peer.rounds] == [1, 2]
    assert server.server_params is not None and peer.server_params is None
    assert len(peer.iterations) == 2 and peer.iterations[-1]["bits"] > 0 and peer.graph.number_of_edges() == 4
    assert set(server.client_models) == set(peer.client_models) == {0, 1, 2, 3}
    # the conveniences are the same runs
    assert _same(server, topofl.simulate(fed, "fedavg", rounds=2, seed=2))
    assert _same(peer, topofl.simulate_decentralised(fed, "sheaf", rounds=2, seed=2, graph="ring", gamma=0.3))
    # a peer result predicts with each client's own model, as a server result does
    X = fed.clients[0].X_test
    assert peer.predict(X, client=0).shape == server.predict(X, client=0).shape == (len(X),)


def test_one_data_source_registry_serves_both_families():
    from topofl.data.sources import available

    assert {"healthcare", "heart-disease", "rotated-digits", "rotated-mnist", "tabular", "school"} <= set(available())
    # a Sheaf-FMTL data set under a server method, and a server scenario under a peer method
    server = run(Job(method="fedavg", data="rotated-digits", data_params={"n_clients": 4}, rounds=1))
    peer = run(Job(method="local-peers", data="healthcare", data_params=SMALL, rounds=1))
    assert server.final["accuracy"] > 0.05 and peer.final["accuracy"] > 0.3
    with pytest.raises(ValueError, match="features"):  # feature counts differ: only peer methods take them
        run(Job(method="fedavg", data="tabular", data_params={"n_clients": 4}, rounds=1))


def test_the_validation_split_is_part_of_the_job():
    plain = run(Job(method="fedavg", data="healthcare", data_params=SMALL, rounds=1))
    held = run(Job(method="fedavg", data="healthcare", data_params=SMALL, rounds=1, validation=0.25))
    assert plain.final["auc"] != held.final["auc"]


def test_no_two_data_sets_share_a_run_id():
    """A scenario and a Sheaf-FMTL data set that once shared a name never share an id (resume reuses by id)."""
    ids = {Job(data=d, method=m).run_id for d in ("mnist", "rotated-mnist", "digits", "rotated-digits")
           for m in ("fedavg", "sheaf")}
    assert len(ids) == 8


def test_a_job_refuses_bad_hyperparameters_and_graphs_when_it_is_made():
    with pytest.raises(ValueError, match="bogus"):
        Job(method="fedavg", hyperparameters={"bogus": 1})
    with pytest.raises(ValueError, match="lr must be in"):
        Job(method="fedavg", hyperparameters={"lr": -1})
    with pytest.raises(ValueError, match="graph must be one of"):
        Job(method="sheaf", graph="nonsense")


def test_the_conveniences_refuse_a_method_of_the_other_family():
    fed = topofl.make_scenario("healthcare", seed=0, **SMALL)
    with pytest.raises(ValueError, match="simulate_decentralised, or topofl.run"):
        topofl.simulate(fed, "sheaf", rounds=1)
    with pytest.raises(ValueError, match="use simulate, or topofl.run"):
        topofl.simulate_decentralised(fed, "fedavg", rounds=1)
    assert topofl.simulate_decentralised(fed, "Local", rounds=1).method == "local-peers"


def test_a_peer_result_reads_as_before():
    fed = topofl.make_scenario("healthcare", seed=0, **SMALL)
    h = topofl.simulate_decentralised(fed, "dfedu", rounds=2, graph="ring")
    assert h.curve().tolist() == [r.accuracy for r in h.rounds]  # a peer run's default curve is accuracy
    assert h.curve("cumulative_bits").tolist() == [r["cumulative_bits"] for r in h.iterations]
    assert h.rounds[-1]["accuracy"] == h.final["accuracy"]


def test_a_flower_checkpoint_of_the_old_history_type_unpickles():
    """Checkpoints written before one result type served both families hold a History with ``server_logs``."""
    import pickle

    r = Result("fedavg", 0)
    r.logs.append({"round": 1})
    old = Result.__new__(Result)
    state = {k: v for k, v in r.__dict__.items() if k not in ("family", "iterations", "models", "graph", "logs")}
    old.__dict__.update({**state, "server_logs": [{"round": 1}]})
    back = pickle.loads(pickle.dumps(old))
    assert back.logs == back.server_logs == [{"round": 1}] and back.family == "server" and back.iterations == []


def test_round_records_are_the_rounds_rows_in_order_for_the_latest_and_an_earlier_round():
    r = Result("fedavg", 0)
    r.records.extend({"round": k, "client": c} for k in (1, 2, 3) for c in (2, 0, 1))
    for k in (1, 2, 3, 4):
        assert r.round_records(k) == [x for x in r.records if x["round"] == k]
    assert [x["client"] for x in r.round_records(3)] == [2, 0, 1]
    assert Result("fedavg", 0).round_records(1) == []
