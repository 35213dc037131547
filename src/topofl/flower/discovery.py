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
from collections.abc import Callable, Mapping
from typing import Any, Literal, overload

from flwr.app import ConfigRecord, MessageType, RecordDict
from flwr.serverapp import Grid

from topofl.data.federation import TASKS
from topofl.federation.pool import Failure
from topofl.federation.validation import client_info
from topofl.flower.exchange import NO_REPLY, OUTAGE_MARK, exchange
from topofl.flower.records import config_record
from topofl.flower.settings import FlowerSettings
from topofl.limits import MAX_CLASSES, MAX_FEATURES

log = logging.getLogger(__name__)

#: where to read why a SuperNode did not connect or answer, in each runtime (what the discovery errors point to)
NODE_LOGS = ("the SuperNodes' logs: supernode-<i>.log in a LocalDeployment's log directory, the output of each "
             "flower-supernode, or the ClientApps' output with topofl flower --verbose (Simulation Runtime)")


def discovery_timeout(settings: FlowerSettings) -> tuple[str, float]:
    """The run-config setting that bounds the discovery query and its seconds: ``node-wait``, or
    ``round-timeout`` when ``node-wait`` is 0.
    """
    return ("node-wait", settings.node_wait) if settings.node_wait else ("round-timeout", settings.round_timeout)


def _busy_hint(name: str) -> str:
    """What to do about SuperNodes that are too slow: the setting to raise, and where their logs are."""
    return (f"a busy machine starts SuperNodes and their ClientApps slowly (imports, loading data): raise {name} in "
            f"the run config (e.g. {name}=300); to see what a SuperNode was doing, read {NODE_LOGS}")


def wait_for_nodes(grid: Grid, settings: FlowerSettings) -> tuple[list[int], dict[int, int]]:
    """Node ids once at least ``min-nodes`` are connected, and when each was first seen (the poll
    of ``grid.get_node_ids()`` it first appeared in: 0, 1, ...); a clear error after ``node-wait`` seconds.
    """
    deadline = time.monotonic() + settings.node_wait
    first_seen: dict[int, int] = {}
    poll = 0
    while True:
        ids = sorted(int(n) for n in grid.get_node_ids())
        for nid in ids:
            first_seen.setdefault(nid, poll)
        if len(ids) >= settings.min_nodes:
            return ids, {nid: first_seen[nid] for nid in ids}
        if time.monotonic() >= deadline:
            raise RuntimeError(f"only {len(ids)} of min-nodes={settings.min_nodes} SuperNode(s) connected within "
                               f"node-wait={settings.node_wait:g} s: {_busy_hint('node-wait')}")
        poll += 1
        time.sleep(0.5)


def discover(grid: Grid, settings: FlowerSettings) -> tuple[dict[int, int], dict[int, dict[str, Any]], list[Failure]]:
    """Ask every connected node which client it is: ``({client: node_id}, {client: info}, failures)``.

    A node's declaration is validated (:func:`declaration`); a node whose declaration is invalid
    is left out of the run with a ``discover`` failure naming the field, never trusted. Who holds a
    partition id that several nodes claim (:func:`assign_partitions`): the node the run config's
    ``partition-nodes`` pins to it; else the claimant that connected first (seen in an earlier
    poll while waiting for ``min-nodes``); claimants first seen at the same time are all left out.
    """
    node_ids, first_seen = wait_for_nodes(grid, settings)
    contents = {nid: RecordDict({"config": config_record(settings.node_config())}) for nid in node_ids}

    def decode(_nid: int, content: RecordDict) -> dict[str, Any]:
        if "info" not in content or not isinstance(content["info"], ConfigRecord):
            raise ValueError("the reply has no 'info' ConfigRecord")
        return dict(content["info"])

    name, seconds = discovery_timeout(settings)
    infos, failures = exchange(grid, {n: n for n in node_ids}, contents, MessageType.QUERY, 0, "discover",
                               seconds, decode, timeout_name=name)
    # nodes that were too slow (not lost to a SuperLink outage, which a longer wait does not cure)
    silent = [f for f in failures if f.reason.startswith(NO_REPLY) and OUTAGE_MARK not in f.reason]
    claims: dict[int, list[tuple[int, dict[str, Any]]]] = {}
    for nid, info in sorted(infos.items()):
        try:
            checked = declaration(info)
        except ValueError as exc:
            failures.append(Failure(0, None, "discover", f"invalid declaration: {exc}", nid))
            continue
        claims.setdefault(checked["client"], []).append((nid, checked))
    nodes, by_client, left_out = assign_partitions(claims, first_seen, settings.partition_nodes)
    failures.extend(left_out)
    for f in failures:
        log.warning("node %s left out of the run at discovery: %s", f.node_id, f.reason)
    if not nodes:
        if silent and len(silent) == len(failures):
            raise RuntimeError(f"no SuperNode answered the discovery query within {name}={seconds:g} s (none of the "
                               f"{len(node_ids)} connected): {_busy_hint(name)}")
        first = next((f for f in failures if f not in silent), None)
        why = f" (node {first.node_id}: {first.reason})" if first is not None else ""
        raise RuntimeError(f"no SuperNode answered the discovery query with a valid declaration{why}; read {NODE_LOGS}")
    if silent:
        log.warning("%d SuperNode(s) did not answer the discovery query within %s=%g s and are left out: %s",
                    len(silent), name, seconds, _busy_hint(name))
    return nodes, by_client, failures


def assign_partitions(
    claims: Mapping[int, list[tuple[int, dict[str, Any]]]], first_seen: Mapping[int, int], pinned: Mapping[int, int],
) -> tuple[dict[int, int], dict[int, dict[str, Any]], list[Failure]]:
    """Which node holds each claimed partition id: ``({client: node_id}, {client: info}, failures)``.

    ``claims`` maps a partition id to its claimants ``(node_id, declaration)``; ``first_seen`` is
    when each node first appeared among the connected nodes (:func:`wait_for_nodes`); ``pinned``
    is the run config's ``partition-nodes`` (partition id → node id). A pinned partition is held by
    its node only, and a pinned node only holds its partition. Otherwise the claimant first seen
    keeps the partition and later claimants are left out; claimants first seen at the same time
    (the same poll) are all left out, as nothing tells the honest one apart. Every node left out
    gets a ``discover`` failure saying why.
    """
    nodes: dict[int, int] = {}
    by_client: dict[int, dict[str, Any]] = {}
    failures: list[Failure] = []
    pinned_node = {nid: cid for cid, nid in pinned.items()}
    for cid, claimants in sorted(claims.items()):
        rest = []
        for nid, info in claimants:
            if cid in pinned and pinned[cid] != nid:
                failures.append(Failure(0, cid, "discover", f"claims partition-id={cid}, which partition-nodes pins to "
                                        f"node {pinned[cid]}: left out", nid))
            elif cid not in pinned and nid in pinned_node:
                failures.append(Failure(0, cid, "discover", "partition-nodes pins this node to "
                                        f"partition-id={pinned_node[nid]}, but it claims partition-id={cid}: left out",
                                        nid))
            else:
                rest.append((nid, info))
        if not rest:
            continue
        first = min(first_seen.get(nid, 0) for nid, _ in rest)
        earliest = [(nid, info) for nid, info in rest if first_seen.get(nid, 0) == first]
        ids = ", ".join(str(n) for n, _ in earliest)
        if len(earliest) > 1:
            failures.extend(Failure(0, cid, "discover", f"partition-id={cid} is claimed by nodes {ids}, which "
                                    "connected at the same time: all of them are left out (give every node its own "
                                    "partition-id, or pin node ids to partitions with the run config's "
                                    "partition-nodes)", n)
                            for n, _ in earliest)
        else:
            nodes[cid], by_client[cid] = earliest[0]
        failures.extend(Failure(0, cid, "discover", f"partition-id={cid} was claimed first by node(s) {ids}, which "
                                "connected earlier: left out (a later claimant of a partition is never trusted with "
                                "it)", n)
                        for n, _ in rest if first_seen.get(n, 0) != first)
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


def _majority(values: dict[int, Any], what: str, key: str) -> Any:
    """The value most clients declared; ``ValueError`` on a tie naming the run-config ``key`` that decides it."""
    counts = Counter(values.values()).most_common()
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        raise ValueError(f"the SuperNodes split evenly on {what} ({dict(counts)}); set {key} in the run config to "
                         "decide")
    return counts[0][0]


#: a node is left out when, with no ``classes`` in the run config, it declares more than
#: ``CLASS_FACTOR`` times and ``CLASS_SLACK`` more than the most any other node declares
CLASS_FACTOR, CLASS_SLACK = 4, 16


def class_problem(n_classes: int, info: Mapping[str, Any], others: list[int], bound: int | None,
                  because: str) -> str | None:
    """Why a node's declared class count cannot be trusted; ``None`` when it can.

    ``bound``: the run's own class count (``classes`` set, or ``task='binary'``), named by
    ``because``. Without one, no node can inflate the run's classes on its own: a node declaring
    more classes than it has examples, or more than ``max(CLASS_FACTOR × m, m + CLASS_SLACK)``
    where ``m`` is the most any *other* node declares (at least 2), is left out.
    """
    if bound is not None:
        return f"declared {n_classes} classes; this run has {bound} ({because})" if n_classes > bound else None
    examples = int(info["n_train"]) + int(info["n_test"])
    if n_classes > examples:
        return (f"declared {n_classes} classes but has only {examples} examples (set classes in the run config if "
                "that is right)")
    if others:
        m = max(max(others), 2)
        limit = max(CLASS_FACTOR * m, m + CLASS_SLACK)
        if n_classes > limit:
            return (f"declared {n_classes} classes, more than max({CLASS_FACTOR} × {m}, {m} + {CLASS_SLACK}) = {limit} "
                    f"where {m} is the most any other node declared (set classes in the run config if that is right)")
    return None


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
    some classes); an even split is an error naming ``task``. Federated methods need one feature
    space: the run config's ``n-features``, or else the count most nodes declared (an even split
    is an error naming ``n-features``). Classes: the run config's ``classes``, or the most any kept
    node declared; a node declaring more than the run allows (:func:`class_problem`: more than
    ``classes`` lists, more than 2 with ``task='binary'``, else far more than any other node or
    more than its examples) is left out. One node can therefore not change the run for the
    others: it is left out.
    """
    failures: list[Failure] = []

    def leave_out(cid: int, reason: str) -> None:
        failures.append(Failure(0, cid, "discover", reason, nodes.pop(cid)))
        del infos[cid]

    family = {cid: "regression" if i["task"] == "regression" else "classification" for cid, i in infos.items()}
    wanted = _task_family(settings) if settings.task else _majority(family, "the task", "task")
    for cid in [c for c, f in family.items() if f != wanted]:
        leave_out(cid, f"declared a {family[cid]} task; this run is {wanted}")
    n_features = _shared_features(infos, settings, leave_out) if shared_features else None
    if wanted == "classification":
        for cid, reason in _class_problems(infos, settings).items():
            if reason is not None:
                leave_out(cid, reason)
    for f in failures:
        log.warning("node %s left out of the run: %s", f.node_id, f.reason)
    if not nodes:
        raise RuntimeError("no SuperNode is left after reconciling the declarations; see the log")
    if wanted == "regression":
        return "regression", 0, n_features, failures
    task, n_classes = _classification(infos, settings)
    return task, n_classes, n_features, failures


def _task_family(settings: FlowerSettings) -> str:
    """The task family the run config's ``task`` names: regression, or classification (binary or multiclass)."""
    return "regression" if settings.task == "regression" else "classification"


def _shared_features(infos: dict[int, dict[str, Any]], settings: FlowerSettings,
                     leave_out: Callable[[int, str], None]) -> int:
    """The run's feature count (the run config's ``n-features``, or else the count most nodes declared);
    every node that declared another is left out (``leave_out``).
    """
    dims = {cid: int(i["n_features"]) for cid, i in infos.items()}
    if settings.n_features:
        n_features, why = settings.n_features, f"n-features={settings.n_features} in the run config"
    else:
        n_features, why = _majority(dims, "the number of features", "n-features"), "the count most nodes declared"
    for cid in [c for c, d in dims.items() if d != n_features]:
        leave_out(cid, f"declared {dims[cid]} features; this run's model takes {n_features} ({why})")
    return n_features


def _class_problems(infos: dict[int, dict[str, Any]], settings: FlowerSettings) -> dict[int, str | None]:
    """Why each node's declared class count cannot be trusted (:func:`class_problem`; ``None``: it can)."""
    declared = {cid: int(i["n_classes"]) for cid, i in infos.items()}
    bound, because = ((len(settings.class_values), f"classes={settings.classes!r}") if settings.class_values else
                      (2, "task='binary'") if settings.task == "binary" else (None, ""))
    return {cid: class_problem(n, infos[cid], [m for c, m in declared.items() if c != cid], bound, because)
            for cid, n in declared.items()}


def _classification(infos: dict[int, dict[str, Any]], settings: FlowerSettings) -> tuple[str, int]:
    """The task ("binary" or "multiclass") and number of classes of a classification run, from the kept nodes."""
    n_classes = (len(settings.class_values) if settings.class_values
                 else max(max(int(i["n_classes"]) for i in infos.values()), 2))
    task = settings.task or ("multiclass" if n_classes > 2 or any(i["task"] == "multiclass" for i in infos.values())
                             else "binary")
    return task, n_classes


def new_run_id() -> str:
    """A run id for runs that Flower gave none (in-memory grids): time and process."""
    return time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
