"""`import topofl` and `topofl --help` load no heavy package (deterministic: which modules are in
``sys.modules`` after the import, in a fresh interpreter; the timings are benchmarks/bench_import.py's)."""
import json
import subprocess
import sys

import pytest

HEAVY = ("sklearn", "matplotlib", "scipy.stats", "scipy.optimize", "torch", "flwr", "topofl.methods", "topofl.experiments")


def loaded_after(code: str) -> dict:
    probe = f"{code}\nimport json, sys\nprint(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("code", [
    "import topofl",
    "import topofl.cli",
    "import sys\nsys.argv = ['topofl', '--help']\nimport topofl.cli\ntry:\n    topofl.cli.main()\nexcept SystemExit:\n    pass",
])
def test_no_heavy_package_is_imported(code):
    loaded = loaded_after(code)
    assert not any(loaded.values()), {m for m, v in loaded.items() if v}


def test_the_probe_sees_a_heavy_import():
    """The check can fail: importing the methods' registry loads SciPy's optimisers and statistics."""
    loaded = loaded_after("import topofl\ntopofl.make_scenario('healthcare', 0)\nimport topofl.methods")
    assert loaded["topofl.methods"] and loaded["scipy.optimize"]


def test_lazy_names_of_the_package():
    import topofl
    from topofl.api import simulate

    assert topofl.simulate is simulate and "simulate" in dir(topofl) and set(topofl.__all__) <= set(dir(topofl))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        topofl.nope  # noqa: B018
