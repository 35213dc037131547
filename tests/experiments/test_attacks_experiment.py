"""The attacks experiment: its plan, the attack applied to the right clients, and its analysis."""
import csv
import json

import numpy as np
import pytest

from topofl.experiments.driver import default_seeds, plan_for, run_experiment
from topofl.experiments.security import attacks
from topofl.job import Job


def test_plans_by_budget_and_run_ids_without_an_attack_are_unchanged():
    full, quick = plan_for("attacks", [0, 1], "full"), plan_for("attacks", [0], "quick")
    audit = len(attacks.DEFENCES) * len(attacks.AUDIT)   # the audit's two sign flips, healthcare only
    defences, kinds = len(attacks.DEFENCES), len(attacks.KINDS)
    per_seed = sum(defences * (1 + kinds * len(shares)) for _, shares in attacks.BUDGETS["full"].shares) + audit
    assert len(full) == 2 * per_seed
    assert len(quick) == sum(defences * (1 + kinds * 2) for _ in attacks.BUDGETS["quick"].shares) + audit
    assert {s.attack for s in full if s.setting["attack"] == "sign_flip_x9"} == {"sign_flip:scale=9,fraction=0.125,seed=0",
                                                                                "sign_flip:scale=9,fraction=0.125,seed=1"}
    assert {s.attack for s in full if s.setting["attack"] == attacks.CLEAN} == {""}
    # an empty attack leaves a run's id as it was before attacks existed (resumable old results)
    spec = Job(experiment="x", data="healthcare", method="fedavg", seed=0, rounds=3)
    assert spec.run_id == spec.with_(attack="").run_id
    assert spec.run_id != spec.with_(attack="sign_flip").run_id
    with pytest.raises(ValueError, match="no --data-root"):
        plan_for("attacks", [0], "full", "/data")
    # `topofl experiment attacks --quick` with no --seeds: three seeds, the full budget ten
    assert default_seeds("attacks", "quick") == (0, 1, 2) and default_seeds("attacks") == tuple(range(10))
    assert default_seeds("comparison", "quick") == default_seeds("comparison") == tuple(range(10))


def test_smoke_run_attacks_the_chosen_clients_and_scores_detection(tmp_path):
    from topofl.robustness.attacks import choose_adversaries

    out = run_experiment("attacks", [0], tmp_path, profile="smoke")
    done = [json.loads(p.read_text()) for p in (out / "runs").glob("*.done.json")]
    for d in done:
        share = attacks.AUDIT[d["attack"]][1] if d["attack"] in attacks.AUDIT else 0.25
        want = sorted(choose_adversaries(range(8), share, 0)) if d["attack"] != attacks.CLEAN else []
        assert d["adversarial"] == want, d["method"]
    drop = list(csv.DictReader(open(out / "drop.csv")))
    # attacked minus clean, per method: recomputed from the runs' final AUCs
    final = {(d["method"], d["attack"]): d["final"]["auc"] for d in done}
    r = next(x for x in drop if x["method"] == "FedAvg" and x["attack"] == "sign_flip")
    assert float(r["diff_mean"]) == pytest.approx(final[("FedAvg", "sign_flip")] - final[("FedAvg", attacks.CLEAN)], abs=1e-9)
    det = {(r["method"], r["attack"]): r for r in csv.DictReader(open(out / "detection.csv"))}
    assert set(m for m, _ in det) <= set(attacks.DETECTORS) and ("FedAvg + Krum", "sign_flip") in det
    for r in det.values():
        for k in ("precision", "recall", "f1"):
            assert r[k] == "" or 0.0 <= float(r[k]) <= 1.0
    # the deployment defaults against the audit's sign flips: honest clients' AUC, recomputed from the runs' rounds
    check = {(r["method"], r["attack"]): r for r in csv.DictReader(open(out / "deployment_default.csv"))}
    assert set(check) == {(m, k) for m in (*attacks.DEPLOYED, *attacks.DEPLOYED.values()) for k in attacks.AUDIT}
    rounds = [r for r in csv.DictReader(open(out / "rounds.csv")) if r["method"] == "FedAvg" and r["round"] == "3"]
    adv = set(choose_adversaries(range(8), 0.25, 0))
    honest = lambda attack: np.mean([float(r["auc"]) for r in rounds if r["attack"] == attack and int(r["client"]) not in adv])  # noqa: E731
    assert float(check[("FedAvg", "sign_flip_x10")]["diff_mean"]) == pytest.approx(honest("sign_flip_x10") - honest(attacks.CLEAN), abs=1e-9)
    assert ("FedAvg (deployment default)", "sign_flip_x10") in det   # the update-space detector is scored


def test_detection_scores_by_hand():
    logs = [
        {"scenario": "healthcare", "method": "FedAvg + Krum", "attack": "sign_flip", "share": 0.25, "seed": 0, "round": 1, "excluded": [5]},
        {"scenario": "healthcare", "method": "FedAvg + Krum", "attack": "sign_flip", "share": 0.25, "seed": 0, "round": 2, "excluded": [1, 5, 6]},
        {"scenario": "healthcare", "method": "pTopoFL", "attack": "sign_flip", "share": 0.25, "seed": 0, "round": 2, "flagged": []},
    ]
    done = [{"scenario": "healthcare", "method": m, "attack": "sign_flip", "share": 0.25, "seed": 0, "adversarial": [1, 5]}
            for m in ("FedAvg + Krum", "pTopoFL")]
    rows = {r["method"]: r for r in attacks.detection(logs, done)}
    krum = rows["FedAvg + Krum"]   # final round: {1, 5, 6} against {1, 5}: precision 2/3, recall 1, F1 0.8
    assert krum["precision"] == pytest.approx(2 / 3) and krum["recall"] == 1.0 and krum["f1"] == pytest.approx(0.8)
    assert rows["pTopoFL"]["recall"] == 0.0 and rows["pTopoFL"]["f1"] == 0.0   # nothing flagged
