"""Flower's Simulation Runtime (Ray): the acceptance equivalence of issue 5 — pTopoFL on the
healthcare scenario for 3 rounds gives the in-process runner's per-round, per-client metrics."""
import numpy as np
import pytest

pytest.importorskip("flwr")

import topofl  # noqa: E402
from topofl.flower import simulate_flower  # noqa: E402

pytestmark = pytest.mark.flower


def test_ptopofl_through_flower_simulation_equals_in_process():
    flower = simulate_flower(method="ptopofl", num_server_rounds=3, seed=0)
    ref = topofl.simulate(topofl.make_scenario("healthcare", seed=0), "ptopofl", rounds=3, seed=0)
    assert len(flower.records) == len(ref.records) == 3 * 8
    got = {(r["round"], r["client"]): (r["auc"], r["accuracy"], r["loss"]) for r in flower.records}
    want = {(r["round"], r["client"]): (r["auc"], r["accuracy"], r["loss"]) for r in ref.records}
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_allclose(got[key], want[key], atol=1e-6, err_msg=str(key))
    assert not flower.failures
    # and the server logs agree: same clusters, same trust weights
    assert flower.server_logs[-1]["clusters"] == ref.server_logs[-1]["clusters"]
    np.testing.assert_allclose(list(flower.server_logs[-1]["trust"].values()), list(ref.server_logs[-1]["trust"].values()), atol=1e-9)


def test_sheaf_relay_through_flower_simulation_equals_in_process():
    small = {"n_clients": 4, "adversarial": (1,)}
    flower = simulate_flower(method="sheaf", num_server_rounds=3, seed=0, scenario_params="n_clients=4,adversarial=(1,)",
                             hyperparameters="gamma=0.3,lam=0.01", graph="ring")
    ref = topofl.simulate_decentralised(topofl.make_scenario("healthcare", seed=0, **small), "sheaf", rounds=3, seed=0,
                                        graph="ring", gamma=0.3, lam=0.01)
    got = {(r["round"], r["client"]): (r["accuracy"], r["loss"]) for r in flower.records}
    want = {(r["round"], r["client"]): (r["accuracy"], r["loss"]) for r in ref.records}
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_allclose(got[key], want[key], atol=1e-9, err_msg=str(key))
    assert [r["bits"] for r in flower.rounds] == [r["bits"] for r in ref.rounds]
