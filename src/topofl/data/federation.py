"""Client data containers: :class:`ClientData` and :class:`Federation`.

A federation is a list of clients, each with its own train/test split, plus the task. Dynamic
federations (data that drift across rounds, paper §4.5) override :meth:`Federation.at_round`.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from topofl._validation import as_labels, as_points
from topofl.limits import MAX_CLASSES
from topofl.models.preprocessing import Preprocessing, check_names, default_feature_names, safe_name

log = logging.getLogger(__name__)

TASKS = ("binary", "multiclass", "regression")


@dataclass(frozen=True)
class ClientData:
    """One client's data. ``meta`` holds scenario facts (e.g. ``adversarial``, ``group``)."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    client_id: int = 0
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def n_train(self) -> int:
        return int(self.X_train.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.X_train.shape[1])

    def __iter__(self) -> Iterator[np.ndarray]:
        """Unpack as ``X_train, y_train, X_test, y_test``."""
        return iter((self.X_train, self.y_train, self.X_test, self.y_test))


def _validated_client(k: int, arrays: Sequence[Any] | ClientData, meta: Mapping[str, Any] | None = None) -> ClientData:
    if isinstance(arrays, ClientData):
        meta, arrays = arrays.meta, tuple(arrays)
    if len(arrays) != 4:
        raise ValueError(f"client {k} must be (X_train, y_train, X_test, y_test); got {len(arrays)} items")
    Xtr = as_points(arrays[0], f"client {k} X_train", min_points=3)
    ytr = as_labels(arrays[1], Xtr.shape[0], f"client {k} y_train")
    Xte = as_points(arrays[2], f"client {k} X_test", min_points=1)
    yte = as_labels(arrays[3], Xte.shape[0], f"client {k} y_test")
    if Xte.shape[1] != Xtr.shape[1]:
        raise ValueError(
            f"client {k} X_test has {Xte.shape[1]} features but its X_train has {Xtr.shape[1]}"
        )
    return ClientData(Xtr, ytr, Xte, yte, client_id=k, meta=dict(meta or {}))


def _show_labels(values: np.ndarray, limit: int = 6) -> str:
    shown = ", ".join(f"{v:g}" for v in values[:limit])
    return "{" + shown + (f", ... ({values.size} distinct)" if values.size > limit else "") + "}"


def resolve_labels(
    labels: Sequence[np.ndarray], task: str | None = None, classes: Sequence[Any] | None = None,
) -> tuple[str, int, Any]:
    """The task, the number of classes and a label map for a whole federation's labels.

    Classification is inferred only from unambiguous labels — the integers 0..C−1, every one
    present — or taken from an explicit ``classes=[...]`` (label ``classes[i]`` becomes class
    ``i``) or ``task=``. ``task="binary"`` also accepts {−1, +1} (−1 becomes 0, logged);
    ``task="multiclass"`` takes non-negative integer labels as class ids. Anything else is a
    ``ValueError`` naming the labels found and the argument to pass.

    Returns ``(task, n_classes, mapping)`` where ``mapping`` is ``None`` or a function applied to
    every label array.
    """
    y = np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in labels])
    values = np.unique(y)
    shown = _show_labels(values)
    if task is not None and task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}; got {task!r}")
    if classes is not None:
        return _resolve_classes(values, task, classes)
    if task == "regression":
        return "regression", 0, None
    integers = bool(np.all(values == np.round(values)))
    if task in (None, "binary") and np.all(np.isin(values, (0.0, 1.0))):
        return "binary", 2, None
    if task == "binary":
        return _resolve_signed_binary(values, shown)
    contiguous = integers and values[0] == 0 and values[-1] == values.size - 1
    if task is None and contiguous:
        return "multiclass", int(values.size), None
    if task == "multiclass":
        return _resolve_class_ids(values, shown, integers)
    # ambiguous: say what was found and what to pass
    raise ValueError(f"labels {shown} are not the classes 0..C-1, so the task is ambiguous; "
                     f"{_ambiguity_hint(values, integers)}")


def _resolve_classes(values: np.ndarray, task: str | None, classes: Sequence[Any]) -> tuple[str, int, Any]:
    """:func:`resolve_labels` given ``classes=[...]``: label ``classes[i]`` becomes class ``i``."""
    if task == "regression":
        raise ValueError("classes= describes a classification task; it cannot be combined with task='regression'")
    try:
        cls = np.asarray(list(classes), dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"classes must be a list of label values; got {classes!r}") from None
    if (cls.ndim != 1 or not 2 <= cls.size <= MAX_CLASSES or np.unique(cls).size != cls.size
            or not np.isfinite(cls).all()):
        raise ValueError(f"classes must list 2 to {MAX_CLASSES} distinct finite label values; got {classes!r}")
    missing = values[~np.isin(values, cls)]
    if missing.size:
        raise ValueError(f"labels {_show_labels(missing)} are not in classes={_show_labels(cls)}")
    inferred = "binary" if cls.size == 2 else "multiclass"
    if task is not None and task != inferred:
        raise ValueError(f"classes={_show_labels(cls)} makes a {inferred} task; got task={task!r}")
    order = np.argsort(cls)
    return inferred, int(cls.size), lambda v: order[np.searchsorted(cls[order], v)].astype(np.float64)


def _resolve_signed_binary(values: np.ndarray, shown: str) -> tuple[str, int, Any]:
    """:func:`resolve_labels` for ``task="binary"`` with labels other than {0, 1}: {−1, +1} or refused."""
    if np.all(np.isin(values, (-1.0, 1.0))):
        log.info("binary labels %s: -1 is mapped to class 0 and +1 to class 1", shown)
        return "binary", 2, lambda v: (v > 0).astype(np.float64)
    raise ValueError(f"task='binary' needs labels {{0, 1}} or {{-1, 1}}; got {shown}: "
                     "pass classes=[negative, positive], "
                     f"e.g. classes=[{', '.join(f'{v:g}' for v in values[:2])}]")


def _resolve_class_ids(values: np.ndarray, shown: str, integers: bool) -> tuple[str, int, Any]:
    """:func:`resolve_labels` for ``task="multiclass"``: non-negative integer labels are class ids."""
    if integers and values[0] >= 0 and values[-1] < MAX_CLASSES:
        return "multiclass", int(values[-1]) + 1, None
    if integers and values[0] >= 0:
        raise ValueError(f"task='multiclass' with class ids up to {values[-1]:g} exceeds the limit of "
                         f"{MAX_CLASSES} classes; pass classes=[...] listing the label values")
    raise ValueError(f"task='multiclass' needs non-negative integer class ids; got {shown}: "
                     "pass classes=[...] to map them")


def _ambiguity_hint(values: np.ndarray, integers: bool) -> str:
    """What to pass when :func:`resolve_labels` cannot tell the task from the labels ``values``."""
    if values.size == 1:
        return "a single class: pass classes=[...] listing every class (at least 2), or task=\"regression\""
    if np.all(np.isin(values, (-1.0, 1.0))):
        return 'pass task="binary" (maps -1 to 0 and +1 to 1) or task="regression"'
    if not integers:
        return 'pass task="regression" for a numeric target, or classes=[...] if these are class labels'
    if values[0] >= 0 and values[0] == 0:
        full = "[" + ", ".join(str(i) for i in range(int(values[-1]) + 1)) + "]"
        return (f"pass classes={full} if the missing classes exist but are absent from this data, "
                f"classes=[{', '.join(f'{v:g}' for v in values)}] to renumber them, or task=\"regression\"")
    return (f"pass classes=[{', '.join(f'{v:g}' for v in values)}] to map them to 0..{values.size - 1}, "
            "or task=\"regression\"")


STANDARDISATIONS = ("none", "per_client", "federated")


def _moments(X: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """A client's share of the federated statistics: its count, mean and centred sum of squares."""
    mu = X.mean(axis=0)
    return X.shape[0], mu, ((X - mu) ** 2).sum(axis=0)


def standardise_clients(clients: Sequence[ClientData], mode: str) -> list[ClientData]:
    """Z-score every client's features (train and test) with training statistics.

    ``"per_client"``: each client's own mean and standard deviation. ``"federated"``: the pooled
    mean and (population) variance of all clients' training data, combined from per-client counts,
    means and centred sums of squares (Chan et al.'s parallel formula) — what a real federation
    computes with a secure sum, without pooling any data. ``"none"``: unchanged. A constant
    column is centred but not scaled.
    """
    return _standardised(clients, mode)[0]


def _standardised(clients: Sequence[ClientData],
                  mode: str) -> tuple[list[ClientData], list[tuple[np.ndarray, np.ndarray]]]:
    """:func:`standardise_clients` and each client's ``(mean, scale)`` (none for ``"none"``)."""
    if mode not in STANDARDISATIONS:
        raise ValueError(f"standardise must be one of {', '.join(STANDARDISATIONS)}; got {mode!r}")
    if mode == "none":
        return list(clients), []
    # an overflow is refused below, by column, not left to a NumPy warning
    with np.errstate(over="ignore", invalid="ignore"):
        if mode == "federated":
            parts = [_moments(c.X_train) for c in clients]
            n = sum(p[0] for p in parts)
            mu = sum(p[0] * p[1] for p in parts) / n
            var = sum(p[2] + p[0] * (p[1] - mu) ** 2 for p in parts) / n
            stats = [(mu, np.sqrt(var))] * len(clients)
        else:
            stats = [(c.X_train.mean(axis=0), c.X_train.std(axis=0)) for c in clients]
        out = []
        used: list[tuple[np.ndarray, np.ndarray]] = [(np.asarray(mu), np.where(sd > 0, sd, 1.0)) for mu, sd in stats]
        for c, (mu, sd) in zip(clients, used, strict=True):
            out.append(ClientData((c.X_train - mu) / sd, c.y_train, (c.X_test - mu) / sd, c.y_test,
                                  c.client_id, c.meta))
    # the inputs are finite (checked on entry), so anything non-finite here is an overflow
    for (mu, sd), c in zip(stats, out, strict=True):
        bad = ~(np.isfinite(mu) & np.isfinite(sd)
                & np.isfinite(c.X_train).all(axis=0) & np.isfinite(c.X_test).all(axis=0))
        if bad.any():
            raise ValueError(_overflow_message(clients, mode, int(np.flatnonzero(bad)[0])))
    return out, used


def _overflow_message(clients: Sequence[ClientData], mode: str, j: int) -> str:
    """Why standardising column ``j`` overflowed: the client holding its largest magnitude, and what to do."""
    k, value = 0, 0.0
    for c in clients:
        for X in (c.X_train, c.X_test):
            if X.shape[0] and abs(v := float(X[np.argmax(np.abs(X[:, j])), j])) > abs(value):
                k, value = c.client_id, v
    return (f"standardise={mode!r} overflows in feature column {j}: client {k} holds {value:.6g}; rescale that column "
            "(change its unit, or take a log) or drop the row before building the federation")


def feature_scale_problem(clients: Sequence[ClientData], ratio: float = 100.0) -> str | None:
    """A warning text when some client's largest feature range exceeds ``ratio`` × its median
    feature range, else ``None``.

    Gradient methods with one step size train badly on such features: the large ones dominate
    the gradient and the loss diverges. A few near-constant columns (rarely lit pixels, a rare
    indicator) are not a problem of that kind, so the reference is the median range, not the
    smallest. Constant columns are left out.
    """
    offenders = []
    for c in clients:
        with np.errstate(over="ignore", invalid="ignore"):
            spans = np.ptp(c.X_train, axis=0)
        cols = np.flatnonzero(np.isfinite(spans) & (spans > 0))
        if cols.size < 2:
            continue
        hi = cols[np.argmax(spans[cols])]
        mid = cols[np.argsort(spans[cols], kind="stable")[(cols.size - 1) // 2]]
        if spans[hi] / ratio > spans[mid]:  # not ratio * spans[mid], which can overflow
            offenders.append((c.client_id, hi, mid, spans[hi], spans[mid]))
    if not offenders:
        return None
    cid, hi, mid, s_hi, s_mid = offenders[0]
    others = f" (and {len(offenders) - 1} other client(s))" if len(offenders) > 1 else ""
    # beyond float64: its power of ten
    factor = f"{s_hi / s_mid:.3g}" if s_hi / 1e300 < s_mid else f"1e{np.log10(s_hi) - np.log10(s_mid):.0f}"
    return (
        f"client {cid}{others}: feature ranges differ by {factor}× (columns {hi} and {mid}: ranges "
        f"{s_hi:.3g} and {s_mid:.3g}, the largest and the median); one step size cannot fit both. "
        "Standardise the features: "
        "Federation.from_arrays(..., standardise='per_client' or 'federated')"
    )


def validation_clients(clients: Sequence[ClientData], fraction: float, seed: int,
                       stratify: bool = True) -> list[ClientData]:
    """Each client's training rows split into a training part and a validation part (``fraction``
    of them), stratified by label (``stratify``; classes of two or more rows keep a row on each
    side; a client whose every class is a single row is split at random, so that it keeps a
    validation row) with a generator of ``seed`` and the client's id; the validation part becomes the
    client's test split and the client's real test split is dropped. The carve is per client and
    local — what a site does before a tuning study — and leaves metadata (groups, flags) as they are.

    Preprocessing already applied to the federation (standardisation, imputation) was fitted on
    the whole training split, validation rows included, but never on a test row.

    ``ValueError`` when ``fraction`` is outside (0, 0.5] or a client has fewer than four training
    rows (three to train on, one to validate).
    """
    from topofl._validation import check_range
    from topofl.data.partition import train_test_split

    check_range("validation_fraction", fraction, 0.0, 0.5, low_open=True)
    out = []
    for c in clients:
        if c.n_train < 4:
            raise ValueError(f"client {c.client_id} has {c.n_train} training rows; a validation split needs at least 4 "
                             "(3 to train on, 1 to validate)")
        rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(c.client_id), 0x7A11D]))
        tr, va = train_test_split(np.asarray(c.y_train), fraction, rng, stratify=stratify)
        # every class a single row: stratification keeps them all for training; draw the rows at random
        if va.size == 0:
            tr, va = train_test_split(np.asarray(c.y_train), fraction, rng, stratify=False)
        if tr.size < 3:  # stratification kept one row of each small class on both sides
            raise ValueError(f"client {c.client_id}: a validation fraction of {fraction} leaves {tr.size} "
                             "training rows; use a smaller one")
        out.append(ClientData(c.X_train[tr], c.y_train[tr], c.X_train[va], c.y_train[va], c.client_id, c.meta))
    return out


def site_split(y: Any, k: int, seed: int, test_fraction: float,
               task: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The training and test row indices of the ``k``-th site (in client order) of
    :meth:`Federation.from_sites` for ``seed``: stratified by label unless ``task="regression"``.
    """
    from topofl.data.partition import train_test_split

    rng = np.random.default_rng(np.random.SeedSequence([seed, k, 0x7AB1]))
    tr, te = train_test_split(np.asarray(y), test_fraction, rng, stratify=task != "regression")
    return tr, te


def _checked_n_classes(task: str, inferred: int, given: int | None) -> int:
    """The number of classes: what the labels need, widened by ``given`` (some classes may be absent
    from the data); ``ValueError`` when ``given`` contradicts the task or the labels.
    """
    if given is None or given == 0 and task == "regression":
        return inferred
    if isinstance(given, bool) or not isinstance(given, (int, np.integer)):
        raise ValueError(f"n_classes must be an integer; got {given!r}")
    if task == "regression":
        raise ValueError(f"n_classes={given} describes classes; a regression task has none")
    if task == "binary" and given != 2:
        raise ValueError(f"n_classes={given} contradicts task='binary' (2 classes)")
    if not inferred <= given <= MAX_CLASSES:
        raise ValueError(f"n_classes must be in [{inferred} (the labels' classes), {MAX_CLASSES}]; got {given}")
    return int(given)


def _label_classes(task: str, n_classes: int, classes: list[Any] | None, mapped: bool) -> tuple[float, ...] | None:
    """The label value of every class id, as :func:`resolve_labels` mapped them (``None``: regression)."""
    if task == "regression":
        return None
    if classes is not None:
        values = [float(v) for v in classes]
    elif mapped:  # task="binary" with labels {-1, +1}
        values = [-1.0, 1.0]
    else:
        values = []
    top = max(values, default=-1.0)
    values += [float(i) if not values else top + 1 + i - len(values) for i in range(len(values), n_classes)]
    return tuple(values)


def _preprocessing(clients: Sequence[ClientData], task: str, n_classes: int, standardise: str,
                   stats: Sequence[tuple[np.ndarray, np.ndarray]], feature_names: Sequence[str] | None,
                   prior: Preprocessing | None, classes: list[Any] | None, mapped: bool) -> Preprocessing:
    """The :class:`Preprocessing` of a federation being built: ``prior`` (what was done to the rows before, e.g. a
    loader's imputation, or an earlier federation's record) with this federation's standardisation, label classes,
    feature names and site names (``meta["site"]`` of every client).
    """
    d = clients[0].n_features
    if prior is not None and (prior.n_clients != len(clients) or prior.n_features != d):
        raise ValueError(f"preprocessing describes {prior.n_clients} client(s) with {prior.n_features} feature(s); "
                         f"the federation has {len(clients)} with {d}")
    if prior is not None and prior.standardise != "none" and standardise != "none":
        raise ValueError(f"these rows were already standardised ({prior.standardise!r}); standardise must be 'none'")
    n_in = d - (len(prior.indicators) if prior is not None else 0)
    if feature_names is not None:
        if isinstance(feature_names, str) or len(feature_names) != n_in:
            raise ValueError(f"feature_names must name each of the {n_in} feature column(s); got {feature_names!r}")
        names = tuple(safe_name(str(n)) for n in feature_names)
    else:
        found = prior.feature_names if prior is not None else clients[0].meta.get("features")
        names = tuple(safe_name(str(n)) for n in found) if found else ()
        if len(names) != n_in or len(set(names)) != n_in:   # names a loader left in meta, when they do not fit
            names = default_feature_names(n_in)
    site_names = [c.meta.get("site") for c in clients]
    if all(isinstance(s, str) and s for s in site_names) and len(set(site_names)) == len(site_names):
        sites: tuple[str, ...] = tuple(safe_name(str(s)) for s in site_names)
    else:
        sites = prior.sites if prior is not None else ()
    label_classes = _label_classes(task, n_classes, classes, mapped)
    if prior is not None and prior.classes is not None and classes is None and not mapped \
            and len(prior.classes) == n_classes:
        label_classes = prior.classes  # the labels were mapped before (an earlier federation's record)
    standardised = stats and standardise != "none"
    return Preprocessing(
        n_clients=len(clients), feature_names=names, sites=sites,
        standardise=standardise if standardised else (prior.standardise if prior is not None else "none"),
        mean=np.stack([m for m, _ in stats]) if standardised else (prior.mean if prior is not None else None),
        scale=np.stack([s for _, s in stats]) if standardised else (prior.scale if prior is not None else None),
        impute=prior.impute if prior is not None else None,
        zero_is_missing=prior.zero_is_missing if prior is not None else (),
        indicators=prior.indicators if prior is not None else (),
        task=task, classes=label_classes, label_name=prior.label_name if prior is not None else "",
        rescaled=prior.rescaled if prior is not None else "")


class Federation:
    """A validated set of clients sharing one feature space and one task.

    Build one with :meth:`from_arrays` or :func:`topofl.data.make_scenario`. Iterating yields
    :class:`ClientData` objects with ``X_train, y_train, X_test, y_test``.
    """

    def __init__(
        self,
        clients: Sequence[ClientData],
        task: str | None = None,
        n_classes: int | None = None,
        name: str = "custom",
        info: Mapping[str, Any] | None = None,
        *,
        classes: Sequence[Any] | None = None,
        standardise: str = "none",
        feature_names: Sequence[str] | None = None,
        preprocessing: Preprocessing | None = None,
    ) -> None:
        if len(clients) < 1:
            raise ValueError("a federation needs at least 1 client; got 0")
        checked = [_validated_client(k, c) for k, c in enumerate(clients)]
        d = checked[0].n_features
        for c in checked[1:]:
            if c.n_features != d:
                raise ValueError(
                    f"client {c.client_id} has {c.n_features} features but client 0 has {d}; "
                    "all clients must share one feature space"
                )
        task, inferred_c, mapping = resolve_labels([c.y_train for c in checked] + [c.y_test for c in checked],
                                                   task, classes)
        if mapping is not None:
            checked = [ClientData(c.X_train, mapping(c.y_train), c.X_test, mapping(c.y_test), c.client_id, c.meta)
                       for c in checked]
        self.clients, stats = _standardised(checked, standardise)
        self.task = task
        self.n_classes = _checked_n_classes(task, inferred_c, n_classes)
        self.name = name
        self.info: dict[str, Any] = {**dict(info or {}),
                                     **({"standardise": standardise} if standardise != "none" else {})}
        #: what was done to the rows before any model saw them (:class:`Preprocessing`): ``predict`` applies it
        self.preprocessing: Preprocessing = _preprocessing(
            self.clients, task, self.n_classes, standardise, stats, feature_names, preprocessing,
            None if classes is None else list(classes), mapping is not None)

    @classmethod
    def from_arrays(
        cls,
        arrays: Sequence[Sequence[Any]],
        task: str | None = None,
        name: str = "custom",
        meta: Sequence[Mapping[str, Any]] | None = None,
        *,
        classes: Sequence[Any] | None = None,
        standardise: str = "none",
        feature_names: Sequence[str] | None = None,
        sites: Sequence[str] | None = None,
        preprocessing: Preprocessing | None = None,
    ) -> Federation:
        """Federation from ``[(X_train, y_train, X_test, y_test), ...]``, one tuple per client.

        Parameters
        ----------
        task : {"binary", "multiclass", "regression"}, optional
            Inferred only from labels 0..C−1; any other labels need ``task`` or ``classes``
            (see :func:`resolve_labels`).
        classes : list, optional
            The label values, in class order: label ``classes[i]`` becomes class ``i``.
        standardise : {"none", "per_client", "federated"}
            Z-score the features (see :func:`standardise_clients`); features on very different
            scales otherwise train poorly, and training warns about them.
        feature_names : list of str, optional
            The columns' names (default ``x0, x1, ...``), kept with the models.
        sites : list of str, optional
            A name for each client (client ``k`` is ``arrays[k]``), kept with the models:
            ``predict(rows, client="name")``.
        preprocessing : Preprocessing, optional
            What was already done to these rows (a loader's imputation), kept with the models.

        Notes
        -----
        The federation's :attr:`preprocessing` records what it fitted (standardisation
        statistics, label classes, names), so that a run's ``predict`` takes raw rows.
        """
        if isinstance(arrays, np.ndarray) or len(arrays) < 1:
            raise ValueError("arrays must be a non-empty list of (X_train, y_train, X_test, y_test) tuples")
        metas: list[dict[str, Any]] = [dict(m) for m in meta] if meta else [{} for _ in arrays]
        if len(metas) != len(arrays):
            raise ValueError(f"meta has {len(metas)} entries for {len(arrays)} clients")
        if sites is not None:
            if isinstance(sites, str) or len(sites) != len(arrays):
                raise ValueError(f"sites must name each of the {len(arrays)} clients; got {sites!r}")
            names = check_names(list(sites), "sites")
            twice = next((s for k, s in enumerate(names) if s in names[:k]), None)
            if twice is not None:
                raise ValueError(f"sites name {twice!r} twice; every client needs a name of its own")
            for m, site in zip(metas, names, strict=True):
                m["site"] = site
        clients = [_validated_client(k, a, metas[k]) for k, a in enumerate(arrays)]
        return cls(clients, task=task, name=name, classes=classes, standardise=standardise,
                   feature_names=feature_names, preprocessing=preprocessing)

    @classmethod
    def from_sites(
        cls,
        sites: Sequence[tuple[str, np.ndarray, np.ndarray, Sequence[str]]],
        *,
        seed: int = 0,
        test_fraction: float = 0.25,
        task: str | None = None,
        classes: Sequence[Any] | None = None,
        standardise: str = "none",
        name: str = "table",
        label_name: str = "",
    ) -> Federation:
        """Federation of whole sites ``(name, X, y, feature_names)``, one client each in the given
        order, each split into train and test with ``seed`` (stratified by label unless
        ``task="regression"``; see :func:`topofl.data.partition.train_test_split`). The site and
        feature names (and ``label_name``, the label column's) are kept in :attr:`preprocessing`.
        """
        from topofl._validation import check_choice, check_range

        check_range("test_fraction", test_fraction, 0.0, 1.0, low_open=True, high_open=True)
        if task is not None:
            check_choice("task", task, ("binary", "multiclass", "regression"))
        if len(sites) < 2:
            raise ValueError(f"a federation needs at least two sites; found {len(sites)} "
                             f"({', '.join(str(s[0]) for s in sites)})")
        arrays, meta = [], []
        for k, (site, X, y, features) in enumerate(sites):
            if len(X) < 2:
                raise ValueError(f"site {site!r} has {len(X)} row(s); each site needs at least 2 "
                                 "(one to train, one to test)")
            tr, te = site_split(y, k, seed, test_fraction, task)
            arrays.append((X[tr], y[tr], X[te], y[te]))
            meta.append({"site": str(site), "features": list(features)})
        fed = cls.from_arrays(arrays, task=task, name=name, meta=meta, classes=classes, standardise=standardise)
        if label_name:
            fed.preprocessing = replace(fed.preprocessing, label_name=safe_name(label_name))
        return fed

    @classmethod
    def from_dataframe(cls, df: Any, site_column: str, label_column: str, **options: Any) -> Federation:
        """Federation from a pandas DataFrame (pandas itself is not required by topofl): one client
        per value of ``site_column``, every other column except ``label_column`` a numeric feature;
        ``options`` as :meth:`from_sites` (``seed``, ``test_fraction``, ``task``, ``classes``,
        ``standardise``).
        """
        for col in (site_column, label_column):
            if col not in df.columns:
                raise ValueError(f"the DataFrame has no column {col!r}; columns: {', '.join(map(str, df.columns))}")
        features = [c for c in df.columns if c not in (site_column, label_column)]
        bad = [str(c) for c in features if df[c].dtype.kind not in "fiub"]
        if bad:
            raise ValueError(f"feature column(s) {', '.join(map(repr, bad))} are not numeric; encode or drop them")
        sites = []
        for site, part in sorted(df.groupby(site_column, sort=False), key=lambda kv: str(kv[0])):
            X = part[features].to_numpy(dtype=np.float64)
            if not np.all(np.isfinite(X)):
                raise ValueError(f"site {site!r} has missing or non-finite feature values; fill or drop them first")
            sites.append((str(site), X, part[label_column].to_numpy(), [str(c) for c in features]))
        return cls.from_sites(sites, **{"label_name": str(label_column), **options})

    @property
    def n_features(self) -> int:
        return self.clients[0].n_features

    @property
    def client_ids(self) -> list[int]:
        return [c.client_id for c in self.clients]

    def scale_problem(self) -> str | None:
        """:func:`feature_scale_problem` of the clients, worked out again only when a client is replaced: a
        federation is run by many methods and seeds (``compare``, the experiments). A client's arrays are not to be
        changed in place (a :class:`ClientData` is frozen; its arrays are the federation's).
        """
        memo = self.__dict__.get("_scale_problem")
        clients = tuple(self.clients)  # held by the memo, so that each identity names one client
        if memo is None or len(memo[0]) != len(clients) or any(a is not b for a, b in zip(memo[0], clients,
                                                                                            strict=True)):
            memo = self.__dict__["_scale_problem"] = (clients, feature_scale_problem(clients))
        problem: str | None = memo[1]
        return problem

    def __len__(self) -> int:
        return len(self.clients)

    def __iter__(self) -> Iterator[ClientData]:
        return iter(self.clients)

    def __getitem__(self, k: int) -> ClientData:
        return self.clients[k]

    def at_round(self, rnd: int) -> Federation:
        """The federation's data at round ``rnd`` (1-based). Static federations return themselves."""
        return self

    def with_validation(self, fraction: float, seed: int) -> Federation:
        """The federation a tuner scores hyper-parameters on: every client's *training* split
        divided by :func:`validation_clients` into a training part and a validation part that
        takes the place of the test split. The test split is left out entirely, so nothing chosen
        on this federation has seen a test row. Refused for a federation whose data change by
        round (the continual scenario), which has no fixed training split to divide.
        """
        if type(self).at_round is not Federation.at_round:
            raise ValueError(f"a validation split needs a static federation; {self.name!r} changes its data by round")
        clients = validation_clients(self.clients, fraction, seed, stratify=self.task != "regression")
        fed = Federation(clients, task=self.task, n_classes=self.n_classes, name=self.name,
                         info={**self.info, "validation_fraction": fraction}, preprocessing=self.preprocessing)
        return fed

    def __repr__(self) -> str:
        sizes = [c.n_train for c in self.clients]
        return (
            f"Federation(name={self.name!r}, task={self.task!r}, clients={len(self)}, "
            f"features={self.n_features}, n_train={min(sizes)}-{max(sizes)})"
        )
