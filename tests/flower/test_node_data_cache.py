"""A SuperNode builds the built-in scenario once per job, not per message (issue 25): every partition and every
round of one job on a node process reads the same cached federation."""
import pytest

pytest.importorskip("flwr")


def test_a_node_builds_the_scenario_once_for_every_partition_and_round(monkeypatch):
    import topofl.data.scenarios as scenarios
    from topofl.flower import node

    node._scenario.cache_clear()
    calls = []
    real = scenarios.make_scenario

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(scenarios, "make_scenario", counted)
    job = {"scenario": "healthcare", "seed": 3, "scenario_params": '{"n_clients": 6}'}
    seen = [node.node_data({"partition-id": pid}, job, rnd)[0] for pid in range(6) for rnd in (1, 2, 3)]
    assert len(calls) == 1
    assert [d.client_id for d in seen[::3]] == list(range(6))
    other = node.node_data({"partition-id": 0}, {**job, "seed": 4}, 1)[0]  # another job: its own federation
    assert len(calls) == 2 and other is not seen[0]
    node._scenario.cache_clear()
