"""Issue 20: a run's done-record is sealed. The audit found that editing ``final.auc`` inside a
valid ``.done.json`` was accepted on resume, so ``summary.csv`` showed 0.889 while ``curves.csv``
said 0.847: the record held each result file's row count and SHA-256, but nothing covered the
record's own content. Now the record carries a seal, a SHA-256 over its canonical JSON (every
field but the seal, the file hashes included); a record whose seal is missing or does not match
is not trusted, and the run is redone with a warning naming the file.
"""
import csv
import json
import logging
import math

import pytest

from topofl.experiments.runs import execute, load_done, run_paths, verified_done, write_done
from topofl.job import Job


def job(experiment, data, method, seed, rounds, **kw):
    """A job given as the experiment runner's runs were: experiment, data, method, seed, rounds."""
    return Job(experiment=experiment, data=data, method=method, seed=seed, rounds=rounds, **kw)


FILES = ("rounds.csv", "curves.csv", "server_log.jsonl")


def specs():
    return [job("t", "healthcare", m, s, 3) for s in (0, 1) for m in ("ptopofl", "fedavg")]


@pytest.fixture
def finished(tmp_path):
    full, cut = tmp_path / "full", tmp_path / "cut"
    return execute(specs(), full), full, cut, execute(specs(), cut)


def last_curve_auc(path) -> float:
    with path.open(newline="") as fh:
        return float(list(csv.DictReader(fh))[-1]["auc"])


def same(a, b) -> bool:
    """Records equal but for their timing (and so their seal); NaN equal to NaN."""
    def strip(r):
        return json.dumps([{k: v for k, v in x.items() if k not in ("seconds", "seal")} for x in r], sort_keys=True)

    return strip(a) == strip(b)


def edit(path, change) -> None:
    """Rewrite a done-record with ``change`` applied, leaving its seal as it was."""
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


def test_an_edited_final_auc_is_caught_and_the_run_redone(finished, caplog):
    full_done, full, cut, _ = finished
    spec = specs()[3]
    paths = run_paths(cut / "runs", spec)
    true_auc = last_curve_auc(paths["curves"])
    assert json.loads(paths["done"].read_text())["final"]["auc"] == pytest.approx(true_auc, abs=1e-9)

    forged = round(true_auc + 0.05, 3)  # the audit's summary showed 0.889 where the curves said 0.847

    def forge(r):
        r["final"]["auc"] = forged

    edit(paths["done"], forge)
    record, reason = verified_done(paths)
    assert record is None and paths["done"].name in reason and "seal" in reason
    with caplog.at_level(logging.WARNING, logger="topofl"):
        records = execute(specs(), cut, resume=True)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and paths["done"].name in warned[0] and "redoing" in warned[0], warned
    assert records[3]["final"]["auc"] == pytest.approx(true_auc, abs=1e-9)
    assert same(records, full_done)  # the redone run is the uninterrupted run
    assert same([json.loads(paths["done"].read_text())], [full_done[3]])
    for name in FILES:
        assert (cut / name).read_bytes() == (full / name).read_bytes(), name


@pytest.mark.parametrize("change", [
    lambda r: r.update(seconds=r["seconds"] + 1),
    lambda r: r["files"]["curves"].update(rows=r["files"]["curves"]["rows"] + 1),
    lambda r: r.update(seed=7),
    lambda r: r.update(extra="field"),
    lambda r: r["final"].pop("auc"),
    lambda r: r["seal"].update(sha256="0" * 64),
    lambda r: r.update(seal="0" * 64),
    lambda r: r["seal"].update(format=99),
], ids=["seconds", "file-rows", "key", "added-field", "removed-metric", "seal-hash", "seal-not-a-table", "seal-format"])
def test_any_change_to_a_record_breaks_its_seal(finished, change):
    _, _, cut, _ = finished
    paths = run_paths(cut / "runs", specs()[0])
    edit(paths["done"], change)
    record, reason = verified_done(paths)
    assert record is None and paths["done"].name in reason and "seal" in reason
    with pytest.raises(ValueError, match=paths["done"].name):
        load_done(cut / "runs", specs()[0])


def test_a_record_from_before_seals_is_redone_with_a_warning(finished, caplog):
    full_done, full, cut, _ = finished
    paths = run_paths(cut / "runs", specs()[1])
    edit(paths["done"], lambda r: r.pop("seal"))
    record, reason = verified_done(paths)
    assert record is None and paths["done"].name in reason and "no seal" in reason and "older topofl" in reason
    with caplog.at_level(logging.WARNING, logger="topofl"):
        records = execute(specs(), cut, resume=True)
    assert paths["done"].name in caplog.text and "redoing" in caplog.text
    assert same(records, full_done) and "seal" in json.loads(paths["done"].read_text())


def test_the_seal_covers_content_not_layout(finished):
    """Re-indenting or re-ordering a record's keys is no edit: the seal is over canonical JSON."""
    _, _, cut, fresh = finished
    paths = run_paths(cut / "runs", specs()[2])
    record = json.loads(paths["done"].read_text())
    paths["done"].write_text(json.dumps(dict(reversed(list(record.items()))), indent=3))
    got, reason = verified_done(paths)
    assert reason is None and json.dumps(got, sort_keys=True) == json.dumps(fresh[2], sort_keys=True) == json.dumps(record, sort_keys=True)


def test_a_fresh_record_equals_the_one_a_resume_reads(finished):
    from topofl.experiments.store import seal_of

    _, _, cut, fresh = finished
    for spec, rec in zip(specs(), fresh, strict=True):
        got, reason = verified_done(run_paths(cut / "runs", spec))
        assert reason is None and json.dumps(got) == json.dumps(rec)
        assert rec["seal"]["sha256"] == seal_of(rec)["sha256"] and len(rec["seal"]["sha256"]) == 64
    assert any(math.isnan(v) for v in fresh[0]["final"].values() if isinstance(v, float))  # NaN survives the seal


def test_write_done_seals_what_it_writes(tmp_path):
    paths = {k: tmp_path / f"r.{k}.{ext}" for k, ext in (("rounds", "csv"), ("curves", "csv"), ("log", "jsonl"), ("done", "json"))}
    for k in ("rounds", "curves"):
        paths[k].write_text("a,b\n1,2\n")
    paths["log"].write_text('{"round": 1}\n')
    rec = write_done(paths, {"final": {"auc": float("nan"), "n": 3}, "client_metrics": {}, "tags": ("x", "y")})
    assert rec["tags"] == ["x", "y"] and set(rec["seal"]) == {"format", "sha256"}
    got, reason = verified_done(paths)
    assert reason is None and json.dumps(got) == json.dumps(rec)
    paths["rounds"].write_text("a,b\n1,3\n")  # a result file edited: its hash, sealed in the record, no longer matches
    got, reason = verified_done(paths)
    assert got is None and "r.rounds.csv" in reason and "SHA-256 differs" in reason
