"""One description of a run — :class:`Job` — that the Python API, the CLI, the experiments and the
Flower apps all build; :func:`topofl.run` executes it. Every default of a run is stated here once.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from topofl._validation import check_choice, check_int, check_range
from topofl.limits import MAX_ROUNDS, MAX_SEED

#: the defaults of a run, for every entry point (``topofl run``/``compare``/``experiment``/``flower``,
#: :func:`topofl.simulate`, :func:`topofl.simulate_decentralised`)
DEFAULT_METHOD = "ptopofl"
DEFAULT_DATA = "healthcare"
DEFAULT_ROUNDS = 15
DEFAULT_GRAPH = "erdos_renyi"
DEVICES = ("cpu", "cuda", "auto")

#: data sources renamed when both families came to share one registry: run ids keep the old names
#: so that results written before still resume
_LEGACY_DATA_NAMES = {"rotated-digits": "digits", "rotated-mnist": "mnist"}


def _id_name(data: str, family: str) -> str:
    """The data source's name in run ids and result columns: a peer run on a renamed Sheaf-FMTL data set
    keeps its old name, and a peer run on a scenario that shares that old name gets its own (no two data
    sets share an id; server runs name their source as it is).
    """
    if family != "peer":
        return data
    if data in _LEGACY_DATA_NAMES:
        return _LEGACY_DATA_NAMES[data]
    return f"{data}-scenario" if data in _LEGACY_DATA_NAMES.values() else data


#: the names files and run configs have always used for a job's fields (``config.json``, Flower's run config
#: and checkpoints): name in files → :class:`Job` field
FILE_NAMES = {"method": "method", "scenario": "data", "scenario_params": "data_params", "rounds": "rounds",
              "seed": "seed", "hyperparameters": "hyperparameters", "client_fraction": "client_fraction",
              "graph": "graph", "graph_params": "graph_params", "model": "model", "device": "device",
              "attack": "attack"}


def _frozen_mapping(name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be a mapping of names to values; got {value!r}")
    if not all(isinstance(k, str) for k in value):
        raise ValueError(f"{name} must map names (strings) to values; got keys {list(value)!r}")
    return dict(value)


@dataclass(frozen=True)
class Job:
    """One run: a method with its hyper-parameters on a data source, for some rounds with a seed.

    Parameters
    ----------
    method : str
        A registered method of either family (``topofl methods``); its family decides the runtime.
    data : str or data object
        A registered data source (:func:`topofl.data.sources.available`), or data in memory: a
        :class:`~topofl.data.Federation`, a ``LoadedData`` or (peer methods) a list of clients.
    data_params : mapping
        Overrides of the data source's parameters (e.g. ``{"n_clients": 4}``).
    hyperparameters : mapping
        The method's hyper-parameters (unknown names or out-of-range values: ``ValueError``).
    model : str or model object
        ``"linear"`` (the task's linear model), a registered name (``"cnn-small"``, ``"mlp"``, ...),
        ``"package.module:factory"``, a ``torch.nn.Module`` or a factory; peer methods: a comma
        list dealt to the clients in turn, or a list with one per client.
    rounds, seed, client_fraction
        Rounds (server) or iterations (peers), the seed, and the fraction of clients per round.
    graph, graph_params
        Peer methods: the communication graph (:func:`topofl.decentralised.make_graph` kind, or a
        ``networkx.Graph``) and its parameters.
    attack : str or AttackConfig
        Hostile clients, ``"kind:key=value,..."`` (:mod:`topofl.robustness.attacks`); ``""``: none.
    validation : float
        Tuning: the fraction of every client's training split held out and scored instead of the
        test split (0: train on it all, score on the test split).
    device : str
        ``"cpu"``, ``"cuda"`` or ``"auto"`` for a PyTorch model.
    input_shape : tuple of int, optional
        The shape each row is reshaped to for a PyTorch model, e.g. ``(1, 8, 8)`` for a user's CNN
        (``None``: flat rows, or the image a registered CNN infers from the feature count).
    experiment, label, setting
        Bookkeeping of an experiment: its name, the method's display name, and the experiment's
        own columns (copied into every result row; ``eval_every`` there sets the peers' evaluation
        interval).
    """

    method: str = DEFAULT_METHOD
    data: Any = DEFAULT_DATA
    data_params: Mapping[str, Any] = field(default_factory=dict)
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)
    model: Any = "linear"
    rounds: int = DEFAULT_ROUNDS
    seed: int = 0
    client_fraction: float = 1.0
    graph: Any = DEFAULT_GRAPH
    graph_params: Mapping[str, Any] = field(default_factory=dict)
    attack: Any = ""
    validation: float = 0.0
    device: str = "cpu"
    input_shape: tuple[int, ...] | None = None
    experiment: str = ""
    label: str = ""
    setting: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from topofl.methods import canonical

        object.__setattr__(self, "method", canonical(self.method))  # unknown: a ValueError listing the registered ones
        for name in ("data_params", "hyperparameters", "graph_params", "setting"):
            object.__setattr__(self, name, _frozen_mapping(name, getattr(self, name)))
        if isinstance(self.data, str):
            from topofl.data.sources import available as sources

            check_choice("data", self.data, sources())
        elif self.data_params:
            raise ValueError("data_params apply to a named data source; data in memory takes none")
        check_int("rounds", self.rounds, 1, MAX_ROUNDS)
        check_int("seed", self.seed, 0, MAX_SEED)
        check_range("client_fraction", self.client_fraction, 0.0, 1.0, low_open=True)
        check_range("validation", self.validation, 0.0, 0.5)
        check_choice("device", self.device, DEVICES)
        if self.input_shape is not None:
            from topofl.models.registry import checked_input_shape

            object.__setattr__(self, "input_shape", checked_input_shape(self.input_shape))
        if isinstance(self.model, str) and not self.model.strip():
            raise ValueError("model must name a model (e.g. 'linear', 'cnn-small' or 'package.module:factory'); got ''")
        if isinstance(self.graph, str):
            from topofl.decentralised.graphs import KINDS

            check_choice("graph", self.graph, KINDS)
        if not self.method.startswith("paper:"):  # the method's hyper-parameters, validated as it will build them
            from topofl.methods import get

            # kept (not a field: no part of the job's identity) for the run to build the method from, with the
            # hyper-parameters it was built from (a plain dict: a user may change it later)
            given = dict(self.hyperparameters)
            object.__setattr__(self, "_method_config", (get(self.method).config.from_dict(given), given))
        for name in ("experiment", "label"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} must be a string; got {getattr(self, name)!r}")
        if self.attack is None:
            object.__setattr__(self, "attack", "")
        if self.attack != "":
            from topofl.robustness.attacks import parse_attack

            try:
                parse_attack(self.attack)
            except ValueError as exc:
                raise ValueError(f"attack={self.attack!r}: {exc}") from None

    @property
    def method_config(self) -> Any:
        """The method's config of :attr:`hyperparameters` (validated: ``ValueError`` for an unknown name or a value out
        of range) — the one built when the job was made while they are unchanged; ``None`` for the authors'
        paper-era protocols.
        """
        if self.method.startswith("paper:"):
            return None
        kept = self.__dict__.get("_method_config")
        if kept is not None:
            given, before = self.hyperparameters, kept[1]
            # the very same values (not merely equal ones: 2.0 for 2, True for 1, -0.0 for 0.0 are judged anew)
            if given.keys() == before.keys() and all(given[k] is v for k, v in before.items()):
                return kept[0]
        from topofl.methods import get

        return get(self.method).config.from_dict(dict(self.hyperparameters))

    @property
    def family(self) -> str:
        """``"server"`` or ``"peer"``: the family of :attr:`method`, which decides the runtime (``"paper"``:
        the authors' paper-era protocol, which the experiment runner executes).
        """
        from topofl.methods import family

        return family(self.method)

    def with_(self, **changes: Any) -> Job:
        """A copy with ``changes`` applied (validated again)."""
        return replace(self, **changes)

    @property
    def key(self) -> dict[str, Any]:
        """Columns identifying the run in tidy results: experiment, data, method (its label), setting, seed."""
        scenario = _id_name(self.data_name, self.family)  # the column results have always had
        return {"experiment": self.experiment, "scenario": scenario, "method": self.label or self.method,
                **self.setting, "seed": self.seed}

    @property
    def data_name(self) -> str:
        """The data source's name (``"custom"`` for data in memory)."""
        return self.data if isinstance(self.data, str) else str(getattr(self.data, "name", "custom"))

    def as_dict(self) -> dict[str, Any]:
        """The job as plain values (for ``config.json`` and the run id); ``ValueError`` for data,
        a model or a graph given as objects, which have no such description.
        """
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("data", "model", "graph"):
            if not isinstance(out[name], str):
                raise ValueError(f"a job whose {name} is an object in memory has no plain description; name it instead")
        if not isinstance(out["attack"], str):
            out["attack"] = _attack_spec(out["attack"])
        return {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in out.items()}

    def spec_dict(self) -> dict[str, Any]:
        """The run as the experiment runner of earlier topofl versions described it (the basis of
        :attr:`run_id` and of tuning's setting names, so that results written before still resume).
        """
        from topofl.data.sources import location_params

        d = self.as_dict()
        where = location_params(d["data"])   # where the data are is no part of the run (School's path)
        out: dict[str, Any] = {
            "experiment": d["experiment"], "scenario": _id_name(d["data"], self.family),
            "method": d["method"],
            "seed": d["seed"], "rounds": d["rounds"], "label": d["label"], "hyperparameters": d["hyperparameters"],
            "scenario_params": {k: v for k, v in d["data_params"].items() if k not in where},
            "setting": d["setting"],
            "graph": {"kind": d["graph"], **d["graph_params"]} if self.family == "peer" else {},
            "model": d["model"], "attack": d["attack"], "validation": d["validation"],
        }
        if d["input_shape"] is not None:  # runs planned before input shapes existed keep their ids
            out["input_shape"] = list(d["input_shape"])
        for name, default in (("client_fraction", 1.0), ("device", "cpu")):  # fields that came with Job
            if d[name] != default:
                out[name] = d[name]
        return out

    def file_dict(self) -> dict[str, Any]:
        """The job's run-defining fields under the names files use (:data:`FILE_NAMES`)."""
        d = self.as_dict()
        return {name: d[f] for name, f in FILE_NAMES.items()}

    @property
    def run_id(self) -> str:
        """File-name-safe id, readable and unique (a hash guards against collisions); the same id as
        the experiment runs of earlier topofl versions had, so their results still resume.
        """
        legacy = self.spec_dict()
        if legacy["model"] == "linear":  # runs planned before models existed keep their ids
            del legacy["model"]
        if not legacy["attack"]:  # runs planned before attacks existed keep their ids
            del legacy["attack"]
        if not legacy["validation"]:  # runs scored on the test split keep their ids
            del legacy["validation"]
        text = json.dumps(legacy, sort_keys=True, default=_plain)
        setting = "_".join(f"{k}{v}" for k, v in self.setting.items())
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-",
                      f"{legacy['scenario']}_{self.label or self.method}_{setting}_s{self.seed}")
        return f"{slug.strip('-')}_{hashlib.sha1(text.encode()).hexdigest()[:8]}"

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Job:
        """A job from plain values (``config.json``, TOML); unknown names are a ``ValueError``."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown job field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**dict(values))


def _plain(o: Any) -> Any:
    """JSON for the values a job may hold beyond JSON's own: NumPy scalars and arrays, sets, tuples."""
    if hasattr(o, "item") and callable(o.item) and getattr(o, "ndim", 1) == 0:
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (set, tuple, frozenset)):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _attack_spec(attack: Any) -> str:
    """An ``AttackConfig`` as its ``kind:key=value,...`` spec (non-default values only)."""
    values = {k: v for k, v in asdict(attack).items()
              if k != "kind" and v != type(attack).__dataclass_fields__[k].default}
    return attack.kind + (":" + ",".join(f"{k}={v}" for k, v in sorted(values.items())) if values else "")
