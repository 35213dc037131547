"""The ptopofl-options experiment: Eq. 12's weights and §3.2's variants against pTopoFL's defaults."""
import dataclasses

from topofl.experiments.driver import EXPERIMENTS, plan_for
from topofl.experiments.ptopofl import ptopofl_options as po
from topofl.experiments.runs import execute


def test_plan_covers_every_setting_and_variant_once_per_seed():
    specs = plan_for("ptopofl-options", [0, 1])
    assert EXPERIMENTS["ptopofl-options"] is po.EXPERIMENT
    assert len(specs) == 2 * len(po.SETTINGS) * len(po.VARIANTS) and len({s.run_id for s in specs}) == len(specs)
    assert {s.setting["setting"] for s in specs} == {name for name, _, _ in po.SETTINGS}
    eq12 = [s for s in specs if s.label == "ptopofl-eq12"]
    assert all(s.method == "ptopofl" and s.hyperparameters == {"intra_weighting": "wasserstein_exp"} for s in eq12)
    plain = [s for s in specs if s.method == "ptopofl" and not s.label]
    assert plain and all(s.hyperparameters == {} for s in plain)  # the reference: pTopoFL's defaults


def test_analysis_pairs_each_variant_against_the_defaults(tmp_path):
    specs = [dataclasses.replace(s, rounds=2) for s in plan_for("ptopofl-options", [0, 1])
             if s.setting["setting"] == "heart-disease" and (s.label or s.method) in ("ptopofl", "ptopofl-eq12", "ptopofl-sw")]
    man = po.analyse(tmp_path, execute(specs, tmp_path))
    rows = list((tmp_path / "paired.csv").read_text().splitlines())
    assert {r.split(",")[1] for r in rows[1:]} == {"ptopofl-eq12", "ptopofl-sw"}
    assert any(n.startswith("heart-disease: Eq. 6 minus Eq. 12 (λ = 1) AUC") for n in man.notes)
