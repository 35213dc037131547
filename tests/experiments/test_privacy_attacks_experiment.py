"""The ``privacy-attacks`` experiment: plan, registration, and a small end-to-end analysis."""
from __future__ import annotations

import csv
import json

import pytest

from topofl.experiments import report
from topofl.experiments.suite import EXPERIMENTS
from topofl.experiments.suite import privacy_attacks as pa


def test_registered_with_a_plan_of_one_run_per_method_and_seed():
    assert EXPERIMENTS["privacy-attacks"] is pa.EXPERIMENT
    assert "privacy-attacks" in report.ORDER
    specs = pa.plan([0, 3])
    assert [(s.method, s.seed) for s in specs] == [(m, s) for s in (0, 3) for m in pa.METHODS]
    assert all(s.scenario == "healthcare" and s.rounds == pa.ROUNDS for s in specs)


@pytest.fixture
def small(monkeypatch):
    """A smaller budget: 3 rounds, batches of 1 and 2, one restart, a pool of two federations."""
    monkeypatch.setattr(pa, "ROUNDS", 3)
    monkeypatch.setattr(pa, "OBSERVED", (1, 3))
    monkeypatch.setattr(pa, "BATCH_SIZES", (1, 2))
    monkeypatch.setattr(pa, "RESTARTS", 2)
    monkeypatch.setattr(pa, "MAX_ITER", 400)
    monkeypatch.setattr(pa, "POOL_SEEDS", (1000, 1001))
    pa.public_pool.cache_clear()
    yield
    pa.public_pool.cache_clear()


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_analysis_measures_every_channel(tmp_path, small):
    from topofl.experiments.driver import run_experiment

    out = run_experiment("privacy-attacks", [0, 1], tmp_path)
    man = json.loads((out / "manifest.json").read_text())
    assert [t["csv"] for t in man["tables"]] == ["inversion.csv", "descriptor_inversion.csv", "descriptor_statistics.csv", "membership.csv",
                                                 "channels.csv"]
    assert all((out / f["png"]).exists() for f in man["figures"])
    inv = {(r["batch"], r["channel"], r["observed_rounds"]): r for r in _rows(out / "inversion.csv")}
    one = inv[("1", "gradient", "1")]
    assert float(one["relative_error_mean"]) < 1e-10 and float(one["label_accuracy_mean"]) == 1.0
    assert float(inv[("1", "update (unrolled)", "3")]["relative_error_mean"]) < 1e-6
    assert float(inv[("client", "gradient", "1")]["label_count_exact_mean"]) == 1.0  # FedAvg's zero start: the count is exact
    by_seed = [r for r in _rows(out / "inversion_by_seed.csv") if r["channel"] == "gradient"]
    assert len({r["seed"] for r in by_seed}) == 2 and max(float(r["label_count_error"]) for r in by_seed) < 1e-9
    assert float(inv[("2", "gradient", "1")]["relative_error_mean"]) > 0.1  # one upload does not identify two rows
    desc = {r["attack"]: r for r in _rows(out / "descriptor_inversion.csv")}
    assert set(desc) == {"nearest descriptor", "nearest, rescaled to φ's H0 amplitude", "same distribution (own test rows)",
                         "random pool cloud (mean)", "best pool cloud (oracle)"}
    assert float(desc["best pool cloud (oracle)"]["relative_chamfer_mean"]) <= float(desc["random pool cloud (mean)"]["relative_chamfer_mean"])
    stats = {r["statistic"] for r in _rows(out / "descriptor_statistics.csv")}
    assert stats == {"n", "rms_radius", "pc1_fraction"}
    mem = {r["method"]: r for r in _rows(out / "membership.csv")}
    assert set(mem) == set(pa.LABELS.values())
    assert all(0.0 <= float(r["auc_mean"]) <= 1.0 and int(r["n_seeds"]) == 2 for r in mem.values())
    per_client = _rows(out / "membership_by_client.csv")
    assert len(per_client) == 2 * len(pa.METHODS) * 6  # 6 honest hospitals per seed
    assert any("matched the record to 0.0e+00" in n for n in man["notes"])  # the attacked models are the recorded runs'
