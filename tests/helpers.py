"""Helpers shared by the tests (importable as ``helpers``: pyproject puts tests/ on the path)."""
from __future__ import annotations

import numpy as np


def blob_client(rng: np.random.Generator, n: int, d: int = 5, shift: float = 0.0, w: np.ndarray | None = None):
    """(X_train, y_train, X_test, y_test) of a linearly separable-ish binary problem."""
    X = rng.standard_normal((n, d)) + shift
    w = np.ones(d) if w is None else w
    y = (X @ w + rng.normal(0, 0.5, n) > shift * w.sum()).astype(float)
    k = n * 3 // 4
    return X[:k], y[:k], X[k:], y[k:]


def make_mlp():
    """A user's own two-layer PyTorch MLP for 20 tabular features, 2 logits (importable by name:
    ``helpers:make_mlp``, as a Flower run names a user's model)."""
    import torch

    return torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def multiclass_peers(dims, n: int = 60, seed: int = 0):
    """One 3-class client per entry of ``dims`` (that many features), 45 training and 15 test rows."""
    from topofl.data.federation import ClientData

    rng = np.random.default_rng(seed)
    out = []
    for k, dk in enumerate(dims):
        X = rng.standard_normal((n, dk))
        y = np.argmax(X[:, :2] @ rng.standard_normal((2, 3)) + rng.normal(0, 0.3, (n, 3)), axis=1).astype(float)
        out.append(ClientData(X[:45], y[:45], X[45:], y[45:], client_id=k))
    return out


def one_line_error(res, *fragments):
    """Assert a CLI result is exit code 2 with one ``Error: ...`` line holding every fragment."""
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:"), res.output
    for f in fragments:
        assert f in lines[0], (f, lines[0])


def make_digit_cnn():
    """A user's own small CNN on 8x8 one-channel images, 10 logits (``helpers:make_digit_cnn``): it needs
    ``input_shape=(1, 8, 8)``, since rows arrive flat."""
    import torch

    class DigitCNN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(1, 4, 3)
            self.head = torch.nn.Linear(4 * 6 * 6, 10)

        def forward(self, x):
            return self.head(torch.relu(self.conv(x)).flatten(1))

    return DigitCNN()
