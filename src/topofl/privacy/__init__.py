"""Privacy: the pTopoFL paper's reconstruction-risk proxies (§3.6), differential-privacy mechanisms
(:mod:`topofl.privacy.dp`: DP-FedAvg, McMahan et al. 2018; the Gaussian mechanism on descriptors)
and their accounting through ``dp-accounting`` (:mod:`topofl.privacy.accounting`).
"""
from topofl.privacy.dp import DPConfig, descriptor_mechanism, dp_fedavg_aggregate, privacy_report
from topofl.privacy.risk import ALPHA_C, client_privacy, descriptor_risk, gradient_risk, mi_proxy

__all__ = ["ALPHA_C", "DPConfig", "client_privacy", "descriptor_mechanism", "descriptor_risk", "dp_fedavg_aggregate",
           "gradient_risk", "mi_proxy", "privacy_report"]
