"""The ``privacy-attacks`` experiment: plan, registration, and a small end-to-end analysis."""
from __future__ import annotations

import csv
import json

import pytest

from topofl.experiments import report
from topofl.experiments.driver import EXPERIMENTS
from topofl.experiments.security import privacy_attacks as pa
from topofl.experiments.security.privacy_probe import ProbeBudget, public_pool

#: a smaller budget: 3 rounds, batches of 1 and 2, two restarts, a pool of two federations
SMALL = pa.PrivacyAttacksBudget(rounds=3, probe=ProbeBudget(batch_sizes=(1, 2), restarts=2, max_iter=400,
                                                              pool_seeds=(1000, 1001)))


def test_registered_with_a_plan_of_one_run_per_method_and_seed():
    assert EXPERIMENTS["privacy-attacks"] is pa.EXPERIMENT
    assert "privacy-attacks" in report.ORDER
    specs = pa.plan([0, 3])
    assert [(s.method, s.seed) for s in specs] == [(m, s) for s in (0, 3) for m in pa.METHODS]
    assert all(s.data == "healthcare" and s.rounds == 15 and s.setting == {"probe": "privacy-attacks"} for s in specs)
    with pytest.raises(ValueError, match="must include 'fedavg'"):
        pa.plan([0], pa.PrivacyAttacksBudget(methods=("ptopofl",)))


def test_the_probe_names_its_budget_and_reads_it_back():
    from topofl.experiments.probes import parse_probe

    assert ProbeBudget().spec() == "privacy-attacks"
    spec = SMALL.probe.spec()
    assert spec == "privacy-attacks:batch_sizes=1/2,restarts=2,max_iter=400,pool_seeds=1000/1001"
    name, params = parse_probe(spec)
    assert name == "privacy-attacks" and ProbeBudget.from_params(params) == SMALL.probe
    with pytest.raises(ValueError, match="unknown probe 'nosuch'"):
        parse_probe("nosuch")
    with pytest.raises(ValueError, match="no parameter"):
        ProbeBudget.from_params({"restart": "2"})


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_analysis_measures_every_channel(tmp_path):
    from topofl.experiments.driver import run_experiment

    public_pool.cache_clear()
    out = run_experiment("privacy-attacks", [0, 1], tmp_path, budget=SMALL)
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
    assert any("matched the record to 0.0e+00" in n for n in man["notes"])  # FedAvg's replay is its recorded run
    done = [json.loads(p.read_text()) for p in (out / "runs").glob("*.done.json")]
    assert all("membership" in d["probe"] for d in done)  # every run's attacks are in its sealed done-record
    assert {d["method"] for d in done if "inversion" in d["probe"]} == {"fedavg"}
