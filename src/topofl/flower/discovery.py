"""Discovery: which SuperNodes take part in a run, and what they declared (validated).

The ServerApp (:mod:`~topofl.flower.server_app`) and the relay (:mod:`~topofl.flower.relay`)
both start here: wait for the nodes, ask each which client it is, validate every declaration,
and reconcile the task, classes and feature count — leaving out, with a recorded failure, any
node that does not fit, so that one node can neither abort nor redefine a run.
"""
from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any, Literal, overload

from flwr.app import ConfigRecord, MessageType, RecordDict
from flwr.serverapp import Grid

from topofl.data.federation import TASKS
from topofl.federation.pool import Failure
from topofl.federation.validation import client_info
from topofl.flower.exchange import exchange
from topofl.flower.records import config_record
from topofl.flower.settings import FlowerSettings
from topofl.limits import MAX_CLASSES, MAX_FEATURES

log = logging.getLogger(__name__)


def wait_for_nodes(grid: Grid, settings: FlowerSettings) -> list[int]:
    """Node ids once at least ``min-nodes`` are connected; a clear error after ``node-wait`` seconds."""
    deadline = time.monotonic() + settings.node_wait
    while True:
        ids = sorted(grid.get_node_ids())
        if len(ids) >= settings.min_nodes:
            return ids
        if time.monotonic() >= deadline:
            raise RuntimeError(f"only {len(ids)} SuperNode(s) connected after node-wait={settings.node_wait:g} s; min-nodes={settings.min_nodes}")
        time.sleep(0.5)


def discover(grid: Grid, settings: FlowerSettings) -> tuple[dict[int, int], dict[int, dict[str, Any]], list[Failure]]:
    """Ask every connected node which client it is: ``({client: node_id}, {client: info}, failures)``.

    A node's declaration is validated (:func:`declaration`); a node whose declaration is invalid
    is left out of the run with a ``discover`` failure naming the field, never trusted. When
    several nodes claim the same partition id, none of them is trusted with it: all are left out.
    """
    node_ids = wait_for_nodes(grid, settings)
    contents = {nid: RecordDict({"config": config_record(settings.job())}) for nid in node_ids}

    def decode(content: RecordDict) -> dict[str, Any]:
        if "info" not in content or not isinstance(content["info"], ConfigRecord):
            raise ValueError("the reply has no 'info' ConfigRecord")
        return dict(content["info"])

    infos, failures = exchange(grid, {n: n for n in node_ids}, contents, MessageType.QUERY, 0, "discover", settings.node_wait or settings.round_timeout, decode)
    claims: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    for nid, info in sorted(infos.items()):
        try:
            checked = declaration(info)
        except ValueError as exc:
            failures.append(Failure(0, None, "discover", f"invalid declaration: {exc}", nid))
            continue
        claims.setdefault(checked["client"], []).append((nid, checked))
    nodes: dict[int, int] = {}
    by_client: dict[int, dict[str, Any]] = {}
    for cid, claimants in sorted(claims.items()):
        if len(claimants) > 1:
            ids = ", ".join(str(n) for n, _ in claimants)
            failures.extend(Failure(0, cid, "discover", f"partition-id={cid} is claimed by nodes {ids}: all of them are left out "
                                    "(give every node its own partition-id)", n) for n, _ in claimants)
            continue
        nodes[cid], by_client[cid] = claimants[0]
    for f in failures:
        log.warning("node %s left out of the run at discovery: %s", f.node_id, f.reason)
    if not nodes:
        raise RuntimeError("no SuperNode answered the discovery query with a valid declaration; see the node logs")
    return nodes, by_client, failures


def declaration(info: Mapping[str, Any]) -> dict[str, Any]:
    """A node's validated discovery reply: counts through :func:`~topofl.federation.validation.client_info`,
    ``task`` one of the tasks, ``n_classes`` and ``n_features`` integers in range; ``ValueError`` otherwise.
    """
    ci = client_info(info.get("client"), info)
    task = info.get("task")
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}; got {task!r}")
    out = {"client": ci.client_id, "n_train": ci.n_train, "n_test": ci.n_test, "task": task}
    for key, low, high in (("n_classes", 0, MAX_CLASSES), ("n_features", 1, MAX_FEATURES)):
        value = info.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{key} must be an integer in [{low}, {high}]; got {value!r}")
        out[key] = value
    return out


def _majority(values: dict[int, Any], what: str) -> Any:
    """The value most clients declared; ``ValueError`` on a tie (the run config must decide)."""
    counts = Counter(values.values()).most_common()
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        raise ValueError(f"the SuperNodes split evenly on {what} ({dict(counts)}); set it in the run config")
    return counts[0][0]


@overload
def reconcile(
    nodes: dict[int, int], infos: dict[int, dict[str, Any]], settings: FlowerSettings, shared_features: Literal[True],
) -> tuple[str, int, int, list[Failure]]: ...


@overload
def reconcile(
    nodes: dict[int, int], infos: dict[int, dict[str, Any]], settings: FlowerSettings, shared_features: bool,
) -> tuple[str, int, int | None, list[Failure]]: ...


def reconcile(
    nodes: dict[int, int], infos: dict[int, dict[str, Any]], settings: FlowerSettings, shared_features: bool,
) -> tuple[str, int, int | None, list[Failure]]:
    """The run's task, number of classes and (for federated methods) feature count; ``nodes`` and
    ``infos`` lose every node that does not fit, each with a ``discover`` failure.

    The task is the run config's ``task``, or else what most nodes declared (regression against
    classification; "binary" and "multiclass" are both classification, since a site may see only
    some classes). Classes: the run config's ``classes``, or the most any kept node declared (at
    most ``MAX_CLASSES``). Federated methods need one feature space: the count most nodes
    declared. One node can therefore not change the run for the others: it is left out.
    """
    failures: list[Failure] = []

    def leave_out(cid: int, reason: str) -> None:
        failures.append(Failure(0, cid, "discover", reason, nodes.pop(cid)))
        del infos[cid]

    family = {cid: "regression" if i["task"] == "regression" else "classification" for cid, i in infos.items()}
    wanted = ("regression" if settings.task == "regression" else "classification") if settings.task else _majority(family, "the task")
    for cid in [c for c, f in family.items() if f != wanted]:
        leave_out(cid, f"declared a {family[cid]} task; this run is {wanted}")
    if shared_features:
        dims = {cid: int(i["n_features"]) for cid, i in infos.items()}
        n_features = _majority(dims, "the number of features")
        for cid in [c for c, d in dims.items() if d != n_features]:
            leave_out(cid, f"declared {dims[cid]} features; this run's model takes {n_features} (the count most nodes declared)")
    for f in failures:
        log.warning("node %s left out of the run: %s", f.node_id, f.reason)
    if not nodes:
        raise RuntimeError("no SuperNode is left after reconciling the declarations; see the log")
    if wanted == "regression":
        return "regression", 0, (n_features if shared_features else None), failures
    n_classes = len(settings.class_values) if settings.class_values else max(max(int(i["n_classes"]) for i in infos.values()), 2)
    task = settings.task or ("multiclass" if n_classes > 2 or any(i["task"] == "multiclass" for i in infos.values()) else "binary")
    return task, n_classes, (n_features if shared_features else None), failures


def new_run_id() -> str:
    """A run id for runs that Flower gave none (in-memory grids): time and process."""
    return time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
