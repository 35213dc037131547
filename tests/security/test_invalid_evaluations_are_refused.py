"""Finding 5: evaluation metrics were not range-checked (AUC 5 made the round's mean 1.37), NaN
metrics were dropped silently, and pooled predictions of the wrong length crashed the run."""
import numpy as np
import pytest
from attacking import VICTIM, replace, run_attacked, victim_failures


def metrics(**values):
    return lambda e: replace(e, metrics={**e.metrics, **values})


@pytest.mark.parametrize("tamper, words", [
    (metrics(auc=5.0), "auc must be in [0, 1]"),
    (metrics(accuracy=1.25e8), "accuracy must be in [0, 1]"),
    (metrics(accuracy=float("nan")), "accuracy must be in [0, 1]"),
    (metrics(loss=float("nan")), "loss must be finite"),
    (metrics(loss=-1.0), "loss must be"),
    (lambda e: replace(e, metrics={"auc": 0.5}), "missing metric(s) accuracy, loss"),
    (metrics(bogus=1.0), "unexpected metric 'bogus'"),
    (lambda e: replace(e, scores=e.scores[:-3]), "scores must have shape"),
    (lambda e: replace(e, y_true=e.y_true[:2]), "y_true must have shape"),
    (lambda e: replace(e, scores=e.scores + 7.0), "scores must be in [0, 1]"),
    (lambda e: replace(e, y_true=np.full_like(e.y_true, 3.0)), "y_true"),
])
def test_invalid_evaluation_is_a_recorded_failure(tamper, words):
    clean, _ = run_attacked("fedavg", rounds=2)
    h, _ = run_attacked("fedavg", evaluate=tamper, rounds=2)
    fails = victim_failures(h, "evaluate")
    assert [f.round for f in fails] == [1, 2] and all(words in f.reason for f in fails), [f.reason for f in h.failures]
    assert 0.0 <= h.final["auc"] <= 1.0 and 0.0 <= h.final["accuracy"] <= 1.0
    # the round's means are over the clients whose evaluation was valid
    others = [r for r in clean.records if r["round"] == 2 and r["client"] != VICTIM]
    assert h.final["auc"] == pytest.approx(np.mean([r["auc"] for r in others]), abs=1e-12)
    assert VICTIM not in {r["client"] for r in h.records}


def test_a_nan_auc_is_kept_visible_and_left_out_of_the_mean():
    """A single-class test split has no AUC (NaN, documented): it is not a failure, but it is not
    silent either — the client's record keeps NaN and n_clients_auc counts only real AUCs."""
    clean, _ = run_attacked("fedavg", rounds=1, evaluate=lambda e: replace(e, y_true=None, scores=None))
    h, _ = run_attacked("fedavg", rounds=1, evaluate=lambda e: replace(e, metrics={**e.metrics, "auc": float("nan")}, y_true=None, scores=None))
    assert not victim_failures(h, "evaluate")
    assert np.isnan([r["auc"] for r in h.records if r["client"] == VICTIM][0])
    assert h.final["n_clients_auc"] == clean.final["n_clients_auc"] - 1 == 7
    others = [r["auc"] for r in clean.records if r["client"] != VICTIM]
    assert h.final["auc"] == pytest.approx(np.mean(others), abs=1e-12)


def test_a_nan_auc_must_agree_with_the_pooled_labels():
    h, _ = run_attacked("fedavg", evaluate=metrics(auc=float("nan")), rounds=1)
    (f,) = victim_failures(h, "evaluate")
    assert "pooled labels hold 2 class(es)" in f.reason


def test_flower_evaluation_metrics_are_validated():
    pytest.importorskip("flwr")
    from fake_grid import FakeGrid, tamper_evaluate_metrics
    from topofl.flower.server_app import federated_main
    from topofl.flower.settings import FlowerSettings

    grid = FakeGrid(8)
    grid.tamper = tamper_evaluate_metrics(grid.node_ids[VICTIM], {"auc": 5.0})
    h = federated_main(grid, FlowerSettings.from_flat(method="fedavg", rounds=2, seed=0))
    assert h.final["auc"] <= 1.0
    assert [f.round for f in h.failures if f.client == VICTIM and f.stage == "evaluate"] == [1, 2]


@pytest.mark.parametrize("metrics_sent, words", [
    ({"auc": float("nan"), "accuracy": float("nan"), "loss": 0.2}, "missing metric(s) mse, r2"),
    ({"auc": float("nan"), "accuracy": float("nan"), "loss": 0.2, "mse": -0.1, "r2": 0.5}, "mse must be finite and >= 0"),
    ({"auc": float("nan"), "accuracy": float("nan"), "loss": 0.2, "mse": float("inf"), "r2": 0.5}, "mse must be finite"),
    ({"auc": float("nan"), "accuracy": float("nan"), "loss": 0.2, "mse": 0.4, "r2": 1.5}, "r2 must be <= 1"),
    ({"auc": 0.7, "accuracy": float("nan"), "loss": 0.2, "mse": 0.4, "r2": 0.5}, "reports no auc or accuracy"),
])
def test_a_regression_evaluation_needs_sound_mse_and_r2(metrics_sent, words):
    from topofl.federation.pool import ClientEvaluation
    from topofl.federation.validation import ClientInfo, evaluation_problem

    reason = evaluation_problem(ClientEvaluation(0, metrics_sent, None, None), ClientInfo(0, 30, 10), "regression", 0)
    assert reason is not None and words in reason, reason
    sound = {"auc": float("nan"), "accuracy": float("nan"), "loss": 0.2, "mse": 0.4, "r2": float("nan")}
    assert evaluation_problem(ClientEvaluation(0, sound, None, None), ClientInfo(0, 30, 10), "regression", 0) is None
    # a classification reply carries no regression metrics
    assert "unexpected metric 'mse'" in evaluation_problem(
        ClientEvaluation(0, {"auc": 0.6, "accuracy": 0.5, "loss": 0.2, "mse": 0.1}, None, None), ClientInfo(0, 30, 10), "binary", 2)
