"""One message exchange with Flower SuperNodes, faults included.

:func:`exchange` sends one message per addressed client, waits up to a timeout and sorts the
outcome into decoded replies and :class:`~topofl.federation.pool.Failure` records: an error reply
(the ClientApp raised, the node is unavailable, ...), no reply within the timeout, or a reply
that cannot be decoded. A failure never ends the run.

Replies are pulled every :data:`POLL_S` seconds for the first :data:`FAST_POLL_FOR` seconds and
every :data:`SLOW_POLL_S` after that. Flower 1.41's own ``Grid.send_and_receive`` on a
deployment polls every 3 s, so each exchange — two per federated round, one per relayed phase —
waited up to 3 s after the last reply; a round of quick ClientApps took over 6 s.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from flwr.app import Message, RecordDict

from topofl.federation.pool import Failure

log = logging.getLogger(__name__)
T = TypeVar("T")

#: seconds between pulls while replies are expected soon, for how long, and after that
POLL_S, FAST_POLL_FOR, SLOW_POLL_S = 0.05, 10.0, 0.5
#: tries of a push or pull that fails (e.g. ``ObjectPushError`` when the SuperLink restarted
#: mid-push and forgot the push session), waiting 1, 2, 4, ... s between them: ~30 s in all,
#: inside the ~60 s a ServerApp's task survives a SuperLink outage
GRID_TRIES = 6


def _retried(call: Callable[[], T], what: str) -> T:
    """``call()``, tried again after a failure (the grid's own transport retries cover the outage
    itself; this covers a request the restarted SuperLink no longer recognises).
    """
    wait = 1.0
    for attempt in range(1, GRID_TRIES + 1):
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - any failure of the SuperLink request; the last one is raised
            if attempt == GRID_TRIES:
                raise
            log.warning("%s failed (%s: %s); trying again in %.0f s (attempt %d of %d)", what, type(exc).__name__, exc, wait,
                        attempt + 1, GRID_TRIES)
            time.sleep(wait)
            wait *= 2
    raise AssertionError("unreachable")  # pragma: no cover


def send_and_receive(grid: Any, messages: list[Message], timeout: float) -> list[Message]:
    """Push ``messages`` and pull their replies until all arrived or ``timeout`` passed.

    The same contract as ``Grid.send_and_receive``, polling faster (module docstring); a grid
    without ``push_messages``/``pull_messages`` (a test double) is asked to do it itself.
    """
    if not (hasattr(grid, "push_messages") and hasattr(grid, "pull_messages")):
        return list(grid.send_and_receive(messages, timeout=timeout))
    pending = set(_retried(lambda: list(grid.push_messages(messages)), "pushing messages to the SuperLink"))
    start = time.monotonic()
    replies: list[Message] = []
    while pending:
        got: Iterable[Message] = _retried(lambda: list(grid.pull_messages(pending)), "pulling replies from the SuperLink")
        for reply in got:
            replies.append(reply)
            pending.discard(reply.metadata.reply_to_message_id)
        elapsed = time.monotonic() - start
        if not pending or elapsed >= timeout:
            break
        time.sleep(min(POLL_S if elapsed < FAST_POLL_FOR else SLOW_POLL_S, max(timeout - elapsed, 0.0)))
    return replies


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
    replies = send_and_receive(grid, list(sent.values()), timeout) if sent else []
    by_id = {m.metadata.message_id: cid for cid, m in sent.items()}
    out: dict[int, T] = {}
    failures: list[Failure] = []
    for reply in replies:
        cid = by_id.get(reply.metadata.reply_to_message_id)
        if cid is not None and (cid in out or any(f.client == cid for f in failures)):
            log.warning("round %d: ignored a second reply for client %s", rnd, cid)
            continue
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
