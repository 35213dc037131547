"""Every package topofl imports is one it declares: a fresh ``pip install -e .`` (or an extra) has
it. (A direct ``import click`` once passed every test here, where another package had installed
click, and failed on a fresh install of the core: typer no longer depends on click.)"""
import ast
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
#: import name → distribution name, for every third-party package topofl may import
DISTRIBUTION = {
    "numpy": "numpy", "scipy": "scipy", "sklearn": "scikit-learn", "gph": "giotto-ph", "gudhi": "gudhi", "typer": "typer",
    "rich": "rich", "matplotlib": "matplotlib", "networkx": "networkx", "threadpoolctl": "threadpoolctl", "tomli": "tomli",
    "torch": "torch", "flwr": "flwr", "dp_accounting": "dp-accounting", "psutil": "psutil", "cryptography": "cryptography",
    "Crypto": "pycryptodome",
    "httpx": "httpx", "starlette": "starlette", "uvicorn": "uvicorn", "h11": "h11", "optuna": "optuna",
    "mlflow": "mlflow-skinny", "tensorboard": "tensorboard", "fastcluster": "fastcluster",
}


def declared() -> dict[str, set[str]]:
    """Distribution names by where they are declared: "core" or the extra's name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = {"core": project["dependencies"], **project["optional-dependencies"]}
    return {g: {re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].strip().lower() for d in deps} for g, deps in groups.items()}


def third_party_imports(package: Path = ROOT / "src" / "topofl") -> dict[str, set[str]]:
    """Top-level names of the non-stdlib packages imported anywhere under ``package`` (module
    level or inside functions), with the files that import them.
    """
    found: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for name in names:
                top = name.split(".")[0]
                if top != "topofl" and top not in sys.stdlib_module_names:
                    found.setdefault(top, set()).add(path.name)
    return found


def undeclared(package: Path = ROOT / "src" / "topofl") -> list[str]:
    """What ``package`` imports that pyproject.toml does not declare (core or an extra)."""
    everywhere = set().union(*declared().values())
    return [f"{top} (imported by {sorted(files)})" for top, files in sorted(third_party_imports(package).items())
            if DISTRIBUTION.get(top) not in everywhere]


def test_every_imported_package_is_declared_in_pyproject():
    assert undeclared() == []


def test_the_check_sees_an_undeclared_import(tmp_path):
    """The check can fail: a module that imports click (inside a function, too) is reported."""
    (tmp_path / "probe.py").write_text("import numpy\n\ndef f():\n    from click import Context\n    return Context\n")
    assert undeclared(tmp_path) == ["click (imported by ['probe.py'])"]
