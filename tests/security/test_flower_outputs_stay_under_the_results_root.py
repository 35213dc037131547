"""Finding 6: the Flower ``out-dir`` accepted any absolute path on the SuperLink host, chosen by
whoever submitted the run, and deleted existing result files there. Outputs now go under a results
root configured on the host; an out-dir that escapes it is refused; nothing is ever deleted and
every run writes into a fresh directory named by its run id."""
import json

import pytest

RESULTS_ROOT_ENV = "TOPOFL_RESULTS_ROOT"


def resolve_run_dir(*args):
    from topofl.flower.outputs import resolve_run_dir as resolve

    return resolve(*args)


def test_resolve_run_dir_stays_under_the_root(tmp_path):
    root = tmp_path / "root"
    d = resolve_run_dir("exp/a", root, 17)
    assert d == (root / "exp" / "a" / "run-17").resolve() and d.is_dir()
    again = resolve_run_dir("exp/a", root, 17)  # the same run id twice never reuses a directory
    assert again != d and again.parent == d.parent
    for bad in (str(tmp_path / "elsewhere"), "../escape", "exp/../../escape", "/etc"):
        with pytest.raises(ValueError, match="out-dir"):
            resolve_run_dir(bad, root, 1)
    assert resolve_run_dir("", root, 1) is None


def test_an_absolute_path_inside_the_root_is_accepted(tmp_path):
    root = tmp_path / "root"
    assert resolve_run_dir(str(root / "x"), root, 3) == (root / "x" / "run-3").resolve()


def test_symlink_escape_is_refused(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    (root / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(ValueError, match="out-dir"):
        resolve_run_dir("link", root, 1)


def test_server_app_refuses_an_escaping_out_dir_and_deletes_nothing(tmp_path, monkeypatch):
    pytest.importorskip("flwr")
    from fake_grid import FakeGrid
    from topofl.flower.server_app import federated_main
    from topofl.flower.settings import FlowerSettings

    monkeypatch.setenv(RESULTS_ROOT_ENV, str(tmp_path / "root"))
    victim = tmp_path / "victim"
    victim.mkdir()
    for name in ("rounds.csv", "curves.csv", "result.json"):
        (victim / name).write_text("precious")
    with pytest.raises(ValueError, match="out-dir"):
        federated_main(FakeGrid(4), FlowerSettings.from_flat(method="fedavg", rounds=1, out_dir=str(victim),
                                                             scenario_params={"n_clients": 4, "adversarial": (1,)}))
    assert all((victim / n).read_text() == "precious" for n in ("rounds.csv", "curves.csv", "result.json"))


def test_each_run_writes_a_fresh_directory(tmp_path, monkeypatch):
    pytest.importorskip("flwr")
    from fake_grid import FakeGrid
    from topofl.flower.server_app import federated_main
    from topofl.flower.settings import FlowerSettings

    root = tmp_path / "root"
    monkeypatch.setenv(RESULTS_ROOT_ENV, str(root))
    (root / "exp").mkdir(parents=True)
    (root / "exp" / "rounds.csv").write_text("an earlier run's file")
    settings = FlowerSettings.from_flat(method="fedavg", rounds=1, out_dir="exp", scenario_params={"n_clients": 4, "adversarial": (1,)})
    h1 = federated_main(FakeGrid(4), settings, run_id=5)
    h2 = federated_main(FakeGrid(4), settings, run_id=5)
    assert h1.out_dir != h2.out_dir
    for h in (h1, h2):
        assert json.loads((root / "exp" / h.out_dir.split("/")[-1] / "result.json").read_text())["rounds"] == 1
    assert (root / "exp" / "rounds.csv").read_text() == "an earlier run's file"


def test_results_root_defaults_to_the_working_directory(tmp_path, monkeypatch):
    from topofl.flower.outputs import results_root

    monkeypatch.delenv(RESULTS_ROOT_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert results_root() == (tmp_path / "results").resolve()
