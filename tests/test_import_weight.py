"""`import topofl` and `topofl --help` load no heavy package (deterministic: which modules are in
``sys.modules`` after the import, in a fresh interpreter; the timings are benchmarks/bench_import.py's)."""
import json
import subprocess
import sys

import pytest

HEAVY = ("sklearn", "matplotlib", "scipy.stats", "scipy.optimize", "torch", "flwr", "topofl.methods", "topofl.experiments")
#: what a Flower ClientApp process (one per message in deployment) must not import: it imports flwr and
#: the methods' registry, but no SciPy at all, nor networkx or the optional TDA/deep/plotting stacks.
#: (rich is not listed: flwr itself imports it.)
CLIENT_APP_HEAVY = ("sklearn", "matplotlib", "scipy", "scipy.stats", "scipy.optimize", "scipy.spatial", "scipy.special", "scipy.linalg",
                    "torch", "gudhi", "gph", "networkx", "pandas", "ot", "topofl.experiments")


def loaded_after(code: str, heavy: tuple[str, ...] = HEAVY) -> dict:
    probe = f"{code}\nimport json, sys\nprint(json.dumps({{m: m in sys.modules for m in {heavy!r}}}))"
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


@pytest.mark.parametrize("code", ["import topofl.flower.client_app", "import topofl.methods\nimport topofl.decentralised"])
def test_the_client_app_imports_no_heavy_package(code):
    """Flower starts a fresh ClientApp process per message in deployment: it must stay light (issue 14, item 4)."""
    if "flower" in code:
        pytest.importorskip("flwr")
    loaded = loaded_after(code, CLIENT_APP_HEAVY)
    assert not any(loaded.values()), {m for m, v in loaded.items() if v}


def test_a_client_app_round_imports_no_heavy_package():
    """What a real site's ClientApp process does for a round (its own arrays, as from a data-path: train,
    evaluate with AUC) imports neither SciPy's optimisers nor its statistics (each ~0.3 s per message in
    deployment). Building a built-in scenario (trials) does load scipy.optimize, for Brent's method."""
    code = ("import numpy as np, topofl\nrng = np.random.default_rng(0)\n"
            "sites = [(X := rng.normal(size=(40, 5)), (X[:, 0] > 0).astype(float), X[:10], (X[:10, 0] > 0).astype(float)) for _ in range(3)]\n"
            "topofl.simulate(topofl.Federation.from_arrays(sites), 'fedavg', rounds=1)")
    loaded = loaded_after(code, CLIENT_APP_HEAVY)
    assert not any(v for m, v in loaded.items() if m not in ("scipy", "scipy.special", "scipy.linalg")), {m for m, v in loaded.items() if v}
    assert loaded["scipy.special"]  # expit: its exact values are kept


def test_the_probe_sees_a_heavy_import():
    """The check can fail: the privacy attacks load SciPy's optimisers, and the methods' registry is seen."""
    loaded = loaded_after("import topofl\nimport topofl.privacy.inversion\nimport topofl.methods")
    assert loaded["topofl.methods"] and loaded["scipy.optimize"]


def test_lazy_names_of_the_package():
    import topofl
    from topofl.api import simulate

    assert topofl.simulate is simulate and "simulate" in dir(topofl) and set(topofl.__all__) <= set(dir(topofl))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        topofl.nope  # noqa: B018


def test_the_results_root_checks_need_no_flower_install():
    """The README's test command installs no flwr: topofl.flower.outputs' path checks import without it."""
    code = ("import sys; sys.modules['flwr'] = None\n"
            "from topofl.flower.outputs import resolve_run_dir\n"
            "print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_the_ptopofl_server_step_imports_neither_scikit_learn_nor_the_ph_library():
    """pTopoFL's server (a Flower ServerApp process) clusters the descriptors clients send and weighs their
    models: SciPy's linkage, no scikit-learn (its AgglomerativeClustering took ~1 s to import, issue 25), and
    no PH library (persistent homology is the clients' work)."""
    code = ("import numpy as np\nfrom topofl.methods import build_server\nfrom topofl.models.linear import BinaryLogistic\n"
            "from topofl.federation.messages import ClientUpdate\n"
            "s = build_server('ptopofl', {})\nrng = np.random.default_rng(0)\n"
            "s.setup(BinaryLogistic(n_features=5), list(range(6)), rng)\n"
            "msgs = s.configure_fit(1, list(range(6)))\n"
            "ups = [ClientUpdate(i, m.params + rng.normal(size=m.params.size), 30, descriptor=np.abs(rng.normal(size=48)))"
            " for i, m in msgs.items()]\n"
            "log = s.aggregate_fit(1, ups)\nassert set(log['clusters'].values()) == {0, 1}, log")
    loaded = loaded_after(code, ("sklearn", "gph", "gudhi", "ot", "matplotlib", "torch"))
    assert not any(loaded.values()), {m for m, v in loaded.items() if v}
