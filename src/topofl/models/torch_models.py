"""Optional PyTorch image classifiers on flat parameter vectors (the paper's CNNs).

:class:`TorchClassifier` wraps a ``torch.nn.Module`` factory behind the contract of the NumPy models
(flat parameter vectors; replies in the module's dtype, float32 by default); :func:`cnn`,
:func:`same_cnn` and :func:`paper_cnn` build the Sheaf-FMTL CNNs (Table 2; §4.2's same-size CNN).
PyTorch is imported lazily (``pip install 'topofl[torch]'``). See
docs/internals.md#topofl.models.torch_models for the numerics and the
derivation of the CNNs from the paper's parameter and byte counts.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.special import softmax

from topofl._validation import check_choice, check_int, check_range

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch import Tensor, nn

CPU_INSTALL_COMMAND = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
TORCH_MISSING_MESSAGE = f"the torch models need PyTorch: pip install 'topofl[torch]' (CPU build: {CPU_INSTALL_COMMAND})"

_DTYPES = ("float32", "float64")
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@dataclass(frozen=True)
class ParamSlot:
    """One parameter tensor of a module inside the flat vector: ``theta[offset : offset + size]``
    reshaped to ``shape`` is the tensor named ``name`` (its ``named_parameters()`` name).
    """

    name: str
    shape: tuple[int, ...]
    offset: int

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def _require_torch():
    """Import and return ``torch``, or raise ``ImportError`` with the install command."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised only without torch
        raise ImportError(TORCH_MISSING_MESSAGE) from exc
    return torch


# --------------------------------------------------------------------------------------------
# Generic wrapper
# --------------------------------------------------------------------------------------------
class _Runtime:
    """The mutable part of a :class:`TorchClassifier`: one module whose parameters view ``flat``."""

    def __init__(self, model: TorchClassifier) -> None:
        torch = _require_torch()
        self.torch = torch
        self.dtype = getattr(torch, model.dtype)
        self.device = torch.device(resolve_device(model.device))
        module = model.module_factory()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"module_factory must return a torch.nn.Module; got {type(module).__name__}")
        module = module.to(dtype=self.dtype, device=self.device).eval()
        params = list(module.parameters())
        if not params:
            raise ValueError("the module has no parameters")
        n = sum(p.numel() for p in params)
        flat = torch.empty(n, dtype=self.dtype, device=self.device)
        weight_mask, offset = np.zeros(n, dtype=bool), 0
        names = [name for name, _ in module.named_parameters()]
        layout = []
        with torch.no_grad():
            for name, p in zip(names, params, strict=True):
                layout.append(ParamSlot(name, tuple(int(s) for s in p.shape), offset))
                k = p.numel()
                view = flat[offset : offset + k]
                view.copy_(p.reshape(-1))
                p.data = view.view_as(p)  # the parameter now lives inside ``flat``
                p.requires_grad_(True)
                if p.ndim > 1:
                    weight_mask[offset : offset + k] = True
                offset += k
        self.module, self.params, self.flat = module, params, flat
        self.layout = tuple(layout)
        self.n_params = n
        self.weight_idx = np.flatnonzero(weight_mask)
        self.weight_mask = torch.from_numpy(weight_mask).to(device=self.device, dtype=self.dtype)
        self.head = _last_linear(module)
        # one forward pass checks that the module accepts the input shape and outputs n_classes
        with torch.inference_mode():
            out = module(torch.zeros((1, *model.input_shape), dtype=self.dtype, device=self.device))
        if tuple(out.shape) != (1, model.n_classes):
            raise ValueError(
                f"the module maps an input of shape (1, {', '.join(map(str, model.input_shape))}) to "
                f"{tuple(out.shape)}; expected (1, {model.n_classes}) logits"
            )

    def load(self, theta: np.ndarray) -> None:
        """Copy ``theta`` (float32 or float64; rounded to the module's dtype) into the module."""
        if theta.flags.writeable:
            source = self.torch.from_numpy(theta)
        else:   # a read-only vector (a saved model, a history's copy) is only read here
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                source = self.torch.from_numpy(theta)
        with self.torch.no_grad():
            self.flat.copy_(source)

    def images(self, X: np.ndarray, shape: tuple[int, ...]) -> torch.Tensor:
        return self.torch.from_numpy(X).to(device=self.device, dtype=self.dtype).reshape(X.shape[0], *shape)


def _last_linear(module: Any) -> Any:
    """The module's last ``nn.Linear`` (its classifier head), whose input is the penultimate layer."""
    nn = _require_torch().nn
    linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
    return linears[-1] if linears else None


def resolve_device(device: str) -> str:
    """``"auto"`` → ``"cuda"`` when a CUDA device is present, else ``"cpu"``; other names as given."""
    if device == "auto":
        return "cuda" if _require_torch().cuda.is_available() else "cpu"
    return device


@dataclass(frozen=True)
class TorchClassifier:
    """A multiclass ``torch.nn.Module`` classifier exposed on flat parameter vectors.

    Parameter vectors: :meth:`sgd` returns the module's parameters in its own dtype (float32 by
    default: :attr:`param_dtype`), laid out as :attr:`layout` says; every method accepts float32
    or float64 vectors (a float64 vector is rounded to the module's dtype when loaded, so the
    float64 averages a server keeps are read exactly as the module would hold them). :meth:`init`
    returns float64 (the module's initial values, exactly), the starting point of a server's
    float64 state.

    Parameters
    ----------
    module_factory : callable () -> torch.nn.Module
        Builds the network: input ``(n, C, H, W)`` images, output ``(n, n_classes)`` logits. It
        must be picklable (a module-level function, a ``functools.partial`` of one, or a
        :class:`CNNBuilder`) for the model to cross process boundaries. Called once at
        construction, and once per :meth:`init` (to draw the default initialisation).
    input_shape : (C, H, W)
        Shape of one image; ``X`` rows are these images flattened in C-order.
    n_classes : int
        Number of classes C (labels are 0, …, C−1).
    l2 : float
        Strength of the penalty ``l2/2 * ||weights||²`` added to the mean cross-entropy.
    dtype : "float32" or "float64"
        Precision of the torch computation and of the vectors :meth:`sgd` returns (inputs,
        scores, features and gradients are float64 NumPy).
    chunk_size : int
        Largest number of rows per forward/backward pass (bounds memory on big inputs).
    """

    module_factory: Callable[[], Any]
    input_shape: tuple[int, ...]
    n_classes: int = 10
    l2: float = 1e-3
    dtype: str = "float32"
    chunk_size: int = 1024
    task: str = "multiclass"
    device: str = "cpu"

    if TYPE_CHECKING:  # set by __post_init__ / __setstate__ with object.__setattr__; not a dataclass field

        @property
        def _rt(self) -> _Runtime: ...

    def __post_init__(self) -> None:
        _require_torch()
        shape = tuple(int(s) for s in np.atleast_1d(self.input_shape))
        if not shape or min(shape) < 1:
            raise ValueError("input_shape must hold positive sizes, e.g. (C, H, W) or (n_features,); "
                             f"got {self.input_shape!r}")
        object.__setattr__(self, "input_shape", shape)
        check_int("n_classes", self.n_classes, 2)
        check_range("l2", self.l2, 0.0)
        check_int("chunk_size", self.chunk_size, 1)
        check_choice("dtype", self.dtype, _DTYPES)
        check_choice("task", self.task, ("multiclass", "binary"))
        if self.task == "binary" and self.n_classes != 2:
            raise ValueError(f"a binary torch model has 2 logits; got n_classes={self.n_classes}")
        if not isinstance(self.device, str) or not self.device:
            raise ValueError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N'; got {self.device!r}")
        object.__setattr__(self, "_rt", _Runtime(self))

    # pickling / copying: ship the fields, rebuild the module on the other side
    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_rt"}

    def __setstate__(self, state: dict) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, v)
        object.__setattr__(self, "_rt", _Runtime(self))

    # ---- bookkeeping ---------------------------------------------------------------------
    @property
    def n_features(self) -> int:
        return math.prod(self.input_shape)

    @property
    def n_outputs(self) -> int:
        return self.n_classes

    @property
    def n_params(self) -> int:
        return self._rt.n_params

    @property
    def weight_mask(self) -> np.ndarray:
        """Boolean mask of the penalised coordinates of ``theta`` (the weights, not the biases)."""
        mask = np.zeros(self.n_params, dtype=bool)
        mask[self._rt.weight_idx] = True
        return mask

    def init(self, rng: np.random.Generator | None = None, scale: float = 0.0) -> np.ndarray:
        """The module's default initialisation (e.g. Kaiming-uniform) as a flat float64 vector.

        Deterministic given ``rng`` (``None`` means ``np.random.default_rng(0)``): one integer
        drawn from ``rng`` seeds torch inside ``torch.random.fork_rng``, so the global torch RNG
        state is left untouched. With ``scale > 0``, N(0, scale²) noise (drawn from ``rng``) is
        added to the weights on top of the default initialisation; ``scale = 0`` adds nothing.
        """
        torch = self._rt.torch
        rng = rng if rng is not None else np.random.default_rng(0)
        seed = int(rng.integers(2**31))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            fresh = self.module_factory()
        with torch.no_grad():
            theta = torch.nn.utils.parameters_to_vector(fresh.parameters()).to(torch.float64).numpy().copy()
        if theta.shape != (self.n_params,):
            raise RuntimeError(f"module_factory built {theta.size} parameters; expected {self.n_params}")
        if scale > 0:
            idx = self._rt.weight_idx
            theta[idx] += rng.normal(0.0, scale, idx.size)
        return theta

    def module(self, theta: np.ndarray) -> nn.Module:
        """A fresh ``torch.nn.Module`` built by :attr:`module_factory` (a user's module comes back as
        its own class) holding the parameters ``theta``, on the CPU in the model's dtype, in eval mode:
        the network to keep, fine-tune or ``torch.save`` (its ``state_dict()``). Buffers (running
        statistics) are the factory's: flat vectors carry parameters only.
        """
        torch = self._rt.torch
        theta = self._theta(theta)
        module = self.module_factory().to(dtype=self._rt.dtype, device="cpu")
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(torch.from_numpy(np.array(theta, dtype=np.float64)).to(self._rt.dtype),
                                                list(module.parameters()))
        return module.eval()

    # ---- input handling ------------------------------------------------------------------
    @property
    def param_dtype(self) -> np.dtype:
        """The dtype of the vectors :meth:`sgd` returns: the module's own (``dtype``)."""
        return np.dtype(self.dtype)

    @property
    def layout(self) -> tuple[ParamSlot, ...]:
        """Where each of the module's parameters lies in ``theta``: name, shape and offset, in the
        order of ``module.parameters()`` (the per-layer arrays a Flower app exchanges).
        """
        return self._rt.layout

    def _theta(self, theta: np.ndarray) -> np.ndarray:
        theta = np.asarray(theta)
        if theta.dtype not in _FLOATS:   # float32 and float64 are read as they are (the module casts on load)
            theta = theta.astype(np.float64)
        theta = np.ascontiguousarray(theta)
        if theta.shape != (self.n_params,):
            raise ValueError(f"theta must have shape ({self.n_params},); got {theta.shape}")
        return theta

    def _X(self, X: np.ndarray) -> np.ndarray:
        X = np.ascontiguousarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(
                f"X must have shape (n, {self.n_features}) (inputs of shape {'x'.join(map(str, self.input_shape))}, "
                f"flattened); got {X.shape}"
            )
        return X

    def _y(self, y: np.ndarray, n: int) -> np.ndarray:
        y = np.asarray(y)
        if y.shape != (n,):
            raise ValueError(f"y must have shape ({n},); got {y.shape}")
        idx = y.astype(np.int64)
        if n and (idx.min() < 0 or idx.max() >= self.n_classes or np.any(idx != y)):
            raise ValueError(f"y must hold class ids in 0..{self.n_classes - 1}; got values in [{y.min()}, {y.max()}]")
        return idx

    def _penalty(self, theta: np.ndarray) -> float:
        w = np.asarray(theta, dtype=np.float64)[self._rt.weight_idx]
        # einsum, not ``w @ w``: a BLAS dot here fights torch's OpenMP threads for the cores
        return 0.5 * self.l2 * float(np.einsum("i,i->", w, w))

    # ---- the contract --------------------------------------------------------------------
    def loss_grad(
        self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None
    ) -> tuple[float, np.ndarray]:
        """Mean cross-entropy plus the L2 penalty, and its gradient (flat float64); with
        ``sample_weight``, the mean of the weighted cross-entropies (1/n) Σ w_i ℓ_i.
        """
        theta, X = self._theta(theta), self._X(X)
        labels = self._y(y, X.shape[0])
        n = X.shape[0]
        sample_w = self._sample_weight(sample_weight, n)
        if n == 0:
            raise ValueError("loss_grad needs at least one sample")
        rt, torch = self._rt, self._rt.torch
        F = torch.nn.functional
        rt.load(theta)
        total = 0.0
        grad: Tensor | None = None
        for start in range(0, n, self.chunk_size):
            stop = min(start + self.chunk_size, n)
            xb = rt.images(X[start:stop], self.input_shape)
            yb = torch.from_numpy(labels[start:stop]).to(rt.device)
            with torch.enable_grad():
                if sample_w is None:
                    loss = F.cross_entropy(rt.module(xb), yb, reduction="sum") / n
                else:
                    loss = (F.cross_entropy(rt.module(xb), yb, reduction="none") * sample_w[start:stop]).sum() / n
                gs = torch.autograd.grad(loss, rt.params, allow_unused=True)
            flat_g = torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1)
                                for g, p in zip(gs, rt.params, strict=True)])
            grad = flat_g if grad is None else grad.add_(flat_g)
            total += float(loss.detach())
        assert grad is not None  # n > 0: at least one chunk
        g = grad.to(torch.float64).cpu().numpy().copy()
        idx = rt.weight_idx
        if self.l2:
            g[idx] += self.l2 * theta[idx]
        return total + self._penalty(theta), g

    def loss(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
        """Mean cross-entropy plus the L2 penalty (no backward pass)."""
        theta, X = self._theta(theta), self._X(X)
        labels = self._y(y, X.shape[0])
        if X.shape[0] == 0:
            raise ValueError("loss needs at least one sample")
        torch = self._rt.torch
        logits = torch.from_numpy(self._logits(theta, X))
        data = float(torch.nn.functional.cross_entropy(logits, torch.from_numpy(labels)))
        return data + self._penalty(theta)

    def grad(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray,
             sample_weight: np.ndarray | None = None) -> np.ndarray:
        return self.loss_grad(theta, X, y, sample_weight)[1]

    def _sample_weight(self, sample_weight: np.ndarray | None, n: int) -> Tensor | None:
        """The per-sample weights as a tensor of the model's dtype on its device (``None`` stays ``None``)."""
        if sample_weight is None:
            return None
        w = np.asarray(sample_weight, dtype=np.float64)
        if w.shape != (n,):
            raise ValueError(f"sample_weight must have shape ({n},); got {w.shape}")
        rt = self._rt
        return rt.torch.from_numpy(w).to(device=rt.device, dtype=rt.dtype)

    def _logits(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Float64 logits of shape (n, n_classes), computed chunk by chunk without autograd."""
        rt, torch = self._rt, self._rt.torch
        rt.load(theta)
        out = np.empty((X.shape[0], self.n_classes))
        with torch.inference_mode():
            for start in range(0, X.shape[0], self.chunk_size):
                stop = min(start + self.chunk_size, X.shape[0])
                out[start:stop] = rt.module(rt.images(X[start:stop], self.input_shape)).to(torch.float64).cpu().numpy()
        return out

    def outputs(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """Mean cross-entropy (without the penalty), scores (as :meth:`predict_scores`) and
        predictions (as :meth:`predict`) from one forward pass — what evaluation needs.
        """
        theta, X = self._theta(theta), self._X(X)
        labels = self._y(y, X.shape[0])
        logits = self._logits(theta, X)
        torch = self._rt.torch
        data = float(torch.nn.functional.cross_entropy(torch.from_numpy(logits), torch.from_numpy(labels)))
        p = softmax(logits, axis=1)
        return data, (p[:, 1] if self.task == "binary" else p), np.argmax(logits, axis=1).astype(np.float64)

    def predict_scores(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Class probabilities, shape (n, n_classes) — for a binary model P(y = 1), shape (n,);
        the softmax is taken in float64.
        """
        p = softmax(self._logits(self._theta(theta), self._X(X)), axis=1)
        return p[:, 1] if self.task == "binary" else p

    def predict(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Predicted class ids as floats, shape (n,)."""
        return np.argmax(self._logits(self._theta(theta), self._X(X)), axis=1).astype(np.float64)

    def features(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Penultimate-layer activations (the input of the last ``nn.Linear``), float64, one row per
        sample: the learned representation pTopoFL computes its descriptor on (§4.1 C).
        """
        rt, torch = self._rt, self._rt.torch
        if rt.head is None:
            raise ValueError("the module has no nn.Linear layer, so it has no penultimate representation")
        theta, X = self._theta(theta), self._X(X)
        rt.load(theta)
        rows: list[np.ndarray] = []

        def grab(_module: Any, inputs: tuple[Any, ...]) -> None:
            rows.append(inputs[0].reshape(inputs[0].shape[0], -1).to(torch.float64).cpu().numpy())

        handle = rt.head.register_forward_pre_hook(grab)
        try:
            with torch.inference_mode():
                for start in range(0, X.shape[0], self.chunk_size):
                    rt.module(rt.images(X[start : start + self.chunk_size], self.input_shape))
        finally:
            handle.remove()
        return np.concatenate(rows) if rows else np.empty((0, 0))

    def sgd(
        self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, *, epochs: int, batch_size: int,
        rng: np.random.Generator, optimizer: Any, extra: Any = None, sample_weight: np.ndarray | None = None,
        local_steps: int = 0,
    ) -> np.ndarray:
        """Mini-batch SGD run inside torch (:func:`topofl.federation.local.sgd` delegates here).

        The same batches as the NumPy loop — each epoch ``rng.permutation(n)``, consecutive slices
        of ``batch_size`` — and the same update θ ← θ − lr·(∇(mean CE + l2/2‖w‖²) + extra(θ)), but
        the parameters stay in the model's dtype on its device for the whole call: converted once
        on entry and once on exit, not per step. ``extra`` is an
        :class:`~topofl.federation.local.AffineGrad` (proximal and control-variate terms). With
        ``sample_weight`` each batch's loss is the mean of its weighted cross-entropies. The step
        budget ``local_steps`` as in the NumPy loop; ``optimizer`` (a
        :class:`~topofl.models.optimizers.LocalOptimizer`) gives the rule and ``lr``: plain SGD
        runs per parameter, another rule on the device on the flat parameters, its state handed back.
        Returns a fresh vector of :attr:`param_dtype`.
        """
        from topofl.models.optimizers import LocalOptimizer, epoch_batches

        theta, X = self._theta(theta), self._X(X)
        labels = self._y(y, X.shape[0])
        sample_w = self._sample_weight(sample_weight, X.shape[0])
        rt, torch = self._rt, self._rt.torch
        F = torch.nn.functional
        rt.load(theta)
        n = X.shape[0]
        bs = max(1, min(batch_size, n))
        Xt = rt.images(X, self.input_shape)
        yt = torch.from_numpy(labels).to(rt.device)
        flat, mask, l2 = rt.flat, rt.weight_mask, self.l2
        term = extra.to_torch(torch, rt.dtype, rt.device) if extra is not None else None
        params = rt.params
        weights = [i for i, p in enumerate(params) if p.ndim > 1]   # the entries of ``mask``, parameter by parameter
        lr, rule = optimizer.spec.lr, None   # plain SGD per parameter below; another rule on the flat vector
        if optimizer.spec.name != "sgd":
            rule = LocalOptimizer(optimizer.spec, torch, optimizer.state(), like=flat)
        def batch_grads(idx: Any) -> list[Any]:
            with torch.enable_grad():
                if sample_w is None:
                    loss = F.cross_entropy(rt.module(Xt[idx]), yt[idx])
                else:
                    loss = (F.cross_entropy(rt.module(Xt[idx]), yt[idx], reduction="none") * sample_w[idx]).mean()
                return [gi if gi is not None else torch.zeros_like(p)
                        for gi, p in zip(torch.autograd.grad(loss, params, allow_unused=True), params, strict=True)]

        def flat_step(gs: list[Any]) -> None:   # the gradient as one vector, the rule applied to it
            g = torch.cat([gi.reshape(-1) for gi in gs])
            if l2:
                g.add_(flat * mask, alpha=l2)
            if term is not None:
                g.add_(term(flat))
            if rule is None:
                flat.sub_(g, alpha=lr)
            else:
                rule.step(flat, g)

        for epoch, batches in enumerate(epoch_batches(n, bs, epochs, local_steps, rng)):
            for batch in batches:
                gs = batch_grads(torch.from_numpy(batch).to(rt.device))
                with torch.no_grad():
                    if term is not None or rule is not None:
                        flat_step(gs)
                        continue
                    if l2:   # per parameter, in place: flat_step's sums without the flat copy
                        torch._foreach_add_([gs[i] for i in weights], [params[i] for i in weights], alpha=l2)
                    torch._foreach_add_(params, gs, alpha=-lr)
            # one reduction; a non-finite sum of finite parameters (an overflow) is checked element-wise
            if not bool(torch.isfinite(flat.sum())) and not bool(torch.isfinite(flat).all()):
                raise FloatingPointError(
                    f"local {optimizer.spec.name} (pass {epoch + 1}) diverged (non-finite parameters) with lr={lr}, "
                    f"{f'local_steps={local_steps}' if local_steps > 0 else f'epochs={epochs}'}, "
                    f"batch_size={bs}; "
                    "lower the step sizes"
                )
        if rule is not None:
            optimizer.load(rule.state())
        # one copy in the module's dtype, owned by the caller: no float64 cast (half the bytes for
        # float32, and no second pass); every server rule reads float32 exactly (DESIGN: parameters)
        return flat.detach().to(device="cpu", copy=True).numpy()


# --------------------------------------------------------------------------------------------
# CNN architectures
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConvBlock:
    """``Conv2d(kernel, padding) → ReLU → [MaxPool2d(pool, pool_stride)]`` (pool 0: no pooling)."""

    out_channels: int
    kernel: int
    padding: int = 0
    pool: int = 2
    pool_stride: int | None = None  # None: equal to ``pool``

    def out_size(self, size: int) -> int:
        size = size + 2 * self.padding - self.kernel + 1
        if self.pool:
            stride = self.pool_stride or self.pool
            size = (size - self.pool) // stride + 1
        return size


@dataclass(frozen=True)
class CNNArchitecture:
    """Convolution blocks, then fully connected hidden layers (ReLU), then a linear classifier."""

    convs: tuple[ConvBlock, ...]
    hidden: tuple[int, ...] = ()

    def feature_shape(self, input_shape: tuple[int, int, int]) -> tuple[int, int, int]:
        c, h, w = input_shape
        for b in self.convs:
            c, h, w = b.out_channels, b.out_size(h), b.out_size(w)
            if h < 1 or w < 1:
                raise ValueError(f"input of shape {tuple(input_shape)} is too small for this CNN")
        return c, h, w

    def n_params(self, input_shape: tuple[int, int, int], n_classes: int = 10) -> int:
        """Parameter count, computed without torch."""
        c, total = input_shape[0], 0
        for b in self.convs:
            total += b.out_channels * (c * b.kernel**2 + 1)
            c = b.out_channels
        width = math.prod(self.feature_shape(input_shape))
        for h in (*self.hidden, n_classes):
            total += h * (width + 1)
            width = h
        return total

    def build(self, input_shape: tuple[int, int, int], n_classes: int = 10) -> nn.Module:
        nn = _require_torch().nn
        layers: list[torch.nn.Module] = []
        c = input_shape[0]
        for b in self.convs:
            layers += [nn.Conv2d(c, b.out_channels, b.kernel, padding=b.padding), nn.ReLU()]
            if b.pool:
                layers.append(nn.MaxPool2d(b.pool, stride=b.pool_stride or b.pool))
            c = b.out_channels
        layers.append(nn.Flatten())
        width = math.prod(self.feature_shape(input_shape))
        for h in self.hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, n_classes))
        return nn.Sequential(*layers)


@dataclass(frozen=True)
class CNNBuilder:
    """Picklable, comparable zero-argument module factory: ``architecture.build(shape, classes)``."""

    architecture: CNNArchitecture
    input_shape: tuple[int, int, int]
    n_classes: int = 10

    def __call__(self) -> nn.Module:
        return self.architecture.build(self.input_shape, self.n_classes)


#: The three CNN sizes of Sheaf-FMTL (docs/internals.md#topofl.models.torch_models: the choices and counts).
PAPER_ARCHITECTURES: dict[str, CNNArchitecture] = {
    "small": CNNArchitecture(convs=(ConvBlock(16, 3, padding=0, pool=3, pool_stride=2),)),
    "medium": CNNArchitecture(convs=(ConvBlock(24, 5, padding=2, pool=2), ConvBlock(48, 5, padding=2, pool=0))),
    "large": CNNArchitecture(convs=(ConvBlock(32, 3, pool=2), ConvBlock(64, 3, pool=2)), hidden=(120,)),
    # §4.2's same-size CNN (34,826 parameters on 1×28×28; see docs/internals.md#topofl.models.torch_models)
    "same": CNNArchitecture(convs=(ConvBlock(32, 3, pool=2), ConvBlock(64, 3, pool=2))),
}

MNIST_SHAPE = (1, 28, 28)
CIFAR_SHAPE = (3, 32, 32)

#: Input shape of each dataset name accepted by :func:`paper_cnn` (lower case, no "-"/"_").
DATASET_SHAPES: dict[str, tuple[int, int, int]] = {
    "mnist": MNIST_SHAPE,
    "rmnist": MNIST_SHAPE,
    "rotatedmnist": MNIST_SHAPE,
    "cifar": CIFAR_SHAPE,
    "cifar10": CIFAR_SHAPE,
    "hcifar10": CIFAR_SHAPE,
}

#: Table 2 of the paper (approximate, as printed): parameters of each (size, dataset); and the
#: same-size CNN's count on R-MNIST implied by Table 4 (FedAvg: 27.9 MB = 200 rounds × n × 4 B).
PAPER_PARAM_COUNTS: dict[tuple[str, str], int] = {
    ("same", "rmnist"): 34_875,
    ("small", "rmnist"): 23_000,
    ("medium", "rmnist"): 121_000,
    ("large", "rmnist"): 212_000,
    ("small", "cifar10"): 28_000,
    ("medium", "cifar10"): 154_000,
    ("large", "cifar10"): 297_000,
}


def cnn(
    size: str,
    input_shape: tuple[int, ...] = MNIST_SHAPE,
    n_classes: int = 10,
    *,
    l2: float = 1e-3,
    dtype: str = "float32",
    chunk_size: int = 1024,
    task: str = "multiclass",
    device: str = "cpu",
) -> TorchClassifier:
    """The paper's ``size`` CNN ("small", "medium" or "large" of Table 2, or §4.2's "same") for images of
    ``input_shape``.
    """
    _require_torch()
    check_choice("size", size, tuple(PAPER_ARCHITECTURES))
    shape = tuple(int(s) for s in input_shape)
    if len(shape) != 3:
        raise ValueError(f"a CNN takes images of shape (C, H, W); got input_shape={input_shape!r}")
    shape3: tuple[int, int, int] = (shape[0], shape[1], shape[2])
    builder = CNNBuilder(PAPER_ARCHITECTURES[size], shape3, int(n_classes))
    return TorchClassifier(builder, shape3, int(n_classes), l2=l2, dtype=dtype, chunk_size=chunk_size, task=task,
                           device=device)


def small_cnn(input_shape=MNIST_SHAPE, n_classes: int = 10, **kwargs) -> TorchClassifier:
    """Small CNN: conv3×3(16) valid → ReLU → maxpool 3/2 → FC ``n_classes`` (kwargs: see :func:`cnn`)."""
    return cnn("small", input_shape, n_classes, **kwargs)


def medium_cnn(input_shape=MNIST_SHAPE, n_classes: int = 10, **kwargs) -> TorchClassifier:
    """Medium CNN: conv5×5(24) pad 2 → maxpool 2 → conv5×5(48) pad 2 → FC (kwargs: see :func:`cnn`)."""
    return cnn("medium", input_shape, n_classes, **kwargs)


def large_cnn(input_shape=MNIST_SHAPE, n_classes: int = 10, **kwargs) -> TorchClassifier:
    """Large CNN: conv3×3(32) → pool 2 → conv3×3(64) → pool 2 → FC 120 → FC (kwargs: see :func:`cnn`)."""
    return cnn("large", input_shape, n_classes, **kwargs)


def same_cnn(input_shape=MNIST_SHAPE, n_classes: int = 10, **kwargs) -> TorchClassifier:
    """§4.2's same-size CNN: conv3×3(32) → pool 2 → conv3×3(64) → pool 2 → FC (34,826 parameters on
    1×28×28, 10 classes; docs/internals.md#topofl.models.torch_models derives it from Table 4) (kwargs: see
    :func:`cnn`).
    """
    return cnn("same", input_shape, n_classes, **kwargs)


#: Factories by size name: ``CNN_FACTORIES[size](input_shape, n_classes, l2=..., dtype=...)``.
CNN_FACTORIES: dict[str, Callable[..., TorchClassifier]] = {
    "small": small_cnn,
    "medium": medium_cnn,
    "large": large_cnn,
    "same": same_cnn,
}


def dataset_shape(dataset: str) -> tuple[int, int, int]:
    """Image shape of a dataset name such as "mnist", "r-mnist", "rotated_mnist", "cifar" or "cifar-10"."""
    key = dataset.lower().replace("-", "").replace("_", "").replace(" ", "")
    if key not in DATASET_SHAPES:
        raise ValueError(f"dataset must be one of {', '.join(DATASET_SHAPES)} (case, '-' and '_' ignored); "
                         f"got {dataset!r}")
    return DATASET_SHAPES[key]


def paper_cnn(size: str, dataset: str, *, n_classes: int = 10, l2: float = 1e-3,
              dtype: str = "float32") -> TorchClassifier:
    """The Sheaf-FMTL CNN of a size ("small", "medium", "large", "same") for a dataset ("rmnist", "cifar10", …)."""
    _require_torch()
    check_choice("size", size, tuple(CNN_FACTORIES))
    return CNN_FACTORIES[size](dataset_shape(dataset), n_classes, l2=l2, dtype=dtype)


__all__ = [
    "CIFAR_SHAPE",
    "CNN_FACTORIES",
    "CNNArchitecture",
    "CNNBuilder",
    "ConvBlock",
    "CPU_INSTALL_COMMAND",
    "DATASET_SHAPES",
    "MNIST_SHAPE",
    "PAPER_ARCHITECTURES",
    "PAPER_PARAM_COUNTS",
    "TORCH_MISSING_MESSAGE",
    "ParamSlot",
    "TorchClassifier",
    "cnn",
    "dataset_shape",
    "large_cnn",
    "medium_cnn",
    "paper_cnn",
    "same_cnn",
    "small_cnn",
]
