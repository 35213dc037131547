"""One message exchange with Flower SuperNodes, faults included.

:func:`exchange` sends one message per addressed client, waits up to a timeout and sorts the
outcome into decoded replies and :class:`~topofl.federation.pool.Failure` records: an error reply
(the ClientApp raised, the node is unavailable, ...), no reply within the timeout, or a reply
that cannot be decoded. A failure never ends the run.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from flwr.app import Message, RecordDict

from topofl.federation.pool import Failure

log = logging.getLogger(__name__)
T = TypeVar("T")


def exchange(
    grid: Any,
    nodes: Mapping[int, int],
    contents: Mapping[int, RecordDict],
    message_type: str,
    rnd: int,
    stage: str,
    timeout: float,
    decode: Callable[[RecordDict], T],
) -> tuple[dict[int, T], list[Failure]]:
    """Send ``contents[cid]`` to node ``nodes[cid]``; return ``{cid: decode(reply)}`` and failures.

    Replies are matched to clients through ``reply_to_message_id`` (an unavailable node's error
    reply comes from the SuperLink, not from the node).
    """
    sent = {cid: Message(content, dst_node_id=nodes[cid], message_type=message_type, group_id=str(rnd)) for cid, content in contents.items()}
    replies = list(grid.send_and_receive(list(sent.values()), timeout=timeout)) if sent else []
    by_id = {m.metadata.message_id: cid for cid, m in sent.items()}
    out: dict[int, T] = {}
    failures: list[Failure] = []
    for reply in replies:
        cid = by_id.get(reply.metadata.reply_to_message_id)
        if cid is None:
            log.warning("round %d: ignored a reply to an unknown message from node %s", rnd, reply.metadata.src_node_id)
            continue
        if reply.has_error():
            err = reply.error
            failures.append(Failure(rnd, cid, stage, f"error code {err.code}: {err.reason}", nodes[cid]))
            continue
        try:
            value = decode(reply.content)
        except Exception as exc:  # noqa: BLE001 - any malformed payload is dropped with its reason
            failures.append(Failure(rnd, cid, stage, f"invalid payload: {exc}", nodes[cid]))
            continue
        claimed = getattr(value, "client_id", cid)
        if claimed != cid:
            failures.append(Failure(rnd, cid, stage, f"invalid payload: reply claims client {claimed}", nodes[cid]))
            continue
        out[cid] = value
    for cid in sorted(set(sent) - set(out) - {f.client for f in failures}):
        failures.append(Failure(rnd, cid, stage, f"no reply within round-timeout={timeout:g} s", nodes[cid]))
    return out, failures
