"""The deployments' Byzantine-robust defaults (re-exported as ``topofl.flower.settings.DEPLOYMENT_DEFAULTS``).

The Flower apps and ``topofl flower`` complete every run's hyper-parameters with
:data:`DEPLOYMENT_DEFAULTS` (run-config ``robust-defaults``, on by default); in-process research
runs keep the papers' rules unless asked (``topofl compare --robust-defaults``,
``topofl experiment NAME --robust-defaults``, :func:`deployment_hyperparameters`).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["DEPLOYMENT_DEFAULTS", "RULE_FIELDS", "deployment_hyperparameters"]

#: The hyper-parameters a deployment (the Flower apps, ``topofl flower``) uses unless the run sets
#: them or opts out (run-config ``robust-defaults=false``): method name, or ``"*"`` for every method
#: whose configuration has the field → values. Measured by ``topofl experiment attacks`` (the
#: "deployment default" rows; docs/threat-model.md): with 1 of 8 clients sending its update
#: reversed ×9 inside the norm bound, or 2 of 8 reversed ×10, FedAvg and pTopoFL keep their
#: honest clients' AUC within 0.03 of the clean run, at ≤ 0.005 cost on clean runs.
#:
#: * ``guarded_mean`` (:func:`topofl.robustness.aggregators.guarded_mean`) for every global and
#:   per-cluster aggregate: changes opposed to the median change or longer than 4× the median
#:   norm are flagged (the update-space detector, logged as ``update_flagged``) and left out,
#:   the rest clipped to 2× the median norm; pTopoFL checks each cluster against the whole round.
#: * ``max_client_weight`` 0.3: no client's declared example count buys it more than 30 % of an
#:   aggregate (a site that declares 10⁹ examples).
#:
#: Every server-based method aggregates through the rule: FedAvg, FedProx, Ditto, pFedMe and
#: Per-FedAvg their global model, IFCA each cluster model (checked against the whole round),
#: SCAFFOLD its Δy (and c over the clients kept), pTopoFL each cluster (``intra_aggregator``). Local
#: and the decentralised methods have no server aggregate and get nothing. A run with client-level
#: DP (``dp_noise_multiplier`` > 0) keeps the mean its noise calibration needs, and a run with secure
#: aggregation (``secure_aggregation``) the mean its sums give (the share cap still applies).
DEPLOYMENT_DEFAULTS: dict[str, dict[str, Any]] = {
    "*": {"max_client_weight": 0.3, "aggregator": "guarded_mean"},
    "ptopofl": {"intra_aggregator": "guarded_mean"},
}

#: the hyper-parameters that name an aggregation rule (left to the mean under client-level DP or secure aggregation)
RULE_FIELDS = ("aggregator", "intra_aggregator")


def deployment_hyperparameters(method: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` completed by :data:`DEPLOYMENT_DEFAULTS` for ``method``: a default applies when the
    method's configuration has the field and ``given`` does not set it.
    """
    from topofl.methods import get as get_method

    fields = set(get_method(method).config.field_help())
    # DP and secure aggregation need the mean: the robust rules are left out, the share cap stays
    mean_only = float(given.get("dp_noise_multiplier", 0) or 0) > 0 or given.get("secure_aggregation") in (True, "true")
    out = dict(given)
    for key, value in {**DEPLOYMENT_DEFAULTS.get("*", {}), **DEPLOYMENT_DEFAULTS.get(method, {})}.items():
        if key in fields and key not in out and not (mean_only and key in RULE_FIELDS):
            out[key] = value
    return out
