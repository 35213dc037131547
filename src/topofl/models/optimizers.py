"""Local optimisers and step budgets: the update rules a client applies to its stochastic gradients
(``sgd``, ``sgd-momentum``, ``adam``) and the order of its mini-batches (epochs, or a step budget).

Pure update rules on one flat parameter vector, NumPy or torch alike (the same arithmetic in the
same order), with their state as plain arrays so that a client can keep it between rounds
(``ctx.state``, which the Flower runtime saves with the node). Details: docs/internals.md.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from topofl.config import OPTIMIZERS

#: the key of a client's kept optimiser state in ``ClientContext.state``
STATE_KEY = "optimizer"


def epoch_batches(n: int, batch_size: int, epochs: int, local_steps: int,
                  rng: np.random.Generator) -> Iterator[list[np.ndarray]]:
    """The mini-batches of one local round, epoch by epoch (the caller checks divergence per epoch).

    ``local_steps == 0``: ``epochs`` passes, each over a fresh ``rng.permutation(n)`` cut into
    consecutive slices of ``batch_size`` (the last may be smaller) — the batches topofl always used.
    ``local_steps = K > 0``: exactly K batches, cycling through freshly shuffled passes in the same
    way (the last pass cut short): FLamby's step budget (du Terrail et al. 2022, §4: a fixed number
    of local updates, a data loader re-iterated when exhausted), which overrides ``epochs``.
    The passes themselves: :func:`epoch_orders`.
    """
    bs = max(1, min(batch_size, n))
    for order, take in epoch_orders(n, batch_size, epochs, local_steps, rng):
        yield [order[i * bs : (i + 1) * bs] for i in range(take)]


def epoch_orders(n: int, batch_size: int, epochs: int, local_steps: int,
                 rng: np.random.Generator) -> Iterator[tuple[np.ndarray, int]]:
    """The passes of :func:`epoch_batches`: each pass's order (``rng.permutation(n)``) and how many of its
    batches are taken — the batches being ``order[i·bs : (i+1)·bs]`` for ``i < take``, with
    ``bs = max(1, min(batch_size, n))``.
    """
    if n < 1:
        raise ValueError(f"local training needs at least one example; got n={n}")
    bs = max(1, min(batch_size, n))
    per_epoch = -(-n // bs)
    if local_steps <= 0:
        for _ in range(epochs):
            yield rng.permutation(n), per_epoch
        return
    left = local_steps
    while left > 0:
        take = min(left, per_epoch)
        yield rng.permutation(n), take
        left -= take


def steps_per_round(n: int, batch_size: int, epochs: int, local_steps: int) -> int:
    """How many mini-batch steps :func:`epoch_batches` gives a client with ``n`` examples."""
    if local_steps > 0:
        return local_steps
    return epochs * -(-n // max(1, min(batch_size, n)))


@dataclass(frozen=True)
class OptimizerSpec:
    """An update rule and its constants (validated by the method's config)."""

    name: str = "sgd"
    lr: float = 0.1
    momentum: float = 0.9
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    @classmethod
    def of(cls, config: Any, lr: float | None = None) -> OptimizerSpec:
        """The rule a training config (:class:`~topofl.config.TrainingConfig`) names, at ``lr`` (default: its own)."""
        return cls(config.optimizer, config.lr if lr is None else lr, config.momentum, config.adam_beta1,
                   config.adam_beta2, config.adam_eps)


class LocalOptimizer:
    """One client's update rule on a flat parameter vector, applied in place.

    - ``sgd``: θ ← θ − lr·g (bit-identical to topofl's SGD before the optimisers existed).
    - ``sgd-momentum``: b ← μ·b + g, θ ← θ − lr·b (heavy ball, PyTorch's ``SGD(momentum=μ)`` with
      no dampening; Polyak 1964, Sutskever et al. 2013 Eq. 1–2).
    - ``adam``: Kingma & Ba (2015) Algorithm 1 in PyTorch's arrangement: m ← β1·m + (1−β1)·g,
      v ← β2·v + (1−β2)·g², θ ← θ − (lr / (1−β1ᵗ))·m / (√v / √(1−β2ᵗ) + ε).

    ``xp`` is ``numpy`` or ``torch`` (then ``like``, a tensor whose dtype and device the state
    takes); ``state`` (from :meth:`state`) continues an earlier run of the same rule.
    """

    def __init__(self, spec: OptimizerSpec, xp: Any = np, state: dict[str, Any] | None = None,
                 like: Any = None) -> None:
        if spec.name not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}; got {spec.name!r}")
        self.spec, self.xp, self.like = spec, xp, like
        self.t = 0
        self.buffers: dict[str, Any] = {}
        if state:
            self.load(state)

    def load(self, state: dict[str, Any]) -> None:
        """Continue from ``state`` (:meth:`state`'s form); a state of another rule is ignored (start afresh)."""
        if not state or state.get("name") != self.spec.name:
            self.t, self.buffers = 0, {}
            return
        self.t = int(state.get("t", 0))
        self.buffers = {k: self._array(v) for k, v in state.get("buffers", {}).items()}

    def _array(self, value: Any) -> Any:
        if self.xp is np:
            return np.array(value, dtype=np.float64, copy=True)
        return self.xp.as_tensor(np.asarray(value), dtype=self.like.dtype, device=self.like.device).clone()

    def step(self, theta: Any, g: Any) -> None:
        """Apply one update to ``theta`` in place with gradient ``g`` (which may be overwritten)."""
        s = self.spec
        if s.name == "sgd":
            theta -= s.lr * g
            return
        self.t += 1
        if s.name == "sgd-momentum":
            b = self.buffers.get("momentum")
            if b is None:
                b = self.buffers["momentum"] = g.copy() if self.xp is np else g.clone()
            else:
                b *= s.momentum
                b += g
            theta -= s.lr * b
            return
        m, v = self.buffers.get("m"), self.buffers.get("v")
        if m is None or v is None:
            m = self.buffers["m"] = self.xp.zeros_like(theta)
            v = self.buffers["v"] = self.xp.zeros_like(theta)
        m *= s.beta1
        m += (1.0 - s.beta1) * g
        v *= s.beta2
        v += (1.0 - s.beta2) * (g * g)
        bias1 = 1.0 - s.beta1 ** self.t
        bias2 = 1.0 - s.beta2 ** self.t
        denom = self.xp.sqrt(v) / (bias2 ** 0.5) + s.eps
        theta -= (s.lr / bias1) * (m / denom)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled as its rule and :meth:`state` (a decentralised node carries its optimiser);
        it unpickles as a NumPy optimiser.
        """
        return {"spec": self.spec, "state": self.state()}

    def __setstate__(self, saved: dict[str, Any]) -> None:
        self.spec, self.xp, self.like = saved["spec"], np, None
        self.t, self.buffers = 0, {}
        self.load(saved["state"])

    def state(self) -> dict[str, Any]:
        """The state to keep for the next round (buffers as float64 NumPy arrays; empty for sgd)."""
        if self.spec.name == "sgd":
            return {}
        buffers = {k: (v if self.xp is np else v.detach().to(device="cpu", dtype=self.xp.float64).numpy()).copy()
                   for k, v in self.buffers.items()}
        return {"name": self.spec.name, "t": self.t, "buffers": buffers}
