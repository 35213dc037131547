"""One message exchange with Flower SuperNodes, faults and SuperLink restarts included.

:func:`exchange` sends one message per addressed client, waits up to a timeout and sorts the outcome
into decoded replies and :class:`~topofl.federation.pool.Failure` records; a failure never ends the run.
After a SuperLink outage it sends lost messages again; rounds it could not recover are degraded
(:func:`outage_rounds`). See docs/internals.md#topofl.flower.exchange for polling and restarts.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
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
#: Flower's error codes (``flwr.common.constant.ErrorCode``) of the replies the SuperLink writes
#: itself when a message, its reply or its destination node is unavailable:
#: MESSAGE_UNAVAILABLE, REPLY_MESSAGE_UNAVAILABLE, NODE_UNAVAILABLE
TRANSIENT_CODES = frozenset({3, 4, 5})
#: seconds after a SuperLink outage during which lost replies are blamed on it and sent again
#: (two heartbeat intervals of Flower's default 30 s: a node whose heartbeat lapsed is back by then)
OUTAGE_MEMORY_S = 120.0
#: copies of one message an exchange sends at most after outages
MAX_RESENDS = 3
#: seconds between reads of the connected nodes while a message waits for its node to come back
NODE_POLL_S = 1.0
#: what the reason of a failure that followed a SuperLink outage says
OUTAGE_MARK = "lost to a SuperLink outage"
#: what Flower's HTTP retry logs (logger ``flwr``) when a request to the SuperLink failed
_FLOWER_RETRY_MESSAGES = ("Connection attempt failed", "Giving up reconnection")

_outage_lock = threading.Lock()
_last_outage: float | None = None


def note_outage() -> None:
    """Record that the SuperLink could not be reached just now (``time.monotonic()``)."""
    global _last_outage
    with _outage_lock:
        _last_outage = time.monotonic()


def forget_outages() -> None:
    """Forget every outage seen so far (a test that simulated one cleans up with this)."""
    global _last_outage
    with _outage_lock:
        _last_outage = None


def last_outage() -> float | None:
    """When (``time.monotonic()``) this process last saw the SuperLink unreachable; ``None``: never."""
    with _outage_lock:
        return _last_outage


def outage_since(t: float) -> float | None:
    """The last outage if it was seen at or after ``t`` (``time.monotonic()``), else ``None``."""
    seen = last_outage()
    return seen if seen is not None and seen >= t else None


class _FlowerRetryWatch(logging.Handler):
    """Notes an outage whenever Flower's HTTP retry reports a failed request to the SuperLink."""

    def emit(self, record: logging.LogRecord) -> None:
        if isinstance(record.msg, str) and record.msg.startswith(_FLOWER_RETRY_MESSAGES):
            note_outage()


_watch = _FlowerRetryWatch()


def watch_flower_connections() -> None:
    """Listen to Flower's logger in this process for failed requests to the SuperLink (idempotent).

    Flower's grid retries a request that failed at the transport (the SuperLink is down) until it
    succeeds, so the failure never reaches topofl's code; the retry's log record is the one sign.
    """
    flwr_logger = logging.getLogger("flwr")
    if _watch not in flwr_logger.handlers:
        flwr_logger.addHandler(_watch)


def _retried(call: Callable[[], T], what: str) -> T:
    """``call()``, tried again after a failure (the grid's own transport retries cover the outage
    itself; this covers a request the restarted SuperLink no longer recognises). Every failure is
    noted as an outage (:func:`note_outage`).
    """
    wait = 1.0
    for attempt in range(1, GRID_TRIES + 1):
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - any failure of the SuperLink request; the last one is raised
            note_outage()
            if attempt == GRID_TRIES:
                raise
            log.warning("%s failed (%s: %s); trying again in %.0f s (attempt %d of %d)", what, type(exc).__name__, exc,
                        wait, attempt + 1, GRID_TRIES)
            time.sleep(wait)
            wait *= 2
    raise AssertionError("unreachable")  # pragma: no cover


def _copy(message: Message) -> Message:
    """A new message (new id) with the content and destination of ``message``."""
    md = message.metadata
    return Message(message.content, dst_node_id=md.dst_node_id, message_type=md.message_type, group_id=md.group_id)


def _transient(reply: Message) -> bool:
    return reply.has_error() and int(reply.error.code) in TRANSIENT_CODES


def send_and_receive(grid: Any, messages: list[Message], timeout: float, *, resend: bool = True) -> list[Message]:
    """Push ``messages`` and pull their replies until all arrived or ``timeout`` passed.

    The same contract as ``Grid.send_and_receive``, polling faster and sending messages again
    after a SuperLink outage (docs/internals.md#topofl.flower.exchange); a reply may then answer a copy of a message
    rather than the message itself. A grid without ``push_messages``/``pull_messages`` (a test
    double) is asked to do it itself.
    """
    return [reply for _, reply in _exchange_replies(grid, messages, timeout, resend=resend)]


def _exchange_replies(grid: Any, messages: Sequence[Message], timeout: float,
                      *, resend: bool = True) -> list[tuple[int | None, Message]]:
    """``(index in messages, reply)`` for every reply (``None``: a reply to a message not sent here)."""
    if not (hasattr(grid, "push_messages") and hasattr(grid, "pull_messages")):
        replies = list(grid.send_and_receive(list(messages), timeout=timeout))
        index = {m.metadata.message_id: k for k, m in enumerate(messages)}
        return [(index.get(r.metadata.reply_to_message_id), r) for r in replies]
    watch_flower_connections()
    ex = _PushPull(grid, messages, resend)
    deadline = ex.start + timeout
    ex.push(list(enumerate(messages)))
    while True:
        if ex.outstanding:
            ex.pull()
        ex.send_again()
        elapsed = time.monotonic() - ex.start
        if len(ex.answered) == len(messages) or (not ex.outstanding and not ex.held) or elapsed >= timeout:
            break
        time.sleep(min(POLL_S if elapsed < FAST_POLL_FOR else SLOW_POLL_S, max(deadline - time.monotonic(), 0.0)))
    return ex.replies()


class _PushPull:
    """The state of one exchange through a grid's ``push_messages``/``pull_messages`` (:func:`_exchange_replies`)."""

    def __init__(self, grid: Any, messages: Sequence[Message], resend: bool) -> None:
        self.grid, self.messages, self.resend = grid, messages, resend
        self.start = time.monotonic()
        self.key_of: dict[str, int] = {}       # message id (of a message or a copy) → index of the message
        self.outstanding: set[str] = set()      # ids whose reply has not come
        self.sent_at: dict[int, float] = {}     # index → when its last copy was pushed
        self.copies: dict[int, int] = {}        # index → copies sent again
        self.answered: dict[int, Message] = {}
        self.held: dict[int, Message] = {}      # index → a transient error reply, while its node may come back
        self.unknown: list[Message] = []
        self.online: set[int] = set()
        self.nodes_read_at = -float("inf")

    def push(self, batch: list[tuple[int, Message]]) -> None:
        ids = _retried(lambda: list(self.grid.push_messages([m for _, m in batch])),
                       "pushing messages to the SuperLink")
        now = time.monotonic()
        for (k, m), mid in zip(batch, ids, strict=False):
            mid = mid or m.metadata.message_id  # '' or None: not stored now, perhaps stored before a restart
            self.key_of[mid] = k
            self.outstanding.add(mid)
            self.sent_at[k] = now

    def pull(self) -> None:
        """Pull the replies that came and sort each (answered, held while its node may come back, or unknown)."""
        got: Iterable[Message] = _retried(lambda: list(self.grid.pull_messages(set(self.outstanding))),
                                          "pulling replies from the SuperLink")
        for reply in got:
            mid = reply.metadata.reply_to_message_id
            self.outstanding.discard(mid)
            k = self.key_of.get(mid)
            if k is None:
                self.unknown.append(reply)
            elif k in self.answered:
                log.debug("a second reply to message %d (a copy sent after an outage); ignored", k)
            elif (self.resend and _transient(reply) and self.copies.get(k, 0) < MAX_RESENDS
                  and outage_since(self.start - OUTAGE_MEMORY_S) is not None):
                self.held[k] = reply
            else:
                self.answered[k] = reply
                self.held.pop(k, None)

    def send_again(self) -> None:
        """After a SuperLink outage, push copies of the messages whose replies were lost to connected nodes."""
        now = time.monotonic()
        outage = outage_since(self.start - OUTAGE_MEMORY_S) if self.resend else None
        if outage is None:
            return
        due = [k for k in range(len(self.messages)) if k not in self.answered and self.copies.get(k, 0) < MAX_RESENDS
               and (k in self.held or self.sent_at[k] <= outage)]
        if due and now - self.nodes_read_at >= NODE_POLL_S:
            self.online = set(_retried(lambda: list(self.grid.get_node_ids()), "reading the connected SuperNodes"))
            self.nodes_read_at = time.monotonic()
        batch = [(k, _copy(self.messages[k])) for k in due if self.messages[k].metadata.dst_node_id in self.online]
        if batch:
            log.warning("sending %d message(s) again after a SuperLink outage (nodes %s): their replies were lost or "
                        "the SuperLink reported them unavailable", len(batch),
                        sorted({m.metadata.dst_node_id for _, m in batch}))
            for k, _ in batch:
                self.copies[k] = self.copies.get(k, 0) + 1
                self.held.pop(k, None)
            self.push(batch)
            self.online -= {m.metadata.dst_node_id for _, m in batch}  # read again before another copy goes out

    def replies(self) -> list[tuple[int | None, Message]]:
        """``(index, reply)``: the answered, then the held ones still unanswered, then the unknown (index ``None``)."""
        out: list[tuple[int | None, Message]] = [(k, r) for k, r in self.answered.items()]
        out += [(k, r) for k, r in self.held.items() if k not in self.answered]
        out += [(None, r) for r in self.unknown]
        return out


#: how the reason of a node's failure to reply in time starts (then ``SETTING=SECONDS s``)
NO_REPLY = "no reply within"


def exchange(
    grid: Any,
    nodes: Mapping[int, int],
    contents: Mapping[int, RecordDict],
    message_type: str,
    rnd: int,
    stage: str,
    timeout: float,
    decode: Callable[[int, RecordDict], T],
    *,
    timeout_name: str = "round-timeout",
) -> tuple[dict[int, T], list[Failure]]:
    """Send ``contents[cid]`` to node ``nodes[cid]``; return ``{cid: decode(cid, reply)}`` and failures.

    ``timeout`` bounds the exchange; ``timeout_name`` is the run-config setting it comes from, named
    in the failure of a node that did not reply in time (``round-timeout``; discovery: ``node-wait``).

    Replies are matched to clients through ``reply_to_message_id`` (an unavailable node's error
    reply comes from the SuperLink, not from the node). A failure that followed a SuperLink
    outage (no reply, or an unavailable message or node) says so in its reason (:data:`OUTAGE_MARK`).
    """
    cids = list(contents)
    sent = [Message(contents[cid], dst_node_id=nodes[cid], message_type=message_type, group_id=str(rnd))
            for cid in cids]
    start = time.monotonic()
    replies = _exchange_replies(grid, sent, timeout) if sent else []
    out: dict[int, T] = {}
    failures: list[Failure] = []
    lost: set[int] = set()  # clients whose failure may be the outage's
    for k, reply in replies:
        cid = cids[k] if k is not None else None
        if cid is not None and (cid in out or any(f.client == cid for f in failures)):
            log.warning("round %d: ignored a second reply for client %s", rnd, cid)
            continue
        if cid is None:
            log.warning("round %d: ignored a reply to an unknown message from node %s", rnd, reply.metadata.src_node_id)
            continue
        if reply.has_error():
            err = reply.error
            failures.append(Failure(rnd, cid, stage, f"error code {err.code}: {err.reason}", nodes[cid]))
            if _transient(reply):
                lost.add(cid)
            continue
        try:
            value = decode(cid, reply.content)
        except Exception as exc:  # noqa: BLE001 - any malformed payload is dropped with its reason
            failures.append(Failure(rnd, cid, stage, f"invalid payload: {exc}", nodes[cid]))
            continue
        claimed = getattr(value, "client_id", cid)
        if claimed != cid:
            failures.append(Failure(rnd, cid, stage, f"invalid payload: reply claims client {claimed}", nodes[cid]))
            continue
        out[cid] = value
    for cid in sorted(set(cids) - set(out) - {f.client for f in failures}):
        failures.append(Failure(rnd, cid, stage, f"{NO_REPLY} {timeout_name}={timeout:g} s", nodes[cid]))
        lost.add(cid)
    outage = outage_since(start - OUTAGE_MEMORY_S)
    if outage is not None and lost:
        failures = _blamed_on_outage(failures, lost, outage)
    return out, failures


def _blamed_on_outage(failures: list[Failure], lost: set[int], outage: float) -> list[Failure]:
    """``failures``, the reason of each failure of a ``lost`` client naming the outage seen at ``outage``."""
    return [Failure(f.round, f.client, f.stage, f"{f.reason} ({OUTAGE_MARK} {time.monotonic() - outage:.0f} s before "
                    "the exchange ended: not recovered by sending the message again within round-timeout)", f.node_id)
            if f.client in lost else f for f in failures]


def outage_rounds(failures: Iterable[Failure]) -> list[int]:
    """The rounds in which a client was lost to a SuperLink outage (:data:`OUTAGE_MARK`)."""
    return sorted({int(f.round) for f in failures if OUTAGE_MARK in str(f.reason)})
