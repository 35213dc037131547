"""CSV cells of experiment results are plain numbers, whatever scalar type a result carries.

NumPy 2 writes ``repr(np.float64(0.5))`` as ``np.float64(0.5)``; a results cell must read ``0.5``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from topofl.experiments.results import CsvAppender, read_csv, write_csv

FIELDS = ["f64", "f32", "i64", "b", "py", "nan", "np_nan", "np_inf", "text"]
ROW = {
    "f64": np.float64(0.1), "f32": np.float32(0.5), "i64": np.int64(3), "b": np.bool_(True), "py": 0.25,
    "nan": float("nan"), "np_nan": np.float64("nan"), "np_inf": np.float64("inf"), "text": "pTopoFL",
}
WANT = {"f64": "0.1", "f32": "0.5", "i64": "3", "b": "True", "py": "0.25", "nan": "", "np_nan": "", "np_inf": "inf", "text": "pTopoFL"}


def _check(path):
    text = path.read_text()
    assert "np." not in text
    assert text.splitlines()[1] == ",".join(WANT[k] for k in FIELDS)
    (row,) = read_csv(path)
    assert row == WANT
    assert float(row["f64"]) == 0.1 and int(row["i64"]) == 3 and math.isinf(float(row["np_inf"]))


def test_csv_appender_writes_numpy_scalars_as_plain_numbers(tmp_path):
    path = tmp_path / "rows.csv"
    with CsvAppender(path, FIELDS) as app:
        app.write([ROW])
    _check(path)


def test_write_csv_writes_numpy_scalars_as_plain_numbers(tmp_path):
    path = tmp_path / "table.csv"
    write_csv(path, [ROW], FIELDS)
    _check(path)


@pytest.mark.parametrize("value, cell", [
    (np.float64(1 / 3), "0.3333333333"), (np.float32(1 / 3), "0.3333333433"), (1 / 3, "0.3333333333"),
    (np.int32(-7), "-7"), (np.bool_(False), "False"), (np.float16(0.5), "0.5"),
])
def test_numpy_and_python_floats_round_alike(tmp_path, value, cell):
    path = tmp_path / "one.csv"
    write_csv(path, [{"v": value}], ["v"])
    assert path.read_text().splitlines() == ["v", cell]
