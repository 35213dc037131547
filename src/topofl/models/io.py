"""Trained models come back: save, load and predict, in a safe format (``.npz`` without pickles).

:func:`save_models` writes every client's final model, the server's model, each client's feature map,
the preprocessing the federation fitted (:class:`~topofl.models.preprocessing.Preprocessing`: standardisation,
imputation, label classes, feature and site names) and a manifest with a SHA-256 of every array;
:func:`load_models` verifies and validates them (:class:`TrainedModels`) and refuses anything else. A
run's :class:`~topofl.federation.history.Result` and a :class:`TrainedModels` predict alike
(:class:`ModelSet`): on raw rows, as the run's evaluated rows were made.
See docs/models.md and docs/internals.md#topofl.models.io.
"""
from __future__ import annotations

import hashlib
import io
import json
import re
import warnings
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from topofl.atomic import write_bytes_atomic

#: the format :func:`save_models` writes (2: with the preprocessing, and a model per client where they differ)
FORMAT = "topofl-models/2"
#: the formats :func:`load_models` reads
FORMATS = ("topofl-models/1", FORMAT)
#: the keys a client's feature state (pTopoFL's §3.2 map) may hold
_STATE_KEYS = ("centroid", "scale", "client_stats")
#: the columns a client's feature state appends to its rows (pTopoFL's four TDA features)
TDA_COLUMNS = 4
_KEY = re.compile(r"^(?:client/(\d{1,9})/(?:params|feature/(centroid|scale|client_stats))|server/params|"
                  r"preprocessing/(mean|scale|impute))$")
#: largest models file :func:`load_models` reads (its manifest alone: 64 MB)
MAX_MANIFEST_BYTES = 64 * 2**20
#: bounds on a model description's shapes and builder arguments, checked before anything is built
MAX_SHAPE_DIMS, MAX_DIM, MAX_INPUT_VALUES = 4, 2**16, 2**26
MAX_BUILDER_INT, MAX_BUILDER_LIST = 2**20, 64


class NoPreprocessingWarning(UserWarning):
    """A models file without the federation's preprocessing: ``predict`` then takes preprocessed rows."""


def _feature_input(state: Mapping[str, np.ndarray], X: np.ndarray) -> np.ndarray:
    """Raw features → the model's input, from a client's feature state (empty: unchanged)."""
    if not state:
        return X
    from topofl.tda.features import TopoContext

    topo = TopoContext(np.asarray(state["centroid"]), float(np.asarray(state["scale"])[0]),
                       np.asarray(state["client_stats"]))
    return topo.augment(X)


@dataclass
class ModelSet:
    """Trained models with what they need to predict: the model object every client shares
    (``model``; ``None`` when they differ, then ``models`` holds each client's), the server's
    parameters, each client's final parameters and feature state, and the federation's
    :class:`~topofl.models.preprocessing.Preprocessing` (``None``: rows are taken as the model's input).
    """

    model: Any
    server_params: np.ndarray | None
    client_models: Mapping[int, np.ndarray]
    client_feature_states: Mapping[int, Mapping[str, np.ndarray]] = field(default_factory=dict)
    models: Mapping[int, Any] = field(default_factory=dict)
    preprocessing: Any = None

    def client_id(self, client: Any) -> int | None:
        """``client`` (an id, a site name or ``None`` for the server's model) as a client id."""
        if client is None:
            return None
        if self.preprocessing is not None:
            return int(self.preprocessing.client_index(client))
        if isinstance(client, str):
            raise ValueError(f"no site named {client!r}: these models carry no site names; pass a client id")
        if isinstance(client, bool) or not isinstance(client, (int, np.integer)):
            raise ValueError(f"client must be a client id (int) or a site name; got {client!r}")
        return int(client)

    def model_of(self, cid: int | None) -> Any:
        """The model object of client ``cid`` (``None``: the server's)."""
        if cid is not None and cid in self.models:
            return self.models[cid]
        if self.model is None:
            if cid is None:
                raise ValueError("the clients' models differ (each has its own architecture or size); pass client=k")
            raise ValueError("no model: this result holds no trained model")
        return self.model

    def params_of(self, cid: int | None) -> np.ndarray:
        """The final parameters of client ``cid`` (``None``: the server's)."""
        if cid is None:
            if self.server_params is None:
                raise ValueError("this method keeps no server model (e.g. local training or peers); pass client=k")
            if self.server_params.ndim != 1:
                raise ValueError(f"the server holds {self.server_params.shape[0]} models (one per cluster); "
                                 "pass client=k")
            return self.server_params
        if cid not in self.client_models:
            raise ValueError(f"client {cid!r} has no final model; clients: {sorted(self.client_models)}")
        return self.client_models[cid]

    def inputs(self, X: Any, client: Any = None, *, preprocessed: bool = False) -> tuple[np.ndarray, int | None]:
        """The model's input rows for ``X`` and the client id: raw rows go through the
        preprocessing and the client's feature map; ``preprocessed=True`` takes rows as the
        federation's own (already standardised and imputed).
        """
        cid = self.client_id(client)
        if self.preprocessing is not None and not preprocessed:
            X = self.preprocessing.transform(X, cid)
        else:
            X = np.asarray(X, dtype=np.float64)
        model = self.model_of(cid)
        if cid is None:
            if X.ndim == 2 and X.shape[1] != model.n_features:
                raise ValueError(f"the server's model takes {model.n_features} inputs per row, {X.shape[1]} given: "
                                 "its clients append features of their own (pTopoFL's §3.2 TDA features); "
                                 "predict for a client (client=k)")
            return X, None
        return _feature_input(self.client_feature_states.get(cid, {}), X), cid

    def raw_inputs(self, client: Any = None) -> int | None:
        """Values a raw row holds for client ``client``'s model (``None``: the server's); ``None`` when
        the model does not say.
        """
        cid = self.client_id(client)
        if self.preprocessing is not None:
            return self.preprocessing.n_inputs
        n = getattr(self.model_of(cid), "n_features", None)
        mapped = cid is not None and bool(self.client_feature_states.get(cid))
        return None if n is None else int(n) - (TDA_COLUMNS if mapped else 0)

    def predict(self, X: Any, client: Any = None, *, preprocessed: bool = False) -> np.ndarray:
        """Scores of raw rows ``X`` under client ``client``'s final model (an id or a site name;
        ``None``: the server's): P(y = 1), class probabilities, or predicted values.
        """
        Z, cid = self.inputs(X, client, preprocessed=preprocessed)
        params = self.params_of(cid)
        scores: np.ndarray = self.model_of(cid).predict_scores(params, Z)
        return scores

    def predict_labels(self, X: Any, client: Any = None, *, preprocessed: bool = False) -> np.ndarray:
        """Predicted labels of raw rows ``X``, as the data named them (``classes=`` or {−1, +1}
        mapped back; with ``preprocessed=True`` too, which is about the rows only); predicted values
        for regression.
        """
        Z, cid = self.inputs(X, client, preprocessed=preprocessed)
        pred = np.asarray(self.model_of(cid).predict(self.params_of(cid), Z))
        if self.preprocessing is None or self.preprocessing.task == "regression":
            return pred
        return self.preprocessing.labels(pred)

    def module(self, client: Any = None) -> Any:
        """Client ``client``'s trained network as a ``torch.nn.Module`` (``None``: the server's), of the
        class that was trained — a user's own module comes back as its own class; ``ValueError`` for
        a NumPy model.
        """
        cid = self.client_id(client)
        model = self.model_of(cid)
        if not hasattr(model, "module"):
            raise ValueError(f"a {type(model).__name__} is a NumPy model, not a torch module; its parameters are "
                             + ("server_params" if cid is None else f"client_models[{cid}]"))
        return model.module(self.params_of(cid))

    def state_dict(self, client: Any = None) -> dict[str, Any]:
        """Client ``client``'s trained network's ``state_dict()`` (``None``: the server's)."""
        out: dict[str, Any] = self.module(client).state_dict()
        return out


def _sha(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes() + str((a.dtype.str, a.shape)).encode()).hexdigest()


def model_set(result: Any) -> ModelSet:
    """The :class:`ModelSet` of a run's result (both families)."""
    return ModelSet(getattr(result, "model", None), getattr(result, "server_params", None),
                    getattr(result, "client_models", {}) or {}, getattr(result, "client_feature_states", {}) or {},
                    getattr(result, "models", {}) or {}, getattr(result, "preprocessing", None))


def save_models(result: Any, path: str | Path) -> Path:
    """Write a run's trained models (a :class:`~topofl.federation.history.Result` of either family,
    or a :class:`TrainedModels`) and its preprocessing to ``path`` (``.npz``).
    """
    from topofl._version import __version__
    from topofl.models.registry import describe

    models = dict(getattr(result, "models", {}) or {})
    shared = getattr(result, "model", None)
    client_models = getattr(result, "client_models", None) or {}
    if not client_models or (shared is None and not models):
        raise ValueError("this result holds no trained models (runs on Flower keep the clients' models on the nodes)")
    if shared is None and set(client_models) - set(models):
        raise ValueError(f"clients {sorted(set(client_models) - set(models))} have parameters but no model object")
    arrays: dict[str, np.ndarray] = {}
    for cid, theta in client_models.items():
        arrays[f"client/{int(cid)}/params"] = np.asarray(theta, dtype=np.float64)
        for key, value in (getattr(result, "client_feature_states", {}) or {}).get(cid, {}).items():
            arrays[f"client/{int(cid)}/feature/{key}"] = np.asarray(value, dtype=np.float64)
    if getattr(result, "server_params", None) is not None:
        arrays["server/params"] = np.asarray(result.server_params, dtype=np.float64)
    descriptions = {int(cid): describe(m) for cid, m in models.items() if int(cid) in client_models}
    if shared is None and len({json.dumps(d, sort_keys=True) for d in descriptions.values()}) == 1:
        shared = models[next(iter(descriptions))]   # per-peer copies of one architecture
    prep = getattr(result, "preprocessing", None)
    prep_meta = None
    if prep is not None:
        prep_meta, prep_arrays = prep.to_manifest()
        arrays.update({f"preprocessing/{k}": v for k, v in prep_arrays.items()})
    manifest = {
        "format": FORMAT, "topofl": __version__, "method": str(result.method), "seed": int(result.seed),
        "model": describe(shared) if shared is not None else None,
        "client_model": {} if shared is not None else {str(k): d for k, d in sorted(descriptions.items())},
        "preprocessing": prep_meta, "sha256": {k: _sha(v) for k, v in arrays.items()},
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    arrays["manifest"] = np.frombuffer(json.dumps(manifest, sort_keys=True).encode(), dtype=np.uint8)
    np.savez(buf, allow_pickle=False, **arrays)
    write_bytes_atomic(path, buf.getvalue())
    return path


class TrainedModels(ModelSet):
    """Models read by :func:`load_models`: ``predict(rows, client=k)`` (an id or a site name;
    ``None``: the server's) on raw rows, ``predict_labels``, ``module``/``state_dict`` for a torch
    model; ``preprocessing`` and ``sites`` say what the federation did and which site is client k.
    """

    def __init__(self, model: Any, manifest: dict[str, Any], server: np.ndarray | None, clients: dict[int, np.ndarray],
                 states: dict[int, dict[str, np.ndarray]], models: Mapping[int, Any] | None = None,
                 preprocessing: Any = None) -> None:
        super().__init__(model, server, clients, states, dict(models or {}), preprocessing)
        self.manifest = manifest

    @property
    def method(self) -> str:
        """The method that trained them."""
        return str(self.manifest["method"])

    @property
    def seed(self) -> int:
        """The seed of the run that trained them."""
        return int(self.manifest["seed"])

    @property
    def sites(self) -> dict[int, str]:
        """Client id → site name (empty when the clients have no names)."""
        prep = self.preprocessing
        return {k: s for k, s in enumerate(prep.sites)} if prep is not None and prep.sites else {}


def _read(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The manifest (read and parsed first) and the arrays of models file ``path``, after checking that its
    members are stored as :func:`save_models` writes them (uncompressed: no zip bomb inflates here).
    """
    try:
        size = path.stat().st_size
        with zipfile.ZipFile(path) as zf:
            members = zf.infolist()
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError) as exc:
        raise ValueError(f"{path}: not a topofl models file ({type(exc).__name__}: {exc})") from None
    with z:
        for info in members:
            if info.compress_type != zipfile.ZIP_STORED:
                raise ValueError(f"{path}: not a topofl models file (member {info.filename!r} is compressed; "
                                 "topofl stores its arrays uncompressed)")
        stored = sum(info.file_size for info in members)
        if stored > size:
            raise ValueError(f"{path}: not a topofl models file (its members claim {stored} bytes; the file has "
                             f"{size})")
        manifest = _parse_manifest(path, _member(path, z, "manifest") if "manifest" in z.files else None)
        return manifest, {k: _member(path, z, k) for k in z.files if k != "manifest"}


def _member(path: Path, z: Any, key: str) -> np.ndarray:
    try:
        out: np.ndarray = z[key]
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError) as exc:
        raise ValueError(f"{path}: not a topofl models file ({type(exc).__name__}: {exc})") from None
    return out


def _parse_manifest(path: Path, raw: np.ndarray | None) -> dict[str, Any]:
    if raw is None or raw.dtype != np.uint8 or raw.ndim != 1 or raw.size > MAX_MANIFEST_BYTES:
        raise ValueError(f"{path}: not a topofl models file (no valid manifest)")
    try:
        manifest = json.loads(bytes(raw).decode())
    except RecursionError:
        raise ValueError(f"{path}: not a topofl models file (its manifest is nested too deeply)") from None
    except (ValueError, UnicodeDecodeError):
        raise ValueError(f"{path}: not a topofl models file (no valid manifest)") from None
    if not isinstance(manifest, dict) or manifest.get("format") not in FORMATS:
        raise ValueError(f"{path}: not a topofl models file "
                         f"(format {manifest.get('format') if isinstance(manifest, dict) else None!r})")
    return manifest


def _check_manifest(path: Path, manifest: dict[str, Any], data: dict[str, np.ndarray]) -> None:
    hashes = manifest.get("sha256")
    if not isinstance(hashes, dict) or set(hashes) != set(data):
        raise ValueError(f"{path}: its arrays {sorted(data)} do not match its manifest "
                         f"{sorted(hashes) if isinstance(hashes, dict) else hashes!r}")
    for key, array in data.items():
        if array.dtype != np.float64 or _sha(array) != hashes[key]:
            raise ValueError(f"{path}: array {key!r} does not match its SHA-256 in the manifest (the file was altered)")
        if _KEY.match(key) is None:
            raise ValueError(f"{path}: unknown array {key!r}")
        if not np.isfinite(array).all():
            raise ValueError(f"{path}: array {key!r} holds a non-finite value")
    method, seed = manifest.get("method"), manifest.get("seed")
    if not isinstance(method, str) or isinstance(seed, bool) or not isinstance(seed, int) \
            or len(method) > 200 or re.search(r"[\x00-\x1f\x7f]", method):
        raise ValueError(f"{path}: the manifest's method and seed must be a one-line name of at most 200 characters "
                         "and an integer")


def load_models(path: str | Path, model: Any = None) -> TrainedModels:
    """Read and verify models saved by :func:`save_models`.

    ``model``: the model to load them into, needed only for a user's own ``torch.nn.Module`` (a
    registered model is rebuilt from the manifest): the module (or its factory) trained, or a
    mapping client id → one, for peers whose modules differ. ``ValueError`` naming the file when
    it is not a topofl models file, when any array's hash differs from the manifest, when a value
    has the wrong type, shape or is not finite, or when ``model`` does not have the saved number of
    parameters. A file written before models carried their preprocessing (format 1) loads with a
    :class:`NoPreprocessingWarning`: its ``predict`` takes rows preprocessed as the federation's were.
    """
    path = Path(path)
    manifest, data = _read(path)
    _check_manifest(path, manifest, data)
    clients: dict[int, np.ndarray] = {}
    states: dict[int, dict[str, np.ndarray]] = {}
    prep_arrays: dict[str, np.ndarray] = {}
    for key, array in data.items():
        m = _KEY.match(key)
        assert m is not None  # checked by _manifest
        if m.group(1) is not None:
            cid = int(m.group(1))
            if m.group(2) is None:
                if array.ndim != 1:
                    raise ValueError(f"{path}: {key!r} must be a vector; got shape {array.shape}")
                clients[cid] = array
            else:
                states.setdefault(cid, {})[m.group(2)] = array
        elif m.group(3) is not None:
            prep_arrays[m.group(3)] = array
    server = data.get("server/params")
    if not clients:
        raise ValueError(f"{path}: no client models")
    _check_states(path, states, clients)
    try:
        shared, per_client = _models(path, manifest, model, clients)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path}: the manifest's model description is malformed ({type(exc).__name__}: {exc})"
                         ) from None
    _check_sizes(path, shared, per_client, clients, server)
    preprocessing = _preprocessing(path, manifest, prep_arrays, shared, per_client, clients, states)
    return TrainedModels(shared, manifest, server, clients, states, per_client, preprocessing)


def _check_states(path: Path, states: dict[int, dict[str, np.ndarray]], clients: dict[int, np.ndarray]) -> None:
    for cid, state in states.items():
        if cid not in clients or set(state) != set(_STATE_KEYS):
            raise ValueError(f"{path}: client {cid}'s feature map must hold {', '.join(_STATE_KEYS)} with its model")
        if state["centroid"].ndim != 1 or state["scale"].shape != (1,) or state["client_stats"].shape != (3,) \
                or not state["scale"][0] > 0:
            raise ValueError(f"{path}: client {cid}'s feature map has the wrong shapes or a non-positive scale")


def _models(path: Path, manifest: dict[str, Any], spec: Any,
            clients: dict[int, np.ndarray]) -> tuple[Any, dict[int, Any]]:
    """The shared model and the per-client models the manifest describes (one of them empty)."""
    desc = manifest.get("model")
    if desc is not None:
        if not isinstance(desc, dict):
            raise ValueError(f"{path}: the manifest's model must be a description (an object)")
        first = next(iter(clients))
        one = spec.get(first) if isinstance(spec, Mapping) else spec
        return (one if one is not None and hasattr(one, "predict_scores")
                else _rebuild(desc, one, path, clients[first].size)), {}
    per = manifest.get("client_model")
    if not isinstance(per, dict) or not per or set(per) != {str(c) for c in clients}:
        raise ValueError(f"{path}: the manifest must describe the model of every client")
    built: dict[int, Any] = {}
    for key, d in per.items():
        if not isinstance(d, dict):
            raise ValueError(f"{path}: client {key}'s model must be a description (an object)")
        one = spec.get(int(key)) if isinstance(spec, Mapping) else spec
        built[int(key)] = (one if one is not None and hasattr(one, "predict_scores")
                           else _rebuild(d, one, path, clients[int(key)].size))
    return None, built


def _check_sizes(path: Path, shared: Any, per_client: dict[int, Any], clients: dict[int, np.ndarray],
                 server: np.ndarray | None) -> None:
    for cid, theta in clients.items():
        m = per_client.get(cid, shared)
        n = int(getattr(m, "n_params", theta.size))
        if theta.size != n:
            raise ValueError(f"{path}: client {cid}'s saved model has {theta.size} parameters; "
                             f"the model {'given' if m is not None else 'described'} has {n}")
    if server is not None and shared is not None and server.shape[-1] != shared.n_params:
        raise ValueError(f"{path}: the server's saved model has {server.shape[-1]} parameters; the model has "
                         f"{shared.n_params}")


def _preprocessing(path: Path, manifest: dict[str, Any], arrays: dict[str, np.ndarray], shared: Any,
                   per_client: dict[int, Any], clients: dict[int, np.ndarray], states: dict[int, Any]) -> Any:
    """The file's :class:`~topofl.models.preprocessing.Preprocessing`, validated against its models (``None``:
    the file has none, with a :class:`NoPreprocessingWarning` for a format-1 file).
    """
    from topofl.models.preprocessing import Preprocessing

    meta = manifest.get("preprocessing")
    if manifest["format"] == "topofl-models/1" or meta is None:
        if arrays:
            raise ValueError(f"{path}: preprocessing arrays without a preprocessing record")
        if manifest["format"] == "topofl-models/1":
            warnings.warn(NoPreprocessingWarning(
                f"{path} was written before models carried their preprocessing (format 1): predict takes rows "
                "preprocessed as the federation's were (standardised, imputed), not raw rows; save the run's models "
                "again with this topofl to keep the preprocessing with them"), stacklevel=3)
        return None
    try:
        prep = Preprocessing.from_manifest(meta, arrays)
    except ValueError as exc:
        raise ValueError(f"{path}: invalid preprocessing record: {exc}") from None
    if max(clients) >= prep.n_clients:
        raise ValueError(f"{path}: the preprocessing describes {prep.n_clients} clients; the file holds models of "
                         f"client {max(clients)}")
    for cid in clients:
        n_in = getattr(per_client.get(cid, shared), "n_features", None)
        want = prep.n_features + (TDA_COLUMNS if cid in states else 0)
        if n_in is not None and n_in != want:
            raise ValueError(f"{path}: client {cid}'s model takes {n_in} inputs; its preprocessing makes {want}")
    return prep


def _rebuild(desc: dict[str, Any], spec: Any, path: Path, n_params: int) -> Any:
    """The model a manifest describes (a registered one), or ``spec`` built for its shapes; the
    description is checked against the ``n_params`` saved parameters before anything is built.
    """
    if desc.get("kind") != "linear" and spec is None and not desc.get("name"):
        raise ValueError(f"{path}: these models use your own torch module ({str(desc.get('builder'))[:200]}); "
                         "pass it again: load_models(path, model=...)")
    try:
        _check_description(desc, n_params, registered=spec is None)
        if spec is None or desc["kind"] == "linear":
            return _build_described(desc, spec)
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: the manifest's model description is invalid ({type(exc).__name__}: {exc})"
                         ) from None
    try:
        return _build_described(desc, spec)
    except ValueError as exc:
        raise ValueError(f"{path}: the model given does not build for these models: {exc}") from None


def _build_described(desc: dict[str, Any], spec: Any) -> Any:
    from topofl.models.linear import make_model
    from topofl.models.registry import build_model, rebuild_registered

    if desc["kind"] == "linear":
        classes = int(desc["n_outputs"]) if desc["task"] == "multiclass" else 2
        return make_model(desc["task"], int(desc["n_features"]), classes, float(desc["l2"]))
    if spec is None:
        return rebuild_registered(desc)
    shape = tuple(int(v) for v in desc["input_shape"])
    return build_model(spec, task=desc["task"], n_features=int(np.prod(shape)), n_classes=int(desc["n_classes"]),
                       l2=float(desc["l2"]), input_shape=shape, dtype=str(desc["dtype"]))


def _int_in(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{what} must be an integer in [{low}, {high}]; got {str(value)[:60]}")
    return value


def _check_description(desc: dict[str, Any], n_params: int, *, registered: bool) -> None:
    """Refuse a model description whose types, shapes or sizes do not fit ``n_params`` saved parameters,
    without building anything (a registered network's parameters are counted on torch's ``meta`` device).
    """
    from topofl.limits import MAX_CLASSES

    if desc.get("task") not in ("binary", "multiclass", "regression"):
        raise ValueError(f"task must be binary, multiclass or regression; got {str(desc.get('task'))[:60]}")
    declared = desc.get("n_params")
    if declared is not None and (isinstance(declared, bool) or declared != n_params):
        raise ValueError(f"it describes {str(declared)[:60]} parameters; the file holds {n_params}")
    if desc.get("kind") == "linear":
        _int_in(desc.get("n_features"), "n_features", 1, n_params)
        _int_in(desc.get("n_outputs"), "n_outputs", 1, n_params)
        return
    shape = desc.get("input_shape")
    if not isinstance(shape, list) or not 1 <= len(shape) <= MAX_SHAPE_DIMS:
        raise ValueError(f"input_shape must list 1 to {MAX_SHAPE_DIMS} sizes; got {str(shape)[:60]}")
    for v in shape:
        _int_in(v, "input_shape", 1, MAX_DIM)
    if int(np.prod(shape)) > MAX_INPUT_VALUES:
        raise ValueError(f"input_shape {shape} holds more than {MAX_INPUT_VALUES} values")
    _int_in(desc.get("n_classes"), "n_classes", 1, MAX_CLASSES)
    if not registered:
        return
    args = desc.get("builder_args", {})
    if not isinstance(args, dict) or len(args) > MAX_BUILDER_LIST:
        raise ValueError(f"builder_args must be an object; got {str(args)[:60]}")
    for key, v in args.items():
        for item in v if isinstance(v, list) and len(v) <= MAX_BUILDER_LIST else [v]:
            _int_in(item, f"builder_args[{key!r}]", 0, MAX_BUILDER_INT)
    n = _count_parameters(desc)
    if n != n_params:
        raise ValueError(f"it describes a network of {n} parameters; the file holds {n_params}")


def _count_parameters(desc: dict[str, Any]) -> int:
    """Parameters of the registered network ``desc`` describes, counted on torch's ``meta`` device (no memory)."""
    from topofl.models.registry import registered_builder
    from topofl.models.torch_models import _require_torch

    torch = _require_torch()
    factory = registered_builder(desc)
    with torch.device("meta"):
        module = factory()
    return int(sum(p.numel() for p in module.parameters()))
