"""One model contract for NumPy and PyTorch: every method trains any model built here.

:func:`build_model` accepts ``None``/``"linear"``, a registered PyTorch name (:data:`MODELS`), a
``"package.module:factory"`` path, a ``torch.nn.Module`` or a factory, or a ready model object.
PyTorch is optional. See docs/internals.md#topofl.models.registry for the specs and input shapes.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from topofl.models.linear import make_model

#: registered PyTorch models: name → what it is
MODELS: dict[str, str] = {
    "linear": "the task's NumPy linear model (logistic / softmax regression, least squares); the default",
    "cnn-small": "Sheaf-FMTL's small CNN: conv3×3(16), maxpool 3/2, FC (23,210 parameters on 1×28×28, 10 classes)",
    "cnn-medium": "Sheaf-FMTL's medium CNN: conv5×5(24), maxpool 2, conv5×5(48), FC (123,562 on 1×28×28)",
    "cnn-large": "Sheaf-FMTL's large CNN: conv3×3(32), pool, conv3×3(64), pool, FC 120, FC (212,146 on 1×28×28)",
    "cnn-same": "Sheaf-FMTL's same-size CNN (§4.2, Table 4): conv3×3(32), pool, conv3×3(64), pool, FC "
                "(34,826 on 1×28×28)",
    "convnet2": "LEAF's FEMNIST CNN: conv5×5(32), pool, conv5×5(64), pool, FC 2048, FC "
                "(6,479,626 on 1×28×28, 10 classes)",
    "resnet18": "ResNet-18, CIFAR variant, GroupNorm instead of BatchNorm (11,173,962 on 3×32×32, 10 classes)",
    "mlp": "two hidden ReLU layers of 64 on flat features",
}


def is_linear(spec: Any) -> bool:
    """Whether ``spec`` names the NumPy linear model (no PyTorch needed)."""
    return spec is None or (isinstance(spec, str) and spec.strip().lower() == "linear")


def spec_is_deep(spec: Any) -> bool:
    """Whether ``spec`` builds a PyTorch model (everything but the linear model and ready NumPy models)."""
    if is_linear(spec):
        return False
    if hasattr(spec, "n_params") and hasattr(spec, "loss_grad"):
        return is_deep(spec)
    return True


def representation(model: Any, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
    """A deep model's penultimate-layer activations of ``X`` (``ValueError`` for other models)."""
    if not is_deep(model):
        raise ValueError(f"a {type(model).__name__} has no learned representation; use descriptor_space='data'")
    Z: np.ndarray = model.features(theta, X)
    return Z


def is_deep(model: Any) -> bool:
    """Whether a built model is a PyTorch model (it has a learned representation, ``features``)."""
    return hasattr(model, "features")


def build_model(
    spec: Any = None,
    *,
    task: str,
    n_features: int,
    n_classes: int = 2,
    l2: float = 1e-3,
    input_shape: tuple[int, ...] | None = None,
    device: str = "cpu",
    dtype: str = "float32",
) -> Any:
    """The model ``spec`` names, for ``task`` on ``n_features`` inputs (docs/internals.md#topofl.models.registry).

    Raises
    ------
    ValueError
        Unknown name, a torch model for a regression task, or inputs that do not fit it.
    ImportError
        A PyTorch model without PyTorch installed.
    """
    if is_linear(spec):
        if input_shape is not None:
            raise ValueError("input_shape applies to a torch model; the linear model reads flat rows "
                             "(pass model=..., e.g. your CNN)")
        return make_model(task, n_features, n_classes, l2)
    if hasattr(spec, "n_params") and hasattr(spec, "loss_grad"):
        return spec
    if task not in ("binary", "multiclass"):
        raise ValueError(f"PyTorch models classify; the task is {task!r} (use the linear model for regression)")
    from topofl.models.torch_models import TorchClassifier, _require_torch

    torch = _require_torch()
    if input_shape is not None:
        input_shape = checked_input_shape(input_shape, n_features)
    classes = 2 if task == "binary" else max(int(n_classes), 2)
    common: dict[str, Any] = {"l2": l2, "dtype": dtype, "task": task, "device": device}
    if isinstance(spec, str) and ":" not in spec:
        return _registered(spec, n_features, classes, input_shape, common)
    factory = _factory(spec, torch)
    try:
        return TorchClassifier(factory, input_shape or (n_features,), classes, **common)
    except (TypeError, RuntimeError) as exc:
        raise ValueError(f"the model does not fit this data ({n_features} features, "
                         f"{classes} classes): {exc}") from None


def checked_input_shape(shape: Any, n_features: int | None = None) -> tuple[int, ...]:
    """``shape`` as a tuple of positive ints (a ``"1,8,8"`` or ``"1x8x8"`` string too) whose product is
    ``n_features`` when given; ``ValueError`` naming both otherwise.
    """
    if isinstance(shape, str):
        text = shape.strip()
        parts = [p.strip() for p in (text.split(",") if "," in text else text.split("x"))]
        try:
            shape = tuple(int(p) for p in parts)   # an empty size ("1,,8") is refused too
        except ValueError:
            raise ValueError(f"input_shape must be sizes such as 1,8,8 (C,H,W); got {shape!r}") from None
    if isinstance(shape, (bool, int, np.integer)) or not hasattr(shape, "__iter__"):
        raise ValueError(f"input_shape must be a tuple of sizes, e.g. (1, 8, 8); got {shape!r}")
    out = tuple(shape)
    if not 1 <= len(out) <= 4 or any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1
                                     for v in out):
        raise ValueError(f"input_shape must be 1 to 4 positive integer sizes, e.g. (1, 8, 8); got {shape!r}")
    out = tuple(int(v) for v in out)
    if n_features is not None and int(np.prod(out)) != n_features:
        raise ValueError(f"input_shape {out} holds {int(np.prod(out))} values per row; the rows have {n_features} "
                         "features")
    return out


def _registered(spec: str, n_features: int, classes: int, input_shape: tuple[int, ...] | None,
                common: dict[str, Any]) -> Any:
    """The registered PyTorch model :data:`MODELS` names ``spec`` (``ValueError`` for an unknown name)."""
    from topofl.models import deep
    from topofl.models.torch_models import TorchClassifier, cnn

    name = spec.strip().lower()
    if name not in MODELS:
        raise ValueError(f"unknown model {spec!r}; available: {', '.join(MODELS)}, 'package.module:factory', "
                         "or a torch.nn.Module")
    if name.startswith("cnn-"):
        return cnn(name[4:], input_shape or deep.image_shape(n_features), classes, **common)
    if name == "convnet2":
        shape = input_shape or deep.image_shape(n_features)
        return TorchClassifier(deep.ConvNet2Builder(_three(shape), classes), shape, classes, **common)
    if name == "resnet18":
        shape = input_shape or deep.image_shape(n_features)
        return TorchClassifier(deep.ResNet18Builder(_three(shape), classes), shape, classes, **common)
    shape = input_shape or (n_features,)
    return TorchClassifier(deep.MLPBuilder(n_features, classes), shape, classes, **common)


def _factory(spec: Any, torch: Any) -> Callable[[], Any]:
    """What builds the user's network: a ``"package.module:factory"`` path, a copy of a ``torch.nn.Module``,
    or the factory itself.
    """
    from topofl.models import deep

    factory: Callable[[], Any]
    if isinstance(spec, str):
        factory = import_factory(spec)
    elif isinstance(spec, torch.nn.Module):
        factory = deep.ModuleCopy(spec)
    elif callable(spec):
        factory = spec
    else:
        raise ValueError("model must be a name, 'package.module:factory', a torch.nn.Module or a factory; "
                         f"got {type(spec).__name__}")
    return factory


def import_factory(path: str) -> Callable[[], Any]:
    """The callable ``package.module:attribute`` names (``ValueError`` naming the path otherwise)."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"a model path must look like 'package.module:factory'; got {path!r}")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import the model factory {path!r}: {exc}") from None
    if not callable(obj):
        raise ValueError(f"{path!r} is not callable; it must build a torch.nn.Module")
    return obj


def describe(model: Any) -> dict[str, Any]:
    """A JSON-able description of a built model (what :func:`topofl.models.io.save_models`
    records); a registered PyTorch model carries its ``name`` and builder arguments, so that
    :func:`rebuild_registered` builds the same network again.
    """
    if not is_deep(model):
        return {"kind": "linear", "class": type(model).__name__, "task": model.task,
                "n_features": int(model.n_features), "n_outputs": int(model.n_outputs), "l2": float(model.l2),
                "n_params": int(model.n_params)}
    import dataclasses

    from topofl.models import deep
    from topofl.models.torch_models import PAPER_ARCHITECTURES, CNNBuilder

    builder = model.module_factory
    name, args = None, {}
    if isinstance(builder, CNNBuilder):
        name = next((f"cnn-{k}" for k, a in PAPER_ARCHITECTURES.items() if a == builder.architecture), None)
    elif isinstance(builder, (deep.ConvNet2Builder, deep.ResNet18Builder, deep.MLPBuilder)):
        name = {deep.ConvNet2Builder: "convnet2", deep.ResNet18Builder: "resnet18",
                deep.MLPBuilder: "mlp"}[type(builder)]
        args = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(builder).items()}
    return {"kind": "torch", "name": name, "builder": repr(builder)[:500], "builder_args": args, "task": model.task,
            "input_shape": list(model.input_shape), "n_classes": int(model.n_classes), "l2": float(model.l2),
            "dtype": model.dtype, "n_params": int(model.n_params)}


def registered_builder(desc: dict[str, Any]) -> Any:
    """The module factory of the registered PyTorch model a :func:`describe` record names (nothing is
    built: a caller may count its parameters first, e.g. on torch's ``meta`` device).
    """
    from topofl.models import deep
    from topofl.models.torch_models import PAPER_ARCHITECTURES, CNNBuilder

    name, args = desc["name"], desc.get("builder_args", {})
    if name.startswith("cnn-") and name[4:] in PAPER_ARCHITECTURES:
        c, h, w = _three(tuple(int(v) for v in desc["input_shape"]))
        return CNNBuilder(PAPER_ARCHITECTURES[name[4:]], (c, h, w), int(desc["n_classes"]))
    builders = {"convnet2": deep.ConvNet2Builder, "resnet18": deep.ResNet18Builder, "mlp": deep.MLPBuilder}
    if name not in builders:
        raise ValueError(f"unknown registered model {name!r}")
    return builders[name](**{k: tuple(v) if isinstance(v, list) else v for k, v in args.items()})


def rebuild_registered(desc: dict[str, Any]) -> Any:
    """The registered PyTorch model a :func:`describe` record names, with its builder arguments."""
    from topofl.models.torch_models import TorchClassifier

    common: dict[str, Any] = {"l2": float(desc["l2"]), "dtype": str(desc["dtype"]), "task": str(desc["task"])}
    return TorchClassifier(registered_builder(desc), tuple(int(v) for v in desc["input_shape"]),
                           int(desc["n_classes"]), **common)


def _three(shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(shape) != 3:
        raise ValueError(f"this CNN takes images of shape (C, H, W); got input_shape={shape!r}")
    return (int(shape[0]), int(shape[1]), int(shape[2]))
