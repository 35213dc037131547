"""The Python API: :func:`run` executes a :class:`~topofl.job.Job` in the runtime of its method's
family; :func:`simulate` and :func:`simulate_decentralised` are conveniences that build the job.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from topofl.data.federation import Federation
from topofl.federation.algorithm import Algorithm
from topofl.federation.history import Result, RoundSummary
from topofl.federation.runner import run_federation
from topofl.job import DEFAULT_GRAPH, DEFAULT_ROUNDS, Job
from topofl.methods import build_peer, build_server
from topofl.threads import limited_threads

if TYPE_CHECKING:
    from topofl.robustness.attacks import AttackConfig

#: called after every (evaluated) round with the result so far and the round's summary
OnRound = Callable[[Result, RoundSummary], None]


def load_job_data(job: Job) -> Any:
    """The job's clients: its data source loaded for its seed (or its data in memory), with the
    validation split applied. A server-family job gets a :class:`Federation`.
    """
    from topofl.data.sources import load

    data = load(job.data, job.seed, job.data_params) if isinstance(job.data, str) else job.data
    if job.family == "server":
        if not isinstance(data, Federation):
            if not (hasattr(data, "clients") and hasattr(data, "task")):
                raise ValueError(f"data must be a Federation or a registered data source for {job.method}; "
                                 f"got {type(data).__name__}")
            data = Federation(data.clients, data.task, data.n_classes, name=job.data_name,
                              preprocessing=getattr(data, "preprocessing", None))
        return data.with_validation(job.validation, job.seed) if job.validation else data
    data = peer_data(data)
    if job.validation:
        from dataclasses import replace

        from topofl.data.federation import validation_clients

        clients = validation_clients(data.clients, job.validation, job.seed, stratify=data.task != "regression")
        data = replace(data, clients=clients)
    return data


def peer_data(clients: Any, task: str | None = None, n_classes: int | None = None) -> Any:
    """``LoadedData`` (clients, task, n_classes) of a :class:`Federation`, a ``LoadedData`` or a list of
    ``ClientData`` / ``(X_train, y_train, X_test, y_test)`` tuples (feature counts may differ).
    """
    from topofl.data.federation import ClientData, _validated_client, resolve_labels
    from topofl.data.loaders.base import LoadedData

    name = str(getattr(clients, "name", "custom"))
    preprocessing = None
    if hasattr(clients, "clients") and hasattr(clients, "task"):
        _agree(clients, task, n_classes)  # the data's preprocessing stays valid only for its own labels
        if isinstance(clients, LoadedData):
            return clients
        data, task, n_classes = clients.clients, clients.task, clients.n_classes
        preprocessing = getattr(clients, "preprocessing", None)
    else:
        data = [c if isinstance(c, ClientData) else _validated_client(k, c) for k, c in enumerate(clients)]
        data = [_validated_client(k, c) for k, c in enumerate(data)]
    if not data:
        raise ValueError("clients must hold at least one client")
    if task is None:
        task, inferred, mapping = resolve_labels([c.y_train for c in data] + [c.y_test for c in data])
        n_classes = n_classes or inferred
        if mapping is not None:
            data = [ClientData(c.X_train, mapping(c.y_train), c.X_test, mapping(c.y_test), c.client_id, c.meta)
                    for c in data]
    return LoadedData(list(data), task, int(n_classes or 2), name, preprocessing=preprocessing)


def _agree(data: Any, task: str | None, n_classes: int | None) -> None:
    """Refuse a ``task`` or ``n_classes`` given for ``data`` (a Federation or LoadedData) that contradicts its own."""
    if task is not None and task != data.task:
        raise ValueError(f"task={task!r} contradicts the data's task {data.task!r}; "
                         "leave task out for a Federation or LoadedData")
    if n_classes is not None and data.task != "regression" and int(n_classes) != int(data.n_classes):
        raise ValueError(f"n_classes={n_classes!r} contradicts the data's {data.n_classes} classes; "
                         "leave n_classes out for a Federation or LoadedData")


def run(
    job: Job,
    *,
    on_round: OnRound | None = None,
    progress: bool = False,
    algorithm: Any = None,
    eval_every: int = 1,
) -> Result:
    """Run ``job`` in process, in the runtime of its method's family, and return its :class:`Result`.

    Parameters
    ----------
    job : Job
        What to run (:class:`topofl.job.Job`).
    on_round : callable, optional
        ``on_round(result, summary)`` after every round (peer methods: every evaluated iteration).
    progress : bool
        Show a progress bar (server-based methods).
    algorithm : Algorithm or PeerAlgorithm, optional
        A configured algorithm object to run instead of building ``job.method`` from ``job.hyperparameters``.
    eval_every : int
        Peer methods: score the clients every ``eval_every`` iterations (and after the last).
    """
    if job.family == "paper":
        raise ValueError(f"{job.method} is the authors' paper-era protocol: "
                         "run it with topofl experiment paper-protocol")
    if algorithm is None:   # from the config the job validated when it was made
        algorithm = (build_server if job.family == "server" else build_peer)(job.method, job.hyperparameters,
                                                                             config=job.method_config)
    data = load_job_data(job)
    if job.family == "server":
        result = _run_server(job, algorithm, data, on_round, progress)
    else:
        result = _run_peers(job, algorithm, data, on_round, eval_every)
    result.preprocessing = getattr(data, "preprocessing", None)  # predict takes raw rows
    return result


def _run_server(job: Job, algorithm: Algorithm, federation: Federation, on_round: OnRound | None,
                progress: bool) -> Result:
    if job.attack != "":
        from topofl.robustness.attacks import attacked, parse_attack

        config = parse_attack(job.attack)
        algorithm = attacked(algorithm, config, config.adversaries(federation.client_ids))
    return run_federation(federation, algorithm, job.rounds, job.seed, client_fraction=job.client_fraction,
                          on_round=on_round, progress=progress, model=job.model, device=job.device,
                          input_shape=job.input_shape)


def _run_peers(job: Job, algorithm: Any, data: Any, on_round: OnRound | None, eval_every: int) -> Result:
    import networkx as nx

    from topofl.decentralised import make_graph, run_decentralised

    g = job.graph if isinstance(job.graph, nx.Graph) else make_graph(job.graph, len(data.clients), seed=job.seed,
                                                                     **job.graph_params)
    if job.attack != "":
        from topofl.robustness.attacks import parse_attack
        from topofl.robustness.peer_attacks import attacked_peers

        config = parse_attack(job.attack)
        algorithm = attacked_peers(algorithm, config, config.adversaries(range(g.number_of_nodes())))
    models = peer_models(per_client(job.model, len(data.clients)), data.clients, data.task, data.n_classes,
                         algorithm.config.l2, job.device, input_shape=job.input_shape)

    def report(result: Result, row: dict[str, Any]) -> None:
        if on_round is not None and "accuracy" in row:
            on_round(result, result.rounds[-1])

    return run_decentralised(data.clients, g, algorithm, job.rounds, job.seed, task=data.task, n_classes=data.n_classes,
                             models=models, eval_every=eval_every, on_round=report)


def per_client(model: Any, n_clients: int) -> Any:
    """A peer run's model spec per client: a list as given; a string naming one model for all, or a
    comma list dealt to the clients in turn (client k gets item k mod len) — the paper's
    heterogeneous federations, in almost equal proportions (Sheaf-FMTL §4.3); an object as given.
    """
    if isinstance(model, str):
        names = [m.strip() for m in model.split(",") if m.strip()] or ["linear"]
        return [names[k % len(names)] for k in range(n_clients)]
    return model


def simulate(  # noqa: PLR0913 (public API: the keyword options of a simulation)
    federation: Federation,
    method: str | Algorithm,
    rounds: int = DEFAULT_ROUNDS,
    seed: int = 0,
    *,
    client_fraction: float = 1.0,
    progress: bool = False,
    on_round: OnRound | None = None,
    model: Any = None,
    device: str = "cpu",
    attack: AttackConfig | str | None = None,
    threads: int | None = None,
    input_shape: tuple[int, ...] | None = None,
    **hyperparameters: Any,
) -> Result:
    """Run a method on a federation in process.

    Parameters
    ----------
    federation : Federation
        From :meth:`Federation.from_arrays` or :func:`topofl.data.make_scenario`.
    method : str or Algorithm
        A registered server-based method (``topofl.methods.available("server")``) or a configured algorithm object.
    rounds, seed, client_fraction, progress, on_round
        See :func:`topofl.federation.run_federation`.
    model
        The model every client trains: ``None`` (the task's linear model), a registered name
        (``"cnn-small"``, ``"cnn-same"``, ``"cnn-medium"``, ``"cnn-large"``, ``"convnet2"``, ``"resnet18"``,
        ``"mlp"``), ``"package.module:factory"``, a ``torch.nn.Module`` or a factory of one
        (:func:`topofl.models.registry.build_model`).
    device
        ``"cpu"``, ``"cuda"`` or ``"auto"`` (CUDA when present) for a PyTorch model.
    attack
        Hostile clients (:mod:`topofl.robustness.attacks`): an ``AttackConfig`` or its spec,
        e.g. ``"sign_flip:fraction=0.25,start_round=2"``; the adversaries are
        ``attack.adversaries(federation.client_ids)``. ``None``: every client is honest.
    input_shape
        The shape each row is reshaped to for a PyTorch model, e.g. ``(1, 8, 8)`` for your own CNN
        on 64 features (default: flat rows; a registered CNN infers a square image).
    threads
        Compute threads (BLAS and torch) of the run, restored afterwards; ``None``: the number
        :func:`topofl.threads.set_threads` gave this process, else half the CPUs, at most 4
        (:mod:`topofl.threads`). ``ValueError`` unless an integer from 1 to the usable CPUs.
    **hyperparameters
        The method's hyper-parameters (e.g. ``lr=0.05, n_clusters=2``); unknown names or
        out-of-range values raise ``ValueError``.

    Returns
    -------
    Result
        ``result.final`` holds ``auc`` and ``accuracy`` (means over clients of each client's
        score with the model it would use), their spreads, and ``pooled_auc``/``pooled_accuracy``;
        ``history.client_models`` every client's final model, ``history.server_params`` the
        server's, ``history.predict(rows, client=k)`` scores new raw rows (the federation's
        ``preprocessing`` applied; ``k`` an id or a site name), ``history.module(k)`` gives a torch
        model back as a module; :func:`topofl.save_models` writes them to a file.
    """
    if not isinstance(federation, Federation):
        raise ValueError(f"federation must be a topofl Federation; got {type(federation).__name__}")
    algorithm = None
    if isinstance(method, Algorithm):
        if hyperparameters:
            raise ValueError("pass hyper-parameters either in the Algorithm's config or as keywords, not both")
        algorithm, method = method, _registered_name(method)
    job = Job(method=method, data=federation, hyperparameters=hyperparameters,
              model="linear" if model is None else model, rounds=rounds, seed=seed, client_fraction=client_fraction,
              attack=attack or "", device=device, input_shape=input_shape)
    _require_family(job, "server", "simulate", "simulate_decentralised")
    with limited_threads(threads, model=job.model):
        return run(job, on_round=on_round, progress=progress, algorithm=algorithm)


def _require_family(job: Job, family: str, here: str, there: str) -> None:
    """``ValueError`` when a convenience is given a method of the other family (``run`` takes both)."""
    if job.family != family:
        from topofl.methods import available

        kind = {"server": "server-based", "peer": "decentralised (peer-to-peer)"}
        raise ValueError(f"{job.method!r} is not a {kind[family]} method; {here} needs one of "
                         f"{', '.join(available(family))} (use {there}, or topofl.run, for {job.method!r})")


def _registered_name(algorithm: Algorithm) -> str:
    """The registry name of a configured algorithm object (its family's runtime is chosen by it)."""
    from topofl.methods import available, get

    for name in available("server"):
        if isinstance(algorithm, get(name).cls):
            return name
    return "fedavg"  # a user's own Algorithm subclass runs in the server family's runtime


def simulate_decentralised(  # noqa: PLR0913 (public API: the keyword options of a decentralised simulation)
    clients: Any,
    method: str = "sheaf",
    rounds: int = DEFAULT_ROUNDS,
    seed: int = 0,
    *,
    graph: Any = DEFAULT_GRAPH,
    graph_params: dict[str, Any] | None = None,
    task: str | None = None,
    n_classes: int | None = None,
    model: Any = None,
    device: str = "cpu",
    attack: AttackConfig | str | None = None,
    threads: int | None = None,
    input_shape: tuple[int, ...] | None = None,
    **hyperparameters: Any,
) -> Any:
    """Run a decentralised method (``sheaf``, ``dfedu``, ``dpsgd``, ``local-peers``) on a graph.

    Parameters
    ----------
    clients
        A :class:`Federation`, a ``LoadedData`` from :mod:`topofl.data.loaders`, or a list of
        ``ClientData`` / ``(X_train, y_train, X_test, y_test)`` tuples — feature counts may differ
        between clients (Sheaf-FMTL then learns maps between models of different sizes).
    graph
        A graph kind for :func:`topofl.decentralised.make_graph` (seeded with ``seed``) or a
        ready ``networkx.Graph`` on nodes 0..N-1.
    model
        Every peer's model (see :func:`simulate`), or a list with one per client — models of
        different sizes, e.g. ``["cnn-small", "cnn-large", ...]`` (Sheaf-FMTL §4.3; only
        Sheaf-FMTL and Local accept different sizes).
    attack
        Hostile peers (:mod:`topofl.robustness.peer_attacks`): an ``AttackConfig`` or its spec,
        e.g. ``"sign_flip:fraction=0.25,start_round=2"``; the adversaries are
        ``attack.adversaries(range(n_nodes))`` of the graph's nodes 0..N-1 (node k is the k-th
        client), as on the Flower relay. ``None``: every peer is honest.
    threads, input_shape
        Compute threads of the run and the input shape of a PyTorch model (see :func:`simulate`).
    **hyperparameters
        The method's hyper-parameters (``topofl methods`` lists the federated ones; see
        :class:`topofl.decentralised.sheaf.SheafConfig`).
    """
    name = "local-peers" if str(method).strip().lower() == "local" else method
    job = Job(method=name, data=peer_data(clients, task, n_classes),
              hyperparameters=hyperparameters, model="linear" if model is None else model, rounds=rounds, seed=seed,
              graph=graph, graph_params=graph_params or {}, attack=attack or "", device=device,
              input_shape=input_shape)
    _require_family(job, "peer", "simulate_decentralised", "simulate")
    with limited_threads(threads, model=job.model):
        return run(job)


def peer_models(spec: Any, clients: Any, task: str, n_classes: int, l2: float, device: str = "cpu",
                input_shape: tuple[int, ...] | None = None) -> list[Any] | None:
    """One model per peer from ``spec`` (one spec for all, or a list with one per client); ``None``
    for the default linear models (the runner builds those).
    """
    from topofl.models.registry import build_model, is_linear

    specs = list(spec) if isinstance(spec, (list, tuple)) else [spec] * len(clients)
    if len(specs) != len(clients):
        raise ValueError(f"model lists {len(specs)} models for {len(clients)} clients")
    if all(is_linear(s) for s in specs):
        return None
    return [build_model(s, task=task, n_features=c.n_features, n_classes=n_classes, l2=l2, device=device,
                        input_shape=input_shape)
            for s, c in zip(specs, clients, strict=True)]
