"""The container every loader returns: :class:`LoadedData` (see :mod:`topofl.data.loaders`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from topofl.data.federation import ClientData, Federation


@dataclass(frozen=True)
class LoadedData:
    """Clients of a loaded data set, before they are assembled into a :class:`Federation`.

    Attributes
    ----------
    clients : list of ClientData
        One entry per client, ``client_id`` equal to its position. Feature counts may differ
        between clients.
    task : str
        ``"binary"``, ``"multiclass"`` or ``"regression"``.
    n_classes : int
        Number of classes (0 for regression).
    name : str
        Short name of the data set, e.g. ``"vehicle"``.
    info : dict
        Provenance: ``source`` (files read or generator), ``protocol`` (split / reduction applied
        and its seed) and loader-specific facts.
    preprocessing : Preprocessing, optional
        What was done to the rows (a :class:`~topofl.models.preprocessing.Preprocessing`), when one
        record describes every client; a run's ``predict`` applies it to raw rows.
    """

    clients: list[ClientData]
    task: str
    n_classes: int
    name: str
    info: dict[str, Any] = field(default_factory=dict)
    preprocessing: Any = None

    @property
    def n_clients(self) -> int:
        """Number of clients."""
        return len(self.clients)

    @property
    def feature_counts(self) -> list[int]:
        """Number of features of each client (they may differ)."""
        return [c.n_features for c in self.clients]

    def to_federation(self) -> Federation:
        """Validate the clients and build a :class:`~topofl.data.federation.Federation`.

        Raises
        ------
        ValueError
            If the clients do not share one feature count (heterogeneous model sizes cannot form
            a single-feature-space federation), or any array fails the federation's checks.
        """
        return Federation(self.clients, task=self.task, n_classes=self.n_classes, name=self.name, info=self.info,
                          preprocessing=self.preprocessing)
