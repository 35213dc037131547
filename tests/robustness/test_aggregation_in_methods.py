"""The robust aggregation rules inside the methods: FedAvg's (and FedProx's) server rule
``aggregator`` and pTopoFL's per-cluster ``intra_aggregator``, against one hostile client whose
reply passes every check of the server — a model just inside the update-norm bound, pointing
against its own honest change (the attack of the README's "Threat model and guarantees")."""
from __future__ import annotations

import json
import logging
from itertools import pairwise

import numpy as np
import pytest
from typer.testing import CliRunner

from security.attacking import VICTIM, replace, run_attacked
from topofl.methods import build

pytestmark = pytest.mark.filterwarnings("ignore::topofl.federation.runner.TrainingWarning")  # the undefended runs diverge


def against(u, m):
    """The victim's honest change, reversed and stretched to 95 % of the smallest bound the server
    can apply (max_update_ratio 10 × max(‖model sent‖, update_norm_floor 1)), so it is accepted."""
    d = u.params - m.params
    return replace(u, params=m.params - 0.95 * 10.0 * max(np.linalg.norm(m.params), 1.0) * d / np.linalg.norm(d))


def auc(history):
    return history.final["auc"]


@pytest.fixture(scope="module")
def fedavg_mean():
    clean, _ = run_attacked("fedavg")
    attacked, _ = run_attacked("fedavg", against)
    return clean, attacked


def test_the_attack_passes_the_checks_and_drags_the_mean(fedavg_mean):
    clean, attacked = fedavg_mean
    assert not attacked.failures                      # accepted: only the aggregation rule can stop it
    assert auc(attacked) < auc(clean) - 0.3


@pytest.mark.parametrize("rule", ["median", "trimmed_mean", "krum", "multi_krum", "bulyan"])
def test_fedavg_with_a_robust_rule_survives_the_attack(rule, fedavg_mean):
    clean, attacked = run_attacked("fedavg", aggregator=rule)[0], run_attacked("fedavg", against, aggregator=rule)[0]
    assert not attacked.failures
    assert auc(attacked) > auc(clean) - 0.05, (rule, auc(clean), auc(attacked))
    assert auc(attacked) > auc(fedavg_mean[1]) + 0.25


@pytest.mark.parametrize("method", ["fedavg", "fedprox"])
def test_multi_krum_excludes_exactly_the_attacker(method):
    h, _ = run_attacked(method, against, aggregator="multi_krum", byzantine_f=1)   # m = n − f = 7 of 8
    assert [log.get("excluded") for log in h.server_logs] == [[VICTIM]] * 3


def test_multi_krum_by_default_tolerates_the_most_the_round_allows():
    h, _ = run_attacked("fedavg", against, aggregator="multi_krum")   # f = (8 − 3) // 2 = 2: m = 6 of 8
    assert all(len(log["excluded"]) == 2 and VICTIM in log["excluded"] for log in h.server_logs)


def test_krum_and_bulyan_exclude_the_attacker():
    krum, _ = run_attacked("fedavg", against, aggregator="krum")
    assert all(len(log["excluded"]) == 7 and VICTIM in log["excluded"] for log in krum.server_logs)   # Krum keeps one
    bul, _ = run_attacked("fedavg", against, aggregator="bulyan")
    assert all(len(log["excluded"]) == 2 and VICTIM in log["excluded"] for log in bul.server_logs)    # θ = n − 2f = 6 kept


def test_the_mean_excludes_no_one_and_logs_nothing_new(fedavg_mean):
    assert all("excluded" not in log and "aggregation_fallback" not in log for log in fedavg_mean[1].server_logs)


def sent_models(**hp):
    """The models the server sent the victim each round (its reply is the attack), and the algorithm."""
    sent = []

    def relay(u, m):  # the model the victim was sent, then its attack
        sent.append(m.params.copy())
        return against(u, m)

    _, algo = run_attacked(hp.pop("method", "fedavg"), relay, **hp)
    return sent, algo


def test_norm_clip_bounds_each_step_of_the_global_model():
    sent, algo = sent_models(aggregator="norm_clip", clip_norm=0.5)
    models = [*sent, algo.global_params]
    steps = [float(np.linalg.norm(b - a)) for a, b in pairwise(models)]
    assert max(steps) <= 0.5 + 1e-12, steps
    sent, algo = sent_models()   # the mean: the attacker's share of its 9.5 moves it further
    assert np.linalg.norm(sent[1] - sent[0]) > 0.5 + 0.4


def test_ptopofl_with_a_robust_intra_aggregator_survives_the_attack():
    clean, _ = run_attacked("ptopofl")
    dragged, _ = run_attacked("ptopofl", against)
    assert not dragged.failures and auc(dragged) < auc(clean) - 0.3
    for rule in ("median", "trimmed_mean"):
        h, _ = run_attacked("ptopofl", against, intra_aggregator=rule)
        assert auc(h) > auc(clean) - 0.05, (rule, auc(h))


def test_ptopofl_multi_krum_within_one_cluster_excludes_the_attacker():
    h, _ = run_attacked("ptopofl", against, n_clusters=1, intra_aggregator="multi_krum", byzantine_f=1)
    assert [log.get("excluded") for log in h.server_logs] == [[VICTIM]] * 3


def test_ptopofl_norm_clip_measures_each_change_from_the_model_sent():
    # one cluster: the model sent each round is the cluster model, so its step is at most clip_norm
    sent, algo = sent_models(method="ptopofl", n_clusters=1, intra_aggregator="norm_clip", clip_norm=0.3)
    models = [*sent, algo.cluster_raw[0]]
    assert max(float(np.linalg.norm(b - a)) for a, b in pairwise(models)) <= 0.3 + 1e-9


# ---- too few updates for the configured f: the round goes on with the median ----------------------
def test_ptopofl_clusters_too_small_for_krum_fall_back_to_the_median(caplog):
    with caplog.at_level(logging.WARNING, logger="topofl.algorithms.base"):
        h, krum = run_attacked("ptopofl", against, intra_aggregator="krum", byzantine_f=1)   # two clusters of 4 < 2f + 3 = 5
    notes = [log["aggregation_fallback"] for log in h.server_logs]
    assert all(set(n) == {"0", "1"} and "needs at least 5 updates; got 4: coordinate-wise median used" in n["0"] for n in notes)
    assert len([r for r in caplog.records if "coordinate-wise median used" in r.getMessage()]) == 1   # warned once per run
    _, median = run_attacked("ptopofl", against, intra_aggregator="median")
    assert all(np.array_equal(krum.cluster_raw[j], median.cluster_raw[j]) for j in median.cluster_raw)


def test_fedavg_round_too_small_for_bulyan_falls_back_to_the_median():
    h, bul = run_attacked("fedavg", against, aggregator="bulyan", byzantine_f=2)   # 8 < 4f + 3 = 11
    assert all("bulyan with byzantine_f=2 needs at least 11 updates; got 8" in log["aggregation_fallback"] for log in h.server_logs)
    _, median = run_attacked("fedavg", against, aggregator="median")
    assert np.array_equal(bul.global_params, median.global_params)


def test_multi_krum_m_above_the_round_is_lowered():
    h, algo = run_attacked("fedavg", aggregator="multi_krum", multi_krum_m=20)
    assert all(log["aggregation_fallback"] == "multi_krum_m=20 exceeds the round's 8 updates: m=8 used" for log in h.server_logs)
    _, mean = run_attacked("fedavg")
    np.testing.assert_allclose(algo.global_params, mean.global_params, rtol=0, atol=1e-12)   # m = n: the weighted mean


# ---- configuration -----------------------------------------------------------------------------
def test_defaults_keep_the_weighted_mean():
    for method, field in (("fedavg", "aggregator"), ("fedprox", "aggregator"), ("ptopofl", "intra_aggregator")):
        c = build(method, {}).config
        assert getattr(c, field) == "mean"
        assert (c.byzantine_f, c.trim_fraction, c.clip_norm, c.multi_krum_m) == (-1, 0.25, 1.0, 0)   # f from the round


@pytest.mark.parametrize("method, values, field", [
    ("fedavg", {"aggregator": "geomed"}, "aggregator"),
    ("ptopofl", {"intra_aggregator": "geomed"}, "intra_aggregator"),
    ("fedavg", {"byzantine_f": -2}, "byzantine_f"),
    ("fedavg", {"trim_fraction": -1.0}, "trim_fraction"),
    ("fedavg", {"guard_min_cosine": 1.0}, "guard_min_cosine"),
    ("ptopofl", {"guard_clip": 0.0}, "guard_clip"),
    ("fedavg", {"guard_clip": 3.0, "guard_max_norm": 2.0}, "guard_max_norm"),
    ("ptopofl", {"trim_fraction": 0.5}, "trim_fraction"),
    ("fedprox", {"clip_norm": 0.0}, "clip_norm"),
    ("fedavg", {"multi_krum_m": -2}, "multi_krum_m"),
])
def test_bad_settings_are_refused_naming_the_field(method, values, field):
    with pytest.raises(ValueError, match=field):
        build(method, values)


def test_settings_from_the_command_line(tmp_path):
    from topofl.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["methods"])
    assert res.exit_code == 0 and all(k in res.output for k in ("aggregator=mean", "intra_aggregator=mean", "byzantine_f=-1", "clip_norm=1.0"))
    res = runner.invoke(app, ["compare", "--methods", "fedavg", "-p", "fedavg.aggregator=krum", "-p", "byzantine_f=2", "--seeds", "0",
                              "--rounds", "2", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    logs = [json.loads(line) for line in (tmp_path / "server_log.jsonl").read_text().splitlines()]
    assert [len(log["excluded"]) for log in logs] == [7, 7]
