"""Communication graphs of decentralised learning (networkx), seeded and validated.

Kinds: ``erdos_renyi`` (p), ``watts_strogatz`` (k = 4, p = 0.1), ``barabasi_albert`` (m = 2),
``complete``, ``ring``, ``star`` (node 0 is the hub) and ``edges`` (a user edge list). Random kinds
are resampled (with derived seeds) until connected, up to ``max_tries``; a disconnected graph is
otherwise refused with an error naming the kind and its parameters.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from topofl._validation import check_int, check_range

if TYPE_CHECKING:  # networkx is imported inside the functions that build graphs (lazy: ~0.1 s)
    import networkx as nx

KINDS = ("erdos_renyi", "watts_strogatz", "barabasi_albert", "complete", "ring", "star", "edges")


def make_graph(
    kind: str,
    n: int,
    seed: int = 0,
    *,
    p: float | None = None,
    k: int = 4,
    m: int = 2,
    edges: Iterable[Sequence[int]] | None = None,
    max_tries: int = 100,
) -> nx.Graph:
    """A connected undirected graph on nodes 0..n-1.

    Parameters
    ----------
    kind : str
        One of ``KINDS``.
    n : int
        Number of nodes (>= 2).
    seed : int
        Seed of the random kinds.
    p : float
        Edge probability (Erdős–Rényi, default 0.15) or rewiring probability (Watts–Strogatz,
        default 0.1).
    k, m : int
        Watts–Strogatz neighbours and Barabási–Albert attachments.
    edges : iterable of pairs
        The user edge list for ``kind="edges"``.
    """
    import networkx as nx

    if kind not in KINDS:
        raise ValueError(f"graph kind must be one of {', '.join(KINDS)}; got {kind!r}")
    check_int("n", n, 2)
    check_int("max_tries", max_tries, 1)
    if kind == "edges":
        return _from_edges(n, edges)
    if kind in ("complete", "ring", "star"):
        return {"complete": nx.complete_graph, "ring": nx.cycle_graph, "star": lambda n: nx.star_graph(n - 1)}[kind](n)
    build: Callable[[int], nx.Graph]
    if kind == "erdos_renyi":
        p = 0.15 if p is None else p
        check_range("p", p, 0.0, 1.0, low_open=True)
        build = lambda s: nx.erdos_renyi_graph(n, p, seed=s)  # noqa: E731
        params = f"p={p}"
    elif kind == "watts_strogatz":
        p = 0.1 if p is None else p
        check_range("p", p, 0.0, 1.0)
        check_int("k", k, 2, n - 1)
        build = lambda s: nx.watts_strogatz_graph(n, k, p, seed=s)  # noqa: E731
        params = f"k={k}, p={p}"
    else:
        check_int("m", m, 1, n - 1)
        build = lambda s: nx.barabasi_albert_graph(n, m, seed=s)  # noqa: E731
        params = f"m={m}"
    ss = np.random.SeedSequence([int(seed), 0x6EA9])
    for attempt, child in enumerate(ss.spawn(max_tries)):
        g = build(int(child.generate_state(1)[0]))
        if nx.is_connected(g):
            g.graph["attempts"] = attempt + 1
            return g
    raise ValueError(
        f"no connected {kind} graph on {n} nodes with {params} in {max_tries} tries; "
        "raise the connectivity (e.g. p) or n"
    )


def _from_edges(n: int, edges: Iterable[Sequence[int]] | None) -> nx.Graph:
    import networkx as nx

    if edges is None:
        raise ValueError("kind='edges' needs an edge list, e.g. [(0, 1), (1, 2)]")
    g = nx.Graph()
    g.add_nodes_from(range(n))
    for e in edges:
        if len(e) != 2:
            raise ValueError(f"each edge must be a pair of node ids; got {tuple(e)!r}")
        a, b = int(e[0]), int(e[1])
        if not (0 <= a < n and 0 <= b < n):
            raise ValueError(f"edge {(a, b)} names a node outside 0..{n - 1}")
        if a == b:
            raise ValueError(f"edge {(a, b)} is a self-loop; the graph must be simple")
        g.add_edge(a, b)
    if not nx.is_connected(g):
        parts = [sorted(c) for c in nx.connected_components(g)]
        raise ValueError(f"the edge list gives a disconnected graph with {len(parts)} components, "
                         f"e.g. {parts[0][:5]} and {parts[1][:5]}")
    return g


def metropolis_weights(g: nx.Graph) -> dict[tuple[int, int], float]:
    """Metropolis–Hastings mixing weights W_ij = 1/(1 + max(deg i, deg j)) (Lian et al. 2017 use a
    doubly stochastic W); W_ii = 1 − Σ_j W_ij.
    """
    w: dict[tuple[int, int], float] = {}
    for i in g.nodes:
        total = 0.0
        for j in g.neighbors(i):
            w[(i, j)] = 1.0 / (1.0 + max(g.degree[i], g.degree[j]))
            total += w[(i, j)]
        w[(i, i)] = 1.0 - total
    return w


def describe(g: nx.Graph) -> dict[str, Any]:
    """Summary of a graph: its numbers of nodes and edges and its smallest and largest degree."""
    degrees = [d for _, d in g.degree]
    return {"nodes": g.number_of_nodes(), "edges": g.number_of_edges(), "min_degree": min(degrees),
            "max_degree": max(degrees)}
