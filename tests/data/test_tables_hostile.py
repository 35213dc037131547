"""CSV and NPZ site files that used to be read wrongly without an error (issue 20's audit): columns in
another order, duplicate or unnamed headers, a row of 1e308, a UTF-8 BOM, a 200,000-character field,
a very wide header, and the heart-disease reader's share of the same checks.
"""
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from topofl.cli import app
from topofl.data import federation as federation_module
from topofl.data.federation import Federation, feature_scale_problem
from topofl.data.loaders import tables
from topofl.data.loaders.heart_disease import read_site
from topofl.data.loaders.tables import MAX_ABS_VALUE, MAX_COLUMNS, load_table, read_sites


def write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.write_text(text, encoding=encoding)
    return path


def site_rows(rng: np.random.Generator, n: int = 30) -> np.ndarray:
    """Columns a (informative), b (noise, 100× larger) and the label y = [a > 0]."""
    a, b = rng.normal(size=n), 100 * rng.normal(size=n)
    return np.column_stack([a, b, (a > 0).astype(float)])


def csv_text(columns: list[str], rows: np.ndarray, order: list[int]) -> str:
    return ",".join(columns[j] for j in order) + "\n" + "".join(",".join(f"{r[j]:.6g}" for j in order) + "\n" for r in rows)


# ---- a directory of site files: columns aligned by name ---------------------------------------------------------


def test_site_files_with_columns_in_another_order_are_aligned_by_name(tmp_path):
    rng = np.random.default_rng(0)
    data = {s: site_rows(rng) for s in ("north", "south", "east")}
    same, shuffled = tmp_path / "same", tmp_path / "shuffled"
    same.mkdir(), shuffled.mkdir()
    for k, (s, rows) in enumerate(data.items()):
        write(same / f"{s}.csv", csv_text(["a", "b", "y"], rows, [0, 1, 2]))
        # the audit's case: the same columns in another order at two of the three sites (east, first by name, sets the order)
        write(shuffled / f"{s}.csv", csv_text(["a", "b", "y"], rows, [[1, 0, 2], [2, 1, 0], [0, 1, 2]][k]))
    ref, got = read_sites(same, None, "y"), read_sites(shuffled, None, "y")
    assert [s[0] for s in got] == [s[0] for s in ref] == ["east", "north", "south"]
    for r, g in zip(ref, got, strict=True):
        assert g[3] == r[3] == ["a", "b"]
        np.testing.assert_array_equal(g[1], r[1])  # a merge by position would put b's values under a
        np.testing.assert_array_equal(g[2], r[2])
    fa, fb = load_table(same, None, "y", seed=3, standardise="federated"), load_table(shuffled, None, "y", seed=3, standardise="federated")
    for ca, cb in zip(fa.clients, fb.clients, strict=True):
        np.testing.assert_array_equal(ca.X_train, cb.X_train)
        np.testing.assert_array_equal(ca.X_test, cb.X_test)


def test_site_files_with_missing_or_extra_columns_are_refused_naming_them(tmp_path):
    write(tmp_path / "a.csv", "a,b,c,y\n1,2,3,0\n2,3,4,1\n")
    write(tmp_path / "b.csv", "a,d,c,y\n1,2,3,0\n2,3,4,1\n")
    with pytest.raises(ValueError, match=r"b\.csv: its columns differ from a\.csv's: missing 'b'; extra 'd'"):
        read_sites(tmp_path, None, "y")


def test_npz_sites_keep_the_count_check_and_duplicate_site_names_are_refused(tmp_path):
    write(tmp_path / "a.csv", "p,q,y\n1,2,0\n2,3,1\n3,1,0\n")
    np.savez(tmp_path / "b.npz", X=np.ones((4, 3)), y=np.arange(4) % 2)
    with pytest.raises(ValueError, match="different numbers of features: a: 2, b: 3"):
        read_sites(tmp_path, None, "y")
    np.savez(tmp_path / "b.npz", X=np.ones((4, 2)), y=np.arange(4) % 2)
    assert [s[0] for s in read_sites(tmp_path, None, "y")] == ["a", "b"]
    np.savez(tmp_path / "a.npz", X=np.ones((4, 2)), y=np.arange(4) % 2)
    with pytest.raises(ValueError, match=r"a\.csv and a\.npz both name site 'a'"):
        read_sites(tmp_path, None, "y")


# ---- headers --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("header", "match"), [
    ("site,a,b,a,y", r"dup\.csv: duplicate column name\(s\) 'a' \(columns 2 and 4\)"),
    ("site, a,b,a ,y", r"duplicate column name\(s\) 'a'"),
    ("site,a,b,y,y", r"duplicate column name\(s\) 'y'"),
    (",site,a,b,y", r"dup\.csv: column 1 has no name .*index=False"),
    ("site,a,,y", r"column 3 has no name"),
])
def test_duplicate_and_unnamed_headers_are_refused(tmp_path, header, match):
    names = [h.strip() for h in header.split(",")]
    rows = [[s if h == "site" else str(k % 2) if h == "y" else str(k) for h in names] for k, s in enumerate("nnnnssss")]
    with pytest.raises(ValueError, match=match):
        read_sites(write(tmp_path / "dup.csv", header + "\n" + "".join(",".join(r) + "\n" for r in rows)))


def test_site_and_label_column_must_differ_and_a_missing_column_is_named_briefly(tmp_path):
    path = write(tmp_path / "t.csv", "site,a,y\nn,1,0\nn,2,1\ns,1,0\ns,2,1\n")
    with pytest.raises(ValueError, match="the site column and the label column are both 'y'"):
        read_sites(path, "y", "y")
    with pytest.raises(ValueError, match=r"no column 'Site' \(there is 'site': names are case-sensitive\)"):
        read_sites(path, "Site", "y")
    wide = write(tmp_path / "w.csv", ",".join(["site"] + [f"f{j}" for j in range(5000)] + ["y"]) + "\n")
    with pytest.raises(ValueError, match=r"no column 'hospital'; columns: site, f0, .*\(5002 in all\)") as info:
        read_sites(wide, "hospital", "y")
    assert len(str(info.value)) < 400


def test_a_semicolon_separated_file_gets_a_hint(tmp_path):
    path = write(tmp_path / "excel.csv", "site;a;y\nn;1,5;0\n")
    with pytest.raises(ValueError, match="separated by ';'"):
        read_sites(path)


def test_a_utf8_bom_is_stripped(tmp_path):
    text = "site,a,y\nn,1,0\nn,2,1\ns,1,0\ns,3,1\n"
    plain, bom = read_sites(write(tmp_path / "plain.csv", text)), read_sites(write(tmp_path / "bom.csv", text, encoding="utf-8-sig"))
    assert (tmp_path / "bom.csv").read_bytes().startswith(b"\xef\xbb\xbf")
    assert [s[3] for s in bom] == [s[3] for s in plain] == [["a"], ["a"]]
    for p, b in zip(plain, bom, strict=True):
        np.testing.assert_array_equal(p[1], b[1])


# ---- values ---------------------------------------------------------------------------------------------------


def huge_row_csv(tmp_path: Path, cell: str = "1e308", column: int = 1) -> Path:
    rng = np.random.default_rng(0)
    lines = ["site,a,b,y"]
    for s in ("north", "south", "east"):
        for _ in range(20):
            a, b = rng.normal(size=2)
            lines.append(f"{s},{a:.4f},{b:.4f},{int(a > 0)}")
    cells = lines[5].split(",")
    cells[column] = cell
    lines[5] = ",".join(cells)  # line 6 of the file, at site north
    return write(tmp_path / "huge.csv", "\n".join(lines) + "\n")


def test_one_row_of_1e308_is_refused_naming_file_column_line_and_fix(tmp_path):
    # the audit: this row overflowed the federated standardisation and every site scored AUC 0.500
    with pytest.raises(ValueError, match=r"huge\.csv line 6: column 'a' holds 1e\+308, beyond ±1e\+15 .*rescale") as info:
        load_table(huge_row_csv(tmp_path), standardise="federated")
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"huge\.csv line 6: column 'y' holds -2e\+16"):
        read_sites(huge_row_csv(tmp_path, "-2e16", 3))


@pytest.mark.parametrize(("cell", "match"), [
    ("inf", r"line 6: column 'a' holds 'inf', not a finite number"),
    ("-Infinity", r"holds '-Infinity', not a finite number"),
    ("nan", r"holds 'nan', not a finite number"),
    ("1_000", r"holds '1_000', not a number"),
    (f"{MAX_ABS_VALUE * 1.5:g}", r"beyond ±1e\+15"),
])
def test_non_finite_and_misreadable_cells_are_refused(tmp_path, cell, match):
    with pytest.raises(ValueError, match=match):
        read_sites(huge_row_csv(tmp_path, cell))


def test_values_up_to_the_bound_are_read(tmp_path):
    sites = read_sites(huge_row_csv(tmp_path, f"{-MAX_ABS_VALUE:g}"))
    assert min(s[1].min() for s in sites) == -MAX_ABS_VALUE


def test_npz_site_values_are_checked_too(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10, 3))
    X[7, 2] = 1e308
    np.savez(tmp_path / "a.npz", X=X, y=np.arange(10) % 2)
    with pytest.raises(ValueError, match=r"a\.npz: X\[7, 2\] \(column x2\) holds 1e\+308"):
        read_sites(tmp_path, None, "y")
    X[7, 2] = np.nan
    np.savez(tmp_path / "a.npz", X=X, y=np.arange(10) % 2)
    with pytest.raises(ValueError, match=r"a\.npz: X\[7, 2\] \(column x2\) holds nan"):
        read_sites(tmp_path, None, "y")


@pytest.mark.parametrize("standardise", ["federated", "per_client"])
def test_standardisation_of_huge_finite_values_is_refused_without_a_numpy_warning(standardise):
    rng = np.random.default_rng(0)
    arrays = [(rng.normal(size=(20, 3)), np.arange(20) % 2, rng.normal(size=(5, 3)), np.arange(5) % 2) for _ in range(3)]
    arrays[1][0][4, 1] = 1e308
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=rf"standardise='{standardise}' overflows in feature column 1: client 1 holds 1e\+308; rescale"):
            Federation.from_arrays(arrays, standardise=standardise)
        arrays[1][0][4, 1] = 1e160  # its square overflows, the value does not
        with pytest.raises(ValueError, match="overflows in feature column 1"):
            Federation.from_arrays(arrays, standardise=standardise)
        arrays[1][0][4, 1] = 1e100  # large but representable: standardised as before
        fed = Federation.from_arrays(arrays, standardise=standardise)
        assert all(np.isfinite(c.X_train).all() and np.isfinite(c.X_test).all() for c in fed.clients)


def test_a_huge_test_value_against_a_tiny_training_spread_is_refused_without_a_warning():
    train = np.zeros((6, 1))
    train[:3, 0] = 1e-150  # a spread of 5e-151 (a smaller one would underflow to 0 in the squares)
    clients = [federation_module.ClientData(train, np.arange(6) % 2, np.array([[1e300]]), np.array([0]), 0)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="overflows in feature column 0: client 0 holds 1e\\+300"):
            federation_module.standardise_clients(clients, "per_client")


def test_feature_scale_warning_on_extreme_spans_raises_no_numpy_warning():
    X = np.column_stack([np.linspace(0, 1e-300, 10), np.linspace(0, 1e-300, 10), np.linspace(0, 1e300, 10)])
    client = federation_module.ClientData(X, np.arange(10) % 2, X[:2], np.array([0, 1]), 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = feature_scale_problem([client])
    assert text is not None and "differ by inf×" not in text and "columns 2 and" in text


# ---- oversized input ------------------------------------------------------------------------------------------


def test_a_field_over_the_csv_limit_is_one_clean_error(tmp_path):
    path = write(tmp_path / "long.csv", "site,a,y\nn,1,0\nn," + "1" * 200_000 + ",1\ns,1,0\n")
    with pytest.raises(ValueError, match=r"long\.csv line 3: a field is longer than 131,072 characters") as info:
        read_sites(path)
    assert "\n" not in str(info.value) and info.value.__cause__ is None


def test_more_columns_than_the_limit_are_refused_before_any_row_is_read(tmp_path):
    path = write(tmp_path / "wide.csv", ",".join(f"c{j}" for j in range(MAX_COLUMNS + 1)) + "\nnot,a,row\n")
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=rf"wide\.csv: {MAX_COLUMNS + 1:,} columns; at most {MAX_COLUMNS:,}"):
        read_sites(path, None, "c0")
    assert time.perf_counter() - t0 < 10


def test_more_values_than_the_limit_are_refused_naming_the_line(tmp_path, monkeypatch):
    monkeypatch.setattr(tables, "MAX_VALUES", 10)
    path = write(tmp_path / "long.csv", "site,a,b,y\n" + "".join(f"{s},1,2,{i % 2}\n" for s in "ns" for i in range(3)))
    with pytest.raises(ValueError, match=r"long\.csv line 4: more than 10 values"):
        read_sites(path)


def _parse_seconds(tmp_path: Path, d: int) -> float:
    path = tmp_path / f"wide{d}.csv"
    names = ["site"] + [f"f{j}" for j in range(d)] + ["y"]
    write(path, ",".join(names) + "\n" + "".join(",".join([s] + ["1"] * d + [str(i % 2)]) + "\n" for s in "ab" for i in range(2)))
    best = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        sites = read_sites(path)
        best = min(best, time.perf_counter() - t0)
    assert sites[0][1].shape == (2, d)
    return best


def test_header_parsing_is_linear_in_the_number_of_columns(tmp_path):
    # quadratic before (header.index per feature): 40,000 columns took 8 s here, 80,000 took 34 s
    small, large = _parse_seconds(tmp_path, 10_000 - 2), _parse_seconds(tmp_path, MAX_COLUMNS - 2)  # 10^4 and 10^5 columns
    assert large < 30 * small + 0.5, (small, large)
    assert large < 15, large


# ---- the heart-disease reader ---------------------------------------------------------------------------------


HEART_ROW = "63.0,1.0,1.0,145.0,233.0,1.0,2.0,150.0,0.0,2.3,3.0,0.0,6.0,0\n"


def test_heart_disease_site_files_reject_huge_values_and_read_a_bom(tmp_path):
    X, num = read_site(write(tmp_path / "bom.data", HEART_ROW * 3, encoding="utf-8-sig"))
    assert X.shape == (3, 13) and num.tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match=r"big\.data line 2: column 'chol' holds 1e\+308"):
        read_site(write(tmp_path / "big.data", HEART_ROW + HEART_ROW.replace("233.0", "1e308")))
    with pytest.raises(ValueError, match=r"text\.data line 1: not ASCII text \('６'\)"):
        read_site(write(tmp_path / "text.data", HEART_ROW.replace("63.0", "６３")))


# ---- the command line -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "message"), [
    ("site,a,a,y\nn,1,2,0\nn,2,3,1\ns,1,2,0\ns,2,3,1\n", "duplicate column name(s) 'a'"),
    ("site,a,y\nn,1,0\nn,1e308,1\ns,1,0\ns,2,1\n", "bad.csv line 3: column 'a' holds 1e+308"),
    ("site,a,y\nn,1,0\nn," + "2" * 200_000 + ",1\n", "bad.csv line 3: a field is longer than 131,072 characters"),
], ids=["duplicate-header", "1e308", "200k-field"])
def test_cli_reports_bad_tables_in_one_line_with_exit_2(tmp_path, text, message):
    path = write(tmp_path / "bad.csv", text)
    res = CliRunner().invoke(app, ["run", "--data", str(path), "--rounds", "1", "--method", "fedavg"])
    assert res.exit_code == 2, res.output
    out = " ".join(res.output.split())
    assert message in out and "Traceback" not in out


def test_a_flower_nodes_own_data_path_gets_the_same_value_checks(tmp_path):
    pytest.importorskip("flwr")
    from topofl.flower.node import node_data

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(20, 3)), (rng.random(20) > 0.5).astype(float)
    good = tmp_path / "site.npz"
    np.savez(good, X_train=X, y_train=y, X_test=X[:5], y_test=y[:5])
    data, _, _ = node_data({"partition-id": 0, "data-path": str(good)}, {})
    assert data.X_train.shape == (20, 3)
    X[7, 2] = 1e308   # one absurd value at one site used to flatten every site's standardised column
    bad = tmp_path / "huge.npz"
    np.savez(bad, X_train=X, y_train=y, X_test=X[:5], y_test=y[:5])
    with pytest.raises(ValueError, match=r"huge.npz.*train split.*X\[7, 2\].*1e\+308"):
        node_data({"partition-id": 0, "data-path": str(bad)}, {})


def test_the_scale_check_is_made_once_per_set_of_clients(monkeypatch):
    """A federation run by many methods and seeds checks its feature scales once (issue 25); a federation whose
    clients change (the continual scenario's rounds) is checked again, and the warning is the same every run."""
    import warnings

    import topofl
    from topofl.data import federation as fed_module

    calls = []
    real = fed_module.feature_scale_problem
    monkeypatch.setattr(fed_module, "feature_scale_problem", lambda clients: calls.append(1) or real(clients))
    rng = np.random.default_rng(0)
    sites = []
    for _ in range(3):
        X = rng.normal(size=(30, 3)) * np.array([1.0, 1.0, 1e4])
        sites.append((X, (X[:, 0] > 0).astype(float), X[:8], (X[:8, 0] > 0).astype(float)))
    fed = Federation.from_arrays(sites)
    for seed in (0, 1):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            topofl.simulate(fed, "fedavg", rounds=1, seed=seed)
        assert any("feature ranges differ by" in str(w.message) for w in caught)
    assert len(calls) == 1
    fed.clients = tuple(fed.clients[:2])  # other clients: checked again
    assert fed.scale_problem() is not None and len(calls) == 2
    clients = list(fed.clients)  # one client replaced in place in the list: checked again
    X = clients[0].X_train / np.array([1.0, 1.0, 1e4])
    clients[0] = type(clients[0])(X, clients[0].y_train, X[:8], clients[0].y_test, clients[0].client_id)
    fed.clients = clients
    fed.scale_problem()
    fed.clients[1] = type(clients[1])(X, clients[1].y_train, X[:8], clients[1].y_test, clients[1].client_id)
    assert fed.scale_problem() is None and len(calls) == 4


def test_the_rows_to_predict_on_name_an_overlong_field_as_the_training_file_does(tmp_path):
    """The two CSV readers share one opening and one set of error messages: a field beyond the CSV reader's limit
    in the rows given to ``topofl predict`` is named as in a training file, not as a bare CSV error."""
    from topofl.data.loaders.tables import read_prediction_rows

    path = tmp_path / "rows.csv"
    path.write_text("a,b\n1,2\n1," + "2" * 200_000 + "\n")
    with pytest.raises(ValueError, match=r"rows\.csv line 3: a field is longer than 131,072 characters"):
        read_prediction_rows(path, ["a", "b"], None, None)
