"""Execution of one decentralised run (Sheaf-FMTL and its baselines) for the experiment runner."""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from topofl.experiments.results import CsvAppender, append_jsonl
from topofl.experiments.store import RunSpec, write_done

# no wall-clock column: results must be identical however often a run is resumed (timings go to the done-record)
CURVE_FIELDS = ("round", "accuracy", "accuracy_std", "loss", "bits", "cumulative_bits", "cumulative_flops", "map_storage_bytes", "mse", "rmse", "r2")
RECORD_FIELDS = ("round", "client", "accuracy", "loss", "dim", "mse", "r2")


def peer_datasets() -> dict[str, Callable[..., Any]]:
    """Name → loader returning ``LoadedData`` (clients, task, n_classes), for offline datasets."""
    from topofl.data.loaders import rotated_digits, rotated_mnist, synthetic_tabular
    from topofl.data.loaders.mnist10k import mnist_10k_dir

    def mnist(seed: int, **params: Any) -> Any:
        """Rotated MNIST-10k (the 10,000 shipped digits), the Sheaf-FMTL paper's protocol."""
        return rotated_mnist(mnist_10k_dir(), seed=seed, **params)

    def school(seed: int, **params: Any) -> Any:
        """School (the 139 schools shipped with topofl), the paper's protocol, z-scored per school."""
        from importlib import resources

        from topofl.data.loaders.matfiles import load_school

        path = Path(str(resources.files("topofl.data") / "builtin" / "school" / "school.mat"))
        return load_school(path, seed=seed, **{"standardise": "per_client", **params})

    return {"digits": rotated_digits, "tabular": synthetic_tabular, "mnist": mnist, "school": school}


#: the peer datasets drawn afresh for every seed (as :data:`topofl.data.scenarios.DRAWN_PER_SEED`); the others re-split fixed rows
PEER_DRAWN_PER_SEED = frozenset({"tabular"})


def load_peer_data(name: str, seed: int, params: Mapping[str, Any]) -> Any:
    """The ``LoadedData`` of offline dataset ``name`` for ``seed``, loaded with ``params``; ``ValueError`` for an unknown name."""
    datasets = peer_datasets()
    if name not in datasets:
        raise ValueError(f"unknown decentralised dataset {name!r}; available: {', '.join(datasets)}")
    return datasets[name](seed=seed, **params)


def per_client(model: str, n_clients: int) -> list[str]:
    """A run's model spec per client: one name for all, or a comma list dealt to the clients in
    turn (client k gets item k mod len) — the paper's heterogeneous federations, in almost equal
    proportions (Sheaf-FMTL §4.3).
    """
    names = [m.strip() for m in model.split(",") if m.strip()] or ["linear"]
    return [names[k % len(names)] for k in range(n_clients)]


def execute_decentralised(spec: RunSpec, paths: dict[str, Path]) -> dict[str, Any]:
    """Run one decentralised ``spec``, writing its per-client rows, curves and log to ``paths``;
    return its done-record (final metrics, timings, graph size, client dimensions, and the
    restriction maps' Frobenius norms for Sheaf-FMTL).
    """
    from topofl.api import peer_models
    from topofl.decentralised import make_graph, run_decentralised
    from topofl.methods import build_peer

    for p in paths.values():
        p.unlink(missing_ok=True)
    data = load_peer_data(spec.scenario, spec.seed, spec.scenario_params)
    if spec.validation:
        from dataclasses import replace

        from topofl.data.federation import validation_clients

        data = replace(data, clients=validation_clients(data.clients, spec.validation, spec.seed, stratify=data.task != "regression"))
    graph_args = dict(spec.graph)
    kind = graph_args.pop("kind", "erdos_renyi")
    graph = make_graph(kind, len(data.clients), seed=spec.seed, **graph_args)
    algo = build_peer(spec.method, spec.hyperparameters)
    key = spec.key
    eval_every = int(spec.setting.get("eval_every", 1)) if "eval_every" in spec.setting else max(1, spec.rounds // 50)
    with CsvAppender(paths["rounds"], tuple(key) + RECORD_FIELDS) as rounds_out, CsvAppender(paths["curves"], tuple(key) + CURVE_FIELDS) as curves_out:

        def on_round(history, row) -> None:
            if "accuracy" in row:
                rounds_out.write({**key, **r} for r in history.records if r["round"] == row["round"])
                curves_out.write([{**key, **row}])

        t0 = time.perf_counter()
        history = run_decentralised(data.clients, graph, algo, spec.rounds, spec.seed, task=data.task,
                                    n_classes=data.n_classes, eval_every=eval_every, on_round=on_round,
                                    models=peer_models(per_client(spec.model, len(data.clients)), data.clients, data.task,
                                                       data.n_classes, algo.config.l2))
    append_jsonl(paths["log"], {**key, "graph_edges": graph.number_of_edges(), **(history.logs[-1] if history.logs else {})})
    final = history.final
    finals: dict[str, Any] = {k: final.get(k) for k in ("accuracy", "accuracy_std", "loss", "cumulative_bits", "cumulative_flops", "map_storage_bytes")}
    finals.update({k: final[k] for k in ("mse", "rmse", "r2") if k in final})   # regression only
    done = {
        **key, "final": finals,
        "seconds": time.perf_counter() - t0, "graph_edges": graph.number_of_edges(),
        "client_dims": [c.n_features for c in data.clients],
    }
    if hasattr(algo, "frobenius_matrix"):
        done["frobenius"] = algo.frobenius_matrix()
    return write_done(paths, done)
