"""Nothing changes numerically: every configuration of the documented set (``tests/bit_identity.py``)
gives, bit for bit, the fingerprint measured before issue 21's refactoring (the Flower configurations
are checked by the Flower tests that make those runs: tests/flower)."""
from __future__ import annotations

import json

import pytest

from bit_identity import CONFIGS, GOLDEN, OTHER_MACHINES, OWN_CONFIGS, fingerprint, golden_fingerprints, run_config

MARKS = {"": (), "deep": (pytest.mark.deep,)}
GOLDEN_VALUES = json.loads(GOLDEN.read_text())


def test_the_golden_file_covers_every_configuration():
    assert sorted(GOLDEN_VALUES) == sorted(CONFIGS)


@pytest.mark.parametrize("name", [pytest.param(n, marks=MARKS[CONFIGS[n][1]]) for n in OWN_CONFIGS])
def test_configuration_is_bit_identical(name):
    assert fingerprint(run_config(name)) in golden_fingerprints(name), f"{name}: iterates or metrics changed"


def test_other_machines_certify_only_pytorch_configurations():
    """Only the PyTorch runs' last bits follow the CPU: every other configuration has one fingerprint everywhere."""
    for fingerprints in OTHER_MACHINES.values():
        assert set(fingerprints) <= {n for n, (_, marker, _) in CONFIGS.items() if marker == "deep"}
        assert not set(fingerprints.values()) & set(GOLDEN_VALUES.values())


def test_comparison_and_experiment_files_are_byte_identical(tmp_path):
    from bit_identity import GOLDEN_FILES, file_hashes

    want = json.loads(GOLDEN_FILES.read_text())
    got = file_hashes(tmp_path)
    assert got["run_ids"] == want["run_ids"], "run ids changed: results written before would not resume"
    changed = [k for k in want if k != "run_ids" and got[k] != want[k]]
    assert not changed, f"files changed: {changed}"
