"""Reconstruction-risk proxies (topofl.privacy.risk), with the paper's numbers."""
from __future__ import annotations

import numpy as np
import pytest

from topofl.privacy import ALPHA_C, client_privacy, descriptor_risk, gradient_risk, mi_proxy


def test_alpha_c_is_the_papers_value():
    assert ALPHA_C == 0.1


def test_gradient_risk_by_hand_and_capped_at_one():
    assert gradient_risk(10, 5, 4) == pytest.approx(0.5)  # 10 / (5 * 4)
    assert gradient_risk(20, 5, 4) == 1.0
    assert gradient_risk(1000, 5, 4) == 1.0  # min(1, 50)
    assert gradient_risk(0, 5, 4) == 0.0


def test_descriptor_risk_by_hand():
    assert descriptor_risk(48, 100, 10) == pytest.approx(0.0048)  # 48 / 1000 * 0.1
    assert descriptor_risk(48, 100, 10, alpha_c=1.0) == pytest.approx(0.048)
    # not capped: a small dataset can give a risk above 1
    assert descriptor_risk(48, 2, 2, alpha_c=1.0) == pytest.approx(12.0)


def test_mi_proxy_papers_numbers():
    assert mi_proxy(48, 0.1) == pytest.approx(np.log2(5.8), abs=1e-12)  # 1 + 4.8
    assert mi_proxy(48, 0.1) == pytest.approx(2.5360529, abs=1e-6)
    assert mi_proxy(21, 1) == pytest.approx(np.log2(22), abs=1e-12)
    assert mi_proxy(21) == pytest.approx(4.4594316, abs=1e-6)
    assert mi_proxy(0) == 0.0
    assert mi_proxy(1) == pytest.approx(1.0)  # log2(2)


def test_client_privacy_keys_and_values():
    out = client_privacy(n=100, d=10, p=21, m=48)
    assert set(out) == {
        "transmitted_model_dim",
        "transmitted_descriptor_dim",
        "risk_gradient",
        "risk_descriptor",
        "mi_gradient_bits",
        "mi_descriptor_bits",
    }
    assert out["transmitted_model_dim"] == 21.0
    assert out["transmitted_descriptor_dim"] == 48.0
    assert out["risk_gradient"] == pytest.approx(0.021)  # 21 / 1000
    assert out["risk_descriptor"] == pytest.approx(0.0048)
    assert out["mi_gradient_bits"] == pytest.approx(np.log2(22))
    assert out["mi_descriptor_bits"] == pytest.approx(np.log2(5.8))
    assert out["risk_descriptor"] < out["risk_gradient"]
    assert all(isinstance(v, float) for v in out.values())


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: gradient_risk(10, 0, 4), "n"),
        (lambda: gradient_risk(10, 5, 0), "d"),
        (lambda: gradient_risk(-1, 5, 4), "p"),
        (lambda: descriptor_risk(48, 0, 10), "n"),
        (lambda: descriptor_risk(-1, 10, 10), "m"),
        (lambda: descriptor_risk(48, 10, 10, alpha_c=1.5), "alpha_c"),
        (lambda: descriptor_risk(48, 10, 10, alpha_c=-0.1), "alpha_c"),
        (lambda: mi_proxy(-3), "dim"),
        (lambda: mi_proxy(4.0), "dim"),
        (lambda: client_privacy(n=0, d=10, p=21, m=48), "n"),
        (lambda: gradient_risk(10, 2.5, 4), "n"),
    ],
)
def test_invalid_arguments_raise_naming_field(call, field):
    with pytest.raises(ValueError, match=rf"^{field} must"):
        call()


def test_mi_proxy_rejects_negative_alpha():
    with pytest.raises(ValueError, match=r"alpha must be in \[0.0, inf\); got -1.0"):
        mi_proxy(10, -1.0)
