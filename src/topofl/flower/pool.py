"""A :class:`~topofl.federation.pool.ClientPool` whose clients are Flower SuperNodes.

The round loop is the in-process one (:func:`topofl.federation.runner.run_rounds`); only where
the clients' work runs differs. Train messages carry the algorithm's server message plus the job
(method, hyper-parameters, data, seed, round); evaluation messages carry ``message_for(client)``.

Replies are sized before they are decoded: a fit reply against the algorithm's
:class:`~topofl.federation.validation.ReplySchema` for that client and message (its parameter
count is the server's model's), an evaluation's pooled predictions against the test count the
client declared at discovery (:mod:`topofl.flower.records`).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from flwr.app import MessageType, RecordDict

from topofl.federation.messages import ServerMessage
from topofl.federation.pool import ClientPool, Failure
from topofl.federation.validation import ClientInfo, ReplySchema
from topofl.flower.exchange import exchange
from topofl.flower.records import decode_evaluation, decode_update, encode_server_message
from topofl.limits import MAX_REPLY_FREE_VALUES
from topofl.privacy.secagg import TRAILER

#: what a fit reply of client ``cid`` to ``message`` must look like (the algorithm's reply schema)
SchemaFn = Callable[[int, ServerMessage], ReplySchema]


class FlowerPool(ClientPool):
    """Clients ``nodes`` (client id → Flower node id) reached through a Flower ``Grid``.

    Parameters
    ----------
    grid
        Flower's grid (or a test double).
    nodes
        Client id → Flower node id of the clients that have a node now.
    job
        What every node needs to build the run (:meth:`FlowerSettings.node_config` plus task and sizes);
        ``job["n_classes"]`` bounds the pooled scores of an evaluation.
    timeout
        Seconds one exchange waits for replies.
    infos
        What each client declared at discovery: its weight and its test count.
    client_ids
        The run's clients (a resumed run keeps those without a node now; each of their rounds fails).
    schema
        The algorithm's reply schema for a client and message: fit replies are checked against it
        before they are decoded. ``None``: decoded first, checked by the server's screening only.
    """

    def __init__(self, grid: Any, nodes: Mapping[int, int], job: Mapping[str, Any], timeout: float,
                 infos: Mapping[int, ClientInfo], client_ids: Sequence[int] | None = None,
                 schema: SchemaFn | None = None) -> None:
        self.grid, self.nodes, self.job, self.timeout = grid, dict(nodes), dict(job), float(timeout)
        # a resumed run keeps its clients, those without a node now included (each of their rounds fails)
        self.client_ids = sorted(self.nodes) if client_ids is None else sorted(client_ids)
        self.infos = dict(infos)  # what each node declared at discovery: its weight, never a reply's claim
        self.schema = schema

    def _send(self, rnd: int, messages: dict[int, ServerMessage], message_type: str, stage: str,
              decode: Callable[[int, RecordDict], Any]) -> tuple[list[Any], list[Failure]]:
        encoded: dict[int, Any] = {}   # one record per distinct params array (its id is stable: messages holds it)
        contents = {cid: encode_server_message(m, self.job, rnd, encoded) for cid, m in messages.items()
                    if cid in self.nodes}
        got, failures = exchange(self.grid, self.nodes, contents, message_type, rnd, stage, self.timeout, decode)
        failures += [Failure(rnd, cid, stage, "no SuperNode for this client since the run was resumed")
                     for cid in sorted(set(messages) - set(self.nodes))]
        return [got[cid] for cid in sorted(got)], failures

    def fit(self, rnd, messages):
        schema = self.schema

        def decode(cid: int, content: RecordDict) -> Any:
            return decode_update(content, schema(cid, messages[cid]) if schema is not None else None)

        return self._send(rnd, messages, MessageType.TRAIN, "fit", decode)

    def secure(self, rnd, stage, requests):
        """One stage of secure aggregation on the nodes (``train`` messages with a ``secagg`` record,
        :mod:`topofl.flower.secure_records`); replies are checked before they are decoded.
        """
        from topofl.flower.secure_records import decode_reply, encode_request

        encoded: dict[int, Any] = {}
        contents = {cid: encode_request(r, self.job, rnd, encoded) for cid, r in requests.items() if cid in self.nodes}
        schema = self.schema
        if stage == "advertise" and schema is not None and requests:
            cid, first = next(iter(requests.items()))   # a masked input: the model's numbers and the trailer
            self._masked_size = int(schema(cid, first.message).params.shape[0]) + TRAILER
        n_masked = getattr(self, "_masked_size", MAX_REPLY_FREE_VALUES)

        def decode(cid: int, content: RecordDict) -> Any:
            fit = requests[cid].message if stage == "advertise" else None
            return decode_reply(content, stage, schema(cid, fit) if schema is not None and fit is not None else None,
                                n_masked)

        got, failures = exchange(self.grid, self.nodes, contents, MessageType.TRAIN, rnd, "fit", self.timeout, decode)
        failures += [Failure(rnd, cid, "fit", "no SuperNode for this client since the run was resumed")
                     for cid in sorted(set(requests) - set(self.nodes))]
        return [got[cid] for cid in sorted(got)], failures

    def evaluate(self, rnd, messages):
        n_classes = int(self.job.get("n_classes") or 0)

        def decode(cid: int, content: RecordDict) -> Any:
            info = self.infos.get(cid)
            return decode_evaluation(content, info.n_test if info is not None else None, n_classes)

        return self._send(rnd, messages, MessageType.EVALUATE, "evaluate", decode)
