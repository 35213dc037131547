"""Helpers of the CLI: TOML files, routing hyper-parameters to methods, the comparison a command
asks for and its output directory (seed ranges and KEY=VALUE parsing live in :mod:`topofl.parsing`,
re-exported here).

Nothing here imports the methods, SciPy or scikit-learn at module level: ``topofl --help`` stays fast.
"""
from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from topofl.atomic import LOCK_NAME
from topofl.parsing import parse_assignments, parse_seeds, parse_value

if TYPE_CHECKING:  # pragma: no cover
    from topofl.experiments.compare import CompareSpec

__all__ = [
    "CONFIG_KEYS", "build_spec", "check_out_is_free", "data_scenario", "flatten_hyperparameters", "load_toml", "method_hyperparameters",
    "parse_assignments", "parse_seeds", "parse_value", "prepare_out", "route_hyperparameters",
]

log = logging.getLogger(__name__)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def method_hyperparameters(methods: Sequence[str], flat: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Route hyper-parameters to methods: ``"ptopofl.beta"`` to one method, a bare ``"lr"`` to every
    selected method that has it. A name no selected method knows is an error listing the known ones.
    """
    from topofl.methods import get as get_method

    out: dict[str, dict[str, Any]] = {m: {} for m in methods}
    for key, value in flat.items():
        if "." in key:
            method, name = key.split(".", 1)
            if method not in out:
                raise ValueError(f"hyper-parameter {key!r} names method {method!r}, which is not selected ({', '.join(methods)})")
            out[method][name] = value
            continue
        targets = [m for m in methods if key in get_method(m).config.field_help()]
        if not targets:
            known = sorted({f for m in methods for f in get_method(m).config.field_help()})
            raise ValueError(f"unknown hyper-parameter {key!r} for {', '.join(methods)}; known: {', '.join(known)}")
        for m in targets:
            out[m].setdefault(key, value)
    return out


#: Largest config file :func:`load_toml` reads (a run/compare file is a few hundred bytes).
MAX_CONFIG_BYTES = 1_000_000
#: Deepest nesting of tables and arrays a config file may have (the layout needs 3: ``[hyperparameters.METHOD]`` with a list value).
MAX_CONFIG_DEPTH = 16


def load_toml(path: Path) -> dict[str, Any]:
    """Read a run/compare TOML file (layout in the README); every key's type is checked
    (:data:`CONFIG_KEYS`) and a wrong one is a ``ValueError`` naming the file and the key.

    Parameters
    ----------
    path : Path
        A UTF-8 TOML file (a leading byte-order mark is ignored) of at most
        :data:`MAX_CONFIG_BYTES` bytes, nesting tables and arrays at most
        :data:`MAX_CONFIG_DEPTH` levels deep.

    Raises
    ------
    ValueError
        One line naming the file: missing or unreadable, too large, not UTF-8, not TOML, nested
        too deeply, an unknown key or a value of the wrong type.
    """
    path = Path(path)
    where = f"config file {str(path)!r}"
    if not path.is_file():
        raise ValueError(f"{where} does not exist")
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise ValueError(f"{where} is larger than {MAX_CONFIG_BYTES:,} bytes ({size:,}); a run/compare config is a few lines")
        with path.open("rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"{where} cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_CONFIG_BYTES:  # grew since stat
        raise ValueError(f"{where} is larger than {MAX_CONFIG_BYTES:,} bytes; a run/compare config is a few lines")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{where} is not UTF-8 text (byte {exc.start} is {raw[exc.start:exc.start + 1]!r}); save it as UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{where} is not valid TOML: {str(exc).splitlines()[0] if str(exc) else exc!r}") from None
    except RecursionError:
        raise ValueError(f"{where} nests deeper than TOML can be read here; at most {MAX_CONFIG_DEPTH} levels of tables and arrays") from None
    depth = _nesting(data) - 1  # the document itself is no level
    if depth > MAX_CONFIG_DEPTH:
        raise ValueError(f"{where} nests {depth} levels deep; at most {MAX_CONFIG_DEPTH} levels of tables and arrays")
    unknown = sorted(set(data) - set(CONFIG_KEYS))
    if unknown:
        shown = ", ".join(k if len(k) <= 40 else k[:30] + "..." for k in unknown[:12]) + (" ..." if len(unknown) > 12 else "")
        raise ValueError(f"{where} has unknown key(s) {shown}; known: {', '.join(sorted(CONFIG_KEYS))}")
    for key, value in data.items():
        expected, ok = CONFIG_KEYS[key]
        if not ok(value):
            raise ValueError(f"{where}: {key} must be {expected}; got {_short(value)}")
    return data


def _nesting(value: Any) -> int:
    """How many tables and arrays ``value`` nests (a scalar: 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, Mapping):
            children: Any = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((c, depth + 1) for c in children)
    return deepest


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to about ``limit`` characters with its full length said."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 20]}... ({len(text)} characters)"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


#: the keys of a TOML file's [tuning] table (topofl tune), as the flags --trials, --tune-params, ... name them
TUNING_KEYS = ("trials", "params", "seeds", "validation_fraction", "metric", "sampler_seed")
#: the keys a run/compare TOML file may hold: (what the value must be, its check)
CONFIG_KEYS: dict[str, tuple[str, Any]] = {
    "scenario": ("a string, e.g. scenario = \"healthcare\"", lambda v: isinstance(v, str)),
    "method": ("a string, e.g. method = \"ptopofl\"", lambda v: isinstance(v, str)),
    "methods": ("a list of method names, e.g. methods = [\"ptopofl\", \"fedavg\"]",
                lambda v: isinstance(v, list) and bool(v) and all(isinstance(m, str) for m in v)),
    "seed": ("an integer", _is_int),
    "model": ("a model name such as \"cnn-small\" or \"package.module:factory\"", lambda v: isinstance(v, str) and bool(v)),
    "seeds": ("a string such as \"0-9\", an integer or a list of integers",
              lambda v: isinstance(v, str) or _is_int(v) or (isinstance(v, list) and bool(v) and all(_is_int(x) for x in v))),
    "rounds": ("an integer", _is_int),
    "client_fraction": ("a number in (0, 1]", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
    "scenario_params": ("a table ([scenario_params] with KEY = VALUE lines)", lambda v: isinstance(v, Mapping)),
    "hyperparameters": ("a table ([hyperparameters] with KEY = VALUE lines, [hyperparameters.METHOD] for one method)",
                        lambda v: isinstance(v, Mapping)),
    "tuning": ("a table ([tuning] with any of " + ", ".join(TUNING_KEYS) + "; topofl tune)",
               lambda v: isinstance(v, Mapping) and set(v) <= set(TUNING_KEYS)),
}


def flatten_hyperparameters(table: Mapping[str, Any]) -> dict[str, Any]:
    """TOML ``[hyperparameters]`` (bare keys, and sub-tables per method) → ``{"lr": .., "ptopofl.beta": ..}``."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, Mapping):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return flat


def _drop_unselected(methods: Sequence[str], flat: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The file's hyper-parameters less those meant only for registered methods that are not
    selected (each dropped one logged); names of no registered method are kept, to fail later.
    """
    from topofl.methods import REGISTRY, available

    kept: dict[str, Any] = {}
    for key, value in flat.items():
        method, dot, name = key.partition(".")
        if not dot:
            method, name = "", key
        if method:
            if method not in REGISTRY:
                raise ValueError(f"{source}: hyper-parameter {key!r} names unknown method {method!r}; available: {', '.join(available())}")
            if method not in methods:
                log.info("%s: %s ignored (method %s is not selected)", source, key, method)
                continue
        elif not any(name in REGISTRY[m].config.field_help() for m in methods) and any(
                name in m.config.field_help() for m in REGISTRY.values()):
            log.info("%s: %s ignored (no selected method has it)", source, key)
            continue
        kept[key] = value
    return kept


def route_hyperparameters(methods: Sequence[str], from_file: Mapping[str, Any], from_flags: Mapping[str, Any],
                          source: str = "config file") -> dict[str, dict[str, Any]]:
    """Route a config file's and the flags' hyper-parameters to ``methods``; a flag's value wins
    over the file's for the same method and name.

    One file may serve several commands, so the file's settings of registered methods that are not
    selected (``ptopofl.n_clusters`` with ``--methods fedavg``, or a bare ``n_clusters`` no
    selected method has) are ignored, each with a logged note (``--verbose`` shows it). A flag naming
    a method that is not selected, and a name no method knows, stay errors (:func:`method_hyperparameters`).
    """
    file_part = method_hyperparameters(methods, _drop_unselected(methods, from_file, source))
    flag_part = method_hyperparameters(methods, from_flags)
    return {m: {**file_part[m], **flag_part[m]} for m in methods}


def resolve(flag: Any, file: Mapping[str, Any], key: str, default: Any) -> Any:
    """A flag's value if given, else the config file's ``key``, else ``default``."""
    return flag if flag is not None else file.get(key, default)


def data_scenario(scenario: str | None, data: Path | None, site_column: str | None, label_column: str | None,
                  scenario_param: list[str] | None) -> tuple[str | None, list[str] | None]:
    """``--data PATH`` is the ``table`` scenario with ``path``/``site_column``/``label_column`` set."""
    if data is None:
        if site_column is not None or label_column is not None:
            raise ValueError("--site-column and --label-column go with --data")
        return scenario, scenario_param
    if scenario not in (None, "table"):
        raise ValueError(f"--data and --scenario {scenario!r} exclude each other")
    extra = [f"path={data}"] + ([f"site_column={site_column}"] if site_column is not None else []) + (
        [f"label_column={label_column}"] if label_column is not None else [])
    return "table", extra + list(scenario_param or [])


def build_spec(file: Mapping[str, Any], scenario: str, methods: Sequence[str], seeds: Any, rounds: int, params: list[str] | None,
               scenario_params: list[str] | None, client_fraction: float, graph: str | None = None, graph_param: list[str] | None = None,
               model: str | None = None) -> CompareSpec:
    """The comparison a ``run``/``compare`` command asks for: flags over the config ``file``'s values."""
    from topofl._validation import check_int
    from topofl.experiments.compare import CompareSpec
    from topofl.limits import MAX_ROUNDS
    from topofl.methods import REGISTRY, available

    scen = dict(file.get("scenario_params", {}))
    scen.update(parse_assignments(scenario_params or [], "--scenario-param"))
    chosen = tuple(m.strip().lower() for m in methods if m.strip())
    if not chosen:
        raise ValueError("--methods must name at least one method")
    for m in chosen:
        if m not in REGISTRY:
            raise ValueError(f"unknown method {m!r}; available: {', '.join(available())}")
    if isinstance(seeds, (list, tuple)):
        seeds = ",".join(map(str, seeds))
    check_int("rounds", rounds, 1, MAX_ROUNDS)
    hyperparameters = route_hyperparameters(chosen, flatten_hyperparameters(file.get("hyperparameters", {})),
                                            parse_assignments(params or [], "--param"))
    return CompareSpec(
        scenario=scenario, methods=chosen, seeds=parse_seeds(seeds), rounds=rounds, client_fraction=float(client_fraction),
        scenario_params=scen, hyperparameters=hyperparameters, graph=graph or "erdos_renyi",
        graph_params=parse_assignments(graph_param or [], "--graph-param"), model=model or file.get("model", "linear"),
    )


def check_out_is_free(path: Path, overwrite: bool, flag: str = "--out") -> None:
    """Refuse (one-line ``ValueError``) to write into a directory that already holds files, unless
    ``overwrite``: results of an earlier run are never replaced by surprise.
    """
    path = Path(path)
    if overwrite or not path.is_dir():
        return
    entries = sorted(p.name for p in path.iterdir() if p.name != LOCK_NAME)  # a lock file left by a finished run holds no results
    if entries:
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise ValueError(f"{flag} {str(path)!r} already holds files ({shown}); pass --overwrite to replace the results in it, "
                         "or choose another directory")


def prepare_out(path: Path, flag: str = "--out") -> Path:
    """Create output directory ``path`` (with its parents) or raise a one-line ``ValueError``
    naming the flag and what is wrong (a file in the way, no permission, ...).
    """
    path = Path(path)
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.is_dir():
            raise ValueError(f"{flag} {str(path)!r}: {str(parent)!r} is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{flag} {str(path)!r}: cannot create the directory ({exc.strerror or exc})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {str(path)!r}: the directory is not writable")
    return path
