"""An in-memory stand-in for Flower's Grid: runs the real ClientApp handlers of topofl on virtual
nodes in this process (no Ray, no SuperLink), with injectable faults.

It is what Flower's in-memory grid does, minus the transport: messages get ids, replies point back
with ``reply_to_message_id``, a node that raises answers with an error reply, a "dead" node
answers nothing, and a tamper function can corrupt a reply's content.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable

from flwr.app import Error, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from topofl.flower import client_app

HANDLERS = {
    "query": client_app.query, "train": client_app.train, "evaluate": client_app.evaluate,
    "query.peer": client_app.peer_setup, "train.peer": client_app.peer_step,
}


class _Context:
    def __init__(self, node_config):
        self.node_config, self.state = node_config, RecordDict()


class FakeGrid:
    def __init__(self, n_nodes: int, node_config: Callable[[int], dict] | None = None) -> None:
        for attr in ("run_id", "task_id", "node_id"):  # what a real ServerApp process has set
            if getattr(TaskIdentity, f"_{attr}", 0) is None:
                setattr(TaskIdentity, attr, 1)
        self.node_ids = [1000 + k for k in range(n_nodes)]
        self.contexts = {nid: _Context((node_config or (lambda k: {}))(k) | {"partition-id": k, "num-partitions": n_nodes})
                         for k, nid in enumerate(self.node_ids)}
        self.dead: set[int] = set()                      # node ids that never answer
        self.raise_on: Callable[[Message], bool] = lambda m: False   # error reply instead of work
        self.tamper: Callable[[Message, RecordDict], RecordDict] = lambda m, c: c
        self.sent: list[Message] = []
        self.deaths: dict[str, int] = {}                 # group id (round) → node index that dies then

    def die_at(self, group: int, node_index: int) -> None:
        """Node ``node_index`` stops answering from the first message of group (round) ``group`` on."""
        self.deaths[str(group)] = node_index

    def get_node_ids(self):
        return list(self.node_ids)

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        messages = list(messages)
        for m in messages:
            if m.metadata.group_id in self.deaths:
                self.dead.add(self.node_ids[self.deaths[m.metadata.group_id]])
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = str(uuid.uuid4())
            self.sent.append(msg)
            nid = msg.metadata.dst_node_id
            if nid in self.dead:
                continue
            if self.raise_on(msg):
                replies.append(Message(Error(2, "<class 'RuntimeError'>:<'injected failure'>"), reply_to=msg))
                continue
            try:
                reply = HANDLERS[msg.metadata.message_type](msg, self.contexts[nid])
            except Exception as exc:  # as Flower does: the ClientApp's exception becomes an error reply
                replies.append(Message(Error(2, f"<class '{type(exc).__name__}'>:<'{exc}'>"), reply_to=msg))
                continue
            reply.content = self.tamper(msg, reply.content)
            replies.append(reply)
        return replies


# ---- tampering helpers: what a hostile node could send ---------------------------------------
def _for(node_id: int, message_type: str, edit: Callable[[RecordDict], None]) -> Callable[[Message, RecordDict], RecordDict]:
    def tamper(msg: Message, content: RecordDict) -> RecordDict:
        if msg.metadata.dst_node_id == node_id and msg.metadata.message_type == message_type:
            edit(content)
        return content

    return tamper


def tamper_train_metrics(node_id: int, changes: dict) -> Callable[[Message, RecordDict], RecordDict]:
    """Node ``node_id``'s train replies carry ``changes`` in their MetricRecord."""
    from flwr.app import MetricRecord

    def edit(content: RecordDict) -> None:
        content["metrics"] = MetricRecord({**dict(content["metrics"]), **changes})

    return _for(node_id, "train", edit)


def tamper_evaluate_metrics(node_id: int, changes: dict) -> Callable[[Message, RecordDict], RecordDict]:
    """Node ``node_id``'s evaluation replies carry ``changes`` in their MetricRecord."""
    from flwr.app import MetricRecord

    def edit(content: RecordDict) -> None:
        content["metrics"] = MetricRecord({**dict(content["metrics"]), **changes})

    return _for(node_id, "evaluate", edit)


def tamper_discovery(node_id: int, changes: dict) -> Callable[[Message, RecordDict], RecordDict]:
    """Node ``node_id`` declares ``changes`` when the server discovers it."""
    from flwr.app import ConfigRecord

    def edit(content: RecordDict) -> None:
        content["info"] = ConfigRecord({**dict(content["info"]), **changes})

    return _for(node_id, "query", edit)
