"""Validation splits carved from each client's training data, never from its test data (issue 19)."""
import numpy as np
import pytest

from topofl.data.federation import validation_clients
from topofl.data.scenarios import make_scenario
from topofl.job import Job


def test_validation_split_is_a_stratified_partition_of_training_rows_only():
    fed = make_scenario("healthcare", seed=3)
    val = fed.with_validation(0.25, seed=3)
    assert len(val) == len(fed) and val.task == fed.task and val.n_classes == fed.n_classes
    for c, v in zip(fed, val, strict=True):
        rows = {r.tobytes() for r in c.X_train}
        got_train = {r.tobytes() for r in v.X_train}
        got_val = {r.tobytes() for r in v.X_test}
        assert got_train | got_val == rows and not (got_train & got_val)      # a partition of the training rows
        assert not (got_val & {r.tobytes() for r in c.X_test})               # no test row anywhere
        assert v.X_test.shape[0] == sum(round(0.25 * np.sum(c.y_train == k)) or 1 for k in (0, 1))  # per class
        assert set(np.unique(v.y_test)) == set(np.unique(c.y_train))         # both classes validated
        assert v.meta == c.meta
    again = fed.with_validation(0.25, seed=3)
    assert all(np.array_equal(a.X_test, b.X_test) for a, b in zip(val, again, strict=True))
    other = fed.with_validation(0.25, seed=4)
    assert not all(np.array_equal(a.X_test, b.X_test) for a, b in zip(val, other, strict=True))


def test_validation_split_refuses_bad_input():
    fed = make_scenario("healthcare", seed=0)
    with pytest.raises(ValueError, match="validation_fraction"):
        fed.with_validation(0.7, 0)
    with pytest.raises(ValueError, match="validation_fraction"):
        fed.with_validation(0.0, 0)
    with pytest.raises(ValueError, match="static federation"):
        make_scenario("continual", seed=0).with_validation(0.25, 0)
    tiny = [fed.clients[0].__class__(fed.clients[0].X_train[:3], fed.clients[0].y_train[:3], fed.clients[0].X_test, fed.clients[0].y_test, 5)]
    with pytest.raises(ValueError, match="client 5 has 3 training rows"):
        validation_clients(tiny, 0.25, 0)


def test_run_ids_of_test_runs_are_unchanged_and_validation_runs_differ():
    spec = Job(experiment="comparison", data="healthcare", method="fedavg", seed=0, rounds=15)
    assert spec.run_id == "healthcare_fedavg__s0_36257b3c"  # as before validation runs existed (results on disk stay valid)
    assert Job(experiment="comparison", data="healthcare", method="fedavg", seed=0, rounds=15, validation=0.25).run_id != spec.run_id
    with pytest.raises(ValueError, match="validation"):
        Job(experiment="comparison", data="healthcare", method="fedavg", seed=0, rounds=15, validation=0.9)
