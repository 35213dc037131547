"""Probes: what a finished run computes on its own models when its job's ``setting`` names one
(``"probe": "NAME[:key=value,...]"``). The executor stores the returned JSON-ready mapping as
``done["probe"]`` in the run's sealed done-record, so an analysis reads results only.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

#: ``probe(params, job, result, federation) -> dict``: ``params`` are the spec's ``key=value`` pairs
Probe = Callable[[Mapping[str, str], Any, Any, Any], dict[str, Any]]


def _privacy_attacks(params: Mapping[str, str], job: Any, result: Any, federation: Any) -> dict[str, Any]:
    from topofl.experiments.security.privacy_probe import probe

    return probe(params, job, result, federation)


def _secure_aggregation(params: Mapping[str, str], job: Any, result: Any, federation: Any) -> dict[str, Any]:
    from topofl.experiments.security.secure_aggregation import probe

    return probe(params, job, result, federation)


#: every probe, by name
PROBES: dict[str, Probe] = {"privacy-attacks": _privacy_attacks, "secure-aggregation": _secure_aggregation}


def parse_probe(spec: str) -> tuple[str, dict[str, str]]:
    """``"NAME:k=v,k2=v2"`` → ``("NAME", {"k": "v", "k2": "v2"})``; ``ValueError``: unknown name, malformed pair."""
    if not isinstance(spec, str):
        raise ValueError(f"a probe is named by a string 'NAME[:key=value,...]'; got {spec!r}")
    name, _, rest = spec.partition(":")
    if name not in PROBES:
        raise ValueError(f"unknown probe {name!r}; available: {', '.join(PROBES)}")
    params: dict[str, str] = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"probe {spec!r}: expected key=value pairs after ':'; got {item!r}")
        params[key.strip()] = value.strip()
    return name, params


def run_probe(name: str, job: Any, result: Any, federation: Any) -> dict[str, Any]:
    """Run the probe ``name`` (a spec, :func:`parse_probe`) on a finished run: its job, its result
    (:class:`topofl.federation.history.Result`) and its federation (after any validation split).
    """
    probe, params = parse_probe(name)
    return PROBES[probe](params, job, result, federation)
