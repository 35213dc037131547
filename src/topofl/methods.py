"""Every method of topofl, of both families, in one registry (DESIGN: "one registry").

A :class:`Method` names its family as data: ``"server"`` — the server-based methods of
:mod:`topofl.algorithms` (pTopoFL, FedAvg, ...), run by :func:`topofl.federation.run_federation`
— or ``"peer"`` — the decentralised methods of :mod:`topofl.decentralised` (Sheaf-FMTL, dFedU,
D-PSGD, Local), run on a graph by :func:`topofl.decentralised.run_decentralised`. The CLI, the
experiment runner and the Flower apps look methods up here. Adding a method touches its module,
its tests and one line here.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

from topofl.algorithms.ditto import Ditto
from topofl.algorithms.fedavg import FedAvg
from topofl.algorithms.fedprox import FedProx
from topofl.algorithms.ifca import IFCA
from topofl.algorithms.local_only import LocalOnly
from topofl.algorithms.perfedavg import PerFedAvg
from topofl.algorithms.pfedme import PFedMe
from topofl.algorithms.ptopofl import PTopoFL
from topofl.algorithms.scaffold import Scaffold
from topofl.config import Config
from topofl.decentralised.dfedu import DFedU
from topofl.decentralised.dpsgd import DPSGD
from topofl.decentralised.local import LocalPeers
from topofl.decentralised.protocol import PeerAlgorithm
from topofl.decentralised.sheaf import SheafFMTL
from topofl.federation.algorithm import Algorithm

FAMILIES = ("server", "peer")
AnyMethod = Union[Algorithm, PeerAlgorithm]


@dataclass(frozen=True)
class Method:
    """A registered method: its name, family (``"server"`` or ``"peer"``), class and a one-line
    description for newcomers (``topofl methods``; the class docstring's first sentence if empty).
    """

    name: str
    family: str
    cls: type[Algorithm] | type[PeerAlgorithm]
    description: str = ""

    @property
    def config(self) -> type[Config]:
        """The method's frozen config dataclass (hyper-parameters with defaults and help)."""
        return self.cls.Config

    @property
    def summary(self) -> str:
        """What the method is, in one line: :attr:`description`, else the docstring's first paragraph."""
        if self.description:
            return self.description
        return " ".join((self.cls.__doc__ or self.name).strip().split("\n\n")[0].split())


_SERVER = (
    (PTopoFL, "pTopoFL (the pTopoFL paper): clients send persistent-homology descriptors of their data; the server "
              "clusters them, weights each cluster's average by topological similarity and trust, and each client "
              "uses its cluster's model."),
    (FedAvg, "FedAvg (McMahan et al. 2017): one global model, the sample-size-weighted average of the clients' local "
             "models."),
    (FedProx, "FedProx (Li et al. 2020): FedAvg whose local objective adds a proximal term "
              "mu/2 |theta - theta_global|^2."),
    (Scaffold, "SCAFFOLD (Karimireddy et al. 2020): FedAvg with control variates that correct the clients' drift "
               "(option II)."),
    (PFedMe, "pFedMe (Dinh et al. 2020): a personal model per client, regularised towards its copy of the global "
             "model (Moreau envelope); clients are scored with their personal model."),
    (Ditto, "Ditto (Li et al. 2021): a FedAvg global model plus a personal model per client trained with a pull "
            "towards the global one; clients are scored with their personal model."),
    (PerFedAvg, "Per-FedAvg (Fallah et al. 2020): MAML-style FedAvg; each client adapts the global model with one "
                "gradient step on its own data before use."),
    (IFCA, "IFCA (Ghosh et al. 2020): k cluster models; each client trains and uses the one with the lowest loss on "
           "its data."),
    (LocalOnly, "Local-only baseline: every client trains its own model; nothing is communicated."),
)
_PEER = (
    (SheafFMTL, "Sheaf-FMTL (Ben Issaid et al. 2025): neighbours exchange projections of their models (of any sizes) "
                "onto learned edge spaces and pull them into agreement there; multi-task, no server."),
    (DFedU, "dFedU (Dinh et al. 2022): each peer takes a local gradient step plus a pull towards its neighbours' "
            "models."),
    (DPSGD, "D-PSGD (Lian et al. 2017): gossip averaging with the neighbours (Metropolis weights), then a local SGD "
            "step."),
    (LocalPeers, "Local-only peer baseline: every peer of the graph trains alone; nothing is sent."),
)

REGISTRY: dict[str, Method] = {
    m.name: m
    for m in (
        *(Method(cls.name, "server", cls, text) for cls, text in _SERVER),
        *(Method(cls.name, "peer", cls, text) for cls, text in _PEER),
    )
}


#: a method run by the authors' paper-era protocol (:mod:`topofl.experiments.paper_protocol`: their
#: training and scoring, re-implemented) is named ``PAPER_PREFIX + one of PAPER_METHODS``; its family is "paper"
PAPER_PREFIX = "paper:"
#: the protocol's methods: Table 1's rows (FedAvg as printed: ``fedavg-refit``), the control and the local reference
PAPER_METHODS = ("ptopofl", "fedavg-refit", "fedavg-global", "fedprox", "scaffold", "pfedme", "local")


def available(family: str | None = None) -> list[str]:
    """Registered method names, of one family or of both."""
    if family is not None and family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}; got {family!r}")
    return [name for name, m in REGISTRY.items() if family is None or m.family == family]


def get(name: str) -> Method:
    """The method registered under ``name``; ``ValueError`` listing the known names otherwise."""
    key = str(name).strip().lower()
    if key not in REGISTRY:
        raise ValueError(f"unknown method {name!r}; available: {', '.join(REGISTRY)}")
    return REGISTRY[key]


def family(name: str) -> str:
    """``"server"`` or ``"peer"`` (``"paper"`` for a method of the authors' paper-era protocol)."""
    if str(name).startswith(PAPER_PREFIX):
        return "paper"
    return get(name).family


def canonical(name: str) -> str:
    """The registered name of ``name`` (case and spaces ignored), or ``paper:<method>`` of the paper-era
    protocol; ``ValueError`` listing the known names otherwise.
    """
    if str(name).startswith(PAPER_PREFIX):
        if str(name)[len(PAPER_PREFIX):] not in PAPER_METHODS:
            raise ValueError(f"unknown paper-protocol method {name!r}; "
                             f"available: {', '.join(PAPER_PREFIX + m for m in PAPER_METHODS)}")
        return str(name)
    return get(name).name


def build(name: str, hyperparameters: Mapping[str, Any] | None = None, *, config: Any = None) -> AnyMethod:
    """Instantiate ``name`` with a validated config built from ``hyperparameters``, or with ``config``, one already
    built (:attr:`topofl.job.Job.method_config`; ``ValueError`` unless of the method's config class).
    """
    m = get(name)
    if config is None:
        config = m.config.from_dict(dict(hyperparameters or {}))
    elif type(config) is not m.config:
        raise ValueError(f"{name} needs a {m.config.__name__}; got {type(config).__name__}")
    return m.cls(config)


def build_server(name: str, hyperparameters: Mapping[str, Any] | None = None, *, config: Any = None) -> Algorithm:
    """Like :func:`build` for a server-based method; ``ValueError`` for a peer method."""
    method = build_family(name, "server", hyperparameters, config=config)
    assert isinstance(method, Algorithm)
    return method


def build_peer(name: str, hyperparameters: Mapping[str, Any] | None = None, *, config: Any = None) -> PeerAlgorithm:
    """Like :func:`build` for a decentralised method; ``ValueError`` for a server-based one."""
    method = build_family(name, "peer", hyperparameters, config=config)
    assert isinstance(method, PeerAlgorithm)
    return method


def build_family(name: str, wanted: str, hyperparameters: Mapping[str, Any] | None = None, *,
                 config: Any = None) -> AnyMethod:
    """:func:`build`, refusing a method of the other family with a message naming both."""
    m = get(name)
    if m.family != wanted:
        kind = {"server": "server-based", "peer": "decentralised (peer-to-peer)"}
        raise ValueError(f"{name!r} is a {kind[m.family]} method; this needs a {kind[wanted]} one: "
                         f"{', '.join(available(wanted))}")
    return build(name, hyperparameters, config=config)
