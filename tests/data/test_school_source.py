"""School is not shipped (no licence is stated for it): the package holds no copy, and the ``school``
source reads the file a user names (``-s path=FILE``, ``TOPOFL_SCHOOL``), else the development
checkout's ``../shared/data/school``, else says where to get it.
"""
from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest

from topofl.data import sources
from topofl.data.sources import SCHOOL_ENV, load, school_path


def test_the_package_ships_no_school_data() -> None:
    builtin = Path(str(resources.files("topofl.data") / "builtin"))
    assert not (builtin / "school").exists()
    assert not list(builtin.rglob("*.mat"))


def test_school_comes_from_the_checkout_in_development() -> None:
    path = school_path()
    assert path.name == "school.mat" and path.parent.parts[-3:] == ("shared", "data", "school")
    assert len(load("school", 0).clients) == 139


def test_school_comes_from_the_path_the_user_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "mine" / "school.mat"
    copy.parent.mkdir()
    shutil.copyfile(school_path(), copy)
    monkeypatch.setattr(sources, "_checkout_school", lambda: [])   # as an installed package: no checkout
    assert school_path(copy) == copy and school_path(copy.parent) == copy
    assert len(load("school", 0, {"path": str(copy)}).clients) == 139
    monkeypatch.setenv(SCHOOL_ENV, str(copy.parent))
    assert school_path() == copy


def test_school_missing_says_where_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "_checkout_school", lambda: [tmp_path / "none" / "school.mat"])
    monkeypatch.delenv(SCHOOL_ENV, raising=False)
    with pytest.raises(ValueError, match=r"not shipped.*MALSAR.*TOPOFL_SCHOOL"):
        load("school", 0)
    monkeypatch.setenv(SCHOOL_ENV, str(tmp_path / "nope.mat"))
    with pytest.raises(ValueError, match=r"TOPOFL_SCHOOL '.*nope.mat' is not school.mat"):
        load("school", 0)
    with pytest.raises(ValueError, match=r"path '.*other.mat' is not school.mat"):
        load("school", 0, {"path": str(tmp_path / "other.mat")})


def test_school_missing_is_a_one_line_error_on_the_command_line(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from topofl.cli import app

    monkeypatch.setenv(SCHOOL_ENV, str(tmp_path / "nope.mat"))
    res = CliRunner().invoke(app, ["experiment", "sheaf-school", "--seeds", "0", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2, res.output
    assert "TOPOFL_SCHOOL" in res.output and "Traceback" not in res.output


def test_the_school_experiment_runs_on_a_path_the_user_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``-s path=FILE`` reaches every part of the experiment (its analysis reads each school's target
    scale too), with no TOPOFL_SCHOOL and no checkout copy; the data's location is no scenario change:
    the results go to DIR/sheaf-school (not -custom) and the run ids are those of the default location.
    """
    from typer.testing import CliRunner

    from topofl.cli import app
    from topofl.experiments.driver import plan_for

    copy = tmp_path / "mine" / "school.mat"
    copy.parent.mkdir()
    shutil.copyfile(school_path(), copy)
    monkeypatch.setattr(sources, "_checkout_school", lambda: [])
    monkeypatch.delenv(SCHOOL_ENV, raising=False)
    out = tmp_path / "o"
    res = CliRunner().invoke(app, ["experiment", "sheaf-school", "--smoke", "--seeds", "0", "-s", f"path={copy}",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "sheaf-school" / "manifest.json").exists() and not (out / "sheaf-school-custom").exists()
    planned = plan_for("sheaf-school", [0], "smoke")
    assert all(j.with_(data_params={"path": str(copy)}).run_id == j.run_id for j in planned)


def test_a_path_of_an_unknown_users_home_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"path '~nosuchuser_topofl/x.mat'"):
        load("school", 0, {"path": "~nosuchuser_topofl/x.mat"})


def test_another_school_file_is_warned_of(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The documented numbers were made with one file (its SHA-256): another one loads, with a warning."""
    import logging

    with caplog.at_level(logging.WARNING, logger="topofl.data.sources"):
        load("school", 0)
    assert not caplog.records   # the file the numbers were made with
    monkeypatch.setattr(sources, "SCHOOL_SHA256", "0" * 64)   # as if the user's file were another one
    with caplog.at_level(logging.WARNING, logger="topofl.data.sources"):
        assert len(load("school", 0).clients) == 139
    assert any("0" * 64 in r.getMessage() and "documented" in r.getMessage() for r in caplog.records), caplog.text


def test_the_checkout_lookup_is_the_source_checkouts_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never the working directory's ../shared (an installed package run anywhere), only ../shared beside
    the source checkout this module lives in (a src/ layout with pyproject.toml).
    """
    looked = sources._checkout_school()
    repo = Path(sources.__file__).resolve().parents[3]
    assert looked == [repo.parent / "shared" / "data" / "school" / "school.mat"]
    monkeypatch.chdir(tmp_path)
    assert sources._checkout_school() == looked
    fake = tmp_path / "site-packages" / "topofl" / "data" / "sources.py"
    monkeypatch.setattr(sources, "__file__", str(fake))
    assert sources._checkout_school() == []
