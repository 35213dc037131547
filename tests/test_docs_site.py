"""The documentation site (mkdocs.yml, docs/): its API reference covers the public API, the README
stays a landing page whose links resolve, and ``mkdocs build --strict`` passes (slow).

The API reference is ``::: target`` blocks of mkdocstrings under docs/api/. Coverage is checked
statically (the source files' ASTs), so it needs neither the docs extra nor Flower or PyTorch."""
from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "topofl"
API = ROOT / "docs" / "api"
#: the packages whose exports and public classes the reference must cover
PACKAGES = ("algorithms", "federation", "decentralised", "data", "models", "tda", "privacy", "robustness", "flower",
            "deploy", "experiments")
README_LIMIT = 15 * 1024


def _directives() -> dict[str, bool]:
    """Every ``::: target`` of the API pages -> whether it renders the target's members."""
    found: dict[str, bool] = {}
    for page in sorted(API.glob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"^::: ([\w.]+)\s*$", line)
            if not m:
                continue
            options = []
            for nxt in lines[i + 1:]:
                if not nxt.startswith("    "):
                    break
                options.append(nxt.strip())
            found[m.group(1)] = found.get(m.group(1), False) or "members: false" not in options
    return found


def _all_of(init: Path) -> list[str]:
    """A module's ``__all__``, read from its source (empty when it has none)."""
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
            return list(ast.literal_eval(node.value))
    return []


def _public_modules(package: str) -> list[tuple[str, Path]]:
    """(dotted name, file) of every module of ``topofl.<package>`` with no private part in its name."""
    base = SRC / package
    out = []
    for path in sorted(base.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if any(p.startswith("_") for p in parts):
            continue
        out.append((".".join(parts), path))
    return out


def _public_classes(path: Path) -> list[str]:
    return [n.name for n in ast.parse(path.read_text(encoding="utf-8")).body
            if isinstance(n, ast.ClassDef) and not n.name.startswith("_")]


def test_the_api_reference_documents_every_name_of_topofl_all():
    targets = _directives()
    names = _all_of(SRC / "__init__.py")
    assert names, "topofl.__all__ not found"
    missing = [n for n in names if f"topofl.{n}" not in targets]
    assert not missing, f"add a '::: topofl.NAME' block to docs/api/index.md for: {missing}"


def test_the_api_reference_documents_every_top_level_module():
    targets = _directives()
    modules = [f"topofl.{p.stem}" for p in sorted(SRC.glob("*.py"))
               if not p.stem.startswith("_") and p.stem not in ("cli", "cli_common")]   # the CLI: docs/cli.md
    missing = [m for m in modules if not targets.get(m)]
    assert not missing, f"add a '::: MODULE' block to docs/api/toplevel.md for: {missing}"


@pytest.mark.parametrize("package", PACKAGES)
def test_the_api_reference_documents_each_package_exports_and_public_classes(package):
    targets = _directives()
    name = f"topofl.{package}"
    assert name in targets, f"docs/api/{package}.md: no '::: {name}' block"
    exported = _all_of(SRC / package / "__init__.py")
    missing = [f"{name}.{n}" for n in exported if not n.startswith("_") and f"{name}.{n}" not in targets]
    for module, path in _public_modules(package):
        for cls in _public_classes(path):
            documented = (targets.get(module) or f"{module}.{cls}" in targets
                          or (module == name and f"{name}.{cls}" in targets))
            if not documented:
                missing.append(f"{module}.{cls}")
    assert not missing, (f"docs/api/{package}.md documents neither these names nor their modules (a '::: MODULE' "
                         f"block renders a module's public members): {missing}")


def test_the_readme_is_a_landing_page_whose_links_resolve():
    readme = ROOT / "README.md"
    size = len(readme.read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes (at most {README_LIMIT}): move the detail into docs/"
    text = readme.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path = (ROOT / target.split("#", 1)[0]).resolve()
        assert path.exists(), f"README.md links to {target}, which does not exist"
    # the two set-up commands, as CI runs them (.ci/run installs, then runs the test command)
    assert "pip install -e . && topofl compare" in text
    assert 'pip install -e ".[dev]" && python -m pytest' in text
    assert 'pip install -e ".[docs]"' in text and "mkdocs serve" in text


def test_every_page_under_docs_is_in_the_navigation():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = set(re.findall(r"([\w/.-]+\.md)\s*$", config, flags=re.M))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert pages - nav == set(), f"add these pages to mkdocs.yml's nav: {sorted(pages - nav)}"
    assert nav - pages == set(), f"mkdocs.yml's nav names pages that do not exist: {sorted(nav - pages)}"


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(module.split(".")[0]) is None or (
                "." in module and importlib.util.find_spec(module) is None):
            pytest.skip(f"the docs extra is not installed ({module} is missing): pip install -e \".[docs]\"")
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, f"mkdocs build --strict failed:\n{res.stdout[-4000:]}\n{res.stderr[-8000:]}"
    assert (tmp_path / "site" / "api" / "index.html").exists()
