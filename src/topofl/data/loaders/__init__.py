"""Loaders of the real data sets of the Sheaf-FMTL experiments, plus offline built-ins.

Every loader reads files that the user has already downloaded (nothing is fetched at run time)
and returns a :class:`LoadedData`: a plain list of :class:`~topofl.data.federation.ClientData`
plus the task, the number of classes, a name and an ``info`` dict recording the source and the
protocol applied. Clients may have *different* feature counts (heterogeneous model sizes, e.g.
:func:`synthetic_tabular`), which is why the loaders do not build a
:class:`~topofl.data.federation.Federation` themselves; call :meth:`LoadedData.to_federation`
when all clients share one feature space.

The split protocol of the paper (Sheaf-FMTL, Ben Issaid et al., TMLR 2025, Appendix F) lives in
:mod:`topofl.data.loaders.protocol`: a seeded 75/25 train/test split of every client, then, for a
seeded half of the clients, the training data are reduced by 80 % (20 % kept).

Loaders (task, clients in the real data):

* :func:`load_vehicle` -- Vehicle Sensor ``.mat`` cell arrays; binary; 23 clients.
* :func:`load_school` -- School ``.mat`` cell arrays; regression; 139 clients.
* :func:`load_gleam` -- GLEAM ``.mat`` cell arrays; binary; 38 clients.
* :func:`load_har` -- UCI HAR Dataset directory; multiclass (6); 30 subjects.
* :func:`rotated_mnist` -- MNIST IDX files (read by :func:`load_mnist_idx`); multiclass (10).
* :func:`load_cifar10` -- CIFAR-10 python pickles, 5 classes per client; multiclass (10).
* :func:`load_femnist` -- LEAF FEMNIST JSON, one client per writer; multiclass (62).
* :func:`rotated_digits` -- scikit-learn's bundled ``load_digits``, no files; multiclass (10).
* :func:`synthetic_tabular` -- generated, clients observe different feature subsets; multiclass (3).
"""
from __future__ import annotations

from topofl.data.loaders.base import LoadedData
from topofl.data.loaders.femnist import load_femnist
from topofl.data.loaders.har import load_har
from topofl.data.loaders.images import (
    load_cifar10,
    load_mnist_idx,
    read_idx,
    rotated_digits,
    rotated_mnist,
)
from topofl.data.loaders.matfiles import load_gleam, load_school, load_vehicle
from topofl.data.loaders.protocol import reduce_half, split_client
from topofl.data.loaders.synthetic import synthetic_tabular

__all__ = [
    "LoadedData",
    "load_cifar10",
    "load_femnist",
    "load_gleam",
    "load_har",
    "load_mnist_idx",
    "load_school",
    "load_vehicle",
    "read_idx",
    "reduce_half",
    "rotated_digits",
    "rotated_mnist",
    "split_client",
    "synthetic_tabular",
]
