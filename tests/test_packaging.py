"""Packaging a user relies on (issue 24): a licence file that matches pyproject, PEP 561's py.typed,
``topofl --version``, and result files with the user's umask (a node's private state excepted)."""
from __future__ import annotations

import os
import stat
import sys
from importlib import resources
from pathlib import Path

import pytest
from typer.testing import CliRunner

import topofl
from topofl.atomic import write_bytes_atomic, write_text_atomic
from topofl.cli import app

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_licence_file_is_the_licence_pyproject_declares():
    text = (ROOT / "LICENSE").read_text()
    assert PROJECT["project"]["license"] == "MIT AND CC-BY-4.0 AND CC-BY-SA-3.0"   # code AND the shipped data
    assert PROJECT["project"]["license-files"] == ["LICENSE", "DATA-LICENCES.md"]
    assert text.startswith("MIT License") and "WITHOUT WARRANTY OF ANY KIND" in text


def test_every_shipped_data_set_states_its_licence():
    """Each directory of topofl/data/builtin has a README stating its licence, the same one DATA-LICENCES.md
    gives it, and the package expression names it; a data set without a stated licence is not shipped."""
    notices = (ROOT / "DATA-LICENCES.md").read_text()
    licences = {"heart-disease": ("Creative Commons Attribution 4.0", "CC-BY-4.0"),
                "mnist-10k": ("CC BY-SA 3.0", "CC-BY-SA-3.0")}
    builtin = ROOT / "src" / "topofl" / "data" / "builtin"
    assert {p.name for p in builtin.iterdir() if p.is_dir()} == set(licences)
    for name, (stated, spdx) in licences.items():
        assert stated in (builtin / name / "README.md").read_text()
        assert f"`builtin/{name}/`" in notices and spdx in PROJECT["project"]["license"]


def test_the_package_ships_py_typed():
    assert resources.files("topofl").joinpath("py.typed").is_file()
    assert "py.typed" in PROJECT["tool"]["setuptools"]["package-data"]["topofl"]


def test_version_flag_prints_the_one_version():
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"topofl {topofl.__version__}"
    assert topofl.__version__ == PROJECT["project"]["version"]


@pytest.fixture
def umask():
    old = os.umask(0o022)
    os.umask(old)

    def set_mask(mask: int) -> None:
        os.umask(mask)

    yield set_mask
    os.umask(old)


@pytest.mark.parametrize("mask,shared", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_results_get_the_users_umask_and_private_state_stays_private(tmp_path, umask, mask, shared):
    umask(mask)
    write_text_atomic(tmp_path / "summary.csv", "a,b\n")
    write_bytes_atomic(tmp_path / "state.pkl", b"secret", private=True)
    assert stat.S_IMODE((tmp_path / "summary.csv").stat().st_mode) == shared
    assert stat.S_IMODE((tmp_path / "state.pkl").stat().st_mode) == 0o600


def test_a_nodes_client_state_on_disk_is_private(tmp_path, umask):
    pytest.importorskip("flwr")
    from flwr.app import RecordDict

    from topofl.flower.records import save_round_state

    umask(0o022)
    save_round_state(RecordDict(), "job", 8, {"secagg": {"s_seed": b"0" * 16}}, tmp_path)
    (snap,) = (tmp_path / "job").iterdir()
    assert stat.S_IMODE(snap.stat().st_mode) == 0o600


def test_exit_codes_tell_bad_input_from_a_failed_run():
    """2: bad input, named; 1: a valid run that failed (training diverged), with the reason."""
    bad = CliRunner().invoke(app, ["run", "--method", "fedavg", "-p", "lr=-1", "--rounds", "1"])
    assert bad.exit_code == 2 and "lr must be in" in bad.output
    diverged = CliRunner().invoke(app, ["run", "--method", "sheaf", "--graph", "ring", "-p", "gamma=0.3", "-p", "lr=90",
                                        "-p", "eta=90", "--rounds", "5"])
    assert diverged.exit_code == 1 and "the run failed: sheaf diverged" in diverged.output
