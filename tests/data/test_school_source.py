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
