"""pTopoFL's τ and trust_gate (paper §3.4): with the default gate τ only names the flagged clients;
with trust_gate="flagged" it changes the models. The robustness experiment runs both gates.
"""
from __future__ import annotations

import numpy as np
import pytest

from topofl import make_scenario, simulate
from topofl.experiments.ptopofl import robustness
from topofl.job import Job


@pytest.fixture(scope="module")
def gate_runs():
    # seed 0, three label-flipping hospitals: z-scores 1.64 (client 6) and 1.14 (client 7), the others below 1
    fed = make_scenario("healthcare", seed=0, adversarial=(1, 3, 5), flip_rate=1.0)
    return {(gate, tau): simulate(fed, "ptopofl", rounds=2, seed=0, tau=tau, trust_gate=gate)
            for gate in ("all", "flagged") for tau in (1.0, 50.0)}


def test_with_gate_all_tau_changes_the_flags_but_not_the_models(gate_runs):
    low, high = gate_runs["all", 1.0], gate_runs["all", 50.0]
    assert low.server_logs[-1]["flagged"] == [6, 7] and high.server_logs[-1]["flagged"] == []
    assert low.server_logs[-1]["trust"] == high.server_logs[-1]["trust"]
    assert low.server_logs[-1]["trust"][6] < 1.0  # z = 1.64 > 1: down-weighted whatever τ
    for cid, theta in low.client_models.items():
        np.testing.assert_array_equal(theta, high.client_models[cid])
    assert low.final == high.final


def test_with_gate_flagged_tau_changes_the_models(gate_runs):
    low, high = gate_runs["flagged", 1.0], gate_runs["flagged", 50.0]
    assert low.server_logs[-1]["flagged"] == [6, 7] and high.server_logs[-1]["flagged"] == []
    assert high.server_logs[-1]["trust"] == {k: 1.0 for k in range(8)}  # nobody flagged: nobody down-weighted
    assert low.server_logs[-1]["trust"][6] < 1.0
    assert any(not np.array_equal(theta, high.client_models[cid]) for cid, theta in low.client_models.items())
    assert low.final["auc"] != high.final["auc"]


def test_gates_agree_when_tau_is_at_most_one(gate_runs):
    # t_k = exp(-max(z_k - 1, 0)) is 1 for z_k <= 1, so flagging every z_k > τ with τ <= 1 changes nothing
    for cid, theta in gate_runs["all", 1.0].client_models.items():
        np.testing.assert_array_equal(theta, gate_runs["flagged", 1.0].client_models[cid])


def test_robustness_plan_adds_the_flagged_gate_and_keeps_the_default_runs():
    specs = robustness.plan([0, 1])
    flagged = [s for s in specs if s.label == robustness.FLAGGED]
    assert len(flagged) == len(robustness.RATES) * 2
    assert all(s.method == "ptopofl" and dict(s.hyperparameters) == {"tau": 1.8, "trust_gate": "flagged"} for s in flagged)
    assert len({s.run_id for s in specs}) == len(specs)
    # the default pTopoFL run keeps its spec (and so its run id: earlier results resume)
    rate = robustness.RATES[2]
    params = {"adversarial": robustness.adversaries(rate, 1), "flip_rate": 1.0}
    default = Job(experiment="robustness", data="healthcare", method="ptopofl", seed=1, rounds=15,
                  hyperparameters={"tau": 1.8}, data_params=params, setting={"attack_rate": rate})
    assert default.run_id in {s.run_id for s in specs}
