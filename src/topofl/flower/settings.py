"""The settings of a topofl Flower run, read from Flower's run config (pure, no flwr import).

Every key is optional; ``flwr run --run-config "method='sheaf' num-server-rounds=5"`` overrides
the app's ``[tool.flwr.app.config]``. Values are validated at construction: a bad one is a
``ValueError`` naming the run-config key and the value.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from topofl._validation import check_choice, check_int, check_range
from topofl.config import parse_assignments
from topofl.data.federation import TASKS
from topofl.deployment_defaults import DEPLOYMENT_DEFAULTS, deployment_hyperparameters
from topofl.job import FILE_NAMES, Job
from topofl.limits import MAX_CLASSES, MAX_FEATURES

__all__ = ["DEPLOYMENT_DEFAULTS", "KEYS", "FlowerSettings", "deployment_hyperparameters", "parse_pairs"]

_JOB = {f.name: f.default for f in dataclasses.fields(Job) if f.default is not dataclasses.MISSING}

#: run-config key → (settings field, default, help); the keys of the run's :class:`~topofl.job.Job` take its defaults
KEYS: dict[str, tuple[str, Any, str]] = {
    "method": ("method", _JOB["method"],
               "a federated method (topofl methods) or a decentralised one: sheaf, dfedu, dpsgd, local-peers"),
    "scenario": ("scenario", _JOB["data"],
                 "built-in scenario each node takes its partition from (unless its node config has data-path)"),
    "scenario-params": ("scenario_params", "", "scenario parameters, 'k=v,k=v'"),
    "num-server-rounds": ("rounds", _JOB["rounds"], "rounds (iterations for decentralised methods)"),
    "seed": ("seed", 0, "seed of every random choice (the scenario too)"),
    "hyperparameters": ("hyperparameters", "", "method hyper-parameters, 'k=v,k=v'"),
    "out-dir": ("out_dir", "", "directory for rounds.csv, server_log.jsonl and result.json ('' = none)"),
    "min-nodes": ("min_nodes", 1, "wait for at least this many connected nodes before round 1"),
    "node-wait": ("node_wait", 60.0, "seconds to wait for min-nodes"),
    "min-replies": ("min_replies", 1, "valid replies a round needs to update the server state"),
    "client-fraction": ("client_fraction", 1.0, "share of the clients a federated round selects, in (0, 1] (partial "
                        "participation; the same seeded choice as in process)"),
    "round-timeout": ("round_timeout", 120.0, "seconds to wait for the replies of one message exchange"),
    "graph": ("graph", _JOB["graph"],
              "communication graph of decentralised methods (topofl.decentralised.make_graph kinds)"),
    "graph-params": ("graph_params", "", "graph parameters, 'k=v,k=v' (e.g. p=0.3)"),
    "pooled-metrics": ("pooled_metrics", False,
                       "clients also send test labels and scores so the server can compute pooled metrics"),
    "task": ("task", "",
             "binary | multiclass | regression; '' = what most nodes declare (nodes that disagree are left out)"),
    "classes": ("classes", "", "label values in class order, 'a,b,c': a node with its own data-path maps label "
                "classes[i] to class i"),
    "n-features": ("n_features", 0, "features of the model of a federated method; nodes that declare another count "
                   "are left out (0 = the count most nodes declare)"),
    "partition-nodes": ("partition_nodes", "", "pin partitions to SuperNodes, 'partition-id=node-id,...': only that "
                        "node may hold the partition ('' = the first node to connect that claims it)"),
    "model": ("model", "linear", "the model every node trains: linear, cnn-small, cnn-same, cnn-medium, cnn-large, "
              "convnet2, resnet18, mlp, or 'package.module:factory' (installed on every node)"),
    "device": ("device", "cpu", "where a PyTorch model computes on each node: cpu, cuda or auto"),
    "resume-dir": ("resume_dir", "", "continue the run whose directory this is (inside the results root, as out-dir; "
                   "e.g. 'trial1/run-42') from its last checkpointed round, with its settings ('' = a new run)"),
    "robust-defaults": ("robust_defaults", True, "apply topofl.flower.settings.DEPLOYMENT_DEFAULTS (a Byzantine-robust "
                        "server rule and a cap on any one client's share) to every hyper-parameter the run does not "
                        "set; false = the papers' rules (opt-out)"),
    "attack": ("attack", "", "robustness trials: hostile clients, 'kind:key=value,...' (topofl.robustness.attacks, "
               "e.g. 'sign_flip:fraction=0.25,start_round=2'); each node whose client id (graph node, for a "
               "decentralised method) is chosen attacks ('' = none)"),
}


def parse_pairs(text: str, key: str) -> dict[str, Any]:
    """``"a=1,b=x,c=(1, 2)"`` → ``{"a": 1, "b": "x", "c": (1, 2)}`` (values as Python literals
    where possible; commas inside brackets belong to the value).
    """
    items, depth, current = [], 0, ""
    for ch in str(text):
        depth += (ch in "([{") - (ch in ")]}")
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    return parse_assignments([p for p in items if p.strip()], key)


def _partition_nodes(value: Any) -> dict[int, int]:
    """The ``partition-nodes`` run-config value as ``{partition id: node id}``: a mapping, or the
    text ``'0=123,1=456'``; ``ValueError`` naming the key unless ids are non-negative integers and
    no node holds two partitions.
    """
    if isinstance(value, str):
        pairs: dict[int, int] = {}
        for item in (p.strip() for p in value.split(",")):
            if not item:
                continue
            left, sep, right = item.partition("=")
            if not sep or not left.strip().isdecimal() or not right.strip().isdecimal():
                raise ValueError(f"partition-nodes must be 'partition-id=node-id,...' with integer ids; got {value!r}")
            if int(left) in pairs:
                raise ValueError(f"partition-nodes names partition-id={int(left)} twice; got {value!r}")
            pairs[int(left)] = int(right)
    elif isinstance(value, Mapping):  # e.g. from a checkpoint's JSON manifest: ids may be strings
        return _partition_nodes(",".join(f"{k}={v}" for k, v in value.items()))
    else:
        raise ValueError(f"partition-nodes must be 'partition-id=node-id,...'; got {value!r}")
    if len(set(pairs.values())) != len(pairs):
        raise ValueError(f"partition-nodes pins one node to several partitions; got {value!r}")
    return pairs


#: flat settings names (run-config keys with underscores; checkpoints and result.json) → :class:`Job` fields
JOB_FIELDS = FILE_NAMES
#: a Job field's name in errors: the run-config key a Flower user typed
_RUN_CONFIG_NAME = {"rounds": "num-server-rounds", "data": "scenario", "client_fraction": "client-fraction",
                    "data_params": "scenario-params", "graph_params": "graph-params"}


@dataclass(frozen=True)
class FlowerSettings:
    """Validated settings of one Flower run: the run itself (a :class:`~topofl.job.Job`, whose data
    is a built-in scenario) and how the Flower runtime carries it out (see :data:`KEYS` for the
    run-config names). :meth:`from_flat` builds one from the flat names.
    """

    job: Job = field(default_factory=Job)
    out_dir: str = ""
    min_nodes: int = 1
    node_wait: float = 60.0
    min_replies: int = 1
    round_timeout: float = 120.0
    pooled_metrics: bool = False
    task: str = ""
    classes: str = ""
    n_features: int = 0
    partition_nodes: Mapping[int, int] = field(default_factory=dict)
    resume_dir: str = ""
    robust_defaults: bool = True

    def __post_init__(self) -> None:
        from topofl.data.scenarios import SCENARIOS

        if not isinstance(self.job, Job):
            raise ValueError(f"job must be a topofl Job; got {type(self.job).__name__}")
        if not isinstance(self.robust_defaults, bool):
            raise ValueError(f"robust-defaults must be true or false; got {self.robust_defaults!r}")
        if self.robust_defaults:  # the deployment's Byzantine-robust defaults, unless the run sets the field
            hyper = deployment_hyperparameters(self.job.method, dict(self.job.hyperparameters))
            object.__setattr__(self, "job", self.job.with_(hyperparameters=hyper))
        check_choice("scenario", self.job.data, list(SCENARIOS))
        for name in ("model", "graph", "attack"):
            if not isinstance(getattr(self.job, name), str):
                raise ValueError(f"{name} must be given by name in a Flower run; got {getattr(self.job, name)!r}")
        check_int("min-nodes", self.min_nodes, 1)
        check_range("node-wait", self.node_wait, 0.0)
        check_int("min-replies", self.min_replies, 0)
        check_range("round-timeout", self.round_timeout, 0.0, low_open=True)
        if not isinstance(self.pooled_metrics, bool):
            raise ValueError(f"pooled-metrics must be true or false; got {self.pooled_metrics!r}")
        check_choice("task", self.task, ["", *TASKS])
        if not isinstance(self.resume_dir, str):
            raise ValueError(f"resume-dir must be a run directory inside the results root; got {self.resume_dir!r}")
        if self.job.attack and self.decentralised:  # a peer kind, and the paper exchange for a reply kind
            from topofl.methods import build_peer
            from topofl.robustness.attacks import parse_attack
            from topofl.robustness.peer_attacks import AttackedPeers

            try:
                AttackedPeers(build_peer(self.job.method, dict(self.job.hyperparameters)),
                              parse_attack(self.job.attack), ())
            except ValueError as exc:
                raise ValueError(f"attack={self.job.attack!r}: {exc}") from None
        if self.classes:
            if self.task == "regression":
                raise ValueError("classes cannot be combined with task='regression'")
            _ = self.class_values
        check_int("n-features", self.n_features, 0, MAX_FEATURES)
        object.__setattr__(self, "partition_nodes", _partition_nodes(self.partition_nodes))

    @property
    def class_values(self) -> list[float]:
        """The ``classes`` run-config value as label values (``[]`` when not set)."""
        if not self.classes:
            return []
        try:
            values = [float(v) for v in str(self.classes).split(",") if v.strip()]
        except ValueError:
            raise ValueError(f"classes must be comma-separated numbers, e.g. '1,2,4'; got {self.classes!r}") from None
        if len(values) < 2 or len(set(values)) != len(values) or len(values) > MAX_CLASSES:
            raise ValueError(f"classes must list 2 to {MAX_CLASSES} distinct label values; got {self.classes!r}")
        return values

    @property
    def decentralised(self) -> bool:
        """Whether the run's method is a peer-to-peer one (relayed between the SuperNodes)."""
        return self.job.family == "peer"

    @classmethod
    def from_flat(cls, **values: Any) -> FlowerSettings:
        """Settings from flat names (:meth:`as_dict`'s; the run-config keys with underscores):
        those of :data:`JOB_FIELDS` build the run's :class:`Job`, the others are the runtime's.
        A bad value is a ``ValueError`` naming the run-config key.
        """
        job_values = {JOB_FIELDS[k]: v for k, v in values.items() if k in JOB_FIELDS}
        rest = {k: v for k, v in values.items() if k not in JOB_FIELDS}
        try:
            job = Job(**job_values)
        except ValueError as exc:
            text = str(exc)
            field_name = text.split(" ", 1)[0]
            if field_name in _RUN_CONFIG_NAME:
                text = _RUN_CONFIG_NAME[field_name] + text[len(field_name):]
            raise ValueError(text) from None
        return cls(job=job, **rest)

    @classmethod
    def from_saved(cls, saved: Mapping[str, Any]) -> FlowerSettings:
        """Settings as :meth:`as_dict` wrote them (a checkpoint's). A checkpoint written before
        ``robust-defaults`` existed ran the papers' rules with the hyper-parameters it saved, so a
        missing ``robust_defaults`` is ``False``: resuming never changes a run's rule. A checkpoint
        written before the run's defaults were stated once (in :class:`Job`) recorded every value,
        so none of its settings changes.
        """
        return cls.from_flat(**{"robust_defaults": False, **saved})

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> FlowerSettings:
        """Settings from Flower's run config; unknown keys are an error listing the known ones."""
        unknown = sorted(set(run_config) - set(KEYS))
        if unknown:
            raise ValueError(f"unknown run-config key(s) {', '.join(unknown)}; known: {', '.join(KEYS)}")
        values: dict[str, Any] = {}
        for key, value in run_config.items():
            name, default, _ = KEYS[key]
            if name in ("scenario_params", "hyperparameters", "graph_params"):
                value = parse_pairs(value, key)
            elif name == "partition_nodes":
                value = _partition_nodes(value)
            elif isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            values[name] = value
        return cls.from_flat(**values)

    def node_config(self) -> dict[str, Any]:
        """What every node needs to build the same algorithm, data and model (sent in each message)."""
        j = self.job
        return {
            "method": j.method,
            "hyperparameters": json.dumps(dict(j.hyperparameters), sort_keys=True),
            "scenario": j.data,
            "scenario_params": json.dumps(dict(j.data_params), sort_keys=True),
            "seed": int(j.seed),
            "pooled": bool(self.pooled_metrics),
            "task": self.task,
            "classes": ",".join(repr(v) for v in self.class_values),
            "model": j.model,
            "device": j.device,
            "attack": j.attack,
        }

    def as_dict(self) -> dict[str, Any]:
        """The settings under their flat names (checkpoints, ``result.json``; :meth:`from_flat` reads them)."""
        flat = self.job.file_dict()
        for f in dataclasses.fields(self):
            if f.name != "job":
                v = getattr(self, f.name)
                flat[f.name] = dict(v) if isinstance(v, Mapping) else v
        return flat
