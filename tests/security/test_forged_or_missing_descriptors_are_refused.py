"""Finding 4: a forged pTopoFL descriptor (all 1e300, all zeros) was accepted, and a reply that
omitted a descriptor the server asked for was silently ignored. Descriptors are now checked
against what a persistent-homology descriptor can be (Betti counts, entropies, curves), and an
omitted descriptor the server asked for is a recorded failure."""
import numpy as np
import pytest
from attacking import VICTIM, replace, run_attacked, victim_failures

from topofl.tda.descriptor import descriptor


def forged(phi_fn):
    def tamper(u, m):
        return replace(u, descriptor=phi_fn(u.descriptor)) if u.descriptor is not None else u
    return tamper


@pytest.mark.parametrize("phi_fn, words", [
    (lambda p: np.full_like(p, 1e300), "descriptor"),
    (lambda p: np.zeros_like(p), "h0_betti"),
    (lambda p: p + 0.5, "integer"),
    (lambda p: np.r_[p[:2], 99.0, p[3:]], "h0_entropy"),
    (lambda p: -p, "h0_betti"),
])
def test_forged_descriptor_is_dropped(phi_fn, words):
    h, algo = run_attacked("ptopofl", forged(phi_fn), rounds=2)
    fails = victim_failures(h)
    assert fails and all(words in f.reason for f in fails), [f.reason for f in h.failures]
    assert VICTIM not in algo.phi  # never clustered on the forged descriptor


def test_omitting_a_requested_descriptor_is_a_recorded_failure():
    h, algo = run_attacked("ptopofl", lambda u, m: replace(u, descriptor=None), rounds=2)
    fails = victim_failures(h)
    assert [f.round for f in fails] == [1, 2]
    assert all("descriptor is required" in f.reason for f in fails)
    assert VICTIM not in algo.labels


def test_descriptor_inconsistent_with_the_diagrams_is_dropped():
    def tamper(u, m):
        if u.descriptor is None:
            return u
        phi = u.descriptor.copy()
        phi[4] *= 2.0  # the H0 amplitude no longer matches the diagram sent beside it
        return replace(u, descriptor=phi)

    h, _ = run_attacked("ptopofl", tamper, rounds=1, cluster_distance="wasserstein")
    (f,) = victim_failures(h)
    assert "does not match the diagrams" in f.reason


def test_real_descriptors_pass_the_checks():
    from topofl.tda.descriptor import descriptor_problems

    rng = np.random.default_rng(0)
    for n, d, scale in ((3, 2, 1.0), (50, 5, 1e-3), (300, 20, 1e3)):
        X = rng.standard_normal((n, d)) * scale
        phi = descriptor(X, n_sub=80, seed=0)
        assert descriptor_problems(phi, n_points=min(n, 80)) is None
