"""Local training: mini-batch SGD on a model's flat parameters (vectorised over each batch)."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from topofl.models.linear import LinearModel

ExtraGrad = Callable[[np.ndarray], np.ndarray]


def ensure_finite(method: str, *params: np.ndarray, **step_sizes: float) -> None:
    """Raise ``FloatingPointError`` naming the method and its step sizes if training diverged."""
    if not all(np.isfinite(p).all() for p in params):
        sizes = ", ".join(f"{k}={v}" for k, v in step_sizes.items())
        raise FloatingPointError(f"{method} diverged (non-finite parameters) with {sizes}; lower the step sizes")


def sgd(
    model: LinearModel,
    theta: np.ndarray,
    X: np.ndarray,
    y: np.ndarray,
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    rng: np.random.Generator,
    extra_grad: ExtraGrad | None = None,
) -> np.ndarray:
    """Run ``epochs`` passes of mini-batch SGD from ``theta`` and return the new parameters.

    ``extra_grad(theta)`` is added to every stochastic gradient: the proximal term of FedProx,
    a control-variate correction, a personalisation penalty, … Each epoch visits the samples in a
    fresh random order; the last batch of an epoch may be smaller.
    """
    theta = np.array(theta, dtype=np.float64, copy=True)
    n = X.shape[0]
    bs = max(1, min(batch_size, n))
    with np.errstate(over="ignore", invalid="ignore"):  # divergence is reported below, by name
        for epoch in range(epochs):
            order = rng.permutation(n)
            for start in range(0, n, bs):
                idx = order[start : start + bs]
                g = model.grad(theta, X[idx], y[idx])
                if extra_grad is not None:
                    g = g + extra_grad(theta)
                theta -= lr * g
            ensure_finite(f"local SGD (epoch {epoch + 1})", theta, lr=lr, epochs=epochs, batch_size=bs)
    return theta
