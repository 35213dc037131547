"""Finding 1: a client that claims 10**12 examples captured FedAvg's and pTopoFL's models.

The server now takes each client's weight from what it declared when it joined (in process: the
federation; Flower: discovery), validated as an integer in [1, MAX_CLIENT_EXAMPLES]; a reply
claiming another count is dropped with its reason, and ``max_client_weight`` caps any share.
"""
import numpy as np
import pytest
from attacking import VICTIM, replace, run_attacked, victim_failures

import topofl


def takeover(update, message):
    return replace(update, n_examples=10**12, params=np.full_like(update.params, 5.0))


@pytest.mark.parametrize("method", ["fedavg", "ptopofl"])
def test_claiming_a_huge_sample_count_does_not_capture_the_model(method):
    clean, _ = run_attacked(method)
    attacked, algo = run_attacked(method, takeover)
    assert abs(attacked.final["auc"] - clean.final["auc"]) <= 0.01, (attacked.final["auc"], clean.final["auc"])
    fails = victim_failures(attacked)
    assert [f.round for f in fails] == [1, 2, 3]
    assert all("n_examples" in f.reason and "1000000000000" in f.reason for f in fails)
    if method == "fedavg":
        assert not np.allclose(algo.global_params, 5.0, atol=1.0)


@pytest.mark.parametrize("claim", [2**63 - 1, 10**400, 0, -3, 2.5, True, "120", None])
def test_absurd_counts_are_dropped_never_crash(claim):
    h, _ = run_attacked("fedavg", lambda u, m: replace(u, n_examples=claim), rounds=2)
    assert len(h.rounds) == 2
    fails = victim_failures(h)
    assert len(fails) == 2 and all("n_examples" in f.reason for f in fails)


def test_a_count_other_than_the_declared_one_is_dropped():
    fed = topofl.make_scenario("healthcare", seed=0)
    declared = fed[VICTIM].n_train
    h, _ = run_attacked("fedavg", lambda u, m: replace(u, n_examples=declared + 1), rounds=1)
    (f,) = victim_failures(h)
    assert f"declared {declared}" in f.reason


def test_capped_shares_pass_the_excess_to_the_uncapped_clients():
    from topofl.algorithms.base import cap_shares

    w = cap_shares(np.array([90.0, 5.0, 3.0, 2.0]), 0.4)
    np.testing.assert_allclose(w.sum(), 1.0)
    assert w.max() <= 0.4 + 1e-12
    # the excess is shared in proportion among the uncapped clients
    np.testing.assert_allclose(w, [0.4, 0.6 * 5 / 10, 0.6 * 3 / 10, 0.6 * 2 / 10])
    np.testing.assert_allclose(cap_shares(np.array([1.0, 3.0]), 1.0), [0.25, 0.75])
    np.testing.assert_allclose(cap_shares(np.array([1.0, 3.0, 6.0]), 0.2), [1 / 3] * 3)  # infeasible: equal shares
    with pytest.raises(ValueError, match="max_share"):
        cap_shares(np.array([1.0]), 0.0)


def test_max_client_weight_bounds_every_share_in_fedavg():
    from helpers import blob_client
    from topofl.algorithms.base import cap_shares

    rng = np.random.default_rng(0)
    fed = topofl.Federation.from_arrays([blob_client(rng, n) for n in (400, 40, 40, 40)])
    replies = {}

    def relay(update, message):  # what each client replied, passed on unchanged
        replies[update.client_id] = update
        return update

    h, algo = run_attacked("fedavg", relay, rounds=1, federation=fed, victim={0, 1, 2, 3}, max_client_weight=0.4)
    assert not h.failures
    ids = sorted(replies)
    n = np.array([fed[k].n_train for k in ids], float)
    expected = cap_shares(n, 0.4) @ np.vstack([replies[k].params for k in ids])
    np.testing.assert_allclose(algo.global_params, expected, rtol=1e-12)
    assert not np.allclose(algo.global_params, (n / n.sum()) @ np.vstack([replies[k].params for k in ids]))


def test_declared_counts_are_validated_at_join():
    from topofl.federation.validation import client_info
    from topofl.limits import MAX_CLIENT_EXAMPLES

    assert client_info(3, {"n_train": 120, "n_test": 30}).n_train == 120
    for bad in (0, -1, MAX_CLIENT_EXAMPLES + 1, 2.5, "120", True):
        with pytest.raises(ValueError, match="n_train"):
            client_info(3, {"n_train": bad, "n_test": 30})


def test_flower_reply_claiming_a_huge_count_is_dropped():
    pytest.importorskip("flwr")
    from fake_grid import FakeGrid, tamper_train_metrics
    from topofl.flower.server_app import federated_main
    from topofl.flower.settings import FlowerSettings

    settings = FlowerSettings.from_flat(method="fedavg", rounds=3, seed=0)
    clean = federated_main(FakeGrid(8), settings)
    grid = FakeGrid(8)
    grid.tamper = tamper_train_metrics(grid.node_ids[VICTIM], {"num-examples": 10**12})
    attacked = federated_main(grid, settings)
    assert abs(attacked.final["auc"] - clean.final["auc"]) <= 0.01
    fails = [f for f in attacked.failures if f.client == VICTIM and f.stage == "fit"]
    assert len(fails) == 3 and all("n_examples" in f.reason for f in fails)


def test_flower_node_declaring_a_huge_count_at_discovery_is_refused():
    pytest.importorskip("flwr")
    from fake_grid import FakeGrid, tamper_discovery
    from topofl.flower.server_app import federated_main
    from topofl.flower.settings import FlowerSettings

    grid = FakeGrid(8)
    grid.tamper = tamper_discovery(grid.node_ids[VICTIM], {"n_train": 10**12})
    h = federated_main(grid, FlowerSettings.from_flat(method="fedavg", rounds=2, seed=0))
    assert VICTIM not in {r["client"] for r in h.records}
    assert any(f.stage == "discover" and "n_train" in f.reason for f in h.failures)


@pytest.mark.parametrize("changes, words", [
    ({"n_features": 21}, "declared 21 features"),
    ({"task": "regression", "n_classes": 0}, "declared a regression task"),
    ({"task": "multiclass", "n_classes": 100000}, "n_classes must be an integer in [0, 1000]"),
    ({"n_test": 0}, "n_test must be in"),
    ({"client": "0"}, "client must be an integer"),
])
def test_one_node_cannot_redefine_or_abort_the_run_at_discovery(changes, words):
    pytest.importorskip("flwr")
    from fake_grid import FakeGrid, tamper_discovery
    from topofl.flower.server_app import federated_main
    from topofl.flower.settings import FlowerSettings

    settings = FlowerSettings.from_flat(method="fedavg", rounds=2, seed=0)
    clean = federated_main(FakeGrid(8), settings)
    grid = FakeGrid(8)
    grid.tamper = tamper_discovery(grid.node_ids[VICTIM], changes)
    h = federated_main(grid, settings)
    assert VICTIM not in {r["client"] for r in h.records}
    assert any(f.stage == "discover" and words in f.reason for f in h.failures), [f.reason for f in h.failures]
    others = [r["auc"] for r in clean.records if r["round"] == 2 and r["client"] != VICTIM]
    assert abs(h.final["auc"] - np.mean(others)) < 0.02  # the 7 others train as before, without the victim


def test_the_run_config_pins_the_task_and_classes_of_sites_with_their_own_data(tmp_path):
    pytest.importorskip("flwr")
    from fake_grid import FakeGrid
    from topofl.flower.server_app import federated_main
    from topofl.flower.settings import FlowerSettings

    rng = np.random.default_rng(0)
    for k in range(3):
        X = rng.standard_normal((60, 4))
        y = np.where(X[:, 0] > 0, 2.0, 1.0)  # labels {1, 2}: ambiguous without the run config
        np.savez(tmp_path / f"site{k}.npz", X_train=X[:45], y_train=y[:45], X_test=X[45:], y_test=y[45:])
    config = lambda k: {"data-path": str(tmp_path / f"site{k}.npz")}  # noqa: E731
    with pytest.raises(RuntimeError, match="no SuperNode answered"):  # without classes every node refuses its labels
        federated_main(FakeGrid(3, node_config=config), FlowerSettings.from_flat(method="fedavg", rounds=1))
    h = federated_main(FakeGrid(3, node_config=config), FlowerSettings.from_flat(method="fedavg", rounds=2, classes="1,2"))
    assert h.final["auc"] > 0.9 and not h.failures


def test_a_site_declaring_a_billion_examples_is_capped_by_the_deployment_defaults():
    """Issue 20's audit: a site declaring 10⁹ examples (at discovery and in every reply, so nothing
    is refused) took FedAvg from 0.877 to 0.724; the deployments' max_client_weight 0.3 caps it."""
    pytest.importorskip("flwr")
    from fake_grid import FakeGrid, tamper_discovery, tamper_train_metrics
    from topofl.flower.server_app import federated_main
    from topofl.flower.settings import FlowerSettings

    def lying_grid():
        grid = FakeGrid(8)
        declare = tamper_discovery(grid.node_ids[3], {"n_train": 10**9})
        repeat = tamper_train_metrics(grid.node_ids[3], {"num-examples": 10**9})
        grid.tamper = lambda message, content: repeat(message, declare(message, content))
        return grid

    for robust, bound in ((False, None), (True, 0.01)):
        settings = FlowerSettings.from_flat(method="fedavg", rounds=15, seed=0, robust_defaults=robust, scenario_params={"adversarial": ()})
        clean, lied = federated_main(FakeGrid(8), settings), federated_main(lying_grid(), settings)
        assert not lied.failures   # the lie is consistent: nothing to refuse
        if bound is None:
            assert lied.final["auc"] < clean.final["auc"] - 0.1, (clean.final["auc"], lied.final["auc"])   # 0.884 -> 0.727
        else:
            assert abs(lied.final["auc"] - clean.final["auc"]) < bound, (clean.final["auc"], lied.final["auc"])   # 0.884 -> 0.879
