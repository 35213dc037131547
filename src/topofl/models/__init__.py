"""Models on flat parameter vectors."""
from topofl.models.linear import BinaryLogistic, LeastSquares, LinearModel, SoftmaxRegression, make_model

__all__ = ["BinaryLogistic", "LeastSquares", "LinearModel", "SoftmaxRegression", "make_model"]
