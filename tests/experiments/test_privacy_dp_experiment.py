"""The ``privacy-dp`` experiment: plan, registration, and a small end-to-end run whose every DP run reports ε."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from topofl.experiments import report
from topofl.experiments.base import server_logs
from topofl.experiments.driver import EXPERIMENTS
from topofl.experiments.security import privacy_dp as pd
from topofl.methods import build_server
from topofl.privacy import accounting, dp

pytest.importorskip("dp_accounting")


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_registered_with_every_setting_per_seed():
    assert EXPERIMENTS["privacy-dp"] is pd.EXPERIMENT
    assert report.ORDER.index("privacy-dp") == report.ORDER.index("privacy-attacks") + 1
    specs = pd.plan([0, 2])
    per_seed = 2 * (1 + len(pd.FULL.noise_multipliers)) + len(pd.FULL.descriptor_epsilons)
    assert len(specs) == 2 * per_seed and {s.seed for s in specs} == {0, 2}
    assert len({s.run_id for s in specs}) == len(specs)
    assert all(s.data == "healthcare" and s.rounds == pd.FULL.rounds for s in specs)
    assert all(s.setting == {"algorithm": s.method} for s in specs)
    for s in specs:  # every setting is a valid configuration of its method
        build_server(s.method, s.hyperparameters)


def test_descriptor_radius_is_the_median_clean_norm_of_the_calibration_federation():
    from topofl.data.scenarios import make_scenario
    from topofl.tda.descriptor import descriptor

    fed = make_scenario("healthcare", seed=pd.CALIBRATION_SEED)
    norms = [np.linalg.norm(descriptor(c.X_train, 80, 20, np.random.default_rng(np.random.SeedSequence([pd.CALIBRATION_SEED, k])), "none"))
             for k, c in enumerate(fed.clients)]
    assert pd.descriptor_radius() == pytest.approx(float(np.median(norms)), rel=1e-12)
    assert 0 < min(norms) <= pd.descriptor_radius() <= max(norms)


def test_every_dp_run_reports_the_accountants_epsilon(tmp_path):
    from topofl.experiments.driver import run_experiment

    small = pd.PrivacyDpBudget(rounds=3, noise_multipliers=(1.0, 4.0), descriptor_epsilons=(1.0, 1e4))
    out = run_experiment("privacy-dp", [0, 1], tmp_path, budget=small)
    man = json.loads((out / "manifest.json").read_text())
    assert [t["csv"] for t in man["tables"]] == ["summary.csv", "paired.csv", "epsilon.csv", "cluster_stability.csv"]
    assert all((out / f["png"]).exists() for f in man["figures"])
    logs = pd.final_logs(server_logs(out))
    assert len(logs) == 2 * (2 * 3 + 2)
    for (_, label, _), r in logs.items():
        if label.startswith("updates"):
            z = float(label.split("=")[1])
            assert r["dp_epsilon"] == pytest.approx(accounting.dp_fedavg_epsilon(z, 1.0, 3, pd.DELTA), rel=1e-12)
        elif label.startswith("descriptor"):
            e = float(label.split("=")[1])
            s = dp.gaussian_sigma(1.0, e, pd.DELTA)
            assert r["dp_epsilon_descriptor"] == pytest.approx(accounting.gaussian_epsilon(s, pd.DELTA, 1, "rdp"), rel=1e-12)
            assert r["dp_descriptor_releases"] == 1
        else:
            assert not any(k.startswith("dp_") for k in r)
    eps = {(r["algorithm"], r["setting"]): r for r in _rows(out / "epsilon.csv")}
    assert float(eps[("fedavg", "updates z=4")]["dp_epsilon"]) < float(eps[("fedavg", "updates z=1")]["dp_epsilon"])
    assert eps[("ptopofl", "updates z=1")]["dp_epsilon_n_distinct"] == "1"
    stab = {r["setting"]: r for r in _rows(out / "cluster_stability.csv")}
    assert float(stab["no-dp"]["ari_vs_no_dp_mean"]) == 1.0
    assert float(stab["updates z=4"]["ari_vs_no_dp_mean"]) == 1.0  # update noise does not touch the clusters
    # at ε = 10⁴ (σ ≈ 0.1 per coordinate against descriptors of norm ~300) the clusters are those of no DP
    assert float(stab["descriptor eps=10000"]["ari_vs_no_dp_mean"]) == 1.0
    paired = _rows(out / "paired.csv")
    assert {(r["algorithm"], r["method"]) for r in paired} == {(a, lab) for a, lab in eps if lab != "no-dp"}
