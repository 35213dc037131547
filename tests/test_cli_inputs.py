"""Config files that used to give tracebacks (issue 20's audit): deeply nested TOML, oversized files,
a BOM, text that is not UTF-8 — each now a one-line error naming the file, and exit code 2."""
from pathlib import Path

import pytest
from typer.testing import CliRunner

from topofl.cli import app
from topofl.cli_common import MAX_CONFIG_BYTES, MAX_CONFIG_DEPTH, load_toml


def write(path: Path, data: str | bytes) -> Path:
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


@pytest.mark.parametrize(("text", "match"), [
    ("seed = " + "[" * 5000 + "]" * 5000 + "\n", "nests deeper than"),  # RecursionError inside tomllib
    ("a = " + "{b = " * 5000 + "1" + "}" * 5000 + "\n", "nests deeper than"),
    ("seed = " + "[" * 40 + "1" + "]" * 40 + "\n", rf"nests 40 levels deep; at most {MAX_CONFIG_DEPTH}"),  # parses, then refused
    ("[hyperparameters]\n" + "x = 1\n" * 10 + "a = '" + "z" * MAX_CONFIG_BYTES + "'\n", rf"larger than {MAX_CONFIG_BYTES:,} bytes"),
], ids=["deep-arrays", "deep-inline-tables", "40-levels", "over-1MB"])
def test_hostile_toml_is_one_clean_error_naming_the_file(tmp_path, text, match):
    path = write(tmp_path / "deep.toml", text)
    with pytest.raises(ValueError, match=match) as info:
        load_toml(path)
    assert "deep.toml" in str(info.value) and "\n" not in str(info.value) and len(str(info.value)) < 400
    res = CliRunner().invoke(app, ["run", "-c", str(path)])
    assert res.exit_code == 2, res.output
    assert "deep.toml" in res.output and "Traceback" not in res.output


def test_a_bom_is_accepted_and_text_that_is_not_utf8_is_named(tmp_path):
    assert load_toml(write(tmp_path / "bom.toml", b"\xef\xbb\xbfrounds = 3\n")) == {"rounds": 3}
    with pytest.raises(ValueError, match=r"latin\.toml' is not UTF-8 text"):
        load_toml(write(tmp_path / "latin.toml", "scenario = 'caf\xe9'\n".encode("latin-1")))


def test_a_long_wrong_value_is_shown_shortened(tmp_path):
    with pytest.raises(ValueError, match=r"rounds must be an integer; got '1111.*\.\.\. \(20002 characters\)") as info:
        load_toml(write(tmp_path / "long.toml", "rounds = '" + "1" * 20_000 + "'\n"))
    assert len(str(info.value)) < 400


def test_nesting_the_layout_needs_is_accepted(tmp_path):
    text = "methods = ['fedavg']\n[hyperparameters]\nlr = 0.1\n[hyperparameters.ptopofl]\nbeta = 0.5\n[scenario_params]\nn_clients = 4\n"
    assert load_toml(write(tmp_path / "ok.toml", text))["hyperparameters"]["ptopofl"] == {"beta": 0.5}


@pytest.mark.parametrize("extra,named", [([], None), (["--secure-aggregation"], "--secure-aggregation"),
                                         (["--papers-rules"], "--robust-defaults")])
def test_flower_resume_names_only_the_options_that_were_given(tmp_path, extra, named):
    """A flag left at its default (--secure-aggregation off) is not "given"; a flag set is named."""
    pytest.importorskip("flwr")
    res = CliRunner().invoke(app, ["flower", "--resume", str(tmp_path / "missing-run"), *extra])
    assert res.exit_code != 0
    if named is None:
        assert "leave out" not in res.output
    else:
        assert "leave out" in res.output and named in res.output
