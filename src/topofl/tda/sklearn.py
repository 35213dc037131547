"""A scikit-learn transformer mapping point clouds to pTopoFL descriptors.

Its samples are whole point clouds, not rows: ``X`` is a sequence of K arrays of shape
(n_k, d) — a list, a 1-D object array, or a 3-D array (K, n, d) of equal-sized clouds — and the
output is the (K, 8 + 2L) matrix of their descriptors. scikit-learn's common checks feed 2-D
arrays of rows; :data:`EXPECTED_FAILED_CHECKS` names the checks that cannot apply and why.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from topofl._validation import as_points, check_choice, check_int
from topofl.tda.descriptor import SCALINGS, DescriptorLayout, descriptors

_ROWS = "fits on a 2-D array of rows, which is refused: this transformer's samples are whole point clouds"

#: scikit-learn common checks that cannot pass for an estimator whose samples are point clouds,
#: each with its reason. The estimator's tags say it takes no 2-D array (``input_tags.two_d_array``
#: is False), so ``check_estimator`` skips every check; to run them anyway, give a subclass
#: ``two_d_array = True`` and pass ``expected_failed_checks=EXPECTED_FAILED_CHECKS``, as
#: ``tests/tda/test_sklearn_estimator.py`` does (it also asserts that each of these still fails
#: for that reason, so the list cannot go stale, and runs the same properties on point clouds).
EXPECTED_FAILED_CHECKS: dict[str, str] = {
    "check_fit_score_takes_y": _ROWS,
    "check_estimators_overwrite_params": _ROWS,
    "check_dont_overwrite_parameters": _ROWS,
    "check_estimators_fit_returns_self": _ROWS,
    "check_readonly_memmap_input": _ROWS,
    "check_n_features_in_after_fitting": _ROWS + "; n_features_in_ is the clouds' number of features",
    "check_n_features_in": _ROWS + "; n_features_in_ is the clouds' number of features",
    "check_positive_only_tag_during_fit": _ROWS,
    "check_estimators_dtypes": _ROWS,
    "check_dtype_object": _ROWS + " (a 1-D object array of clouds is accepted)",
    "check_estimators_empty_data_messages": "expects scikit-learn's message for a 2-D array of 0 features; "
                                            "a 2-D array is refused as not a sequence of clouds "
                                            "(a cloud of 0 features is refused by name)",
    "check_pipeline_consistency": _ROWS,
    "check_estimators_nan_inf": "expects the NaN/inf message for a 2-D array of rows, which is refused as such; "
                                "a cloud holding NaN or inf is refused by name",
    "check_estimators_pickle": _ROWS,
    "check_f_contiguous_array_estimator": _ROWS,
    "check_transformer_data_not_an_array": _ROWS + " (wrapped in an object that is not an array)",
    "check_transformer_general": _ROWS,
    "check_transformer_preserve_dtypes": _ROWS + "; the output is float64 whatever the input precision",
    "check_methods_sample_order_invariance": _ROWS + "; and cloud k is subsampled with a generator seeded by "
                                             "(seed, k), so reordering clouds of more than n_sub points changes "
                                             "their subsamples",
    "check_methods_subset_invariance": _ROWS + "; and cloud k's subsample depends on its position k",
    "check_fit2d_1sample": "expects scikit-learn's message for a 2-D array of one row; a 2-D array is refused as "
                           "not a sequence of clouds",
    "check_fit2d_1feature": _ROWS + " (clouds of one feature are accepted)",
    "check_fit2d_predict1d": _ROWS,
    "check_dict_unchanged": _ROWS,
    "check_fit_idempotent": _ROWS,
    "check_fit_check_is_fitted": _ROWS,
}


def point_clouds(X: Any) -> list[np.ndarray]:
    """``X`` as a list of finite 2-D float64 point clouds of at least 3 points and one common
    number of features; a ``ValueError`` saying what is wrong otherwise.
    """
    if hasattr(X, "toarray") or hasattr(X, "tocsr"):
        raise ValueError("sparse input is not supported: X must be a sequence of dense point clouds; "
                         f"got {type(X).__name__}")
    if X is None or isinstance(X, (str, bytes)):
        raise ValueError("X must be a sequence of point clouds (arrays of shape (n_points, n_features)); "
                         f"got {type(X).__name__}")
    if isinstance(X, np.ndarray) and X.dtype.kind == "c":  # a cloud of complex numbers is refused by as_points
        raise ValueError("Complex data not supported: point clouds must be real")
    if isinstance(X, np.ndarray):
        if X.ndim == 2:
            raise ValueError(
                "X must be a sequence of point clouds (arrays of shape (n_points, n_features)); "
                f"got a 2-D array of shape {X.shape}: pass [X] for a single cloud"
            )
        if X.ndim != 3 and not (X.dtype == object and X.ndim == 1):
            raise ValueError("X must be a sequence of point clouds or a 3-D array "
                             f"(n_clouds, n_points, n_features); got shape {X.shape}")
    try:
        items = list(X)
    except TypeError:
        raise ValueError(f"X must be a sequence of point clouds; got {type(X).__name__}") from None
    if not items:
        raise ValueError("X must hold at least one point cloud; got 0")
    clouds = [as_points(c, f"point cloud {k}", min_points=3) for k, c in enumerate(items)]
    dims = {c.shape[1] for c in clouds}
    if len(dims) > 1:
        raise ValueError(f"point clouds must share their number of features; got {sorted(dims)}")
    return clouds


# scikit-learn ships no type information (no py.typed), so mypy sees its base classes as Any
class TopologicalDescriptor(TransformerMixin, BaseEstimator):  # type: ignore[misc]
    """Transform a sequence of point clouds into a (K, 8 + 2L) matrix of descriptors (§3.1).

    Each input sample is a whole point cloud (array of shape (n_k, d)), e.g. one client's data or
    one patient's time series embedding, so it fits in a ``Pipeline`` before any estimator.

    Parameters
    ----------
    n_sub, n_thresholds, scale, seed
        As in :func:`topofl.tda.descriptor`; checked by ``fit``.

    Attributes
    ----------
    n_features_in_ : int
        Number of features d of each point cloud seen by ``fit``; ``transform`` refuses other widths.
    n_features_out_ : int
        Width of the descriptor, 8 + 2 * n_thresholds.
    """

    def __init__(self, n_sub: int = 80, n_thresholds: int = 20, scale: str = "none", seed: int = 0):
        self.n_sub = n_sub
        self.n_thresholds = n_thresholds
        self.scale = scale
        self.seed = seed

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False  # a 2-D array of rows is refused: a sample is a whole point cloud
        tags.input_tags.three_d_array = True  # (n_clouds, n_points, n_features); lists of clouds of any sizes too
        tags.requires_fit = True
        return tags

    def fit(self, X: Sequence[np.ndarray], y: Any = None) -> TopologicalDescriptor:
        """Check the parameters and the point clouds (``ValueError`` naming what is wrong); record
        the clouds' number of features and the output width. Nothing else is learned.
        """
        check_int("n_sub", self.n_sub, 3)
        check_int("n_thresholds", self.n_thresholds, 1, 10_000)
        check_choice("scale", self.scale, SCALINGS)
        check_int("seed", self.seed, 0)
        clouds = point_clouds(X)
        self.n_features_in_ = int(clouds[0].shape[1])
        self.n_features_out_ = len(DescriptorLayout(self.n_thresholds))
        return self

    def transform(self, X: Sequence[np.ndarray]) -> np.ndarray:
        """Descriptors of each point cloud in ``X`` (cloud ``k`` subsampled with the seed and ``k``)."""
        check_is_fitted(self, "n_features_in_")
        clouds = point_clouds(X)
        if clouds[0].shape[1] != self.n_features_in_:
            raise ValueError(f"X has point clouds of {clouds[0].shape[1]} features, but {type(self).__name__} "
                             f"is expecting {self.n_features_in_} features as input")
        return descriptors(clouds, self.n_sub, self.n_thresholds, self.seed, self.scale)

    def get_feature_names_out(self, input_features: Sequence[str] | None = None) -> np.ndarray:
        return np.array(DescriptorLayout(self.n_thresholds).names, dtype=object)
