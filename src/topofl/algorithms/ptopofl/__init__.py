"""pTopoFL: personalised federated learning via persistent homology (arXiv 2603.04323)."""
from topofl.algorithms.ptopofl.algorithm import PTopoFL, PTopoFLConfig

__all__ = ["PTopoFL", "PTopoFLConfig"]
