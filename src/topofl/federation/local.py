"""Local training: mini-batch SGD on a model's flat parameters (vectorised over each batch).

A model that trains faster natively (the PyTorch models: :meth:`TorchClassifier.sgd
<topofl.models.torch_models.TorchClassifier.sgd>`) gets the whole loop — the same batches, the
same update — so parameters cross the NumPy/torch boundary once per local round, not per step.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from topofl.models.base import Model
from topofl.models.optimizers import LocalOptimizer, OptimizerSpec, epoch_orders

ExtraGrad = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class AffineGrad:
    """An extra gradient term ``scale · (θ − center) + offset``: FedProx's and Ditto's proximal
    pulls (scale μ or λ towards a model), SCAFFOLD's constant correction c − c_i (offset only).

    Being data, not a closure, it can be evaluated by a model's native training loop.
    """

    scale: float = 0.0
    center: np.ndarray | None = None
    offset: np.ndarray | None = None

    def __call__(self, theta: np.ndarray) -> np.ndarray:
        if self.center is not None and self.scale != 0.0:
            g: np.ndarray = self.scale * (theta - self.center)
            return g if self.offset is None else g + self.offset
        if self.offset is None:
            return np.zeros_like(theta)
        return self.offset

    def to_torch(self, torch: Any, dtype: Any, device: Any) -> Callable[[Any], Any]:
        """The same term on a torch parameter vector (constants converted once)."""
        center = (torch.from_numpy(np.asarray(self.center)).to(device=device, dtype=dtype) if self.center is not None
                  else None)
        offset = (torch.from_numpy(np.asarray(self.offset)).to(device=device, dtype=dtype) if self.offset is not None
                  else None)
        scale = float(self.scale)

        def term(flat: Any) -> Any:
            if center is not None and scale != 0.0:
                g = (flat - center) * scale
                return g if offset is None else g + offset
            return offset if offset is not None else torch.zeros_like(flat)

        return term


def ensure_finite(method: str, *params: np.ndarray, **step_sizes: float) -> None:
    """Raise ``FloatingPointError`` naming the method and its step sizes if training diverged."""
    if not all(np.isfinite(p).all() for p in params):
        sizes = ", ".join(f"{k}={v}" for k, v in step_sizes.items())
        raise FloatingPointError(f"{method} diverged (non-finite parameters) with {sizes}; lower the step sizes")


def sgd(  # noqa: PLR0913 - the local-training keywords every method passes, by name
    model: Model,
    theta: np.ndarray,
    X: np.ndarray,
    y: np.ndarray,
    *,
    epochs: int,
    lr: float,
    batch_size: int,
    rng: np.random.Generator,
    extra_grad: ExtraGrad | None = None,
    sample_weight: np.ndarray | None = None,
    local_steps: int = 0,
    optimizer: LocalOptimizer | None = None,
) -> np.ndarray:
    """Run ``epochs`` passes of mini-batch SGD from ``theta`` (or ``local_steps`` steps) and return
    the new parameters.

    ``extra_grad(theta)`` is added to every stochastic gradient: the proximal term of FedProx,
    a control-variate correction, a personalisation penalty, … The batches are those of
    :func:`~topofl.models.optimizers.epoch_batches` (taken as :func:`~topofl.models.optimizers.epoch_orders`
    gives them): each epoch visits the samples in a fresh random order, the last batch of an epoch may be
    smaller, and a step budget ``local_steps > 0``
    overrides ``epochs``. ``sample_weight`` (one weight per row of ``X``) makes each batch's loss
    the mean of its weighted losses (the model's ``grad(..., sample_weight=...)``); the batches are
    the same. ``optimizer`` (default: plain SGD at ``lr``) applies its rule at its own step size
    (``lr`` then only names the step size in a divergence message) and keeps its state, which the
    caller may save for the next round (:meth:`LocalOptimizer.state`).
    """
    optimizer = optimizer if optimizer is not None else LocalOptimizer(OptimizerSpec("sgd", lr))
    native = getattr(model, "sgd", None)
    weighted = {} if sample_weight is None else {"sample_weight": np.asarray(sample_weight, dtype=np.float64)}
    if native is not None and (extra_grad is None or isinstance(extra_grad, AffineGrad)):
        return native(theta, X, y, epochs=epochs, batch_size=batch_size, rng=rng, extra=extra_grad,  # type: ignore[no-any-return]
                      local_steps=local_steps, optimizer=optimizer, **weighted)
    if sample_weight is not None and weighted["sample_weight"].shape != (X.shape[0],):
        raise ValueError(f"sample_weight must have shape ({X.shape[0]},); got {weighted['sample_weight'].shape}")
    theta = np.array(theta, dtype=np.float64, copy=True)
    n = X.shape[0]
    bs = max(1, min(batch_size, n))
    # plain SGD (LocalOptimizer.step's θ −= lr·g; only the library's own optimiser: a subclass's or a patched step
    # is called) without weights or extra terms: a model's own passes (epoch_sgd) run every step of a pass
    lean_sgd = getattr(model, "epoch_sgd", None)
    if (lean_sgd is not None and sample_weight is None and extra_grad is None and optimizer.spec.name == "sgd"
            and type(optimizer).step is LocalOptimizer.step and "step" not in vars(optimizer)):
        run = lean_sgd(theta, X, y, bs, optimizer.spec.lr)
        if run is not None:
            with np.errstate(over="ignore", invalid="ignore"):  # divergence is reported below, by name
                for epoch, (order, take) in enumerate(epoch_orders(n, bs, epochs, local_steps, rng)):
                    run(order, take * bs)
                    _check_pass(theta, optimizer, epoch, lr, local_steps, epochs, bs)
            return theta
    kernel = getattr(model, "epoch_gradient", None)
    passes = kernel(theta, X, y, weighted.get("sample_weight")) if kernel is not None else None
    if passes is None:
        gradient, own = _gradient_step(model, theta, X, y, weighted.get("sample_weight"))
        begin, sliced = None, None
    else:   # each pass's rows gathered once, every batch a view of them (epoch_orders' consecutive slices)
        (begin, sliced), own = passes, True
    # plain SGD in the loop itself: LocalOptimizer.step's θ −= lr·g, the product written into the loop's own buffer
    # (only for the library's own optimiser: a subclass's or a patched step is called)
    plain = own and optimizer.spec.name == "sgd" and type(optimizer).step is LocalOptimizer.step \
        and "step" not in vars(optimizer)
    step, rate = optimizer.step, optimizer.spec.lr
    multiply, subtract = np.multiply, np.subtract
    with np.errstate(over="ignore", invalid="ignore"):  # divergence is reported below, by name
        for epoch, (order, take) in enumerate(epoch_orders(n, bs, epochs, local_steps, rng)):
            if begin is not None:   # the rows of the batches taken (a step budget may stop within the pass)
                begin(order if take * bs >= n else order[:take * bs])
            for i in range(take):
                start = i * bs
                g = sliced(start, min(start + bs, n)) if sliced is not None else gradient(order[start:start + bs])
                if extra_grad is not None:  # into the buffer (the same sum as g + extra, in its place)
                    g = np.add(g, extra_grad(theta), out=g) if own else g + extra_grad(theta)
                if plain:
                    subtract(theta, multiply(rate, g, out=g), out=theta)
                else:
                    step(theta, g)
            _check_pass(theta, optimizer, epoch, lr, local_steps, epochs, bs)
    return theta


def _check_pass(theta: np.ndarray, optimizer: LocalOptimizer, epoch: int, lr: float, local_steps: int, epochs: int,
                bs: int) -> None:
    """After a pass: ``FloatingPointError`` naming the optimiser, the pass and the step sizes if θ diverged."""
    if not math.isfinite(float(theta @ theta)):  # NaN or inf in θ makes it NaN or inf; so may an overflow
        budget = {"local_steps": local_steps} if local_steps > 0 else {"epochs": epochs}
        ensure_finite(f"local {optimizer.spec.name} (pass {epoch + 1})", theta, lr=lr, **budget, batch_size=bs)


BatchGrad = Callable[[np.ndarray], np.ndarray]


def _gradient_step(model: Model, theta: np.ndarray, X: np.ndarray, y: np.ndarray,
                   sample_weight: np.ndarray | None) -> tuple[BatchGrad, bool]:
    """``gradient(idx)``: the model's stochastic gradient at ``theta`` (read when called) on the batch ``X[idx]``,
    ``y[idx]``, weighted by ``sample_weight[idx]`` when there are weights; and whether that gradient is written
    into a buffer of the loop's own (then free to be changed in place until the next step).

    A model with ``batch_gradient`` (the NumPy linear models,
    :meth:`~topofl.models.linear.LinearModel.batch_gradient`) gives a kernel that writes every step's gradient
    into one float64 buffer kept for the whole local round, its views of ``theta`` and of the buffer made once:
    no loss computed, no concatenation, no new array and no per-step checks. Any other model's ``grad`` returns
    an array that is left as it is.
    """
    kernel = getattr(model, "batch_gradient", None)
    if kernel is not None:
        return kernel(theta, X, y, sample_weight), True
    if sample_weight is None:
        return (lambda idx: model.grad(theta, X[idx], y[idx])), False
    return (lambda idx: model.grad(theta, X[idx], y[idx], sample_weight=sample_weight[idx])), False
