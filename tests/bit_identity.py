"""The documented configuration set of the before/after bit-identity check (issue 21).

Every method of both families, in process and through the Flower apps (on Flower's Simulation
Runtime and on the in-memory grid), with the linear and a PyTorch model, with attacks and with DP. :func:`fingerprint` reduces a run's result to a SHA-256
of its per-(round, client) metrics, its per-round summaries and its final models, bit for bit:
``tests/data/bit_identity.json`` holds the fingerprints measured before the refactoring, and
``tests/test_bit_identity.py`` checks that every configuration still gives them; the Flower ones are
checked inside the Flower tests that already run them (``tests/flower/``), so that no Flower run is
made twice.
Regenerate (only for an intended numerical change, and say so): ``python tests/bit_identity.py``.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

#: fingerprints measured on c2dfcf4 (before issue 21); the two server PyTorch ones re-measured on d67329b (before
#: issue 22) with the dtype-aware fingerprint below, so they still certify the code of before
GOLDEN = Path(__file__).parent / "data" / "bit_identity.json"
#: the PyTorch configurations' fingerprints on other machines, by :func:`machine_signature`. MKL's and OpenBLAS's
#: kernels follow the CPU's vector units, so the same code gives other last bits on another CPU (no MKL_CBWR,
#: OPENBLAS_CORETYPE, ATEN_CPU_CAPABILITY or ONEDNN_MAX_CPU_ISA setting reproduces GOLDEN's on the one below). Each
#: entry was measured with 2f7c49d, whose fingerprints equal GOLDEN on the machine GOLDEN was measured on (its CI
#: passed), and issue 25's later commits gave the same there; a numerical change moves them on every machine. Only
#: the entry of the machine a test runs on is accepted there.
OTHER_MACHINES: dict[str, dict[str, str]] = {
    # Intel Xeon, Sapphire Rapids (AVX-512 with FP16, AMX), 2 cores; torch 2.13.0+cpu with MKL 2024.2,
    # numpy 2.4.6 with OpenBLAS 0.3.31 — measured 2026-11-26
    "torch 2.13.0+cpu AVX512 AMX; OpenBLAS SkylakeX": {
        "server-fedavg-torch": "13b96efe2d5d543aa777ea1b4b22a7a9787cce724d17ffe9a6321fe17d3246a8",
        "server-ptopofl-torch": "4a4d5d71fd0980fff15f7bc02161416bd6b5dec4d75645574369d388f49d5bda",
        "peer-dfedu-torch": "a7f1bea84ef3f0d4258a61ac1f938a054097b96bb24265f90c11d836c143223b",
    },
}


def machine_signature() -> str:
    """What the PyTorch runs' last bits follow here: torch's version and CPU kernels (AMX when the CPU has it) and
    NumPy's OpenBLAS kernels."""
    import threadpoolctl
    import torch

    cpuinfo = Path("/proc/cpuinfo")
    amx = " AMX" if cpuinfo.exists() and "amx_tile" in cpuinfo.read_text() else ""
    blas = ",".join(sorted({str(i.get("architecture")) for i in threadpoolctl.threadpool_info()
                            if i.get("internal_api") == "openblas"}))
    return f"torch {torch.__version__} {torch.backends.cpu.get_cpu_capability()}{amx}; OpenBLAS {blas}"


SERVER_METHODS = ("ptopofl", "fedavg", "fedprox", "scaffold", "pfedme", "ditto", "perfedavg", "ifca", "local")
PEER_METHODS = ("sheaf", "dfedu", "dpsgd", "local-peers")
RECORD_KEYS = ("round", "client", "auc", "accuracy", "loss", "mse", "r2", "bytes_up", "bytes_down", "floats_up", "floats_down")
#: a peer's record (it has ``dim``): its payload in floats; the bytes are derived (8 per float)
PEER_RECORD_KEYS = ("round", "client", "auc", "accuracy", "loss", "mse", "r2", "floats_up", "floats_down")
SUMMARY_KEYS = ("round", "auc", "auc_std", "accuracy", "accuracy_std", "loss", "pooled_auc", "pooled_accuracy", "mse", "r2")
HEALTHCARE = {"n_clients": 6, "n_min": 60, "n_max": 120}
#: the Flower runs' federation: four clients, client 1 adversarial
FLOWER_SMALL = {"n_clients": 4, "adversarial": (1,)}
RELAY_HPS = {"sheaf": {"gamma": 0.3, "lam": 0.01}}

# name -> (runtime, marker, keyword arguments); "in-process" server runs go through topofl.simulate
CONFIGS: dict[str, tuple[str, str, dict[str, Any]]] = {
    **{f"server-{m}": ("server", "", {"method": m}) for m in SERVER_METHODS},
    "server-fedavg-attack": ("server", "", {"method": "fedavg", "attack": "sign_flip:fraction=0.34,scale=3"}),
    "server-ptopofl-attack": ("server", "", {"method": "ptopofl", "attack": "label_flip:fraction=0.34"}),
    "server-fedavg-dp": ("server", "", {"method": "fedavg", "dp_noise_multiplier": 0.5, "dp_clip": 1.0}),
    "server-ditto-dp": ("server", "", {"method": "ditto", "dp_noise_multiplier": 0.5, "dp_clip": 1.0}),
    "server-pfedme-guarded": ("server", "", {"method": "pfedme", "aggregator": "guarded_mean"}),
    "server-fedavg-torch": ("server", "deep", {"method": "fedavg", "model": "mlp"}),
    "server-ptopofl-torch": ("server", "deep", {"method": "ptopofl", "model": "mlp"}),
    **{f"peer-{m}": ("peer", "", {"method": m, **({"gamma": 0.2} if m == "sheaf" else {})}) for m in PEER_METHODS},
    "peer-sheaf-attack": ("peer", "", {"method": "sheaf", "gamma": 0.2, "attack": "sign_flip:fraction=0.34"}),
    "peer-dfedu-torch": ("peer", "deep", {"method": "dfedu", "model": "mlp"}),
    # the Flower runs of tests/flower: through the in-memory grid (every method) and on Ray
    **{f"flower-grid-{m}": ("flower-grid", "flower", {"method": m}) for m in SERVER_METHODS},
    **{f"flower-relay-{m}": ("flower-relay", "flower", {"method": m, **RELAY_HPS.get(m, {})}) for m in PEER_METHODS},
    "flower-ptopofl": ("flower", "flower", {"method": "ptopofl"}),
    "flower-sheaf": ("flower", "flower", {"method": "sheaf", **RELAY_HPS["sheaf"]}),
}
#: the configurations that tests/test_bit_identity.py runs itself (the Flower ones run in tests/flower)
OWN_CONFIGS = [n for n, c in CONFIGS.items() if not c[0].startswith("flower")]


def _floats(values: Any) -> bytes:
    return np.asarray(values, dtype=np.float64).tobytes()


def fingerprint(result: Any) -> str:
    """SHA-256 over a run's records, round summaries and final models (server's and clients')."""
    h = hashlib.sha256()
    model = getattr(result, "model", None)
    dtype = getattr(model, "param_dtype", None) or np.dtype(getattr(model, "dtype", "float64"))
    for r in sorted(result.records, key=lambda r: (r["round"], r["client"])):
        keys = PEER_RECORD_KEYS if "dim" in r else RECORD_KEYS
        row = r
        if dtype != np.float64 and "bytes_up" in r:
            # a float32 model's bytes as every run counted them before issue 22 (8 per number); its real
            # bytes (4 per number) are checked in tests/models/test_param_dtype.py
            row = {**r, "bytes_up": 8 * r["floats_up"], "bytes_down": 8 * r["floats_down"]}
        h.update(_floats([float(row[k]) if row.get(k) is not None else np.nan for k in keys]))
    for s in result.rounds:
        row = s if isinstance(s, dict) else s.as_dict()
        h.update(_floats([float(row[k]) if row.get(k) is not None else np.nan for k in SUMMARY_KEYS]))
    server = getattr(result, "server_params", None)
    if server is not None:
        h.update(b"server" + _floats(server))
    # a client's model as its model holds it (float32 for a float32 torch model: issue 22 stores it so;
    # before, the same numbers were kept unrounded in float64, so the old code gives this same fingerprint)
    for k in sorted(result.client_models):
        h.update(str(k).encode() + _floats(np.asarray(result.client_models[k]).astype(dtype)))
    return h.hexdigest()


#: torch threads of the PyTorch configurations: their fingerprints were measured with torch's default
#: on a 2-core machine, and the order of a float sum (so its last bit) follows the thread count
TORCH_THREADS = 2


def run_config(name: str) -> Any:
    """Run configuration ``name`` of :data:`CONFIGS` and return its result."""
    if CONFIGS[name][1] != "deep":
        return _run_config(name)
    from topofl.threads import limited_threads

    with limited_threads(TORCH_THREADS, model="mlp"):   # simulate(threads=None) within keeps this number
        return _run_config(name)


def _run_config(name: str) -> Any:
    import topofl
    from topofl.data.scenarios import make_scenario

    runtime, _, kwargs = CONFIGS[name]
    kwargs = dict(kwargs)
    method = kwargs.pop("method")
    if runtime == "server":
        federation = make_scenario("healthcare", seed=3, **HEALTHCARE)
        return topofl.simulate(federation, method, rounds=3, seed=3, **kwargs)
    if runtime == "peer":
        federation = make_scenario("healthcare", seed=3, **HEALTHCARE)
        return topofl.simulate_decentralised(federation, method, rounds=4, seed=3, graph="ring", **kwargs)
    return _run_flower(runtime, method, kwargs)


def _run_flower(runtime: str, method: str, hps: dict[str, Any]) -> Any:
    """The Flower runs of ``tests/flower``, as those tests make them."""
    from topofl.flower.settings import FlowerSettings

    if runtime == "flower-grid":  # tests/flower/test_flower_inprocess.py, the in-process equivalence
        from fake_grid import FakeGrid
        from topofl.flower.server_app import federated_main

        return federated_main(FakeGrid(4), FlowerSettings.from_flat(method=method, rounds=3, seed=3, scenario_params=FLOWER_SMALL))
    if runtime == "flower-relay":
        from fake_grid import FakeGrid
        from topofl.flower.relay import relay_main

        settings = FlowerSettings.from_flat(method=method, rounds=4, seed=1, scenario_params=FLOWER_SMALL, hyperparameters=hps, graph="ring")
        return relay_main(FakeGrid(4), settings)
    from topofl.flower.simulation import simulate_flower  # tests/flower/test_flower_simulation.py, on Ray

    if method == "sheaf":
        return simulate_flower(method="sheaf", num_server_rounds=3, seed=0, scenario_params="n_clients=4,adversarial=(1,)",
                               hyperparameters="gamma=0.3,lam=0.01", graph="ring")
    return simulate_flower(method=method, num_server_rounds=3, seed=0)


def golden_fingerprints(name: str) -> set[str]:
    """Configuration ``name``'s certified fingerprints here: :data:`GOLDEN`'s, and, for a PyTorch configuration,
    this machine's entry of :data:`OTHER_MACHINES` if it has one.
    """
    golden = {json.loads(GOLDEN.read_text())[name]}
    if CONFIGS[name][1] != "deep":
        return golden
    here = OTHER_MACHINES.get(machine_signature(), {})
    return golden | ({here[name]} if name in here else set())


def assert_golden(name: str, result: Any) -> None:
    """Fail unless ``result`` has configuration ``name``'s fingerprint, measured before issue 21."""
    assert fingerprint(result) in golden_fingerprints(name), f"{name}: iterates or metrics changed"

def main(argv: list[str]) -> None:
    """Measure every configuration (or those named) and write their fingerprints to :data:`GOLDEN`."""
    names = argv or list(CONFIGS)
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    for name in names:
        golden[name] = fingerprint(run_config(name))
        print(name, golden[name], flush=True)
    GOLDEN.write_text(json.dumps(dict(sorted(golden.items())), indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])


#: result files of a comparison and of the experiment runner (hashes in ``bit_identity_files.json``,
#: measured before the refactoring; wall-clock columns live only in files not hashed here)
GOLDEN_FILES = Path(__file__).parent / "data" / "bit_identity_files.json"


def file_jobs() -> tuple[list[Any], list[Any]]:
    """The comparison's jobs and the experiment runner's jobs of the file check."""
    from topofl.experiments.compare import plan_compare
    from topofl.job import Job

    compare = plan_compare(Job(data="healthcare", data_params={"n_clients": 6}, rounds=3, graph="ring"),
                           ("ptopofl", "fedavg", "sheaf"), (0, 1), {"sheaf": {"gamma": 0.3}})
    runs = [
        Job(experiment="golden", data="healthcare", method="ptopofl", seed=0, rounds=3, data_params={"n_clients": 6}),
        Job(experiment="golden", data="healthcare", method="fedavg", seed=1, rounds=3, label="FedAvg-attacked",
            data_params={"n_clients": 6}, attack="sign_flip:fraction=0.4", setting={"attack_rate": 0.4}),
        Job(experiment="golden", data="tabular", method="sheaf", seed=0, rounds=4, data_params={"n_clients": 6}, graph="ring"),
        Job(experiment="golden", data="rotated-digits", method="dfedu", seed=0, rounds=3, data_params={"n_clients": 4},
            graph="erdos_renyi"),
    ]
    return compare, runs


def file_hashes(out: Path) -> dict[str, Any]:
    """Run :func:`file_jobs` under ``out`` and hash the files they write."""
    from topofl.experiments.compare import run_compare
    from topofl.experiments.runs import execute

    compare, runs = file_jobs()
    run_compare(compare, out / "compare")
    execute(runs, out / "exp")
    digest = {f"compare/{n}": hashlib.sha256((out / "compare" / n).read_bytes()).hexdigest()
              for n in ("rounds.csv", "curves.csv", "server_log.jsonl")}
    digest.update({f"execute/{n}": hashlib.sha256((out / "exp" / n).read_bytes()).hexdigest()
                   for n in ("rounds.csv", "curves.csv", "server_log.jsonl")})
    digest["run_ids"] = [j.run_id for j in runs]
    return digest
