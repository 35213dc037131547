"""Topological data analysis: persistence diagrams, the pTopoFL descriptor, distances, features."""
from topofl.tda.descriptor import (
    DESCRIPTOR_DIM,
    LAYOUT,
    DescriptorLayout,
    betti_curve,
    descriptor,
    descriptor_from_diagrams,
    descriptors,
    persistence_entropy,
)
from topofl.tda.diagrams import diagrams
from topofl.tda.distances import (
    bottleneck,
    descriptor_distance,
    normalise_rows,
    pairwise_descriptor_distances,
    pairwise_diagram_distances,
    wasserstein,
)
from topofl.tda.features import FEATURE_NAMES, TopoContext

__all__ = [
    "DESCRIPTOR_DIM", "LAYOUT", "DescriptorLayout", "FEATURE_NAMES", "TopoContext", "betti_curve",
    "bottleneck", "descriptor", "descriptor_distance", "descriptor_from_diagrams", "descriptors",
    "diagrams", "normalise_rows", "pairwise_descriptor_distances", "pairwise_diagram_distances",
    "persistence_entropy", "wasserstein",
]
