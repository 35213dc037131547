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
    return FlowerSettings.from_flat(**{"method": method, "rounds": ROUNDS, "seed": 2, "scenario_params": SMALL, "out_dir": "out", **kw})


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


def with_state_dir(root: Path) -> FakeGrid:
    """SuperNodes that keep their client state on disk (node config state-dir), as a new Flower run finds it."""
    return FakeGrid(4, node_config=lambda k: {"state-dir": str(root / f"node-{k}")})


@pytest.mark.parametrize("method", ["fedavg", "ptopofl", "scaffold", "ditto", "pfedme", "fedprox", "local", "perfedavg", "ifca"])
@pytest.mark.parametrize("stage", ["train", "evaluate"])
def test_resume_after_a_kill_equals_the_run_that_never_stopped(tmp_path, method, stage):
    """Killed as it sends round 3's fit (nodes untouched) or evaluate (nodes already trained round 3).
    The resumed run is a new Flower run: new node contexts, as Flower gives; the SuperNodes keep
    their client state on disk (state-dir), so even stateful clients (Ditto, SCAFFOLD, Local)
    continue exactly: each node restores its state as of before the message the server sends again."""
    root, nodes = tmp_path / "run", tmp_path / "nodes"
    with pytest.raises(Killed):
        federated_main(killed_at(with_state_dir(nodes), 3, stage), settings(method), run_id="a", root=root)
    run_dir = only_run(root)
    assert not (run_dir / "result.json").exists()
    assert json.loads((run_dir / MANIFEST).read_text())["round"] == 2
    h = federated_main(with_state_dir(nodes), FlowerSettings.from_flat(resume_dir="out/run-a"), run_id="b", root=root)
    assert h.out_dir == str(run_dir) and [r.round for r in h.rounds] == [1, 2, 3, 4]
    assert files(run_dir) == reference(tmp_path, method)
    assert not (run_dir / MANIFEST).exists() and not list(run_dir.glob("checkpoint-*.pkl"))  # finished: result.json is the record
    # a fresh run with the same settings never picks up that lineage's state from the nodes' disks
    again = federated_main(with_state_dir(nodes), settings(method), run_id="c", root=tmp_path / "again")
    assert files(Path(again.out_dir)) == reference(tmp_path, method)


def test_node_state_on_disk_keeps_the_last_snapshots_and_refuses_a_bad_state_dir(tmp_path):
    from flwr.app import RecordDict

    from topofl.flower.records import SNAPSHOTS_KEPT, load_round_state, save_round_state, state_dir

    d, st = tmp_path / "n", RecordDict()
    for seq in range(2, 9):
        save_round_state(st, "job", seq, {"seq": seq}, d)
    assert sorted(p.name for p in (d / "job").iterdir()) == [f"seq-{s}.pkl" for s in range(9 - SNAPSHOTS_KEPT, 9)]
    assert load_round_state(st, "job", 8, d) == ({"seq": 7}, True)
    assert load_round_state(st, "job", 6, d) == ({}, False)  # older than what is kept
    save_round_state(st, "job", 7, {"seq": "7 again"}, d)  # a message sent again: later snapshots go
    assert sorted(p.name for p in (d / "job").iterdir()) == ["seq-6.pkl", "seq-7.pkl"]
    assert load_round_state(st, "other-job", 9, d) == ({}, False)
    assert state_dir({}) is None and state_dir({"state-dir": str(d)}) == d
    with pytest.raises(ValueError, match="state-dir must be a directory path; got 3"):
        state_dir({"state-dir": 3})
    # in context.state (no state-dir) a node holds its state after its last message only
    save_round_state(st, "job", 4, {"seq": 4})
    assert load_round_state(st, "job", 5) == ({"seq": 4}, True) and load_round_state(st, "job", 4) == ({}, False)


def test_rows_written_after_the_last_checkpoint_are_redone_not_duplicated(tmp_path, monkeypatch):
    """Killed after round 3's rows reached the files but before its checkpoint: resuming cuts them off and redoes round 3."""
    save = server_app.save_checkpoint

    def dying(run_dir, rnd, *args):
        if rnd == 3:
            raise Killed
        save(run_dir, rnd, *args)

    monkeypatch.setattr(server_app, "save_checkpoint", dying)
    root = tmp_path / "run"
    with pytest.raises(Killed):
        federated_main(with_state_dir(tmp_path / "nodes"), settings("ptopofl"), run_id="a", root=root)
    run_dir = only_run(root)
    assert sum(1 for _ in (run_dir / "curves.csv").open()) == 1 + 3  # round 3 is on disk, not checkpointed
    monkeypatch.setattr(server_app, "save_checkpoint", save)
    federated_main(with_state_dir(tmp_path / "nodes"), FlowerSettings.from_flat(resume_dir=str(run_dir)), root=root)
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
        federated_main(FakeGrid(4), FlowerSettings.from_flat(resume_dir="out/run-a"), root=root)
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
        federated_main(FakeGrid(4), FlowerSettings.from_flat(resume_dir=str(tmp_path)), root=root)
    with pytest.raises(ValueError, match="cannot be resumed"):
        run(FakeGrid(4), FlowerSettings.from_flat(method="dfedu", resume_dir="out/run-a"), root=root)
    reconcile = server_app.reconcile

    def one_more_feature(*args, **kw):  # the SuperNodes now declare one more feature than the checkpointed run's
        task, n_classes, n_features, left_out = reconcile(*args, **kw)
        return task, n_classes, n_features + 1, left_out

    with monkeypatch.context() as m:
        m.setattr(server_app, "reconcile", one_more_feature)
        with pytest.raises(ValueError, match=r"other data than the checkpointed run \(n_features: 20 → 21\)"):
            federated_main(FakeGrid(4), FlowerSettings.from_flat(resume_dir="out/run-a"), root=root)
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
        federated_main(FakeGrid(4), FlowerSettings.from_flat(resume_dir="out/run-a"), root=root)
    blob.write_bytes(pristine[manifest["pickle"]])
    (run_dir / MANIFEST).write_text("{not json")
    with pytest.raises(ValueError, match="not a readable checkpoint manifest"):
        load_checkpoint(run_dir)
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.name != MANIFEST} == {k: v for k, v in pristine.items() if k != MANIFEST}
    (run_dir / MANIFEST).write_bytes(pristine[MANIFEST])
    # the resuming run's own settings are ignored (named in a warning), the checkpoint's are used
    with caplog.at_level(logging.WARNING, logger="topofl.flower.server_app"):
        h = federated_main(FakeGrid(4), FlowerSettings.from_flat(resume_dir="out/run-a", method="ditto", rounds=9), root=root)
    assert h.method == "fedavg" and len(h.rounds) == ROUNDS
    assert [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()] == [
        "resume-dir: the resumed run keeps its own settings; ignored: method, rounds"]
    with pytest.raises(ValueError, match="that run finished"):
        federated_main(FakeGrid(4), FlowerSettings.from_flat(resume_dir="out/run-a"), root=root)


def test_a_resume_keeps_the_checkpointed_clients_and_changes_nothing_when_it_fails(tmp_path):
    from topofl.flower.checkpoint import run_lock

    def node3_dead(grid: FakeGrid) -> FakeGrid:
        grid.dead.add(grid.node_ids[3])
        return grid

    root = tmp_path / "run"
    with pytest.raises(Killed):  # client 3's node is down during the original run
        federated_main(killed_at(node3_dead(FakeGrid(4)), 3, "train"), settings("fedavg"), run_id="a", root=root)
    run_dir = only_run(root)
    # a ServerApp still writing the run (it holds the lock): a resume is refused
    with run_lock(run_dir), pytest.raises(ValueError, match="another ServerApp is still writing that run"):
        federated_main(FakeGrid(4), FlowerSettings.from_flat(resume_dir="out/run-a"), root=root)
    # a resume that fails (no node answers) leaves every file as it was
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    nobody = FakeGrid(4)
    nobody.dead.update(nobody.node_ids)
    with pytest.raises(RuntimeError, match="no SuperNode answered"):
        federated_main(nobody, FlowerSettings.from_flat(resume_dir="out/run-a"), root=root)
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before
    # client 3's node is back: it is not a client of the checkpointed run, so it is left out, and
    # the run ends as the uninterrupted run without it
    h = federated_main(FakeGrid(4), FlowerSettings.from_flat(resume_dir="out/run-a"), root=root)
    assert [(f.client, f.stage) for f in h.failures if f.stage == "resume-discover"] == [(3, "resume-discover")]
    ref = federated_main(node3_dead(FakeGrid(4)), settings("fedavg"), run_id="ref", root=tmp_path / "ref")
    for name in ("rounds.csv", "curves.csv", "server_log.jsonl"):
        assert (run_dir / name).read_bytes() == (Path(ref.out_dir) / name).read_bytes(), name
    assert json.loads((run_dir / "result.json").read_text())["clients"] == [0, 1, 2]
