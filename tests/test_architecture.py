"""The house rules the import graph must keep (docs/architecture.md): no circle, no upward arrow,
and no decentralised module much over 300 lines. Read from the source with ``ast``: every import,
at module level or inside a function, counts; ``from pkg import sub`` points at the submodule."""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: bottom to top; a module may import its own layer or any layer below, never one above
LAYERS = [
    ("core", ["topofl._validation", "topofl._version", "topofl.limits", "topofl.config", "topofl.atomic",
              "topofl.threads"]),
    ("maths", ["topofl.tda", "topofl.models", "topofl.metrics", "topofl.privacy", "topofl.robustness", "topofl.robustness.aggregators"]),
    ("data", ["topofl.data"]),
    ("runtimes", ["topofl.federation", "topofl.decentralised", "topofl.decentralised.protocol", "topofl.decentralised.spec",
                  "topofl.decentralised.graphs", "topofl.decentralised.transport", "topofl.decentralised.runner"]),
    ("methods", ["topofl.algorithms", "topofl.decentralised.model_exchange", "topofl.decentralised.sheaf",
                 "topofl.decentralised.dfedu", "topofl.decentralised.dpsgd", "topofl.decentralised.local",
                 "topofl.robustness.attacks", "topofl.robustness.peer_attacks"]),
    ("registry", ["topofl.methods", "topofl.job"]),
    ("applications", ["topofl.api", "topofl.experiments", "topofl.flower", "topofl.deployment_defaults",
                      "topofl.tracking"]),
    ("interfaces", ["topofl", "topofl.cli", "topofl.cli_common"]),
    # operator tooling for a real Flower deployment (LocalDeployment, the Fleet proxy): on top, so nothing imports it
    ("tooling", ["topofl.deploy"]),
]
#: prefixes that name one module only (the root package would otherwise claim every module)
EXACT = {"topofl"}


def modules() -> dict[str, Path]:
    out = {}
    for p in (SRC / "topofl").rglob("*.py"):
        parts = p.relative_to(SRC).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def import_edges(mods: dict[str, Path]) -> set[tuple[str, str]]:
    """(importer, imported) for every import of a topofl module anywhere in a module's source."""
    edges = set()
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
                targets = subs if len(subs) == len(node.names) else [base, *subs]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:
                    t = t.rsplit(".", 1)[0] if "." in t else ""
                if t.startswith("topofl") and t != name:
                    edges.add((name, t))
    return edges


def layer_of(module: str) -> int:
    best = (-1, -1)
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or (p not in EXACT and module.startswith(p + "."))) and len(p) > best[1]:
                best = (i, len(p))
    if best[0] < 0:
        raise AssertionError(f"{module} has no layer: add it to LAYERS (and to docs/architecture.md)")
    return best[0]


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    mods = modules()
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    g.add_edges_from(import_edges(mods))
    return g


def test_the_import_graph_has_no_circle(graph):
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert not circles, f"import circles: {circles}"


def test_no_module_imports_a_layer_above_its_own(graph):
    up = [f"{a} ({LAYERS[layer_of(a)][0]}) -> {b} ({LAYERS[layer_of(b)][0]})" for a, b in graph.edges if layer_of(b) > layer_of(a)]
    assert not up, "upward imports:\n" + "\n".join(sorted(up))


def test_every_module_has_a_layer(graph):
    for m in graph.nodes:
        layer_of(m)
    with pytest.raises(AssertionError, match="has no layer"):   # the check can fail: a module nobody placed
        layer_of("topofl.newly_added_module")


def package_circles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """Circles between the packages (``topofl.X``) that the module imports imply."""
    g = nx.DiGraph()
    top = lambda m: ".".join(m.split(".")[:2])  # noqa: E731
    g.add_edges_from((top(a), top(b)) for a, b in edges if top(a) != top(b))
    return [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]


def test_no_circle_between_packages(graph):
    assert not package_circles(set(graph.edges)), package_circles(set(graph.edges))
    # the check can fail: two packages importing each other through different modules
    assert package_circles({("topofl.algorithms.base", "topofl.robustness.aggregators"),
                            ("topofl.robustness.attacks", "topofl.algorithms.ifca")}) == [["topofl.algorithms", "topofl.robustness"]]


def test_the_checker_sees_circles_and_upward_arrows():
    """The rules can fail: a circle and an upward import written here are caught."""
    g = nx.DiGraph([("topofl.federation.runner", "topofl.algorithms.fedavg"), ("topofl.algorithms.fedavg", "topofl.federation.runner")])
    assert [c for c in nx.strongly_connected_components(g) if len(c) > 1]
    assert layer_of("topofl.algorithms.fedavg") > layer_of("topofl.federation.runner")


def test_nothing_in_the_library_imports_the_deployment_tooling(graph):
    """topofl.deploy (operator tooling) may import topofl.flower and the layers below it, and no library module
    imports it (the CLI and the top-level package included)."""
    tooling = lambda m: m == "topofl.deploy" or m.startswith("topofl.deploy.")  # not topofl.deployment_defaults
    into = sorted(f"{a} -> {b}" for a, b in graph.edges if tooling(b) and not tooling(a))
    assert not into, "library modules importing topofl.deploy:\n" + "\n".join(into)
    applications = [name for name, _ in LAYERS].index("applications")
    out = sorted(f"{a} -> {b}" for a, b in graph.edges if tooling(a) and not tooling(b) and layer_of(b) > applications)
    assert not out, "topofl.deploy importing above topofl.flower's layer:\n" + "\n".join(out)


def test_decentralised_modules_stay_small():
    big = {p.name: n for p in (SRC / "topofl" / "decentralised").rglob("*.py") if (n := len(p.read_text().splitlines())) > 310}
    assert not big, f"split these modules (about 300 lines at most): {big}"
