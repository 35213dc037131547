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
from topofl.data.federation import TASKS
from topofl.deployment_defaults import DEPLOYMENT_DEFAULTS, deployment_hyperparameters
from topofl.limits import MAX_CLASSES, MAX_FEATURES, MAX_ROUNDS, MAX_SEED
from topofl.parsing import parse_assignments

__all__ = ["DEPLOYMENT_DEFAULTS", "KEYS", "FlowerSettings", "deployment_hyperparameters", "parse_pairs"]

#: run-config key → (settings field, default, help)
KEYS: dict[str, tuple[str, Any, str]] = {
    "method": ("method", "ptopofl", "a federated method (topofl methods) or a decentralised one: sheaf, dfedu, dpsgd, local-peers"),
    "scenario": ("scenario", "healthcare", "built-in scenario each node takes its partition from (unless its node config has data-path)"),
    "scenario-params": ("scenario_params", "", "scenario parameters, 'k=v,k=v'"),
    "num-server-rounds": ("rounds", 3, "rounds (iterations for decentralised methods)"),
    "seed": ("seed", 0, "seed of every random choice (the scenario too)"),
    "hyperparameters": ("hyperparameters", "", "method hyper-parameters, 'k=v,k=v'"),
    "out-dir": ("out_dir", "", "directory for rounds.csv, server_log.jsonl and result.json ('' = none)"),
    "min-nodes": ("min_nodes", 1, "wait for at least this many connected nodes before round 1"),
    "node-wait": ("node_wait", 60.0, "seconds to wait for min-nodes"),
    "min-replies": ("min_replies", 1, "valid replies a round needs to update the server state"),
    "client-fraction": ("client_fraction", 1.0, "share of the clients a federated round selects, in (0, 1] (partial participation; "
                        "the same seeded choice as in process)"),
    "round-timeout": ("round_timeout", 120.0, "seconds to wait for the replies of one message exchange"),
    "graph": ("graph", "ring", "communication graph of decentralised methods (topofl.decentralised.make_graph kinds)"),
    "graph-params": ("graph_params", "", "graph parameters, 'k=v,k=v' (e.g. p=0.3)"),
    "pooled-metrics": ("pooled_metrics", False, "clients also send test labels and scores so the server can compute pooled metrics"),
    "task": ("task", "", "binary | multiclass | regression; '' = what most nodes declare (nodes that disagree are left out)"),
    "classes": ("classes", "", "label values in class order, 'a,b,c': a node with its own data-path maps label classes[i] to class i"),
    "n-features": ("n_features", 0, "features of the model of a federated method; nodes that declare another count are left out "
                   "(0 = the count most nodes declare)"),
    "partition-nodes": ("partition_nodes", "", "pin partitions to SuperNodes, 'partition-id=node-id,...': only that node may hold "
                        "the partition ('' = the first node to connect that claims it)"),
    "model": ("model", "linear", "the model every node trains: linear, cnn-small, cnn-same, cnn-medium, cnn-large, convnet2, resnet18, mlp, or "
              "'package.module:factory' (installed on every node)"),
    "device": ("device", "cpu", "where a PyTorch model computes on each node: cpu, cuda or auto"),
    "resume-dir": ("resume_dir", "", "continue the run whose directory this is (inside the results root, as out-dir; e.g. "
                   "'trial1/run-42') from its last checkpointed round, with its settings ('' = a new run)"),
    "robust-defaults": ("robust_defaults", True, "apply topofl.flower.settings.DEPLOYMENT_DEFAULTS (a Byzantine-robust server rule "
                        "and a cap on any one client's share) to every hyper-parameter the run does not set; false = the "
                        "papers' rules (opt-out)"),
    "attack": ("attack", "", "robustness trials: hostile clients, 'kind:key=value,...' (topofl.robustness.attacks, e.g. "
               "'sign_flip:fraction=0.25,start_round=2'); each node whose client id (graph node, for a "
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


@dataclass(frozen=True)
class FlowerSettings:
    """Validated settings of one Flower run (see :data:`KEYS` for the run-config names)."""

    method: str = "ptopofl"
    scenario: str = "healthcare"
    scenario_params: Mapping[str, Any] = field(default_factory=dict)
    rounds: int = 3
    seed: int = 0
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)
    out_dir: str = ""
    min_nodes: int = 1
    node_wait: float = 60.0
    min_replies: int = 1
    client_fraction: float = 1.0
    round_timeout: float = 120.0
    graph: str = "ring"
    graph_params: Mapping[str, Any] = field(default_factory=dict)
    pooled_metrics: bool = False
    task: str = ""
    classes: str = ""
    n_features: int = 0
    partition_nodes: Mapping[int, int] = field(default_factory=dict)
    model: str = "linear"
    device: str = "cpu"
    attack: str = ""
    resume_dir: str = ""
    robust_defaults: bool = True

    def __post_init__(self) -> None:
        from topofl.data.scenarios import SCENARIOS
        from topofl.methods import available

        check_choice("method", self.method, available())
        if not isinstance(self.robust_defaults, bool):
            raise ValueError(f"robust-defaults must be true or false; got {self.robust_defaults!r}")
        if self.robust_defaults:  # the deployment's Byzantine-robust defaults, unless the run sets the field
            object.__setattr__(self, "hyperparameters", deployment_hyperparameters(self.method, dict(self.hyperparameters)))
        check_choice("scenario", self.scenario, list(SCENARIOS))
        check_int("num-server-rounds", self.rounds, 1, MAX_ROUNDS)
        check_int("seed", self.seed, 0, MAX_SEED)
        check_int("min-nodes", self.min_nodes, 1)
        check_range("node-wait", self.node_wait, 0.0)
        check_int("min-replies", self.min_replies, 0)
        check_range("client-fraction", self.client_fraction, 0.0, 1.0, low_open=True)
        check_range("round-timeout", self.round_timeout, 0.0, low_open=True)
        if not isinstance(self.pooled_metrics, bool):
            raise ValueError(f"pooled-metrics must be true or false; got {self.pooled_metrics!r}")
        check_choice("task", self.task, ["", *TASKS])
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"model must be a registered model name or 'package.module:factory'; got {self.model!r}")
        check_choice("device", self.device, ["cpu", "cuda", "auto"])
        if not isinstance(self.resume_dir, str):
            raise ValueError(f"resume-dir must be a run directory inside the results root; got {self.resume_dir!r}")
        if not isinstance(self.attack, str):
            raise ValueError(f"attack must be 'kind:key=value,...'; got {self.attack!r}")
        if self.attack:
            from topofl.robustness.attacks import parse_attack

            try:
                config = parse_attack(self.attack)
                if self.decentralised:  # a peer kind, and the paper exchange for a reply kind
                    from topofl.methods import build_peer
                    from topofl.robustness.peer_attacks import AttackedPeers

                    AttackedPeers(build_peer(self.method, dict(self.hyperparameters)), config, ())
            except ValueError as exc:
                raise ValueError(f"attack={self.attack!r}: {exc}") from None
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
        from topofl.methods import family

        return family(self.method) == "peer"

    @classmethod
    def from_saved(cls, saved: Mapping[str, Any]) -> FlowerSettings:
        """Settings as :meth:`as_dict` wrote them (a checkpoint's). A checkpoint written before
        ``robust-defaults`` existed ran the papers' rules with the hyper-parameters it saved, so a
        missing ``robust_defaults`` is ``False``: resuming never changes a run's rule.
        """
        return cls(**{"robust_defaults": False, **saved})

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
        return cls(**values)

    def job(self) -> dict[str, Any]:
        """What every node needs to build the same algorithm, data and model (sent in each message)."""
        return {
            "method": self.method,
            "hyperparameters": json.dumps(dict(self.hyperparameters), sort_keys=True),
            "scenario": self.scenario,
            "scenario_params": json.dumps(dict(self.scenario_params), sort_keys=True),
            "seed": int(self.seed),
            "pooled": bool(self.pooled_metrics),
            "task": self.task,
            "classes": ",".join(repr(v) for v in self.class_values),
            "model": self.model,
            "device": self.device,
            "attack": self.attack,
        }

    def as_dict(self) -> dict[str, Any]:
        return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in dataclasses.asdict(self).items()}
