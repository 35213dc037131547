"""More PyTorch architectures behind the flat-parameter contract.

:class:`ConvNet2Builder` (LEAF's FEMNIST ConvNet-2), :class:`ResNet18Builder` (CIFAR ResNet-18 with
GroupNorm) and :class:`MLPBuilder` (a small MLP for tabular data) are picklable zero-argument builders
of ``torch.nn.Module``. See docs/internals.md#topofl.models.deep for the layers and parameter counts.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from topofl.models.torch_models import _require_torch


@dataclass(frozen=True)
class ConvNet2Builder:
    """LEAF's two-layer FEMNIST CNN (Caldas et al. 2018; pTopoFL §4.1 Scenario D; docs/internals.md)."""

    input_shape: tuple[int, int, int] = (1, 28, 28)
    n_classes: int = 62
    hidden: int = 2048

    def __call__(self) -> Any:
        nn = _require_torch().nn
        c, h, w = self.input_shape
        return nn.Sequential(
            nn.Conv2d(c, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * (h // 4) * (w // 4), self.hidden), nn.ReLU(),
            nn.Linear(self.hidden, self.n_classes),
        )

    def n_params(self) -> int:
        """Parameter count, without torch."""
        c, h, w = self.input_shape
        flat = 64 * (h // 4) * (w // 4)
        return 32 * (c * 25 + 1) + 64 * (32 * 25 + 1) + self.hidden * (flat + 1) + self.n_classes * (self.hidden + 1)


@dataclass(frozen=True)
class ResNet18Builder:
    """ResNet-18 for 32×32 images with GroupNorm (He et al. 2016; pTopoFL §4.1 Scenario C; docs/internals.md)."""

    input_shape: tuple[int, int, int] = (3, 32, 32)
    n_classes: int = 10
    groups: int = 32

    def __call__(self) -> Any:
        nn = _require_torch().nn
        g = self.groups

        class Block(nn.Module):  # type: ignore[name-defined]
            def __init__(self, c_in: int, c_out: int, stride: int) -> None:
                super().__init__()
                self.body = nn.Sequential(
                    nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.GroupNorm(min(g, c_out), c_out), nn.ReLU(),
                    nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False), nn.GroupNorm(min(g, c_out), c_out),
                )
                self.skip = (nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False),
                                           nn.GroupNorm(min(g, c_out), c_out))
                             if stride != 1 or c_in != c_out else nn.Identity())
                self.act = nn.ReLU()

            def forward(self, x: Any) -> Any:
                return self.act(self.body(x) + self.skip(x))

        layers: list[Any] = [nn.Conv2d(self.input_shape[0], 64, 3, 1, 1, bias=False), nn.GroupNorm(min(g, 64), 64),
                             nn.ReLU()]
        c = 64
        for width, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [Block(c, width, stride), Block(width, width, 1)]
            c = width
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, self.n_classes)]
        return nn.Sequential(*layers)


@dataclass(frozen=True)
class MLPBuilder:
    """A fully connected network on flat inputs (see docs/internals.md#topofl.models.deep)."""

    n_features: int
    n_classes: int = 2
    hidden: tuple[int, ...] = (64, 64)

    def __call__(self) -> Any:
        nn = _require_torch().nn
        layers: list[Any] = [nn.Flatten()]
        width = self.n_features
        for h in self.hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, self.n_classes))
        return nn.Sequential(*layers)


@dataclass(frozen=True)
class ModuleCopy:
    """A factory that returns a deep copy of a user's ``torch.nn.Module`` instance (its current
    weights are the initial model); picklable when the module is.
    """

    module: Any

    def __call__(self) -> Any:
        import copy

        return copy.deepcopy(self.module)


def image_shape(n_features: int) -> tuple[int, int, int]:
    """The image shape of flattened inputs: 784 → (1, 28, 28), 3072 → (3, 32, 32), a square
    number → one channel; ``ValueError`` otherwise (pass ``input_shape``).
    """
    if n_features == 3 * 32 * 32:
        return (3, 32, 32)
    side = math.isqrt(n_features)
    if side * side == n_features:
        return (1, side, side)
    raise ValueError(f"cannot tell the image shape of {n_features} features; pass input_shape=(C, H, W)")
