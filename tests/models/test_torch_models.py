"""Optional PyTorch CNNs on flat parameter vectors (topofl.models.torch_models)."""
from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from topofl.federation.local import sgd  # noqa: E402
from topofl.metrics import evaluate  # noqa: E402
from topofl.models import torch_models as tm  # noqa: E402
from topofl.models.torch_models import (  # noqa: E402
    CNN_FACTORIES,
    PAPER_ARCHITECTURES,
    PAPER_PARAM_COUNTS,
    TorchClassifier,
    dataset_shape,
    paper_cnn,
    small_cnn,
)

# exact counts of our architectures (documented in the module docstring next to Table 2)
EXPECTED_COUNTS = {
    ("small", "rmnist"): 23_210,
    ("medium", "rmnist"): 123_562,
    ("large", "rmnist"): 212_146,
    ("small", "cifar10"): 31_818,
    ("medium", "cifar10"): 153_562,
    ("large", "cifar10"): 297_202,
}


def _images(n: int, shape: tuple[int, int, int], n_classes: int, seed: int = 0):
    """Tiny synthetic image set: class k lights up the k-th horizontal band, plus noise."""
    rng = np.random.default_rng(seed)
    c, h, w = shape
    y = rng.integers(0, n_classes, n)
    X = rng.normal(0.0, 0.3, (n, c, h, w))
    band = h // n_classes
    for k in range(n_classes):
        X[y == k, :, k * band : (k + 1) * band, :] += 1.0
    return X.reshape(n, -1), y.astype(np.float64)


@pytest.mark.parametrize("size, dataset", sorted(EXPECTED_COUNTS))
def test_parameter_counts_match_the_paper(size, dataset):
    model = paper_cnn(size, dataset)
    n = EXPECTED_COUNTS[(size, dataset)]
    assert model.n_params == n
    assert sum(p.numel() for p in model.module_factory().parameters()) == n
    assert PAPER_ARCHITECTURES[size].n_params(dataset_shape(dataset), 10) == n  # torch-free formula
    assert abs(n / PAPER_PARAM_COUNTS[(size, dataset)] - 1.0) < 0.15
    assert model.n_features == int(np.prod(dataset_shape(dataset)))
    assert (model.task, model.n_classes, model.n_outputs) == ("multiclass", 10, 10)


def test_same_size_cnn_is_the_one_table_4_counts():
    """§4.2's CNN ("two convolutional layers (32 and 64 filters) followed by a fully connected
    layer"): Table 4's FedAvg sends 27.9 MB on R-MNIST, 200 rounds of one float32 model."""
    from topofl.models.registry import MODELS, build_model, describe, rebuild_registered

    model = paper_cnn("same", "rmnist")
    assert model.n_params == PAPER_ARCHITECTURES["same"].n_params((1, 28, 28), 10) == 34_826
    assert round(200 * model.n_params * 4 / 1e6, 1) == 27.9
    assert abs(model.n_params / PAPER_PARAM_COUNTS[("same", "rmnist")] - 1) < 0.002
    convs = [m for m in model.module_factory() if isinstance(m, torch.nn.Conv2d)]
    linears = [m for m in model.module_factory() if isinstance(m, torch.nn.Linear)]
    assert [(c.out_channels, c.kernel_size, c.padding) for c in convs] == [(32, (3, 3), (0, 0)), (64, (3, 3), (0, 0))]
    assert [(f.in_features, f.out_features) for f in linears] == [(64 * 5 * 5, 10)]
    assert paper_cnn("same", "cifar10").n_params == 42_442  # the public code's CIFAR10CNN: 64·6·6 into the FC layer
    built = build_model("cnn-same", task="multiclass", n_features=784, n_classes=10)
    assert "cnn-same" in MODELS and built == model and describe(built)["name"] == "cnn-same"
    assert rebuild_registered(describe(built)) == model


def test_dataset_names_and_factories():
    assert dataset_shape("R-MNIST") == dataset_shape("rotated_mnist") == (1, 28, 28)
    assert dataset_shape("H-CIFAR-10") == dataset_shape("cifar") == (3, 32, 32)
    assert set(CNN_FACTORIES) == {"small", "medium", "large", "same"}
    assert paper_cnn("small", "mnist") == small_cnn((1, 28, 28), 10)  # builders compare by value
    with pytest.raises(ValueError, match="size"):
        paper_cnn("huge", "mnist")
    with pytest.raises(ValueError, match="dataset"):
        paper_cnn("small", "imagenet")
    with pytest.raises(ValueError, match="too small"):
        tm.large_cnn((1, 4, 4))
    with pytest.raises(ValueError, match="dtype"):
        small_cnn(dtype="float16")


@pytest.mark.parametrize("size", ["small", "medium", "large"])
def test_flat_vector_round_trip(size):
    model = paper_cnn(size, "cifar10", l2=0.01)
    theta = model.init(np.random.default_rng(0))
    assert theta.shape == (model.n_params,) and theta.dtype == np.float64
    X, y = _images(6, model.input_shape, 10)
    loss, g = model.loss_grad(theta, X, y)
    assert isinstance(loss, float) and np.isfinite(loss)
    assert g.shape == theta.shape and g.dtype == np.float64 and np.isfinite(g).all()
    assert model.loss(theta, X, y) == pytest.approx(loss, rel=1e-5)
    np.testing.assert_array_equal(model.grad(theta, X, y), g)
    # the penalty l2/2·‖w‖² covers the weights (ndim > 1) only: against the same network without it
    mask = model.weight_mask
    assert 0 < mask.sum() < model.n_params
    plain = paper_cnn(size, "cifar10", l2=0.0)
    assert model.loss(theta, X, y) - plain.loss(theta, X, y) == pytest.approx(0.005 * theta[mask] @ theta[mask], rel=1e-9)
    np.testing.assert_allclose(g - plain.grad(theta, X, y), np.where(mask, 0.01 * theta, 0.0), rtol=0, atol=1e-12)


def test_finite_difference_gradient_small_cnn_float64():
    model = small_cnn((1, 12, 12), 4, l2=0.05, dtype="float64")
    rng = np.random.default_rng(1)
    theta = model.init(rng, scale=0.05)
    X, y = _images(8, model.input_shape, 4, seed=1)
    _, g = model.loss_grad(theta, X, y)
    mask = model.weight_mask
    coords = np.concatenate([rng.choice(np.flatnonzero(mask), 8, replace=False), rng.choice(np.flatnonzero(~mask), 4, replace=False)])
    h = 1e-6
    for i in coords:
        e = np.zeros_like(theta)
        e[i] = h
        fd = (model.loss(theta + e, X, y) - model.loss(theta - e, X, y)) / (2 * h)
        assert g[i] == pytest.approx(fd, rel=1e-5, abs=1e-8), i
    # float32 computation agrees with float64 up to single precision
    g32 = small_cnn((1, 12, 12), 4, l2=0.05).loss_grad(theta, X, y)[1]
    np.testing.assert_allclose(g32, g, rtol=1e-3, atol=1e-5)


def test_init_is_deterministic_and_leaves_global_torch_rng_alone():
    model = small_cnn()
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a = model.init(np.random.default_rng(7))
    b = model.init(np.random.default_rng(7))
    c = model.init(np.random.default_rng(8))
    assert torch.equal(torch.get_rng_state(), state)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    np.testing.assert_array_equal(model.init(), model.init())  # rng=None is a fixed seed
    # default init is torch's (non-zero, bounded weights, e.g. Kaiming-uniform)
    assert np.abs(a).max() < 1.0 and np.abs(a).min() < np.abs(a).max() and a.std() > 0
    # scale > 0 adds N(0, scale²) noise to the weights only
    noisy = model.init(np.random.default_rng(7), scale=0.5)
    mask = model.weight_mask
    np.testing.assert_array_equal(noisy[~mask], a[~mask])
    assert np.std(noisy[mask] - a[mask]) == pytest.approx(0.5, rel=0.05)


def test_a_few_sgd_steps_reduce_the_loss():
    model = small_cnn((1, 12, 12), 3, l2=1e-4)
    X, y = _images(90, model.input_shape, 3, seed=2)
    theta0 = model.init(np.random.default_rng(0))
    loss0 = model.loss(theta0, X, y)
    theta = sgd(model, theta0, X, y, epochs=4, lr=0.1, batch_size=15, rng=np.random.default_rng(0))
    assert model.loss(theta, X, y) < 0.7 * loss0
    assert np.mean(model.predict(theta, X) == y) > 0.8


def test_scores_are_probabilities_and_predictions_their_argmax():
    model = paper_cnn("medium", "rmnist")
    theta = model.init(np.random.default_rng(3), scale=0.05)
    X, y = _images(7, model.input_shape, 10, seed=3)
    P = model.predict_scores(theta, X)
    assert P.shape == (7, 10) and P.dtype == np.float64 and (P >= 0).all()
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    pred = model.predict(theta, X)
    assert pred.dtype == np.float64
    np.testing.assert_array_equal(pred, np.argmax(P, axis=1))
    metrics, scores = evaluate(model, theta, X, y)  # the package's evaluation path works as is
    assert set(metrics) == {"auc", "accuracy", "loss"} and scores.shape == (7, 10)


def test_chunking_pickling_and_input_checks():
    X, y = _images(13, (1, 28, 28), 10, seed=4)
    whole = small_cnn(l2=0.01)
    chunked = small_cnn(l2=0.01, chunk_size=5)
    theta = whole.init(np.random.default_rng(4))
    l1, g1 = whole.loss_grad(theta, X, y)
    l2, g2 = chunked.loss_grad(theta, X, y)
    assert l2 == pytest.approx(l1, rel=1e-5)
    np.testing.assert_allclose(g2, g1, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(chunked.predict_scores(theta, X), whole.predict_scores(theta, X), atol=1e-6)

    clone = pickle.loads(pickle.dumps(whole))
    assert clone == whole and clone.n_params == whole.n_params
    assert clone.loss(theta, X, y) == pytest.approx(whole.loss(theta, X, y), rel=1e-6)

    with pytest.raises(ValueError, match="theta"):
        whole.loss(theta[:-1], X, y)
    with pytest.raises(ValueError, match="X must have shape"):
        whole.predict(theta, X[:, :-1])
    with pytest.raises(ValueError, match="class ids"):
        whole.loss(theta, X, np.full(13, 10.0))
    with pytest.raises(ValueError, match="logits"):
        TorchClassifier(tm.CNNBuilder(PAPER_ARCHITECTURES["small"], (1, 28, 28), 5), (1, 28, 28), n_classes=10)


def test_missing_torch_gives_the_install_hint():
    # a fresh interpreter in which ``import torch`` fails (torch is not even imported at module load)
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import topofl.models, topofl.models.torch_models as tm\n"
        "assert 'torch' not in sys.modules\n"
        "try:\n    tm.paper_cnn('small', 'mnist')\n"
        "except ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("the torch models need PyTorch: pip install 'topofl[torch]' (CPU build: pip install torch")
    assert "download.pytorch.org/whl/cpu" in out


@pytest.mark.parametrize("name", ["sgd-momentum", "adam"])
def test_the_native_loop_with_a_rule_and_a_step_budget_equals_torch_optim_on_the_module(name):
    """K steps of topofl's torch loop (the rule on the flat parameters, on the device) = the same
    K batches through torch.optim on the module itself; the kept state continues a second call."""
    from topofl.models.optimizers import LocalOptimizer, OptimizerSpec, epoch_batches

    model = small_cnn((1, 12, 12), 3, l2=0.0, dtype="float64")
    X, y = _images(40, model.input_shape, 3, seed=4)
    theta0 = model.init(np.random.default_rng(1))
    spec = OptimizerSpec(name, lr=0.01, momentum=0.7)
    ours = LocalOptimizer(spec)
    theta = theta0
    for seed in (5, 6):  # two rounds of 7 steps (batch 10: a pass is 4 batches, so each round reshuffles once)
        theta = sgd(model, theta, X, y, epochs=1, lr=0.01, batch_size=10, rng=np.random.default_rng(seed),
                    local_steps=7, optimizer=ours)
    module = model.module_factory().double()
    torch.nn.utils.vector_to_parameters(torch.from_numpy(theta0), module.parameters())
    opt = (torch.optim.SGD(module.parameters(), lr=0.01, momentum=0.7) if name == "sgd-momentum"
           else torch.optim.Adam(module.parameters(), lr=0.01))
    Xt, yt = torch.from_numpy(X).reshape(-1, *model.input_shape), torch.from_numpy(y).long()
    for seed in (5, 6):
        for batches in epoch_batches(40, 10, 1, 7, np.random.default_rng(seed)):
            for idx in batches:
                opt.zero_grad()
                torch.nn.functional.cross_entropy(module(Xt[idx]), yt[idx]).backward()
                opt.step()
    want = torch.nn.utils.parameters_to_vector(module.parameters()).detach().numpy()
    np.testing.assert_allclose(theta, want, rtol=1e-9, atol=1e-12)
    assert ours.t == 14
