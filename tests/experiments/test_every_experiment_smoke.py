"""Every built-in experiment completes with its smoke budget through the command line, as a user
runs it (``topofl experiment NAME --smoke --seeds 0``), with its budget labelled in the report."""
import importlib.util
import json
import logging
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from topofl.cli import app
from topofl.experiments.driver import EXPERIMENTS

log = logging.getLogger(__name__)


def test_every_experiment_offers_a_smoke_budget_below_its_full_one():
    for name, exp in EXPERIMENTS.items():
        assert "smoke" in exp.profiles, name


def test_the_smoke_budget_defaults_to_two_seeds():
    from topofl.experiments.driver import default_seeds

    for name, exp in EXPERIMENTS.items():
        assert default_seeds(name, "smoke") == exp.default_seeds[:2], name
        assert default_seeds(name, "full") == exp.default_seeds, name
    assert default_seeds("all", "smoke") == (0, 1)


@pytest.mark.slow
def test_every_experiment_completes_with_its_smoke_budget(tmp_path):
    runner = CliRunner()
    took = {}
    for name, exp in EXPERIMENTS.items():
        t0 = time.perf_counter()
        res = runner.invoke(app, ["experiment", name, "--smoke", "--seeds", "0", "--jobs", "1", "--out", str(tmp_path)])
        took[name] = time.perf_counter() - t0
        assert res.exit_code == 0, f"{name}: {res.output[-2000:]}"
        manifest = json.loads((tmp_path / name / "manifest.json").read_text())
        assert manifest["tables"] or manifest["figures"], name
        for entry in manifest["tables"]:
            assert (tmp_path / name / entry["csv"]).is_file(), (name, entry["csv"])
        if exp.budget("smoke") != exp.budget("full"):
            assert manifest["budget"].startswith("smoke budget"), name
    log.info("smoke runs (s, for information: timings are for benchmarks): %s", ", ".join(f"{n} {s:.1f}" for n, s in took.items()))
    res = runner.invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "report.html").read_text()
    assert page.count("class=budgetnote") == sum(exp.budget("smoke") != exp.budget("full")
                                                 for exp in EXPERIMENTS.values())
    if shutil.which("chromium") or shutil.which("google-chrome"):  # CI's layout check, on every experiment's section
        spec = importlib.util.spec_from_file_location("check_report_layout",
                                                      Path(__file__).parents[2] / "tools" / "check_report_layout.py")
        tool = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tool)
        for width in (1400, 760):
            r = tool.check(tmp_path / "report.html", width)
            assert r["problems"] == [] and r["scrollWidth"] <= width, (width, r)
