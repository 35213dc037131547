"""Your own data: CSV with a site column, a directory of per-site files, a DataFrame, the CLI --data."""
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from topofl.cli import app
from topofl.data.federation import Federation
from topofl.data.loaders.tables import load_table, read_sites

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "data" / "heart.csv"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def small_csv(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    lines = ["site,a,b,y"]
    for site in ("north", "south", "east"):
        for _ in range(20):
            a, b = rng.normal(size=2)
            lines.append(f"{site},{a:.4f},{b:.4f},{int(a + b > 0)}")
    return write(tmp_path / "sites.csv", "\n".join(lines) + "\n")


def test_a_csv_with_a_site_column_is_one_client_per_site_split_by_seed(tmp_path):
    fed = load_table(small_csv(tmp_path), "site", "y", seed=0)
    assert fed.task == "binary" and [c.meta["site"] for c in fed.clients] == ["east", "north", "south"]
    assert all(c.n_train + c.X_test.shape[0] == 20 for c in fed.clients) and fed.n_features == 2
    assert fed.clients[0].meta["features"] == ["a", "b"]
    again, other = load_table(small_csv(tmp_path), seed=0), load_table(small_csv(tmp_path), seed=1)
    assert np.array_equal(fed.clients[0].X_test, again.clients[0].X_test)
    assert not np.array_equal(fed.clients[0].X_test, other.clients[0].X_test)


def test_a_directory_of_csv_and_npz_sites(tmp_path):
    d = tmp_path / "sites"
    d.mkdir()
    write(d / "alpha.csv", "a,b,y\n" + "\n".join(f"{i},{i % 3},{i % 2}" for i in range(10)) + "\n")
    rng = np.random.default_rng(1)
    np.savez(d / "beta.npz", X=rng.normal(size=(12, 2)), y=np.arange(12) % 2)
    sites = read_sites(d, None, "y")
    assert [s[0] for s in sites] == ["alpha", "beta"] and all(s[1].shape[1] == 2 for s in sites)
    assert len(load_table(d, None, "y").clients) == 2
    np.savez(d / "gamma.npz", X=rng.normal(size=(12, 3)), y=np.arange(12) % 2)
    with pytest.raises(ValueError, match="different numbers of features"):
        read_sites(d, None, "y")


@pytest.mark.parametrize(("text", "match"), [
    ("site,a,y\nn,1,0\n", "at least two sites"),
    ("site,a,label\nn,1,0\ns,2,1\n", "no column 'y'"),
    ("site,a,y\nn,1,0\nn,2,1\ns,abc,0\ns,1,1\n", "line 4: column 'a' holds 'abc'"),
    ("site,a,y\nn,1,0\nn,,1\ns,1,0\ns,2,1\n", "line 3: column 'a' is empty"),
    ("site,a,y\nn,1,0\nn,2,1,7\n", "line 3: 4 values for 3 columns"),
    ("site,a,y\n" + "".join(f"{s},{i},{i % 3 + 0.5}\n" for s in "ns" for i in range(8)), "task"),
    ("site,a,y\nn,1,0\ns,1,1\ns,2,0\n", "site 'n' has 1 row"),
])
def test_bad_csvs_name_the_file_column_or_line(tmp_path, text, match):
    with pytest.raises(ValueError, match=match):
        load_table(write(tmp_path / "bad.csv", text), "site", "y")


def test_regression_labels_with_task_and_an_unreadable_path(tmp_path):
    fed = load_table(write(tmp_path / "r.csv", "site,a,y\n" + "\n".join(f"{s},{i},{i * 0.5}" for s in "nm" for i in range(6)) + "\n"),
                     task="regression")
    assert fed.task == "regression"
    with pytest.raises(ValueError, match="neither a CSV file nor a directory"):
        load_table(tmp_path / "missing.csv")


def test_from_dataframe():
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"hospital": ["a"] * 10 + ["b"] * 10, "x1": rng.normal(size=20), "x2": rng.normal(size=20),
                       "y": [0, 1] * 10})
    fed = Federation.from_dataframe(df, "hospital", "y", seed=0, standardise="federated")
    assert [c.meta["site"] for c in fed.clients] == ["a", "b"] and fed.n_features == 2
    with pytest.raises(ValueError, match="not numeric"):
        Federation.from_dataframe(df.assign(x2="text"), "hospital", "y")
    with pytest.raises(ValueError, match="no column 'site'"):
        Federation.from_dataframe(df, "site", "y")


def test_cli_compare_on_the_shipped_example_and_one_line_errors(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["compare", "--data", str(EXAMPLE), "--site-column", "hospital", "--label-column", "disease",
                            "--methods", "ptopofl,fedavg", "--seeds", "0", "--rounds", "3", "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out" / "summary.csv").is_file()
    bad = runner.invoke(app, ["run", "--data", str(EXAMPLE), "--site-column", "clinic", "--label-column", "disease", "--rounds", "1"])
    assert bad.exit_code != 0 and "no column 'clinic'" in bad.output
    both = runner.invoke(app, ["run", "--data", str(EXAMPLE), "--scenario", "healthcare"])
    assert both.exit_code != 0 and "exclude each other" in both.output


def test_school_per_client_standardisation_keeps_binary_columns_and_the_target_scale():
    from topofl.data.loaders.matfiles import load_school
    from topofl.data.sources import school_path

    path = school_path()   # not shipped: TOPOFL_SCHOOL, else ../shared/data/school of the checkout (CI has it)
    raw, std = load_school(path, seed=0), load_school(path, seed=0, standardise="per_client")
    for r, s in zip(raw.clients[:5], std.clients[:5], strict=True):
        assert abs(s.y_train.mean()) < 1e-9 and abs(s.y_train.std() - 1) < 1e-9
        np.testing.assert_allclose(s.y_test * s.meta["y_scale"] + s.meta["y_mean"], r.y_test)
        binary = [j for j in range(r.X_train.shape[1]) if np.all(np.isin(r.X_train[:, j], (0.0, 1.0)))]
        assert binary and np.array_equal(s.X_train[:, binary], r.X_train[:, binary])
    with pytest.raises(ValueError, match="standardise"):
        load_school(path, standardise="global")
