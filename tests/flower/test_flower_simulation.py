"""Flower's Simulation Runtime (Ray): the acceptance equivalence of issue 5 — pTopoFL on the
healthcare scenario for 3 rounds gives the in-process runner's per-round, per-client metrics."""
import numpy as np
import pytest

pytest.importorskip("flwr")

import topofl  # noqa: E402
from bit_identity import assert_golden  # noqa: E402
from topofl.flower import simulate_flower  # noqa: E402

pytestmark = pytest.mark.flower


def test_ptopofl_through_flower_simulation_equals_in_process():
    from topofl.deployment_defaults import deployment_hyperparameters

    flower = simulate_flower(method="ptopofl", num_server_rounds=3, seed=0)
    assert_golden("flower-ptopofl", flower)  # bit for bit what it gave before issue 21
    # a Flower run applies the deployment defaults (robust-defaults): the in-process run gets the same hyper-parameters
    ref = topofl.simulate(topofl.make_scenario("healthcare", seed=0), "ptopofl", rounds=3, seed=0,
                          **deployment_hyperparameters("ptopofl", {}))
    assert len(flower.records) == len(ref.records) == 3 * 8
    got = {(r["round"], r["client"]): (r["auc"], r["accuracy"], r["loss"]) for r in flower.records}
    want = {(r["round"], r["client"]): (r["auc"], r["accuracy"], r["loss"]) for r in ref.records}
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_allclose(got[key], want[key], atol=1e-6, err_msg=str(key))
    assert not flower.failures
    # and the server logs agree: same clusters, same trust weights
    assert flower.server_logs[-1]["clusters"] == ref.server_logs[-1]["clusters"]
    np.testing.assert_allclose(list(flower.server_logs[-1]["trust"].values()), list(ref.server_logs[-1]["trust"].values()), atol=1e-9)


def test_sheaf_relay_through_flower_simulation_equals_in_process():
    small = {"n_clients": 4, "adversarial": (1,)}
    flower = simulate_flower(method="sheaf", num_server_rounds=3, seed=0, scenario_params="n_clients=4,adversarial=(1,)",
                             hyperparameters="gamma=0.3,lam=0.01", graph="ring")
    assert_golden("flower-sheaf", flower)
    ref = topofl.simulate_decentralised(topofl.make_scenario("healthcare", seed=0, **small), "sheaf", rounds=3, seed=0,
                                        graph="ring", gamma=0.3, lam=0.01)
    got = {(r["round"], r["client"]): (r["accuracy"], r["loss"]) for r in flower.records}
    want = {(r["round"], r["client"]): (r["accuracy"], r["loss"]) for r in ref.records}
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_allclose(got[key], want[key], atol=1e-9, err_msg=str(key))
    assert [r["bits"] for r in flower.iterations] == [r["bits"] for r in ref.iterations]


def test_cli_resume_continues_a_killed_run_on_the_simulation_runtime(tmp_path):
    """`topofl flower --resume RUN_DIR` on Ray: a run killed after round 2 (checkpoint written by the
    same ServerApp code through the in-memory grid) finishes with the curves of a run that never stopped."""
    import csv
    import json

    from typer.testing import CliRunner

    from fake_grid import FakeGrid
    from topofl.cli import app
    from topofl.flower.server_app import federated_main
    from topofl.flower.settings import FlowerSettings

    class Killed(BaseException):
        pass

    small = {"n_clients": 4, "adversarial": (1,)}
    s = FlowerSettings.from_flat(method="fedavg", rounds=4, seed=0, scenario_params=small, out_dir=".")
    grid = FakeGrid(4)
    send = grid.send_and_receive

    def dying(messages, *, timeout=None):
        messages = list(messages)
        if any(m.metadata.group_id == "3" for m in messages):
            raise Killed
        return send(messages, timeout=timeout)

    grid.send_and_receive = dying
    for run_id in ("a", "b"):
        with pytest.raises(Killed):
            federated_main(grid, s, run_id=run_id, root=tmp_path / "out")
    ref = federated_main(FakeGrid(4), s, run_id="ref", root=tmp_path / "ref")
    result = CliRunner().invoke(app, ["flower", "--resume", str(tmp_path / "out" / "run-a")])
    assert result.exit_code == 0, result.output
    assert "resumed in" in result.output
    rows = lambda p: list(csv.DictReader(p.open()))  # noqa: E731
    got, want = rows(tmp_path / "out" / "run-a" / "curves.csv"), rows(tmp_path / "ref" / "run-ref" / "curves.csv")
    assert [r["round"] for r in got] == ["1", "2", "3", "4"]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose([float(a[k]) for k in ("auc", "accuracy", "loss")], [float(b[k]) for k in ("auc", "accuracy", "loss")],
                                   atol=1e-9)
    assert ref.out_dir
    done = CliRunner().invoke(app, ["flower", "--resume", str(tmp_path / "out" / "run-a")])  # bad input: exit 2, one line
    assert done.exit_code == 2 and "that run finished" in done.output
    # a checkpoint altered on disk is refused by the ServerApp: bad input, exit 2 with the reason
    manifest = json.loads((tmp_path / "out" / "run-b" / "checkpoint.json").read_text())
    (tmp_path / "out" / "run-b" / manifest["pickle"]).write_bytes(b"not the checkpoint")
    bad = CliRunner().invoke(app, ["flower", "--resume", str(tmp_path / "out" / "run-b")])
    assert bad.exit_code == 2 and "SHA-256 differs" in bad.output, bad.output
    # a run that fails for another reason (here: no SuperNode can serve the scenario) says why and exits 1
    failed = CliRunner().invoke(app, ["flower", "--method", "fedavg", "--rounds", "1", "--nodes", "2", "-s", "n_clients=4"])
    assert failed.exit_code == 1 and "the Flower run failed" in failed.output, failed.output


def test_secure_ptopofl_through_flower_simulation_equals_in_process():
    """SecAgg+ per cluster on Flower's Simulation Runtime: the in-process secure run's numbers, bit for bit."""
    from topofl.deployment_defaults import deployment_hyperparameters

    flower = simulate_flower(method="ptopofl", num_server_rounds=2, seed=0,
                             scenario_params="n_clients=6,adversarial=(1,)", hyperparameters="secure_aggregation=true")
    assert not flower.failures
    hp = deployment_hyperparameters("ptopofl", {"secure_aggregation": True})
    assert hp.get("intra_aggregator") is None and hp["max_client_weight"] == 0.3
    ref = topofl.simulate(topofl.make_scenario("healthcare", seed=0, n_clients=6, adversarial=(1,)), "ptopofl",
                          rounds=2, seed=0, **hp)
    assert [(r["round"], r["client"], r["auc"], r["loss"]) for r in flower.records] == \
        [(r["round"], r["client"], r["auc"], r["loss"]) for r in ref.records]
    assert [e["secure"] for e in flower.server_logs] == [e["secure"] for e in ref.server_logs]
