"""The topofl Flower app, end to end, on a loopback Flower deployment.

A real ``flower-superlink`` (TLS, SuperNode authentication, on 127.0.0.1 behind the
Fleet-only proxy, unless ``secure=False``) and real ``flower-supernode`` processes (one
per client, ``partition-id`` in their node config) run ``examples/flower-app`` through
``flwr run``. The end-to-end tests are slow (Flower starts a fresh ``flwr-clientapp``
process per message, and rounds have a ~6 s polling floor): 20-90 s each on 2 cores.
"""
from __future__ import annotations

import csv
import json
import math
import os
import re
import signal
import subprocess
import sys
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
    from topofl.deploy.config import format_config, toml_document

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


def _ours(dep: Any) -> list[str]:
    """Command lines of running processes that belong to ``dep`` (its ports or log dir),
    whether or not ``dep`` recorded them: what ``pgrep -af "flower-super|flwr-"`` would
    show of this deployment."""
    import psutil

    ports = "|".join(str(p) for p in [dep.superlink_port, dep.proxy_port, *dep._node_ports] if p is not None)
    mark = re.compile(rf"{re.escape(str(dep.log_dir))}|:({ports})\b")
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            if proc.info["status"] != psutil.STATUS_ZOMBIE and mark.search(cmd):
                found.append(f"{proc.pid} {cmd[:200]}")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_local_deployment_starts_restarts_and_stops_every_process(flower_deployment_factory: Any) -> None:
    """Secure by default; a node killed with SIGKILL comes back with its key and node id
    once the SuperLink has marked it offline, one stopped with SIGTERM at once; stop()
    leaves no process of the deployment behind (recorded or not)."""
    from topofl.deploy.processes import _alive

    # heartbeat 10 s: a SIGKILLed node is offline (may rejoin) after ~20 s, not ~60 s
    dep = flower_deployment_factory(2, heartbeat_interval=10.0)
    assert dep.secure and len(set(dep.node_ids)) == 2 and None not in dep.node_ids
    assert set(dep.pids) == {"superlink", "superexec", "fleet-proxy", "supernode-0", "supernode-1"}
    assert dep.address.startswith("127.0.0.1:") and dep.fleet_address != dep.address
    config = (dep.cli_home / "config.toml").read_text()
    assert config.count(dep.address) == 1 and str(dep.credentials.ca) in config and "insecure" not in config
    superlink_cmd = " ".join(dep.superlink.popen.args)
    for flag in ("--enable-supernode-auth", "--ssl-certfile", "--database", "--isolation process",
                 "--host 127.0.0.1"):
        assert flag in superlink_cmd, flag
    assert dep.node_status() == {nid: "online" for nid in dep.node_ids}
    node_tree = {p for p, _ in dep.nodes[1].collect()}
    assert len(node_tree) >= 2  # the SuperNode and its flower-superexec

    dep.kill_node(1)
    assert not dep.nodes[1].alive() and dep.nodes[0].running
    old_id = dep.node_ids[1]
    dep.restart_node(1)  # waits until `flwr supernode ls` no longer says online, then starts it
    assert dep.nodes[1].running and dep.node_ids[1] == old_id and 1 not in dep.killed
    dep.restart_node(0, sig=signal.SIGTERM)  # said goodbye: rejoins at once, same id
    assert dep.node_status() == {nid: "online" for nid in dep.node_ids}

    everything = set().union(*(proc.collect() for proc in dep._retired + dep.processes))
    assert len({p for p, _ in everything}) >= 9  # restarted processes are tracked too
    dep.stop()
    assert [ident for ident in everything if _alive(ident)] == []
    assert _ours(dep) == []


def test_local_deployment_validates_its_arguments(tmp_path: Path) -> None:
    from topofl.deploy import LocalDeployment

    for kwargs, field in [({"num_nodes": 0}, "num_nodes"), ({"heartbeat_interval": 5.0}, "heartbeat_interval"),
                          ({"host": "localhost"}, "host"), ({"stop_timeout": 0}, "stop_timeout"),
                          ({"node_config": [{}]}, "node_config")]:
        args = {"num_nodes": 2, **kwargs}
        with pytest.raises(ValueError, match=field):
            LocalDeployment(args.pop("num_nodes"), tmp_path, **args)


def test_fleet_proxy_forwards_only_the_fleet_api() -> None:
    from topofl.deploy.proxy_rules import allowed, parse_address

    assert allowed("POST", b"/v1/fleet/pull-messages") is True
    assert allowed("GET", b"/health") is True
    assert allowed("GET", b"/v1/fleet/pull-messages") is False  # 405
    for path in (b"/v1/control/register-node", b"/v1/runtime/acquire-task", b"/v1/fleet/../control/list-nodes",
                 b"/v1/fleet/%2e%2e/control/list-nodes", b"/v1/fleet//x", b"/v1/fleet/", b"/health/x", b"/"):
        assert allowed("POST", path) is None, path
    assert parse_address("127.0.0.1:9093", "x") == ("127.0.0.1", 9093)
    with pytest.raises(ValueError, match="superlink"):
        parse_address("127.0.0.1", "superlink")


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
    # round-timeout bounds a round that waits for it anyway. secure=False: the plain-HTTP
    # opt-out works too.
    dep = flower_deployment_factory(N_CLIENTS, heartbeat_interval=10.0, secure=False)
    assert not dep.secure and dep.fleet_address == dep.address and dep.proxy is None
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


# ------------------------------------------------------------ security and recovery

SMALL_PARAMS = "n_clients=2,adversarial=(1,)"
METRICS = ("auc", "accuracy", "loss")


def _curves(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "curves.csv").open(newline="") as fh:
        return [row for row in csv.DictReader(fh) if None not in row.values()]


def _reference_curves(root: Path, rounds: int, n_clients: int = 2) -> list[dict[str, str]]:
    """curves.csv of the same fedavg run, uninterrupted, in process (the ServerApp's code on
    an in-memory grid: equal to a deployment run, see test_flower_inprocess.py)."""
    from fake_grid import FakeGrid
    from topofl.flower.server_app import federated_main
    from topofl.flower.settings import FlowerSettings

    settings = FlowerSettings.from_flat(method="fedavg", rounds=rounds, seed=0, out_dir="ref",
                              scenario_params={"n_clients": n_clients, "adversarial": (1,)})
    history = federated_main(FakeGrid(n_clients), settings, run_id="ref", root=root)
    return _curves(Path(history.out_dir))


def _assert_same_curves(got: list[dict[str, str]], want: list[dict[str, str]]) -> None:
    assert [r["round"] for r in got] == [r["round"] for r in want]
    for a, b in zip(got, want, strict=True):
        for key in METRICS:
            assert math.isclose(float(a[key]), float(b[key]), rel_tol=1e-9, abs_tol=1e-12), (a["round"], key, a, b)


def _wait_for_round(run: Any, parent: Path, rnd: int, timeout: float = RUN_TIMEOUT) -> Path:
    """The run directory under ``parent`` once curves.csv shows round ``rnd``."""
    deadline = time.monotonic() + timeout
    while True:
        dirs = sorted(parent.glob("run-*"))
        if dirs and (dirs[0] / "curves.csv").is_file() and len(_curves(dirs[0])) >= rnd:
            return dirs[0]
        assert not run.done(), f"run ended before round {rnd} was written:\n{run.output()[-4000:]}"
        assert time.monotonic() < deadline, f"no round {rnd} in curves.csv:\n{run.output()[-4000:]}"
        time.sleep(0.2)


def _outsider_env(home: Path) -> dict[str, str]:
    env = dict(os.environ, FLWR_HOME=str(home), FLWR_TELEMETRY_ENABLED="0", FLWR_DISABLE_UPDATE_CHECK="1")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def test_an_outsider_with_only_the_ca_cannot_join_or_register(
    flower_deployment: Any, flower_app_dir: Path, tmp_path: Path
) -> None:
    """Someone who can reach the Fleet proxy and has ca.pem (what every site gets): their
    SuperNode with an unregistered key is refused, registering the key through the proxy
    is refused (the Control API is not there), and the run goes on with the registered
    nodes only."""
    import psutil

    from topofl.deploy.credentials import generate_supernode_key
    from topofl.deploy.processes import find_free_ports

    dep = flower_deployment
    ca = dep.credentials.ca
    public = generate_supernode_key(tmp_path / "outsider")
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "victim"\n\n[superlink.victim]\naddress = "{dep.fleet_address}"\n'
        f"root-certificates = {json.dumps(str(ca))}\n"
    )
    flwr = str(Path(sys.executable).with_name("flwr"))
    register = subprocess.run([flwr, "supernode", "register", str(public), "victim"], env=_outsider_env(home),
                              capture_output=True, text=True, timeout=120)
    assert register.returncode != 0 and "registered successfully" not in register.stdout
    assert "404" in register.stdout + register.stderr, register.stdout + register.stderr

    log_path = tmp_path / "outsider.log"
    with log_path.open("wb") as log_file:
        node = subprocess.Popen(
            [str(Path(sys.executable).with_name("flower-supernode")), "--superlink", dep.fleet_address,
             "--root-certificates", str(ca), "--auth-supernode-private-key", str(tmp_path / "outsider"),
             "--host", "127.0.0.1", "--port", str(find_free_ports(1)[0]),
             "--node-config", f"partition-id=0 num-partitions={N_CLIENTS}"],
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, env=_outsider_env(home),
            start_new_session=True,
        )
    try:
        returncode = node.wait(timeout=120)
    finally:
        if node.poll() is None:
            children = psutil.Process(node.pid).children(recursive=True)
            os.killpg(node.pid, signal.SIGKILL)
            node.wait()
            psutil.wait_procs(children, timeout=10)
    text = log_path.read_text(errors="replace")
    assert returncode != 0 and "2004" in text and "Failed to activate SuperNode" in text, text[-3000:]
    assert dep.node_status() == {nid: "online" for nid in dep.node_ids}  # nobody else registered

    config = {"method": "fedavg", "num-server-rounds": 1, "scenario-params": SCENARIO_PARAMS,
              "out-dir": "out-outsider", "min-nodes": N_CLIENTS}
    result = dep.run(flower_app_dir, config, timeout=RUN_TIMEOUT)
    res = _check_run(result, _run_dir(dep.results_root / "out-outsider"), "fedavg", rounds=1)
    assert res["failures"] == []


def test_a_failed_run_is_reported_with_its_reason(flower_deployment: Any, flower_app_dir: Path) -> None:
    """resume-dir naming a directory without a checkpoint: the ServerApp fails, the run ends
    finished:failed (flwr run itself exits 0), ok is False and check=True raises with why."""
    from topofl.flower.checkpoint import MANIFEST

    dep = flower_deployment
    (dep.results_root / "empty" / "run-1").mkdir(parents=True)
    with pytest.raises(RuntimeError, match="finished:failed") as info:
        dep.run(flower_app_dir, {"resume-dir": "empty/run-1"}, timeout=RUN_TIMEOUT, check=True)
    assert MANIFEST in str(info.value) and "empty/run-1" in str(info.value)
    run = dep.runs[-1]
    assert run.run_id is not None and dep.run_status(run.run_id) == "finished:failed"


def test_the_run_survives_a_superlink_restart_with_the_same_metrics(
    flower_deployment_factory: Any, flower_app_dir: Path, tmp_path: Path
) -> None:
    """SIGKILL of the SuperLink after round 1 of 2, restart 5 s later on the same port and
    database: the same ServerApp process carries on (or, if the restart still ended the run,
    resume-dir continues it), the run completes, and its curves equal an uninterrupted run's."""
    dep = flower_deployment_factory(2)
    config = {"method": "fedavg", "num-server-rounds": 2, "scenario-params": SMALL_PARAMS,
              "out-dir": "out", "min-nodes": 2}
    run = dep.submit(flower_app_dir, config)
    run_dir = _wait_for_round(run, dep.results_root / "out", 1)
    serverapps = [p.pid for p in dep.serverapps()]
    assert len(serverapps) == 1 and not (run_dir / "result.json").exists()
    outage = dep.restart_superlink(down_for=5.0)
    print(f"SuperLink outage {outage:.1f} s")
    assert [p.pid for p in dep.serverapps()] == serverapps  # the same ServerApp, reconnecting

    result = run.wait(timeout=RUN_TIMEOUT)
    if not result.ok:
        # The documented fallback: a restart can still end the run (e.g. the SuperLink died
        # while the ServerApp pushed, beyond what its retries recover); resume-dir continues it
        print(f"the run ended {result.status} ({result.status_details}); resuming it from its checkpoint")
        assert _checkpointed_round(run_dir) >= 1, result.status
        resume = {"resume-dir": str(run_dir.relative_to(dep.results_root)), "min-nodes": 2}
        result = dep.run(flower_app_dir, resume, timeout=RUN_TIMEOUT)
    _check_run_files(result, run_dir, rounds=2)
    _assert_same_curves(_curves(run_dir), _reference_curves(tmp_path, rounds=2))
    assert dep.node_status() == {nid: "online" for nid in dep.node_ids}  # same ids, still there


def test_nodes_reported_unavailable_after_a_restart_get_their_round_again(
    flower_deployment_factory: Any, flower_app_dir: Path, tmp_path: Path
) -> None:
    """The audit's case, made deterministic: 10 s heartbeats, 4 SuperNodes, 3 of them frozen
    (SIGSTOP) while the SuperLink restarts after round 1 of 2 and for 30 s after, so their
    heartbeats lapse and the restarted SuperLink answers round 2 with NODE_UNAVAILABLE for them
    (the audit: 3 of 4 nodes lost, AUC 0.858 instead of 0.880, reported ``finished:completed``).
    The ServerApp holds those replies and sends the messages again once the nodes are back: no
    failure, the uninterrupted run's curves, and result.json says ``completed``."""
    dep = flower_deployment_factory(4, heartbeat_interval=10.0)
    config = {"method": "fedavg", "num-server-rounds": 2, "scenario-params": "n_clients=4,adversarial=(1,)",
              "out-dir": "out", "min-nodes": 4}
    run = dep.submit(flower_app_dir, config)
    run_dir = _wait_for_round(run, dep.results_root / "out", 1)
    frozen = [1, 2, 3]
    try:
        for i in frozen:
            dep.nodes[i].signal_tree(signal.SIGSTOP)
        print(f"SuperLink outage {dep.restart_superlink(down_for=5.0):.1f} s")
        time.sleep(30.0)  # > 2 heartbeat intervals: the SuperLink now reports the frozen nodes unavailable
    finally:
        for i in frozen:
            dep.nodes[i].signal_tree(signal.SIGCONT)
    result = run.wait(timeout=RUN_TIMEOUT)
    _check_run_files(result, run_dir, rounds=2, n_clients=4)
    _assert_same_curves(_curves(run_dir), _reference_curves(tmp_path, rounds=2, n_clients=4))


def test_a_killed_serverapp_resumes_from_its_checkpoint_with_the_same_metrics(
    flower_deployment_factory: Any, flower_app_dir: Path, tmp_path: Path
) -> None:
    """SIGKILL of the flwr-serverapp after round 1 of 2; the dead run is stopped and a new
    `flwr run` with resume-dir continues it in its directory: the curves equal an
    uninterrupted run's (fedavg keeps no client state, so fresh node contexts do not matter)."""
    dep = flower_deployment_factory(2)
    config = {"method": "fedavg", "num-server-rounds": 2, "scenario-params": SMALL_PARAMS,
              "out-dir": "out", "min-nodes": 2}
    run = dep.submit(flower_app_dir, config)
    run_dir = _wait_for_round(run, dep.results_root / "out", 1)
    deadline = time.monotonic() + RUN_TIMEOUT
    while not _checkpointed_round(run_dir):  # curves.csv gets round 1 just before its checkpoint
        assert not run.done() and time.monotonic() < deadline, run.output()[-4000:]
        time.sleep(0.1)
    assert len(dep.kill_serverapp()) == 1
    assert not (run_dir / "result.json").exists()
    before = _curves(run_dir)
    dep.stop_run(run.run_id)  # else it stays "running" until its task token expires (~60 s)
    killed = run.wait(timeout=RUN_TIMEOUT)
    assert not killed.ok and killed.status == "finished:stopped", killed.status

    resume = {"resume-dir": str(run_dir.relative_to(dep.results_root)), "min-nodes": 2}
    result = dep.run(flower_app_dir, resume, timeout=RUN_TIMEOUT)
    _check_run_files(result, run_dir, rounds=2)
    after = _curves(run_dir)
    assert after[: len(before)] == before  # continued in place: checkpointed rows kept, not redone
    _assert_same_curves(after, _reference_curves(tmp_path, rounds=2))


def _checkpointed_round(run_dir: Path) -> int:
    """The round of the run's last checkpoint (0: none yet)."""
    from topofl.flower.checkpoint import MANIFEST

    try:
        return int(json.loads((run_dir / MANIFEST).read_text())["round"])
    except (OSError, ValueError, KeyError):
        return 0


def _check_run_files(result: Any, run_dir: Path, rounds: int, n_clients: int = 2) -> None:
    assert result.ok, f"status {result.status} {result.status_details}\n{result.stdout[-4000:]}"
    res = _result(run_dir)
    assert res["method"] == "fedavg" and res["rounds"] == rounds and res["clients"] == list(range(n_clients))
    assert res["failures"] == [] and res["status"] == "completed" and res["degraded_rounds"] == []


@pytest.mark.parametrize("method", ["ptopofl", "fedavg"])
def test_secure_aggregation_on_the_tls_deployment_gives_the_in_process_curves(
    flower_deployment: Any, flower_app_dir: Path, tmp_path: Path, method: str
) -> None:
    """SecAgg+ over the authenticated TLS deployment: four exchanges per round, the server's log has each
    group's survivors, and the curves are the in-process (in-memory grid) run's, bit for bit."""
    from fake_grid import FakeGrid
    from topofl.flower.server_app import federated_main
    from topofl.flower.settings import FlowerSettings

    out_name = f"out-secure-{method}"
    config = {"method": method, "num-server-rounds": 2, "scenario": "healthcare", "scenario-params": SCENARIO_PARAMS,
              "hyperparameters": "secure_aggregation=true", "out-dir": out_name}
    result = flower_deployment.run(flower_app_dir, config, timeout=RUN_TIMEOUT)
    out_dir = _run_dir(flower_deployment.results_root / out_name)
    res = _check_run(result, out_dir, method, rounds=2)
    assert res["failures"] == []
    logs = [json.loads(line) for line in (out_dir / "server_log.jsonl").read_text().splitlines()]
    assert [entry["secure"]["0"]["survivors"] for entry in logs] == [[0, 1, 2], [0, 1, 2]]
    settings = FlowerSettings.from_flat(method=method, rounds=2, seed=0, out_dir="ref",
                                        scenario_params={"n_clients": N_CLIENTS, "adversarial": (1,)},
                                        hyperparameters={"secure_aggregation": True})
    ref = federated_main(FakeGrid(N_CLIENTS), settings, run_id="ref", root=tmp_path)
    _assert_same_curves(_curves(out_dir), _curves(Path(ref.out_dir)))
