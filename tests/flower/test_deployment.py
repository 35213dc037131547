"""The topofl Flower app, end to end, on a loopback Flower deployment.

A real ``flower-superlink`` and real ``flower-supernode`` processes (one per client,
``partition-id`` in their node config) run ``examples/flower-app`` through
``flwr run``. The end-to-end tests are slow (Flower starts a fresh ``flwr-clientapp``
process per message): 50-80 s each on 2 cores.
"""
from __future__ import annotations

import csv
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flwr")

pytestmark = pytest.mark.flower

RUN_TIMEOUT = 300.0  # s per `flwr run`; a 2-round run takes 50-80 s on 2 cores
N_CLIENTS = 3
# healthcare poisons clients 1 and 5 by default: keep the adversary among 3 clients
SCENARIO_PARAMS = f"n_clients={N_CLIENTS},adversarial=(1,)"


def test_config_formatting() -> None:
    from topofl.flower.deployment import format_config, toml_document

    assert format_config({"partition-id": 0, "num-partitions": 3, "data-path": "/d/a b.npz"}) == (
        'partition-id=0 num-partitions=3 data-path="/d/a b.npz"'
    )
    assert format_config({"x": 'say "hi"', "ok": True, "lr": 0.5}) == "x='say \"hi\"' ok=true lr=0.5"
    with pytest.raises(ValueError):
        format_config({"bad key": 1})
    text = toml_document({"method": "sheaf", "scenario-params": "n_clients=3,adversarial=(1,)",
                          "round-timeout": 20.0, "num-server-rounds": 2, "pooled-metrics": False})
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    assert tomllib.loads(text) == {"method": "sheaf", "scenario-params": "n_clients=3,adversarial=(1,)",
                                   "round-timeout": 20.0, "num-server-rounds": 2, "pooled-metrics": False}


def test_local_deployment_starts_kills_and_stops_every_process(flower_deployment_factory: Any) -> None:
    from topofl.flower.deployment import _alive

    dep = flower_deployment_factory(2)
    assert len(set(dep.node_ids)) == 2 and None not in dep.node_ids
    assert set(dep.pids) == {"superlink", "supernode-0", "supernode-1"}
    assert (dep.cli_home / "config.toml").read_text().count(dep.address) == 1
    node_tree = {p for p, _ in dep.nodes[1].collect()}
    assert len(node_tree) >= 2  # the SuperNode and its flower-superexec
    dep.kill_node(1)
    assert not dep.nodes[1].alive() and dep.nodes[0].running
    everything = set().union(*(proc.collect() for proc in dep.processes))  # (pid, start time)
    dep.stop()
    assert [ident for ident in everything if _alive(ident)] == []


def test_example_app_config_matches_settings(flower_app_dir: Path) -> None:
    """examples/flower-app declares exactly the run-config keys topofl reads, same defaults."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    from topofl.flower.settings import KEYS

    app = tomllib.loads((flower_app_dir / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    assert app["components"] == {
        "serverapp": "topofl_flower_app.server_app:app",
        "clientapp": "topofl_flower_app.client_app:app",
    }
    config = app["config"]
    assert set(config) == set(KEYS)
    for key, (_, default, _) in KEYS.items():
        assert config[key] == default and type(config[key]) is type(default), key


def _run_dir(parent: Path) -> Path:
    """The one fresh ``run-<id>`` directory a run wrote under ``parent``."""
    dirs = sorted(parent.glob("run-*"))
    assert len(dirs) == 1, f"expected one run directory in {parent}; got {dirs}"
    return dirs[0]


def _result(out_dir: Path) -> dict[str, Any]:
    path = out_dir / "result.json"
    assert path.is_file(), f"no {path}; out-dir holds {sorted(p.name for p in out_dir.glob('*'))}"
    return json.loads(path.read_text())


def _rounds_csv(out_dir: Path) -> list[dict[str, str]]:
    path = out_dir / "rounds.csv"
    if not path.is_file():
        return []
    with path.open(newline="") as fh:  # skip a line still being written
        return [row for row in csv.DictReader(fh) if None not in row.values()]


def _accuracy_ok(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and 0.0 <= value <= 1.0


def _check_run(result: Any, out_dir: Path, method: str, rounds: int) -> dict[str, Any]:
    """Common checks of a finished run; returns result.json."""
    assert result.ok, (
        f"flwr run: exit {result.returncode}, status {result.status}\n{result.stdout[-4000:]}"
    )
    res = _result(out_dir)
    assert res["method"] == method
    assert res["rounds"] == rounds
    assert sorted(res["clients"]) == list(range(N_CLIENTS))
    assert _accuracy_ok(res["final"]["accuracy"]), res["final"]
    rows = _rounds_csv(out_dir)
    assert rows, "rounds.csv is empty"
    for row in rows:
        assert _accuracy_ok(float(row["accuracy"])), row
        assert math.isfinite(float(row["loss"])), row
    seen_rounds = {int(float(row["round"])) for row in rows}
    assert seen_rounds == set(range(1, rounds + 1))
    return res


@pytest.mark.parametrize(
    ("method", "extra"),
    # gamma=0.3: Sheaf's default edge fraction (0.03) leaves no edge space for the
    # healthcare scenario's 21-parameter models
    [("ptopofl", {}), ("sheaf", {"graph": "ring", "hyperparameters": "gamma=0.3"})],
    ids=["ptopofl", "sheaf"],
)
def test_two_rounds_on_three_supernodes(
    flower_deployment: Any, flower_app_dir: Path, tmp_path: Path, method: str, extra: dict
) -> None:
    out_name = f"out-{method}"
    config = {
        "method": method,
        "num-server-rounds": 2,
        "scenario": "healthcare",
        "scenario-params": SCENARIO_PARAMS,
        "out-dir": out_name,  # inside the deployment's results root
        **extra,
    }
    result = flower_deployment.run(flower_app_dir, config, timeout=RUN_TIMEOUT)
    out_dir = _run_dir(flower_deployment.results_root / out_name)
    res = _check_run(result, out_dir, method, rounds=2)
    assert res["failures"] == []
    for rnd in (1, 2):  # every client reported metrics in every round
        clients = {int(float(r["client"])) for r in _rounds_csv(out_dir) if int(float(r["round"])) == rnd}
        assert clients == set(range(N_CLIENTS)), (rnd, clients)


def test_run_finishes_when_a_supernode_dies(
    flower_deployment_factory: Any, flower_app_dir: Path, tmp_path: Path
) -> None:
    # Heartbeat 10 s: the SuperLink declares the killed node dead within ~20 s;
    # round-timeout bounds a round that waits for it anyway.
    dep = flower_deployment_factory(N_CLIENTS, heartbeat_interval=10.0)
    config = {
        "method": "ptopofl",
        "num-server-rounds": 3,
        "scenario": "healthcare",
        "scenario-params": SCENARIO_PARAMS,
        "out-dir": str(dep.results_root / "out"),  # an absolute path inside the results root
        "round-timeout": 20.0,
    }
    run = dep.submit(flower_app_dir, config)

    deadline = time.monotonic() + RUN_TIMEOUT
    while not list((dep.results_root / "out").glob("run-*/rounds.csv")):
        assert not run.done(), f"run ended before it wrote results:\n{run.output()[-4000:]}"
        assert time.monotonic() < deadline, f"no results directory:\n{run.output()[-4000:]}"
        time.sleep(0.2)
    out_dir = _run_dir(dep.results_root / "out")
    while not any(int(float(r["round"])) == 1 for r in _rounds_csv(out_dir)):
        assert not run.done(), f"run ended before round 1 was written:\n{run.output()[-4000:]}"
        assert time.monotonic() < deadline, f"no round 1 in rounds.csv:\n{run.output()[-4000:]}"
        time.sleep(0.2)
    assert not (out_dir / "result.json").exists(), "run finished before the kill"
    victim = N_CLIENTS - 1
    victim_id = dep.node_ids[victim]
    dep.kill_node(victim)

    result = run.wait(timeout=max(deadline - time.monotonic(), 60.0))
    res = _check_run(result, out_dir, "ptopofl", rounds=3)
    assert res["failures"], "no failure recorded for the killed SuperNode"
    assert any(f.get("node_id") == victim_id for f in res["failures"]), (victim_id, res["failures"])
    assert all(f["round"] >= 2 for f in res["failures"] if f.get("node_id") == victim_id)
