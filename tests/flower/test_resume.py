"""A killed ServerApp resumes from its last checkpoint (resume-dir) with the files and metrics of a
run that never stopped; a torn or altered checkpoint is refused, and nothing is changed."""
from __future__ import annotations

import csv
import io
import json
import logging
import pickle
from pathlib import Path

import pytest

pytest.importorskip("flwr")

import topofl.flower.server_app as server_app  # noqa: E402
from fake_grid import FakeGrid  # noqa: E402
from topofl.flower.checkpoint import MANIFEST, RESULT_FILES, load_checkpoint  # noqa: E402
from topofl.flower.server_app import federated_main, run  # noqa: E402
from topofl.flower.settings import FlowerSettings  # noqa: E402

SMALL = {"n_clients": 4, "adversarial": (1,)}
ROUNDS = 4


class Killed(BaseException):
    """What kill -9 of the ServerApp looks like from inside: nothing after it runs (no except Exception catches it)."""


def settings(method: str, **kw) -> FlowerSettings:
    return FlowerSettings(**{"method": method, "rounds": ROUNDS, "seed": 2, "scenario_params": SMALL, "out_dir": "out", **kw})


def killed_at(grid: FakeGrid, rnd: int, message_type: str) -> FakeGrid:
    """The ServerApp dies as it sends round ``rnd``'s ``message_type`` messages."""
    send = grid.send_and_receive

    def dying(messages, *, timeout=None):
        messages = list(messages)
        if any(m.metadata.group_id == str(rnd) and m.metadata.message_type == message_type for m in messages):
            raise Killed
        return send(messages, timeout=timeout)

    grid.send_and_receive = dying  # type: ignore[method-assign]
    return grid


def files(run_dir: Path) -> dict[str, bytes]:
    out = {name: (run_dir / name).read_bytes() for name in RESULT_FILES if (run_dir / name).exists()}
    result = json.loads((run_dir / "result.json").read_text())
    out["result.json"] = json.dumps({k: result[k] for k in ("method", "rounds", "final", "clients", "failures")}, sort_keys=True).encode()
    return out


def reference(tmp_path: Path, method: str) -> dict[str, bytes]:
    h = federated_main(FakeGrid(4), settings(method), run_id="ref", root=tmp_path / "ref")
    return files(Path(h.out_dir))


def only_run(root: Path) -> Path:
    (d,) = (root / "out").iterdir()
    return d


@pytest.mark.parametrize("method", ["fedavg", "ptopofl", "scaffold", "ditto", "pfedme", "fedprox", "local", "perfedavg", "ifca"])
@pytest.mark.parametrize("stage", ["train", "evaluate"])
def test_resume_after_a_kill_equals_the_run_that_never_stopped(tmp_path, method, stage):
    """Killed as it sends round 3's fit (nodes untouched) or evaluate (nodes already trained round 3);
    the SuperNodes keep their state, so even stateful clients (Ditto, SCAFFOLD, Local) continue
    exactly: each node restores its state as of before the message the server sends again."""
    grid = killed_at(FakeGrid(4), 3, stage)
    root = tmp_path / "run"
    with pytest.raises(Killed):
        federated_main(grid, settings(method), run_id="a", root=root)
    run_dir = only_run(root)
    assert not (run_dir / "result.json").exists()
    assert json.loads((run_dir / MANIFEST).read_text())["round"] == 2
    grid.send_and_receive = FakeGrid.send_and_receive.__get__(grid)  # the same SuperNodes, a new ServerApp
    h = federated_main(grid, FlowerSettings(resume_dir="out/run-a"), run_id="b", root=root)
    assert h.out_dir == str(run_dir) and [r.round for r in h.rounds] == [1, 2, 3, 4]
    assert files(run_dir) == reference(tmp_path, method)
    assert not (run_dir / MANIFEST).exists() and not list(run_dir.glob("checkpoint-*.pkl"))  # finished: result.json is the record


def test_rows_written_after_the_last_checkpoint_are_redone_not_duplicated(tmp_path, monkeypatch):
    """Killed after round 3's rows reached the files but before its checkpoint: resuming cuts them off and redoes round 3."""
    save = server_app.save_checkpoint

    def dying(run_dir, rnd, *args):
        if rnd == 3:
            raise Killed
        save(run_dir, rnd, *args)

    monkeypatch.setattr(server_app, "save_checkpoint", dying)
    root = tmp_path / "run"
    grid = FakeGrid(4)
    with pytest.raises(Killed):
        federated_main(grid, settings("ptopofl"), run_id="a", root=root)
    run_dir = only_run(root)
    assert sum(1 for _ in (run_dir / "curves.csv").open()) == 1 + 3  # round 3 is on disk, not checkpointed
    monkeypatch.setattr(server_app, "save_checkpoint", save)
    federated_main(grid, FlowerSettings(resume_dir=str(run_dir)), root=root)
    assert files(run_dir) == reference(tmp_path, "ptopofl")


STATELESS = ("fedavg", "fedprox", "ifca", "perfedavg")
RECOVERY = {"scaffold": "c_i restarts at 0", "ditto": "personal model v_k restarts", "local": "local model restarts",
            "pfedme": "recomputed by its next fit", "ptopofl": "recomputes its descriptor"}


@pytest.mark.parametrize("method", [*STATELESS, *RECOVERY])
def test_resume_on_new_supernodes_is_exact_without_client_state_and_says_how_a_client_recovers(tmp_path, caplog, method):
    """A resumed run reaching SuperNodes that lost their state (a new Flower run): methods whose
    clients keep no state resume exactly; the others log, per client, what their method does."""
    root = tmp_path / "run"
    with pytest.raises(Killed):
        federated_main(killed_at(FakeGrid(4), 3, "train"), settings(method), run_id="a", root=root)
    with caplog.at_level(logging.WARNING, logger="topofl.flower.node"):
        federated_main(FakeGrid(4), FlowerSettings(resume_dir="out/run-a"), root=root)
    lost = [r.getMessage() for r in caplog.records if "has no state of this job before round 3 fit" in r.getMessage()]
    if method in STATELESS:
        assert not lost
        assert files(only_run(root)) == reference(tmp_path, method)
    else:
        assert len(lost) == 4 and all(RECOVERY[method] in m for m in lost), lost
    if method == "ptopofl":  # the same descriptor, recomputed and sent again: equal metrics, 48 more floats up in round 3
        got, want = (list(csv.DictReader(io.StringIO(f["rounds.csv"].decode()))) for f in (files(only_run(root)), reference(tmp_path, method)))
        assert [(r["auc"], r["accuracy"], r["loss"]) for r in got] == [(r["auc"], r["accuracy"], r["loss"]) for r in want]
        assert [int(a["floats_up"]) - int(b["floats_up"]) for a, b in zip(got, want, strict=True)] == [0] * 8 + [48] * 4 + [0] * 4


def test_resume_takes_the_checkpointed_settings_and_refuses_what_it_cannot_trust(tmp_path, caplog, monkeypatch):
    root = tmp_path / "run"
    grid = killed_at(FakeGrid(4), 3, "train")
    with pytest.raises(Killed):
        federated_main(grid, settings("fedavg"), run_id="a", root=root)
    run_dir = only_run(root)
    with pytest.raises(ValueError, match="outside the results root"):
        federated_main(FakeGrid(4), FlowerSettings(resume_dir=str(tmp_path)), root=root)
    with pytest.raises(ValueError, match="cannot be resumed"):
        run(FakeGrid(4), FlowerSettings(method="dfedu", resume_dir="out/run-a"), root=root)
    reconcile = server_app.reconcile

    def one_more_feature(*args, **kw):  # the SuperNodes now declare one more feature than the checkpointed run's
        task, n_classes, n_features, left_out = reconcile(*args, **kw)
        return task, n_classes, n_features + 1, left_out

    with monkeypatch.context() as m:
        m.setattr(server_app, "reconcile", one_more_feature)
        with pytest.raises(ValueError, match=r"other data than the checkpointed run \(n_features: 20 → 21\)"):
            federated_main(FakeGrid(4), FlowerSettings(resume_dir="out/run-a"), root=root)
    pristine = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    # a torn results file: shorter than at the checkpoint
    (run_dir / "rounds.csv").write_bytes(pristine["rounds.csv"][:-5])
    with pytest.raises(ValueError, match="rounds.csv: its first .* bytes are not those of the checkpoint after round 2"):
        load_checkpoint(run_dir)
    (run_dir / "rounds.csv").write_bytes(pristine["rounds.csv"])
    # an altered pickle
    manifest = json.loads((run_dir / MANIFEST).read_text())
    blob = run_dir / manifest["pickle"]
    blob.write_bytes(pickle.dumps({"state": None}))
    with pytest.raises(ValueError, match="SHA-256 differs"):
        federated_main(FakeGrid(4), FlowerSettings(resume_dir="out/run-a"), root=root)
    blob.write_bytes(pristine[manifest["pickle"]])
    (run_dir / MANIFEST).write_text("{not json")
    with pytest.raises(ValueError, match="not a readable checkpoint manifest"):
        load_checkpoint(run_dir)
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.name != MANIFEST} == {k: v for k, v in pristine.items() if k != MANIFEST}
    (run_dir / MANIFEST).write_bytes(pristine[MANIFEST])
    # the resuming run's own settings are ignored (named in a warning), the checkpoint's are used
    with caplog.at_level(logging.WARNING, logger="topofl.flower.server_app"):
        h = federated_main(FakeGrid(4), FlowerSettings(resume_dir="out/run-a", method="ditto", rounds=9), root=root)
    assert h.method == "fedavg" and len(h.rounds) == ROUNDS
    assert [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()] == [
        "resume-dir: the resumed run keeps its own settings; ignored: method, rounds"]
    with pytest.raises(ValueError, match="that run finished"):
        federated_main(FakeGrid(4), FlowerSettings(resume_dir="out/run-a"), root=root)
