"""The Python API: :func:`simulate`."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from topofl.data.federation import Federation
from topofl.federation.algorithm import Algorithm
from topofl.federation.history import History
from topofl.federation.runner import OnRound, run_federation
from topofl.methods import build_peer, build_server

if TYPE_CHECKING:
    from topofl.robustness.attacks import AttackConfig


def simulate(
    federation: Federation,
    method: str | Algorithm,
    rounds: int = 15,
    seed: int = 0,
    *,
    client_fraction: float = 1.0,
    progress: bool = False,
    on_round: OnRound | None = None,
    model: Any = None,
    device: str = "cpu",
    attack: AttackConfig | str | None = None,
    **hyperparameters: Any,
) -> History:
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
    **hyperparameters
        The method's hyper-parameters (e.g. ``lr=0.05, n_clusters=2``); unknown names or
        out-of-range values raise ``ValueError``.

    Returns
    -------
    History
        ``history.final`` holds ``auc`` and ``accuracy`` (means over clients of each client's
        score with the model it would use), their spreads, and ``pooled_auc``/``pooled_accuracy``;
        ``history.client_models`` every client's final model, ``history.server_params`` the
        server's, ``history.predict(X, client=k)`` scores new data; :func:`topofl.save_models`
        writes them to a file.
    """
    if not isinstance(federation, Federation):
        raise ValueError(f"federation must be a topofl Federation; got {type(federation).__name__}")
    if isinstance(method, Algorithm):
        if hyperparameters:
            raise ValueError("pass hyper-parameters either in the Algorithm's config or as keywords, not both")
        algorithm = method
    else:
        algorithm = build_server(method, hyperparameters)
    if attack is not None:
        from topofl.robustness.attacks import attacked, parse_attack

        config = parse_attack(attack)
        algorithm = attacked(algorithm, config, config.adversaries(federation.client_ids))
    return run_federation(federation, algorithm, rounds, seed, client_fraction=client_fraction, on_round=on_round, progress=progress,
                          model=model, device=device)


def simulate_decentralised(
    clients: Any,
    method: str = "sheaf",
    rounds: int = 200,
    seed: int = 0,
    *,
    graph: Any = "erdos_renyi",
    graph_params: dict[str, Any] | None = None,
    task: str | None = None,
    n_classes: int | None = None,
    model: Any = None,
    device: str = "cpu",
    attack: AttackConfig | str | None = None,
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
    **hyperparameters
        The method's hyper-parameters (``topofl methods`` lists the federated ones; see
        :class:`topofl.decentralised.sheaf.SheafConfig`).
    """
    import networkx as nx

    from topofl.data.federation import ClientData, _validated_client, resolve_labels
    from topofl.decentralised import make_graph, run_decentralised

    if isinstance(clients, Federation):
        data, task, n_classes = clients.clients, task or clients.task, n_classes or clients.n_classes
    elif hasattr(clients, "clients") and hasattr(clients, "task"):
        data, task, n_classes = clients.clients, task or clients.task, n_classes or clients.n_classes
    else:
        data = [c if isinstance(c, ClientData) else _validated_client(k, c) for k, c in enumerate(clients)]
        data = [_validated_client(k, c) for k, c in enumerate(data)]
    if not data:
        raise ValueError("clients must hold at least one client")
    if task is None:
        task, inferred, mapping = resolve_labels([c.y_train for c in data] + [c.y_test for c in data])
        n_classes = n_classes or inferred
        if mapping is not None:
            data = [ClientData(c.X_train, mapping(c.y_train), c.X_test, mapping(c.y_test), c.client_id, c.meta) for c in data]
    g = graph if isinstance(graph, nx.Graph) else make_graph(graph, len(data), seed=seed, **(graph_params or {}))
    algorithm = build_peer({"local": "local-peers"}.get(method, method), hyperparameters)
    if attack is not None:
        from topofl.robustness.attacks import parse_attack
        from topofl.robustness.peer_attacks import attacked_peers

        config = parse_attack(attack)
        algorithm = attacked_peers(algorithm, config, config.adversaries(range(g.number_of_nodes())))
    models = peer_models(model, data, task, n_classes or 2, algorithm.config.l2, device)
    return run_decentralised(data, g, algorithm, rounds, seed, task=task, n_classes=n_classes or 2, models=models)


def peer_models(spec: Any, clients: Any, task: str, n_classes: int, l2: float, device: str = "cpu") -> list[Any] | None:
    """One model per peer from ``spec`` (one spec for all, or a list with one per client); ``None``
    for the default linear models (the runner builds those).
    """
    from topofl.models.registry import build_model, is_linear

    specs = list(spec) if isinstance(spec, (list, tuple)) else [spec] * len(clients)
    if len(specs) != len(clients):
        raise ValueError(f"model lists {len(specs)} models for {len(clients)} clients")
    if all(is_linear(s) for s in specs):
        return None
    return [build_model(s, task=task, n_features=c.n_features, n_classes=n_classes, l2=l2, device=device) for s, c in zip(specs, clients, strict=True)]
