"""Privacy accounting (reconstruction-risk proxies of the pTopoFL paper, §3.6)."""
from topofl.privacy.risk import ALPHA_C, client_privacy, descriptor_risk, gradient_risk, mi_proxy

__all__ = ["ALPHA_C", "client_privacy", "descriptor_risk", "gradient_risk", "mi_proxy"]
