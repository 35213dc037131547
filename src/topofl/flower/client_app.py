"""The topofl ClientApp: each SuperNode runs the algorithm's own client-side methods on its data.

Message types: ``query`` (discovery), ``train`` and ``evaluate`` (federated methods),
``query.peer`` / ``train.peer`` (decentralised methods through the relay). The work itself is
in :mod:`topofl.flower.node` and :mod:`topofl.flower.peer`; client state persists in
``context.state`` on the node. Every message first passes :func:`thread_policy`.
"""
from __future__ import annotations

from collections.abc import Callable

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from topofl.flower import node, peer
from topofl.flower.secure_records import is_secure
from topofl.threads import node_threads


def thread_policy(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
    """The ClientApp's mod: this process's compute threads (:func:`topofl.threads.node_threads`: set
    once, at the first message, from the runtime's ``OMP_NUM_THREADS`` or the default policy), then
    the message's handler.
    """
    node_threads()
    return call_next(msg, context)


app = ClientApp(mods=[thread_policy])


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Discovery: reply with this node's declaration (partition id, data sizes, task)."""
    return Message(node.describe(context.node_config, msg.content), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One round of a federated method's local work on this node (:func:`topofl.flower.node.fit`), or one
    stage of secure aggregation (:func:`topofl.flower.node.secure`).
    """
    if is_secure(msg.content):
        return Message(node.secure(context.node_config, context.state, msg.content), reply_to=msg)
    return Message(node.fit(context.node_config, context.state, msg.content), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    """Test metrics with the model this node would use (:func:`topofl.flower.node.evaluate`)."""
    return Message(node.evaluate(context.node_config, context.state, msg.content), reply_to=msg)


@app.query("peer")
def peer_setup(msg: Message, context: Context) -> Message:
    """Build this node's peer of a decentralised method from the relay's spec (:func:`topofl.flower.peer.setup`)."""
    return Message(peer.setup(context.node_config, context.state, msg.content), reply_to=msg)


@app.train("peer")
def peer_step(msg: Message, context: Context) -> Message:
    """Consume one relayed phase and emit the next (:func:`topofl.flower.peer.step`)."""
    return Message(peer.step(context.node_config, context.state, msg.content), reply_to=msg)
