"""Reconstruction-risk accounting of what a client transmits (pTopoFL paper §3.6, Fig. 6).

These are the paper's dimension-counting proxies, not formal privacy guarantees: ρ compares the
number of transmitted numbers with the n·d numbers of the local dataset, and the MI proxy is
log2(1 + dim·α).
"""
from __future__ import annotations

import numpy as np

from topofl._validation import check_int, check_range

ALPHA_C = 0.1  # the paper's estimated compression factor of the PH map (§3.6)
#: the names :func:`client_privacy` reports (all non-negative)
PRIVACY_METRICS = (
    "transmitted_model_dim", "transmitted_descriptor_dim", "risk_gradient", "risk_descriptor",
    "mi_gradient_bits", "mi_descriptor_bits",
)


def _check(n: int, d: int) -> None:
    check_int("n", n, 1)
    check_int("d", d, 1)


def gradient_risk(p: int, n: int, d: int) -> float:
    """ρ_grad = min(1, p / (n·d)) for sending p model numbers (Eq. 10)."""
    _check(n, d)
    check_int("p", p, 0)
    return min(1.0, p / (n * d))


def descriptor_risk(m: int, n: int, d: int, alpha_c: float = ALPHA_C) -> float:
    """ρ_topo = m / (n·d) · α_c for sending an m-dimensional PH descriptor (Eq. 11)."""
    _check(n, d)
    check_int("m", m, 0)
    check_range("alpha_c", alpha_c, 0.0, 1.0)
    return m / (n * d) * alpha_c


def mi_proxy(dim: int, alpha: float = 1.0) -> float:
    """Mutual-information proxy log2(1 + dim·α) in bits (Fig. 6B; α = 1 for gradients, α_c for φ)."""
    check_int("dim", dim, 0)
    check_range("alpha", alpha, 0.0)
    return float(np.log2(1.0 + dim * alpha))


def client_privacy(n: int, d: int, p: int, m: int, alpha_c: float = ALPHA_C) -> dict[str, float]:
    """Per-client privacy accounting of pTopoFL's two channels.

    pTopoFL sends both a descriptor (m numbers) and its model (p numbers); both channels are
    reported so that the descriptor's lower risk is never mistaken for the whole upload's.
    """
    return {
        "transmitted_model_dim": float(p),
        "transmitted_descriptor_dim": float(m),
        "risk_gradient": gradient_risk(p, n, d),
        "risk_descriptor": descriptor_risk(m, n, d, alpha_c),
        "mi_gradient_bits": mi_proxy(p, 1.0),
        "mi_descriptor_bits": mi_proxy(m, alpha_c),
    }
