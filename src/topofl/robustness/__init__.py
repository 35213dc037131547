"""Byzantine robustness: defences and attacks.

* :mod:`topofl.robustness.aggregators` — robust aggregation rules as pure functions over a
  round's updates (maths layer): coordinate-wise median and trimmed mean, Krum, Multi-Krum,
  Bulyan, norm clipping, and :func:`~topofl.robustness.aggregators.robust_aggregate` by name.
* :mod:`topofl.robustness.attacks` — hostile clients as wrappers of a method's client side
  (methods layer).

This package imports neither, so that importing one does not load the other.
"""
