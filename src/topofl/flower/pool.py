"""A :class:`~topofl.federation.pool.ClientPool` whose clients are Flower SuperNodes.

The round loop is the in-process one (:func:`topofl.federation.runner.run_rounds`); only where
the clients' work runs differs. Train messages carry the algorithm's server message plus the job
(method, hyper-parameters, data, seed, round); evaluation messages carry ``message_for(client)``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flwr.app import MessageType

from topofl.federation.messages import ServerMessage
from topofl.federation.pool import ClientPool, Failure
from topofl.federation.validation import ClientInfo
from topofl.flower.exchange import exchange
from topofl.flower.records import decode_evaluation, decode_update, encode_server_message


class FlowerPool(ClientPool):
    """Clients ``nodes`` (client id → Flower node id) reached through a Flower ``Grid``."""

    def __init__(self, grid: Any, nodes: Mapping[int, int], job: Mapping[str, Any], timeout: float,
                 infos: Mapping[int, ClientInfo], client_ids: Sequence[int] | None = None) -> None:
        self.grid, self.nodes, self.job, self.timeout = grid, dict(nodes), dict(job), float(timeout)
        # a resumed run keeps its clients, those without a node now included (each of their rounds fails)
        self.client_ids = sorted(self.nodes) if client_ids is None else sorted(client_ids)
        self.infos = dict(infos)  # what each node declared at discovery: its weight, never a reply's claim

    def _send(self, rnd: int, messages: dict[int, ServerMessage], message_type: str, stage: str, decode):
        contents = {cid: encode_server_message(m, self.job, rnd) for cid, m in messages.items() if cid in self.nodes}
        got, failures = exchange(self.grid, self.nodes, contents, message_type, rnd, stage, self.timeout, decode)
        failures += [Failure(rnd, cid, stage, "no SuperNode for this client since the run was resumed") for cid in sorted(set(messages) - set(self.nodes))]
        return [got[cid] for cid in sorted(got)], failures

    def fit(self, rnd, messages):
        return self._send(rnd, messages, MessageType.TRAIN, "fit", decode_update)

    def evaluate(self, rnd, messages):
        return self._send(rnd, messages, MessageType.EVALUATE, "evaluate", decode_evaluation)
