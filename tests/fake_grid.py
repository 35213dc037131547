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
        self.arrivals: dict[int, int] = {}               # node id → get_node_ids() calls before it is listed
        self.node_id_calls = 0

    def die_at(self, group: int, node_index: int) -> None:
        """Node ``node_index`` stops answering from the first message of group (round) ``group`` on."""
        self.deaths[str(group)] = node_index

    def get_node_ids(self):
        """The connected nodes; a node in :attr:`arrivals` is listed from its ``arrivals[nid]``-th call on."""
        calls, self.node_id_calls = self.node_id_calls, self.node_id_calls + 1
        return [n for n in self.node_ids if self.arrivals.get(n, 0) <= calls]

    def handle(self, msg: Message) -> Message:
        """Run ``msg`` on its node as Flower does: its reply, or an error reply if the ClientApp raises."""
        nid = msg.metadata.dst_node_id
        if self.raise_on(msg):
            return Message(Error(2, "<class 'RuntimeError'>:<'injected failure'>"), reply_to=msg)
        try:
            reply = HANDLERS[msg.metadata.message_type](msg, self.contexts[nid])
        except Exception as exc:  # as Flower does: the ClientApp's exception becomes an error reply
            return Message(Error(2, f"<class '{type(exc).__name__}'>:<'{exc}'>"), reply_to=msg)
        reply.content = self.tamper(msg, reply.content)
        return reply

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        messages = list(messages)
        for m in messages:
            if m.metadata.group_id in self.deaths:
                self.dead.add(self.node_ids[self.deaths[m.metadata.group_id]])
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = str(uuid.uuid4())
            self.sent.append(msg)
            if msg.metadata.dst_node_id in self.dead:
                continue
            replies.append(self.handle(msg))
        return replies


class LinkGrid(FakeGrid):
    """A :class:`FakeGrid` with Flower's ``push_messages``/``pull_messages`` API behind a SuperLink
    that can restart (:meth:`restart_at`), as a deployment's ServerApp sees it.

    Nodes work through their messages in the order they were pushed (as Flower's SuperLink
    hands them out), one pull after the push.
    """

    def __init__(self, n_nodes: int, node_config: Callable[[int], dict] | None = None) -> None:
        super().__init__(n_nodes, node_config)
        self.queue: list[Message] = []                    # pushed, not yet processed by its node
        self.replies: dict[str, Message] = {}             # message id → reply not yet pulled
        self.restarts: dict[tuple[str, str], dict] = {}   # (group id, message type) → what the restart does
        self.offline: dict[int, int] = {}                 # node id → get_node_ids() calls it is still missing from
        self.unreachable: set[int] = set()                # node ids the SuperLink answers for with NODE_UNAVAILABLE

    def restart_at(self, group: int, message_type: str, *, lost: tuple[int, ...] = (), unavailable: tuple[int, ...] = (),
                   offline_for: int = 2) -> None:
        """The SuperLink restarts right after the first push of ``(group, message_type)``: the next
        pull fails once (the ServerApp sees the outage); nodes ``lost`` (indices) process their
        message but their replies are lost; nodes ``unavailable`` get a NODE_UNAVAILABLE error
        reply without processing it and are missing from the next ``offline_for`` node lists.
        """
        self.restarts[(str(group), message_type)] = {"lost": lost, "unavailable": unavailable, "offline_for": offline_for, "armed": False}

    def get_node_ids(self):
        ids = super().get_node_ids()
        out = [n for n in ids if self.offline.get(n, 0) <= 0]
        for n in self.offline:
            self.offline[n] -= 1
        return out

    def push_messages(self, messages):
        ids = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = str(uuid.uuid4())
            self.sent.append(msg)
            self.queue.append(msg)
            ids.append(msg.metadata.message_id)
            r = self.restarts.get((msg.metadata.group_id, msg.metadata.message_type))
            if r is not None and not r["armed"] and "done" not in r:
                r["armed"] = True
        return ids

    def pull_messages(self, message_ids):
        for r in self.restarts.values():
            if r["armed"]:  # the SuperLink is down for this pull
                r["armed"], r["done"] = False, True
                self._restart(r)
                raise ConnectionError("the SuperLink is unreachable (simulated restart)")
        for m in list(self.queue):
            self.queue.remove(m)
            if m.metadata.group_id in self.deaths:
                self.dead.add(self.node_ids[self.deaths[m.metadata.group_id]])
            if m.metadata.dst_node_id in self.unreachable:
                self.replies[m.metadata.message_id] = Message(Error(5, "Error: Node Unavailable (simulated)"), reply_to=m)
            elif m.metadata.dst_node_id not in self.dead:
                self.replies[m.metadata.message_id] = self.handle(m)
        return [self.replies.pop(i) for i in list(message_ids) if i in self.replies]

    def _restart(self, r: dict) -> None:
        lost = {self.node_ids[k] for k in r["lost"]}
        unavailable = {self.node_ids[k] for k in r["unavailable"]}
        for m in list(self.queue):
            nid = m.metadata.dst_node_id
            if nid in lost:
                self.queue.remove(m)
                self.handle(m)  # the node did the work; its reply never reached the SuperLink
            elif nid in unavailable:
                self.queue.remove(m)
                self.replies[m.metadata.message_id] = Message(Error(5, "Error: Node Unavailable (simulated)"), reply_to=m)
        for nid in unavailable:
            self.offline[nid] = r["offline_for"]


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
