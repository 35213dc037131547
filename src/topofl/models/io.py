"""Trained models come back: save, load and predict, in a safe format (``.npz`` without pickles).

:func:`save_models` writes every client's final model, the server's model, each client's feature map and
a manifest with a SHA-256 of every array; :func:`load_models` verifies them (:class:`TrainedModels`) and
refuses anything else.
See docs/internals.md#topofl.models.io.
"""
from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from topofl.atomic import write_bytes_atomic

FORMAT = "topofl-models/1"


def _feature_input(state: dict[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    """Raw features → the model's input, from a client's feature state (empty: unchanged)."""
    if not state:
        return X
    from topofl.tda.features import TopoContext

    topo = TopoContext(np.asarray(state["centroid"]), float(np.asarray(state["scale"])[0]),
                       np.asarray(state["client_stats"]))
    return topo.augment(X)


def predict_with(model: Any, server: np.ndarray | None, clients: dict[int, np.ndarray],
                 states: dict[int, dict[str, np.ndarray]], X: np.ndarray, client: int | None = None) -> np.ndarray:
    """Scores of ``X`` under a client's model, or under the server's (``client=None``)."""
    if model is None:
        raise ValueError("no model: this result holds no trained model")
    X = np.asarray(X, dtype=np.float64)
    if client is None:
        if server is None:
            raise ValueError("this method keeps no server model (e.g. local training); pass client=k")
        if server.ndim != 1:
            raise ValueError(f"the server holds {server.shape[0]} models (one per cluster); pass client=k")
        if X.ndim == 2 and X.shape[1] != model.n_features:
            raise ValueError(f"the server's model takes {model.n_features} inputs per row, {X.shape[1]} given: "
                             "its clients append features of their own (pTopoFL's §3.2 TDA features); "
                             "predict for a client (client=k)")
        return model.predict_scores(server, X)
    if client not in clients:
        raise ValueError(f"client {client!r} has no saved model; clients: {sorted(clients)}")
    return model.predict_scores(clients[client], _feature_input(states.get(client, {}), X))


def _sha(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes() + str((a.dtype.str, a.shape)).encode()).hexdigest()


def save_models(result: Any, path: str | Path) -> Path:
    """Write a run's trained models (a :class:`~topofl.federation.history.History`) to ``path`` (``.npz``)."""
    from topofl._version import __version__
    from topofl.models.registry import describe

    if getattr(result, "model", None) is None or not getattr(result, "client_models", None):
        raise ValueError("this result holds no trained models (runs on Flower keep the clients' models on the nodes)")
    arrays: dict[str, np.ndarray] = {}
    for cid, theta in result.client_models.items():
        arrays[f"client/{int(cid)}/params"] = np.asarray(theta, dtype=np.float64)
        for key, value in result.client_feature_states.get(cid, {}).items():
            arrays[f"client/{int(cid)}/feature/{key}"] = np.asarray(value, dtype=np.float64)
    if result.server_params is not None:
        arrays["server/params"] = np.asarray(result.server_params, dtype=np.float64)
    manifest = {
        "format": FORMAT, "topofl": __version__, "method": result.method, "seed": int(result.seed),
        "model": describe(result.model), "sha256": {k: _sha(v) for k, v in arrays.items()},
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    arrays["manifest"] = np.frombuffer(json.dumps(manifest, sort_keys=True).encode(), dtype=np.uint8)
    np.savez(buf, allow_pickle=False, **arrays)
    write_bytes_atomic(path, buf.getvalue())
    return path


class TrainedModels:
    """Models read by :func:`load_models`: ``predict(X, client=k)`` (``None``: the server's)."""

    def __init__(self, model: Any, manifest: dict[str, Any], server: np.ndarray | None, clients: dict[int, np.ndarray],
                 states: dict[int, dict[str, np.ndarray]]) -> None:
        self.model, self.manifest = model, manifest
        self.server_params, self.client_models, self.client_feature_states = server, clients, states

    @property
    def method(self) -> str:
        """The method that trained them."""
        return str(self.manifest["method"])

    def predict(self, X: np.ndarray, client: int | None = None) -> np.ndarray:
        """Scores of ``X`` under client ``client``'s model (``None``: the server's)."""
        return predict_with(self.model, self.server_params, self.client_models, self.client_feature_states, X, client)


def load_models(path: str | Path, model: Any = None) -> TrainedModels:
    """Read and verify models saved by :func:`save_models`.

    ``model``: the model to load them into, needed only for a user's own ``torch.nn.Module`` (a
    registered model is rebuilt from the manifest). ``ValueError`` naming the file when it is not a
    topofl models file, when any array's hash differs from the manifest, or when ``model`` does not
    have the saved number of parameters.
    """
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"{path}: not a topofl models file ({type(exc).__name__}: {exc})") from None
    try:
        manifest = json.loads(bytes(data.pop("manifest")).decode())
    except (KeyError, ValueError, UnicodeDecodeError):
        raise ValueError(f"{path}: not a topofl models file (no valid manifest)") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{path}: not a topofl models file "
                         f"(format {manifest.get('format') if isinstance(manifest, dict) else None!r})")
    hashes = manifest.get("sha256", {})
    if set(hashes) != set(data):
        raise ValueError(f"{path}: its arrays {sorted(data)} do not match its manifest {sorted(hashes)}")
    for key, array in data.items():
        if array.dtype != np.float64 or _sha(array) != hashes[key]:
            raise ValueError(f"{path}: array {key!r} does not match its SHA-256 in the manifest (the file was altered)")
    built = (model if model is not None and hasattr(model, "predict_scores")
             else _rebuild(manifest["model"], model, path))
    clients: dict[int, np.ndarray] = {}
    states: dict[int, dict[str, np.ndarray]] = {}
    for key, array in data.items():
        parts = key.split("/")
        if parts[0] == "client":
            cid = int(parts[1])
            if parts[2] == "params":
                clients[cid] = array
            else:
                states.setdefault(cid, {})[parts[3]] = array
    server = data.get("server/params")
    n = int(manifest["model"]["n_params"])
    if getattr(built, "n_params", n) != n:
        raise ValueError(f"{path}: the saved models have {n} parameters; the model given has {built.n_params}")
    return TrainedModels(built, manifest, server, clients, states)


def _rebuild(desc: dict[str, Any], spec: Any, path: Path) -> Any:
    """The model a manifest describes (a registered one), or ``spec`` built for its shapes."""
    from topofl.models.linear import make_model
    from topofl.models.registry import build_model, rebuild_registered

    if desc.get("kind") == "linear":
        classes = int(desc["n_outputs"]) if desc["task"] == "multiclass" else 2
        return make_model(desc["task"], int(desc["n_features"]), classes, float(desc["l2"]))
    if spec is None:
        if not desc.get("name"):
            raise ValueError(f"{path}: these models use your own torch module ({desc.get('builder')}); "
                             "pass it again: load_models(path, model=...)")
        return rebuild_registered(desc)
    shape = tuple(int(v) for v in desc["input_shape"])
    return build_model(spec, task=desc["task"], n_features=int(np.prod(shape)), n_classes=int(desc["n_classes"]),
                       l2=float(desc["l2"]), input_shape=shape, dtype=str(desc["dtype"]))
