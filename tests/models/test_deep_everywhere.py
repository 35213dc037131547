"""Deep models everywhere (issue: PyTorch models in every algorithm and runtime).

A user's own torch.nn.Module trains with pTopoFL, FedAvg, SCAFFOLD and Sheaf-FMTL, in process
and through Flower's in-memory grid, with identical metrics; the special cases still hold with a
CNN; trained models come back, save → load → predict exactly, and a tampered or foreign file is
refused."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import topofl  # noqa: E402
import topofl.methods  # noqa: E402  (binds topofl.methods for the parametrisation below, also when this file runs alone)
from topofl.data.loaders.mnist10k import mnist_federation  # noqa: E402
from topofl.models.registry import build_model, is_deep  # noqa: E402
from topofl.threads import limited_threads  # noqa: E402

pytestmark = pytest.mark.deep
SMALL = {"n_clients": 4, "adversarial": (1,)}


def assert_same_records(a, b, keys=("auc", "accuracy", "loss"), atol=0.0):
    ka = {(r["round"], r["client"]): [r[k] for k in keys] for r in a}
    kb = {(r["round"], r["client"]): [r[k] for k in keys] for r in b}
    assert ka.keys() == kb.keys()
    for k in ka:
        np.testing.assert_allclose(ka[k], kb[k], atol=atol, rtol=0, equal_nan=True, err_msg=str(k))


@pytest.fixture(scope="module")
def images():
    return mnist_federation(4, partition_kind="iid", n_samples=600, seed=0, min_size=10)


@pytest.mark.parametrize("method", ["ptopofl", "fedavg", "scaffold"])
def test_a_users_module_trains_in_process_and_on_flower_with_identical_metrics(method):
    pytest.importorskip("flwr")
    from fake_grid import FakeGrid
    from helpers import make_mlp
    from topofl.flower.server_app import federated_main
    from topofl.flower.settings import FlowerSettings

    fed = topofl.make_scenario("healthcare", seed=0, **SMALL)
    from topofl.deployment_defaults import deployment_hyperparameters

    # the Flower run applies the deployment defaults (robust-defaults): the in-process run gets the same
    local = topofl.simulate(fed, method, rounds=2, seed=0, model=make_mlp, **deployment_hyperparameters(method, {"lr": 0.05}))
    assert is_deep(local.model) and not local.failures
    # simulate trains with the thread policy's threads (topofl.threads); the in-memory grid's nodes run in this
    # process, so they get the same number (torch's sums can differ in the last bit between thread counts)
    with limited_threads():
        flower = federated_main(FakeGrid(4), FlowerSettings.from_flat(method=method, rounds=2, seed=0, scenario_params=SMALL,
                                                            hyperparameters={"lr": 0.05}, model="helpers:make_mlp"))
    assert not flower.failures
    assert_same_records(local.records, flower.records)
    assert local.final["auc"] > 0.6


@pytest.mark.parametrize("model_init", ["independent", "common"])
def test_sheaf_with_a_users_module_in_process_and_through_the_relay(model_init):
    """Both starts of Algorithm 1's θ_i⁰ (each node its own, or one common one) are the same through the relay."""
    pytest.importorskip("flwr")
    from fake_grid import FakeGrid
    from helpers import make_mlp
    from topofl.flower.relay import relay_main
    from topofl.flower.settings import FlowerSettings

    fed = topofl.make_scenario("healthcare", seed=1, **SMALL)
    hp = {"gamma": 0.1, "lr": 0.05, "model_init": model_init}
    local = topofl.simulate_decentralised(fed, "sheaf", rounds=3, seed=1, graph="ring", model=make_mlp, **hp)
    relayed = relay_main(FakeGrid(4), FlowerSettings.from_flat(method="sheaf", rounds=3, seed=1, scenario_params=SMALL, graph="ring",
                                                     hyperparameters=hp, model="helpers:make_mlp"))
    assert not relayed.failures
    assert_same_records(local.records, relayed.records, keys=("accuracy", "loss"))
    assert local.iterations[-1]["cumulative_bits"] == relayed.iterations[-1]["cumulative_bits"] > 0


def test_fedprox_with_mu_zero_equals_fedavg_with_a_cnn(images):
    a = topofl.simulate(images, "fedavg", rounds=2, seed=3, model="cnn-small", lr=0.05, local_epochs=1)
    b = topofl.simulate(images, "fedprox", rounds=2, seed=3, model="cnn-small", lr=0.05, local_epochs=1, mu=0.0)
    assert_same_records(a.records, b.records)
    np.testing.assert_array_equal(a.server_params, b.server_params)


def test_ptopofl_one_cluster_no_blend_equal_descriptors_is_fedavg_with_a_cnn(images):
    """Every client holds the same images, so every (representation) descriptor is the same:
    Eq. 6's weights reduce to n_k / Σ n, and with M = 1, β = 0 pTopoFL's model is FedAvg's."""
    c = images[0]
    same = topofl.Federation.from_arrays([(c.X_train, c.y_train, c.X_test, c.y_test)] * 3, task="multiclass")
    same.n_classes = 10
    a = topofl.simulate(same, "fedavg", rounds=2, seed=0, model="cnn-small", lr=0.05, local_epochs=1)
    b = topofl.simulate(same, "ptopofl", rounds=2, seed=0, model="cnn-small", lr=0.05, local_epochs=1, n_clusters=1, beta=0.0)
    np.testing.assert_allclose(b.server_params, a.server_params, rtol=0, atol=1e-12)
    assert_same_records(a.records, b.records, atol=1e-12)
    assert b.server_logs[-1]["flagged"] == []


def test_deep_runs_are_bit_reproducible_on_cpu(images):
    a = topofl.simulate(images, "ptopofl", rounds=2, seed=5, model="cnn-small", lr=0.05, local_epochs=1)
    b = topofl.simulate(images, "ptopofl", rounds=2, seed=5, model="cnn-small", lr=0.05, local_epochs=1)
    assert_same_records(a.records, b.records)
    for k in a.client_models:
        np.testing.assert_array_equal(a.client_models[k], b.client_models[k])


def test_ptopofl_describes_the_learned_representation(images):
    h = topofl.simulate(images, "ptopofl", rounds=1, seed=0, model="cnn-small", local_epochs=1)
    algo_defaults = topofl.methods.get("ptopofl").config()
    assert algo_defaults.descriptor_space == "auto" and algo_defaults.augment == "auto"
    # the model's input is the image (no §3.2 columns appended) and clusters were formed
    assert h.model.n_features == 784 and len(h.server_logs[-1]["clusters"]) == 4
    with pytest.raises(ValueError, match="augment='on'"):
        topofl.simulate(images, "ptopofl", rounds=1, seed=0, model="cnn-small", augment="on")


@pytest.mark.parametrize("method", ["ptopofl", "ditto", "local", "fedavg"])
def test_trained_models_save_load_predict_exactly(tmp_path, method):
    fed = topofl.make_scenario("healthcare", seed=0, **SMALL)
    h = topofl.simulate(fed, method, rounds=2, seed=0)
    X = fed[2].X_test
    path = topofl.save_models(h, tmp_path / "m.npz")
    loaded = topofl.load_models(path)
    for k in h.client_models:  # the federation's rows are preprocessed already
        np.testing.assert_array_equal(loaded.predict(X, client=k, preprocessed=True),
                                      h.predict(X, client=k, preprocessed=True))
    if h.server_params is not None and h.server_params.ndim == 1 and h.model.n_features == X.shape[1]:
        np.testing.assert_array_equal(loaded.predict(X, preprocessed=True), h.predict(X, preprocessed=True))
    elif method == "ptopofl":  # its clients append their own TDA features: no client-free prediction
        with pytest.raises(ValueError, match="predict for a client"):
            h.predict(X, preprocessed=True)
    # the client's own model is the one it is scored with
    k = 2
    ev = [r for r in h.records if r["round"] == 2 and r["client"] == k][0]
    pred = h.predict(fed[k].X_test, client=k, preprocessed=True)
    assert np.mean((pred >= 0.5) == fed[k].y_test) == pytest.approx(ev["accuracy"])


def test_cnn_models_save_load_predict_exactly(tmp_path, images):
    h = topofl.simulate(images, "fedavg", rounds=1, seed=0, model="cnn-small", local_epochs=1)
    X = images[1].X_test
    loaded = topofl.load_models(topofl.save_models(h, tmp_path / "cnn.npz"))
    np.testing.assert_array_equal(loaded.predict(X, client=1, preprocessed=True),
                                  h.predict(X, client=1, preprocessed=True))


def test_a_users_module_must_be_passed_again_to_load(tmp_path):
    from helpers import make_mlp

    fed = topofl.make_scenario("healthcare", seed=0, **SMALL)
    h = topofl.simulate(fed, "fedavg", rounds=1, seed=0, model=make_mlp)
    path = topofl.save_models(h, tmp_path / "mlp.npz")
    with pytest.raises(ValueError, match="pass it again"):
        topofl.load_models(path)
    loaded = topofl.load_models(path, model=build_model(make_mlp, task="binary", n_features=20))
    np.testing.assert_array_equal(loaded.predict(fed[0].X_test, client=0, preprocessed=True),
                                  h.predict(fed[0].X_test, client=0, preprocessed=True))


def test_tampered_or_foreign_files_are_refused(tmp_path):
    fed = topofl.make_scenario("healthcare", seed=0, **SMALL)
    path = topofl.save_models(topofl.simulate(fed, "fedavg", rounds=1, seed=0), tmp_path / "m.npz")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["client/0/params"] = arrays["client/0/params"] + 1e-9
    np.savez(tmp_path / "tampered.npz", **arrays)
    with pytest.raises(ValueError, match="client/0/params.*SHA-256"):
        topofl.load_models(tmp_path / "tampered.npz")
    np.savez(tmp_path / "foreign.npz", weights=np.ones(3))
    with pytest.raises(ValueError, match="not a topofl models file"):
        topofl.load_models(tmp_path / "foreign.npz")
    (tmp_path / "pickle.npz").write_bytes(b"\x80\x04\x95not a zip")
    with pytest.raises(ValueError, match="not a topofl models file"):
        topofl.load_models(tmp_path / "pickle.npz")
    bad = dict(arrays)
    manifest = json.loads(bytes(bad["manifest"]).decode())
    manifest["format"] = "other/1"
    bad["manifest"] = np.frombuffer(json.dumps(manifest).encode(), dtype=np.uint8)
    np.savez(tmp_path / "other.npz", **bad)
    with pytest.raises(ValueError, match="format 'other/1'"):
        topofl.load_models(tmp_path / "other.npz")


def test_a_registered_models_description_is_checked_before_it_is_built(tmp_path, images):
    h = topofl.simulate(images, "fedavg", rounds=1, seed=0, model="mlp", local_epochs=1)
    path = topofl.save_models(h, tmp_path / "mlp.npz")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    manifest = json.loads(bytes(arrays.pop("manifest")).decode())
    for change, message in [({"builder_args": {**manifest["model"]["builder_args"], "hidden": [10**6, 10**6]}},
                             "describes a network of"),   # would allocate ~8 GB if built
                            ({"input_shape": [1, 10**9]}, "input_shape"),
                            ({"builder_args": {"hidden": [[1]]}}, "builder_args")]:
        bad = {**arrays, "manifest": np.frombuffer(json.dumps({**manifest, "model": {**manifest["model"], **change}}
                                                             ).encode(), dtype=np.uint8)}
        np.savez(tmp_path / "bad.npz", **bad)
        with pytest.raises(ValueError, match=rf"bad\.npz: .*{message}"):
            topofl.load_models(tmp_path / "bad.npz")


def test_model_registry_errors_are_clear():
    with pytest.raises(ValueError, match="unknown model 'vgg'"):
        build_model("vgg", task="multiclass", n_features=784, n_classes=10)
    with pytest.raises(ValueError, match="PyTorch models classify"):
        build_model("mlp", task="regression", n_features=5)
    with pytest.raises(ValueError, match="cannot tell the image shape of 20 features"):
        build_model("cnn-small", task="binary", n_features=20)
    with pytest.raises(ValueError, match="cannot import the model factory 'nope.nothing:make'"):
        build_model("nope.nothing:make", task="binary", n_features=20)
    from topofl.models.torch_models import resolve_device

    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.parametrize("method", topofl.methods.available("server"))
@pytest.mark.parametrize("model", ["cnn-small", "mlp"])
def test_every_server_method_trains_a_torch_model_unchanged(images, method, model):
    h = topofl.simulate(images, method, rounds=2, seed=0, model=model, lr=0.05, local_epochs=1)
    assert is_deep(h.model) and len(h.curve("accuracy")) == 2
    assert np.isfinite(h.final["accuracy"]) and 0.0 <= h.final["accuracy"] <= 1.0
    assert set(h.client_models) == {c.client_id for c in images.clients}
    assert all(v.shape == (h.model.n_params,) and np.all(np.isfinite(v)) for v in h.client_models.values())


@pytest.fixture(scope="module")
def rotated():
    from topofl.data.sources import load

    return load("rotated-mnist", 0, {"n_clients": 6, "samples_per_client": 30})


@pytest.mark.parametrize("method", topofl.methods.available("peer"))
def test_every_peer_method_trains_torch_models_including_a_mix_of_sizes(rotated, method):
    hp = {"gamma": 0.05, "maps": "compact", "map_init": "sparse_sign", "lam": 1e-4} if method == "sheaf" else {}
    for model in ("cnn-small", ["cnn-small", "cnn-medium"] * 3):
        if isinstance(model, list) and method in ("dfedu", "dpsgd"):
            continue   # they average whole models, so sizes must agree (refused with a ValueError, tested elsewhere)
        h = topofl.simulate_decentralised(rotated.clients, method, rounds=2, seed=0, graph="ring", task=rotated.task,
                                          n_classes=rotated.n_classes, model=model, lr=0.05, **hp)
        assert np.isfinite(h.final["accuracy"]) and 0.0 <= h.final["accuracy"] <= 1.0
        dims = {len(v) for v in h.client_models.values()}
        assert dims == ({23_210} if model == "cnn-small" else {23_210, 123_562})
