"""Loaders of the real data sets of the Sheaf-FMTL experiments, plus offline built-ins.

Every loader reads files the user has already downloaded (nothing is fetched at run time) and returns a
:class:`LoadedData`; :meth:`LoadedData.to_federation` builds a federation when all clients share one feature
space. Loaders: :func:`load_vehicle`, :func:`load_school`, :func:`load_gleam`, :func:`load_har`,
:func:`rotated_mnist`, :func:`load_cifar10`, :func:`load_femnist`, :func:`rotated_digits`,
:func:`synthetic_tabular`; the paper's split protocol is :mod:`topofl.data.loaders.protocol`.
See docs/internals.md#topofl.data.loaders for the data sets (task, clients) and the protocol.
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
