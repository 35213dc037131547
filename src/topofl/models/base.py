"""The model contract every method trains through (DESIGN: "parameters are flat float vectors").

Parameter vectors are flat and contiguous. A model *returns* trained parameters in its own
:attr:`Model.param_dtype` (float64 for the NumPy linear models, the module's dtype — float32 by
default — for PyTorch models) and *accepts* float32 or float64 vectors everywhere. Servers keep
their aggregates in float64 (a sum of many float32 vectors is accumulated in float64), which a
float32 model reads exactly as it would hold them.

Both the NumPy linear models (:mod:`topofl.models.linear`) and the PyTorch wrapper
(:class:`topofl.models.torch_models.TorchClassifier`) satisfy :class:`Model`; methods, runtimes and
metrics are typed against it and never against a concrete model.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np


class Model(Protocol):
    """A model on flat parameter vectors ``theta``."""

    task: str

    @property
    def param_dtype(self) -> np.dtype:
        """The dtype of the parameter vectors the model's training returns."""

    @property
    def n_params(self) -> int:
        """Length of ``theta``."""

    @property
    def n_outputs(self) -> int:
        """Outputs per sample (1 for binary and regression, C for C classes)."""

    @property
    def n_features(self) -> int:
        """Length of one input row."""

    def init(self, rng: np.random.Generator | None = None, scale: float = 0.0) -> np.ndarray:
        """Initial parameters."""

    def loss_grad(
        self, theta: np.ndarray, X: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None
    ) -> tuple[float, np.ndarray]:
        """Mean loss with the L2 penalty, and its gradient; with ``sample_weight`` (n,), the mean
        of the weighted losses (1/n) Σ w_i ℓ_i (pTopoFL's paper-era §3.2 sample weighting).
        """

    def loss(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
        """Mean loss with the L2 penalty."""

    def grad(self, theta: np.ndarray, X: np.ndarray, y: np.ndarray,
             sample_weight: np.ndarray | None = None) -> np.ndarray:
        """Gradient of :meth:`loss` (of the weighted mean loss with ``sample_weight``)."""

    def predict_scores(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """P(y = 1) (binary), class probabilities (multiclass) or predictions (regression)."""

    def predict(self, theta: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Predicted labels (or values), shape (n,)."""

    def _penalty(self, theta: np.ndarray) -> float:
        """The L2 penalty alone (subtracted to report the data loss)."""


def param_dtype(model: object) -> np.dtype:
    """``model.param_dtype``, or float64 for a user's model that does not declare one."""
    return np.dtype(getattr(model, "param_dtype", np.float64))


def reply_dtypes(model: object) -> tuple[str, ...]:
    """The dtypes a server accepts for a parameter vector of ``model``: float64 always (a server's
    own float64 aggregates, an attack's rewrite, a Flower record) and the model's own dtype.
    """
    own = param_dtype(model).name
    return ("float64",) if own == "float64" else ("float64", own)
