"""NumPy linear models on flat parameter vectors (the DESIGN contract: algorithms see vectors).

Each model maps a flat ``theta`` to predictions, a mean loss with an L2 penalty on the weights
(not on the intercepts), and its gradient. Everything is vectorised over samples.

Layouts
-------
``BinaryLogistic``      theta = [w (d), b]                      loss: mean log-loss
``SoftmaxRegression``   theta = [W (d*C, row-major d x C), b (C)]  loss: mean cross-entropy
``LeastSquares``        theta = [w (d), b]                      loss: mean ½(ŷ − y)²
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

from topofl._validation import check_int, check_range


@functools.cache
def _special() -> ModuleType:
    """``scipy.special``, imported on first use: SciPy adds ~0.15 s to every import of topofl (paid by each
    Flower ClientApp process, one per message in a deployment); the cached call costs ~0.1 µs.
    """
    import scipy.special

    return scipy.special


def _mean(values: np.ndarray) -> float:
    """``np.mean(values)`` of a float64 vector, to the bit, without its Python wrapper (the sum, then the division
    by the count: its own two steps); an empty vector goes through ``np.mean`` (NaN, with its warning).
    """
    if values.dtype != np.float64 or values.size == 0:
        return float(np.mean(values))
    return float(np.add.reduce(values, axis=None) / values.size)


#: every step a fast path (:meth:`LinearModel.batch_gradient`, :meth:`LinearModel.evaluation_outputs`) writes out
#: or goes around: a subclass that overrides any of them gets the general path, which calls them
_STEPS = ("_split", "_logits", "_penalty", "_pack_grad", "_dlogits", "_batch_dlogits", "_kernel", "_loss_at",
          "_data_loss_at", "_outputs_at", "loss_grad", "loss", "grad", "grad_into", "batch_gradient", "epoch_gradient",
          "epoch_sgd", "_kernel_arrays", "_check_theta",
          "evaluation_outputs", "predict_scores", "predict", "joined_evaluation_outputs")


def _library_class(cls: type) -> type:
    """The class of this module that ``cls`` derives from (itself, for the library's own models)."""
    return next(k for k in cls.__mro__ if k.__module__ == __name__)


_OWN_STEPS: dict[type, bool] = {}
_OVERRIDES: dict[tuple[type, str], bool] = {}


def _own_steps(cls: type) -> bool:
    """Whether ``cls`` has every method of :data:`_STEPS` as the library's class it derives from has it: then the
    fast paths compute exactly what the step-by-step methods would. Worked out once per class.
    """
    known = _OWN_STEPS.get(cls)
    if known is None:
        library = _library_class(cls)
        known = _OWN_STEPS[cls] = all(getattr(cls, name, None) is getattr(library, name, None) for name in _STEPS)
    return known


def _overrides(cls: type, name: str) -> bool:
    """Whether ``cls`` replaces the library's method ``name`` (a user's subclass). Worked out once per class."""
    known = _OVERRIDES.get((cls, name))
    if known is None:
        known = _OVERRIDES[(cls, name)] = getattr(cls, name) is not getattr(_library_class(cls), name)
    return known


_ALL = np.logical_and.reduce


class JoinedOutputs(NamedTuple):
    """:meth:`BinaryLogistic.joined_evaluation_outputs`: each split's loss, the splits' scores, predictions and labels
    end to end, and each split's ``(start, stop)`` in them.
    """

    losses: list[float]
    scores: np.ndarray
    pred: np.ndarray
    labels: np.ndarray
    bounds: list[tuple[int, int]]


def _weigh(values: np.ndarray, sample_weight: np.ndarray | None) -> np.ndarray:
    """Per-sample ``values`` (samples on the first axis) times ``sample_weight``; the same array without weights."""
    if sample_weight is None:
        return values
    w = np.asarray(sample_weight, dtype=np.float64)
    if w.shape != (values.shape[0],):
        raise ValueError(f"sample_weight must have shape ({values.shape[0]},); got {w.shape}")
    weighted: np.ndarray = values * w.reshape((-1,) + (1,) * (values.ndim - 1))
    return weighted


@dataclass(frozen=True)
class LinearModel:
    """Common parameter bookkeeping of the linear models.

    Parameters
    ----------
    n_features : int
        Input dimension d.
    l2 : float
        Strength of the penalty ``l2/2 * ||weights||²`` added to the mean loss.
    """

    n_features: int
    l2: float = 1e-3

    task = "binary"
    n_outputs = 1
    #: parameters are float64 vectors (the linear models' iterates are reproducible bit for bit)
    param_dtype = np.dtype(np.float64)

    def __post_init__(self) -> None:
        check_int("n_features", self.n_features, 1)
        check_range("l2", self.l2, 0.0)

    @property
    def n_params(self) -> int:
        return (self.n_features + 1) * self.n_outputs

    def init(self, rng: np.random.Generator | None = None, scale: float = 0.0) -> np.ndarray:
        """Initial parameters: zeros, or N(0, scale²) weights when ``scale > 0``."""
        theta = np.zeros(self.n_params)
        if scale > 0:
            rng = rng if rng is not None else np.random.default_rng(0)
            theta[: self.n_features * self.n_outputs] = rng.normal(0.0, scale, self.n_features * self.n_outputs)
        return theta

    def _split(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d, c = self.n_features, self.n_outputs
        if theta.shape != (self.n_params,):
            raise ValueError(f"theta must have shape ({self.n_params},); got {theta.shape}")
        W = theta[: d * c].reshape(d, c)
        return W, theta[d * c :]

    def _logits(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        W, b = self._split(theta)
        return X @ W + b

    def _penalty(self, theta: np.ndarray) -> float:
        w = theta[: self.n_features * self.n_outputs]
        return 0.5 * self.l2 * float(w @ w)

    def _pack_grad(self, X: np.ndarray, dlogits: np.ndarray, theta: np.ndarray,
                   out: np.ndarray | None = None) -> np.ndarray:
        """Gradient of the mean loss given d(loss_i)/d(logits_i) of shape (n, C), plus the L2 term.

        Written into ``out`` (a float64 vector of ``n_params``; a new one when ``None``) in the layout of
        ``theta``: the weights' block by one matrix product into its row-major view, the intercepts by a mean
        into theirs (a sum, then a division by n: ``numpy.mean``'s own steps); no concatenation. The arithmetic,
        in its order, is that of ``concatenate([(Xᵀ·D / n).ravel(), mean(D, 0)])`` plus ``l2 · w``: the same bits.
        """
        n = X.shape[0]
        dc = self.n_features * self.n_outputs
        g = np.empty(self.n_params) if out is None else out
        gW = g[:dc].reshape(self.n_features, self.n_outputs)  # a view: the product lands in place
        np.matmul(X.T, dlogits, out=gW)
        gW /= n
        gb = np.add.reduce(dlogits, axis=0, out=g[dc:])  # np.mean's two steps, without its Python wrapper
        gb /= n
        g[:dc] += self.l2 * theta[:dc]
        return g

    def _loss_at(self, theta: np.ndarray, Z: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None) -> float:
        """The mean loss with the L2 penalty from the logits ``Z`` (n, C) of ``theta``: :meth:`_data_loss_at`, then
        the penalty added.
        """
        return self._data_loss_at(Z, y, sample_weight) + self._penalty(theta)

    def _data_loss_at(self, Z: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None) -> float:
        """The mean loss (weighted by ``sample_weight``) from the logits ``Z`` (n, C), without the penalty; each model
        defines it.
        """
        raise NotImplementedError

    def _dlogits(self, Z: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None) -> np.ndarray:
        """d(loss_i)/d(logits_i) of every sample from the logits ``Z`` (n, C), weighted by ``sample_weight``;
        each model defines it.
        """
        raise NotImplementedError

    def loss_grad(
        self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None
    ) -> tuple[float, np.ndarray]:
        """Mean loss with the L2 penalty and its gradient (with ``sample_weight``: of the weighted mean loss)."""
        Z = self._logits(theta, X)
        return self._loss_at(theta, Z, y, sample_weight), self._pack_grad(X, self._dlogits(Z, y, sample_weight), theta)

    def loss(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
        """Mean loss with the L2 penalty, without the gradient: the same bits as ``loss_grad(...)[0]`` (a subclass
        that overrides :meth:`loss_grad`, the model contract's method, gets its loss).
        """
        if _overrides(type(self), "loss_grad"):
            return self.loss_grad(theta, X, y)[0]
        return self._loss_at(theta, self._logits(theta, X), y, None)

    def grad(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray,
             sample_weight: np.ndarray | None = None) -> np.ndarray:
        """Gradient of :meth:`loss` (of the weighted mean loss with ``sample_weight``), without the loss:
        the same bits as ``loss_grad(...)[1]`` (a subclass that overrides :meth:`loss_grad` gets its gradient).
        """
        if _overrides(type(self), "loss_grad"):
            weighted = {} if sample_weight is None else {"sample_weight": sample_weight}
            return self.loss_grad(theta, X, y, **weighted)[1]
        return self._pack_grad(X, self._dlogits(self._logits(theta, X), y, sample_weight), theta)

    def grad_into(self, out: np.ndarray, theta: np.ndarray, X: np.ndarray, y: np.ndarray,
                  sample_weight: np.ndarray | None = None) -> np.ndarray:
        """:meth:`grad` written into ``out`` (a float64 vector of ``n_params``, overwritten whole) and returned:
        local training keeps one gradient buffer for all its steps.

        Parameters
        ----------
        out : numpy.ndarray
            The buffer, float64, shape ``(n_params,)``; must not share memory with ``theta``.
        theta, X, y, sample_weight
            As for :meth:`grad`.

        Returns
        -------
        numpy.ndarray
            ``out``, holding the gradient (the same bits as :meth:`grad`'s).
        """
        if out.shape != (self.n_params,) or out.dtype != np.float64:
            raise ValueError(f"out must be a float64 vector of shape ({self.n_params},); got {out.dtype} {out.shape}")
        if _overrides(type(self), "loss_grad") or _overrides(type(self), "grad"):
            weighted = {} if sample_weight is None else {"sample_weight": sample_weight}
            np.copyto(out, self.grad(theta, X, y, **weighted))
            return out
        return self._pack_grad(X, self._dlogits(self._logits(theta, X), y, sample_weight), theta, out)

    def batch_gradient(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray,
                       sample_weight: np.ndarray | None = None) -> Callable[[np.ndarray], np.ndarray]:
        """``gradient(idx)``: :meth:`grad` at ``theta`` on the mini-batch ``X[idx]``, ``y[idx]`` (weighted by
        ``sample_weight[idx]``), written into one float64 buffer that every call returns — the kernel of local
        training, which updates ``theta`` in place between calls.

        ``theta`` is read when ``gradient`` is called, through views of its weights and intercepts made once
        here: the layers of :meth:`grad_into` (shape checks, the split, the buffer's views) are paid once per
        local round instead of once per step. The arithmetic, in its order, is :meth:`grad_into`'s: the same bits.
        :func:`topofl.federation.local.sgd` uses :meth:`epoch_gradient`, the same kernel on a pass's rows
        gathered once.

        Parameters
        ----------
        theta : numpy.ndarray
            The float64 parameter vector the caller trains in place (shape ``(n_params,)``).
        X, y : numpy.ndarray
            The training rows and labels that ``idx`` indexes.
        sample_weight : numpy.ndarray, optional
            One float64 weight per row of ``X``.

        Returns
        -------
        callable
            ``gradient(idx) -> buffer``; the buffer is the caller's to change until the next call.
        """
        kernel = self._kernel(theta, X, y, sample_weight)
        if sample_weight is None:
            return lambda idx: kernel(X[idx], y[idx], None)
        return lambda idx: kernel(X[idx], y[idx], sample_weight[idx])

    def epoch_gradient(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None,
                       ) -> tuple[Callable[[np.ndarray], None], Callable[[int, int], np.ndarray]] | None:
        """``(begin, gradient)``: :meth:`batch_gradient`'s kernel on one pass's rows gathered once —
        ``begin(order)`` takes the rows, labels (and weights) of a pass in the order ``order``, and
        ``gradient(start, stop)`` is then ``batch_gradient(...)(order[start:stop])``, the same bits, on a view of the
        gathered rows: one gather a pass instead of one a step (the batches of
        :func:`~topofl.models.optimizers.epoch_orders` are consecutive slices of a pass's order). ``None`` for a
        subclass that changes a step of the kernel (its :meth:`grad`, batch by batch, is then what runs), and for
        array subclasses (a masked array, a matrix), whose arithmetic stays the per-batch gathers'.

        A batch is then a view at some offset into the pass's rows rather than a fresh copy: the same numbers in the
        same layout, and the same bits on OpenBLAS (tested); a BLAS whose results depend on memory alignment (MKL
        outside its conditional-numerical-reproducibility mode) may differ from per-batch copies in the last bits.
        """
        if not _own_steps(type(self)) or type(X) is not np.ndarray or type(y) is not np.ndarray or not (
                sample_weight is None or type(sample_weight) is np.ndarray):
            return None   # an array subclass (a masked array, a matrix) keeps the per-batch gathers' arithmetic
        kernel = self._kernel(theta, X, y, sample_weight)
        rows: list[np.ndarray] = [X, y]
        weights: list[np.ndarray | None] = [None]

        def begin(order: np.ndarray) -> None:
            rows[:] = X[order], y[order]
            if sample_weight is not None:
                weights[0] = sample_weight[order]

        if sample_weight is None:
            def gradient(start: int, stop: int) -> np.ndarray:
                Xp, yp = rows
                return kernel(Xp[start:stop], yp[start:stop], None)
        else:
            def gradient(start: int, stop: int) -> np.ndarray:
                Xp, yp = rows
                wp = weights[0]
                return kernel(Xp[start:stop], yp[start:stop], None if wp is None else wp[start:stop])

        return begin, gradient

    def _kernel(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray,
                sample_weight: np.ndarray | None) -> Callable[[np.ndarray, np.ndarray, np.ndarray | None], np.ndarray]:
        """``kernel(Xb, yb, wb)``: :meth:`grad` at ``theta`` (read when called) on the batch's rows, labels and
        weights, written into one buffer kept for the local round (see :meth:`batch_gradient`).
        """
        self._check_theta(theta)
        if not _own_steps(type(self)):
            # a subclass that changes a step this kernel writes out: its own gradient (grad), batch by batch
            buffer = np.empty(self.n_params)

            def general(Xb: np.ndarray, yb: np.ndarray, wb: np.ndarray | None) -> np.ndarray:
                weighted = {} if wb is None else {"sample_weight": wb}
                np.copyto(buffer, self.grad(theta, Xb, yb, **weighted))
                return buffer

            return general
        W, b, w, g, gW, gb, gw, l2, decay = self._kernel_arrays(theta)
        dlogits = self._batch_dlogits(y, sample_weight) if type(X) is np.ndarray else self._dlogits
        matmul, divide, add, multiply, reduce = np.matmul, np.divide, np.add, np.multiply, np.add.reduce

        def kernel(Xb: np.ndarray, yb: np.ndarray, wb: np.ndarray | None) -> np.ndarray:
            Z = matmul(Xb, W)
            D = dlogits(add(Z, b, out=Z), yb, wb)   # ``Xb @ W + b``, the sum written over the product
            matmul(Xb.T, D, out=gW)   # _pack_grad's steps, in place (``a /= n`` is ``divide(a, n, out=a)``)
            reduce(D, axis=0, out=gb)
            divide(g, Xb.shape[0], out=g)   # both blocks by n: one element-wise division, the same quotients
            add(gw, multiply(l2, w, out=decay), out=gw)
            return g

        return kernel

    def _check_theta(self, theta: np.ndarray) -> None:
        """``ValueError`` unless ``theta`` is the float64 parameter vector the kernels train in place."""
        if theta.shape != (self.n_params,) or theta.dtype != np.float64:
            raise ValueError(f"theta must be a float64 vector of shape ({self.n_params},); got {theta.dtype} "
                             f"{theta.shape}")

    def _kernel_arrays(self, theta: np.ndarray) -> tuple[Any, ...]:
        """The kernel's views and buffers (:meth:`_kernel`): ``W``, ``b`` and ``w`` (views of ``theta``), the gradient
        buffer ``g`` with its views ``gW``, ``gb`` and ``gw``, ``l2``, and the buffer of ``l2 · w`` in the l2's own
        precision (a longdouble l2's).
        """
        d, c = self.n_features, self.n_outputs
        dc = d * c
        g = np.empty(self.n_params)
        l2 = self.l2
        return (theta[:dc].reshape(d, c), theta[dc:], theta[:dc], g, g[:dc].reshape(d, c), g[dc:], g[:dc], l2,
                np.empty(dc, dtype=np.result_type(l2, theta)))

    def epoch_sgd(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, batch_size: int,
                  lr: float) -> Callable[[np.ndarray, int], None] | None:
        """``run(order, stop)``: plain SGD steps ``θ ← θ − lr · g`` on ``theta`` in place, one per batch of a pass —
        the pass's rows ``order[:stop]`` gathered once, the batches its consecutive slices of ``batch_size`` rows
        (the last one shorter) — the same bits as :meth:`epoch_gradient`'s batches each followed by
        :func:`~topofl.federation.local.sgd`'s plain step, in one frame (the kernel's lines written out rather than
        called: fewer Python frames a batch, for the local training of every client of every round; the tests compare
        the two bit for bit). ``None`` where :meth:`epoch_gradient` is ``None``.
        """
        if not _own_steps(type(self)) or type(X) is not np.ndarray or type(y) is not np.ndarray:
            return None   # as epoch_gradient: the per-batch gathers' arithmetic
        self._check_theta(theta)
        W, b, w, g, gW, gb, gw, l2, decay = self._kernel_arrays(theta)
        dlogits = self._batch_dlogits(y, None)
        matmul, divide, add, multiply, subtract, reduce = (np.matmul, np.divide, np.add, np.multiply, np.subtract,
                                                           np.add.reduce)

        def run(order: np.ndarray, stop: int) -> None:
            rows = order if stop >= order.shape[0] else order[:stop]
            Xp, yp = X[rows], y[rows]
            for start in range(0, stop, batch_size):   # a slice stops at the pass's end by itself
                Xb, yb = Xp[start:start + batch_size], yp[start:start + batch_size]
                # the kernel (_kernel), then the step
                Z = matmul(Xb, W)
                D = dlogits(add(Z, b, out=Z), yb, None)
                matmul(Xb.T, D, out=gW)
                reduce(D, axis=0, out=gb)
                divide(g, Xb.shape[0], out=g)
                add(gw, multiply(l2, w, out=decay), out=gw)
                subtract(theta, multiply(lr, g, out=g), out=theta)

        return run

    def _batch_dlogits(self, y: np.ndarray, sample_weight: np.ndarray | None,
                       ) -> Callable[[np.ndarray, np.ndarray, np.ndarray | None], np.ndarray]:
        """``dlogits(Z, yb, wb)``: :meth:`_dlogits` of a batch's logits ``Z``, labels ``yb`` and weights ``wb`` — the
        kernel's step (:meth:`batch_gradient`), which the library's models may write for it with the same bits (``Z``
        is the kernel's own array, free to be overwritten); ``y`` and ``sample_weight`` are the arrays the batches
        come from. A step of the kernel, listed in ``_STEPS``: a subclass that overrides it gets the general path.
        """
        return self._dlogits

    def evaluation_outputs(self, theta: np.ndarray, X: np.ndarray,
                           y: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """The data loss (:meth:`loss` less the L2 penalty), :meth:`predict_scores` and :meth:`predict` of ``(X, y)``
        from one logits pass — what evaluation needs (:func:`topofl.metrics.evaluate`), with the bits of the three
        separate calls.
        """
        if not _own_steps(type(self)):
            # a subclass that changes what _outputs_at mirrors: the three calls
            scores = self.predict_scores(theta, X)
            loss = self.loss(theta, X, y) - self._penalty(theta)
            return loss, scores, scores if self.task == "regression" else self.predict(theta, X)
        Z = self._logits(theta, X)
        penalty = self._penalty(theta)   # _loss_at's, added then taken off again (the bits of loss() − penalty)
        loss = (self._data_loss_at(Z, y, None) + penalty) - penalty
        scores, pred = self._outputs_at(Z)
        return loss, scores, pred

    def _outputs_at(self, Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`predict_scores` and :meth:`predict` from the logits ``Z`` (n, C); each model defines them."""
        raise NotImplementedError

    def predict_scores(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Scores of samples ``X`` (probabilities, or predictions for regression); each model defines them."""
        raise NotImplementedError

    def predict(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Predicted labels (or values, for regression) of samples ``X``; each model defines them."""
        raise NotImplementedError


@dataclass(frozen=True)
class BinaryLogistic(LinearModel):
    """Binary logistic regression; labels in {0, 1}; ``predict_scores`` gives P(y = 1)."""

    task = "binary"
    n_outputs = 1

    def _data_loss_at(self, Z, y, sample_weight):
        sp = _special()
        z = Z[:, 0]
        # -[y log σ(z) + (1 - y) log σ(-z)], computed stably
        per_sample = y * sp.log_expit(z) + (1.0 - y) * sp.log_expit(-z)
        return -float(_mean(_weigh(per_sample, sample_weight)))

    def _dlogits(self, Z, y, sample_weight):
        return _weigh((_special().expit(Z[:, 0]) - y)[:, None], sample_weight)

    def _batch_dlogits(self, y, sample_weight):
        """σ(Z) − y of a batch written over its logits ``Z`` (n, 1) — :meth:`_dlogits`'s element-wise steps on the
        column itself: the same bits without its layers. Weighted or not-float64 labels: :meth:`_dlogits`.
        """
        if sample_weight is not None or type(y) is not np.ndarray or y.dtype != np.float64 or y.ndim != 1:
            return self._dlogits   # weighted, or labels of another kind (a masked array keeps its own arithmetic)
        expit, subtract = _special().expit, np.subtract

        def dlogits(Z: np.ndarray, yb: np.ndarray, wb: np.ndarray | None) -> np.ndarray:
            return subtract(expit(Z, out=Z), yb[:, None], out=Z)

        return dlogits

    def _outputs_at(self, Z):
        scores = _special().expit(Z[:, 0])
        return scores, (scores >= 0.5).astype(np.float64)

    def joined_evaluation_outputs(self, theta: np.ndarray, Xs: list[np.ndarray],
                                  ys: list[np.ndarray]) -> JoinedOutputs | None:
        """:meth:`evaluation_outputs` of the test splits ``(Xs[k], ys[k])`` with one ``theta`` (a round's evaluations
        in process, every client with the model sent): each split's logits its own product (:meth:`_logits`), each
        element-wise step of the loss, the scores and the predictions taken once over the splits' logits together,
        each split's loss its own sum — the same bits as one call per split, whose element-wise steps see the same
        numbers (the tests compare them). ``None`` — then one call per split — for a model whose steps are not the
        library's, a split that is not a float64 matrix of this model's features with float64 labels, logits or
        labels that are not all finite, any floating-point event of numpy's in these steps, or a SciPy error setting
        that reports expit's and log_expit's own (which one call per split would report once per split, in order).
        """
        if not _own_steps(type(self)) or not Xs or len(Xs) != len(ys):
            return None
        d = self.n_features
        for X, y in zip(Xs, ys, strict=True):
            if (type(X) is not np.ndarray or type(y) is not np.ndarray or X.dtype != np.float64
                    or y.dtype != np.float64 or X.ndim != 2 or X.shape[1] != d or not X.shape[0]
                    or y.shape != (X.shape[0],)):
                return None
        W, b = self._split(theta)
        sp = _special()
        # SciPy reports expit's and log_expit's own under- and overflows by its own setting: one that reports any
        # (not SciPy's default) would report them once per split there, in its order — the splits then go one by one
        if any(action != "ignore" for kind, action in sp.geterr().items() if kind != "memory"):
            return None
        try:
            # any floating-point event of numpy's (an overflow, an underflow, an invalid value) would warn or raise
            # once per split there, in its order: then the splits go one by one, which says it as before
            with np.errstate(all="raise"):
                Z = np.concatenate([X @ W + b for X in Xs])   # each split's logits, _logits' X @ W + b
                y = np.concatenate(ys)
                z = Z[:, 0]
                if not (_ALL(np.isfinite(z), axis=None) and _ALL(np.isfinite(y), axis=None)):
                    return None
                penalty = self._penalty(theta)
                per_sample = y * sp.log_expit(z) + (1.0 - y) * sp.log_expit(-z)   # _data_loss_at's steps
                scores = sp.expit(z)                                              # _outputs_at's
                pred = (scores >= 0.5).astype(np.float64)
                bounds, losses, at, reduce = [], [], 0, np.add.reduce
                for X in Xs:
                    n = X.shape[0]
                    # evaluation_outputs: (_data_loss_at + penalty) − penalty, _data_loss_at being −_mean of its terms
                    losses.append((-float(reduce(per_sample[at:at + n], axis=None) / n) + penalty) - penalty)
                    bounds.append((at, at + n))
                    at += n
        except FloatingPointError:
            return None
        return JoinedOutputs(losses, scores, pred, y, bounds)

    def predict_scores(self, theta, X):
        return _special().expit(self._logits(theta, X)[:, 0])

    def predict(self, theta, X):
        return (self.predict_scores(theta, X) >= 0.5).astype(np.float64)


@dataclass(frozen=True)
class SoftmaxRegression(LinearModel):
    """Multinomial logistic regression; labels in {0, …, C−1}; scores are class probabilities."""

    n_classes: int = 3
    task = "multiclass"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("n_classes", self.n_classes, 2)
        object.__setattr__(self, "n_outputs", self.n_classes)

    def _data_loss_at(self, Z, y, sample_weight):
        idx = y.astype(np.int64)
        lse = _special().logsumexp(Z, axis=1)
        return float(_mean(_weigh(lse - Z[np.arange(len(idx)), idx], sample_weight)))

    def _dlogits(self, Z, y, sample_weight):
        idx = y.astype(np.int64)
        P = np.exp(Z - _special().logsumexp(Z, axis=1)[:, None])
        P[np.arange(len(idx)), idx] -= 1.0
        return _weigh(P, sample_weight)

    def _outputs_at(self, Z):
        return _special().softmax(Z, axis=1), np.argmax(Z, axis=1).astype(np.float64)

    def predict_scores(self, theta, X):
        return _special().softmax(self._logits(theta, X), axis=1)

    def predict(self, theta, X):
        return np.argmax(self._logits(theta, X), axis=1).astype(np.float64)


@dataclass(frozen=True)
class LeastSquares(LinearModel):
    """Least-squares regression with L2 (ridge); scores are the predictions."""

    task = "regression"
    n_outputs = 1

    def _data_loss_at(self, Z, y, sample_weight):
        r = Z[:, 0] - y
        return 0.5 * float(r @ _weigh(r, sample_weight)) / len(r)

    def _dlogits(self, Z, y, sample_weight):
        return _weigh((Z[:, 0] - y)[:, None], sample_weight)

    def _outputs_at(self, Z):
        scores = Z[:, 0]
        return scores, scores

    def predict_scores(self, theta, X):
        return self._logits(theta, X)[:, 0]

    predict = predict_scores


def make_model(task: str, n_features: int, n_classes: int = 2, l2: float = 1e-3) -> LinearModel:
    """Model for a task: "binary", "multiclass" or "regression"."""
    factories = {
        "binary": lambda: BinaryLogistic(n_features, l2),
        "multiclass": lambda: SoftmaxRegression(n_features, l2, n_classes=n_classes),
        "regression": lambda: LeastSquares(n_features, l2),
    }
    if task not in factories:
        raise ValueError(f"task must be one of {', '.join(factories)}; got {task!r}")
    return factories[task]()
