"""The Fleet proxy's connection guard: connection caps, TLS handshake and request-head deadlines."""

from __future__ import annotations

import asyncio
import gc
import logging
import ssl
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from topofl.deploy.proxy_rules import _positive, _Throttle

if TYPE_CHECKING:
    from uvicorn.protocols.http.h11_impl import H11Protocol as _H11Base
else:
    _H11Base = object

__all__ = ["ConnectionLimits", "guarded_protocol"]

log = logging.getLogger("topofl.deploy.proxy")  # one name for the whole proxy's log


class ConnectionLimits:
    """Counts open connections, in total and per peer address, and picks one to evict when full.

    A connection is *waiting* from when it is accepted until its first request head is complete,
    and again between requests. When ``total`` connections are open, a new one evicts the
    waiting connection that has waited longest (its close callback is called) rather than be
    refused, so idle or slow connections cannot lock SuperNodes out; it is refused when none is
    waiting (all are mid-request). Over ``per_ip`` from its address, a new one is refused.

    Parameters
    ----------
    total
        Connections open at once (> 0).
    per_ip
        Connections open at once from one address (> 0, <= ``total``).
    """

    def __init__(self, total: int, per_ip: int) -> None:
        _positive("max_connections", total)
        _positive("max_connections_per_ip", per_ip)
        if per_ip > total:
            raise ValueError(f"max_connections_per_ip ({per_ip}) must be <= max_connections ({total})")
        self.total, self.per_ip = total, per_ip
        self.open = 0
        self.by_ip: dict[str, int] = {}
        self.evicted = 0
        self._waiting: dict[object, Callable[[], None]] = {}  # insertion order: longest waiting first

    def acquire(self, ip: str) -> bool:
        """Count a new connection from ``ip``; ``False`` (and nothing counted) when over a limit."""
        if self.by_ip.get(ip, 0) >= self.per_ip:
            return False
        if self.open >= self.total and self._waiting:
            close = self._waiting.pop(next(iter(self._waiting)))
            self.evicted += 1
            close()  # releases its count (see waiting())
        if self.open >= self.total:
            return False
        self.open += 1
        self.by_ip[ip] = self.by_ip.get(ip, 0) + 1
        return True

    def waiting(self, conn: object, close: Callable[[], None]) -> None:
        """``conn`` waits for a request head (again): evictable, newest last. ``close`` must
        close it and :meth:`release` its count at once.
        """
        self._waiting.pop(conn, None)
        self._waiting[conn] = close

    def busy(self, conn: object) -> None:
        """``conn`` is in the middle of a request: not evictable."""
        self._waiting.pop(conn, None)

    def release(self, ip: str, conn: object = None) -> None:
        """A connection from ``ip`` closed."""
        self._waiting.pop(conn, None)
        self.open -= 1
        left = self.by_ip.get(ip, 0) - 1
        if left > 0:
            self.by_ip[ip] = left
        else:
            self.by_ip.pop(ip, None)


class _Collector:
    """Runs the cyclic garbage collector after every ``every`` closed connections, at most once per ``interval`` s.

    Each asyncio socket transport is a reference cycle (it keeps a bound method of itself),
    freed only by a full collection; Python runs one only when the objects that survived
    earlier collections have grown by a quarter, so a flood of short connections (each
    surviving while it is open) piled up ~8 MB per 1,000 in a trial before one ran.
    A full collection of the proxy's ~50,000 objects takes a few milliseconds.
    """

    def __init__(self, every: int = 256, interval: float = 1.0) -> None:
        self.every, self.interval = every, interval
        self._closed = 0
        self._last = time.monotonic()

    def closed(self) -> None:
        self._closed += 1
        now = time.monotonic()
        if self._closed >= self.every and now - self._last >= self.interval:
            self._closed, self._last = 0, now
            gc.collect()


class _GuardedH11(_H11Base):
    """The connection guard of :func:`guarded_protocol`, whose subclass sets the class attributes below.

    A mixin at run time (``uvicorn`` is imported only when a proxy is served); ``H11Protocol`` for mypy.
    """

    _ssl_context: ssl.SSLContext | None
    _limits: ConnectionLimits
    _handshake_timeout: float
    _idle_timeout: float
    _throttle: _Throttle
    _collector: _Collector
    _h11_idle: object  # h11.IDLE
    _peer: str | None = None
    _ready = False  # uvicorn's connection_made has run (TLS is up)
    _lost = False
    _early: list[bytes] | None = None  # data decrypted before _ready (the request may follow the handshake)
    _head_timer: asyncio.TimerHandle | None = None
    _raw: asyncio.Transport | None = None  # the TCP transport (under TLS)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # uvicorn's set-up (an h11 parser, loggers...) waits until the connection is let in:
        # one refused in a flood costs this small object only
        self._init_args: tuple[tuple[Any, ...], dict[str, Any]] | None = (args, kwargs)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        peername = transport.get_extra_info("peername")
        ip = str(peername[0]) if peername else ""
        if not self._limits.acquire(ip):
            limits = self._limits
            self._throttle.warning("limit", "closed a connection from %s: %d open from it, %d in all (limits %d, %d)",
                                   ip, limits.by_ip.get(ip, 0), limits.open, limits.per_ip, limits.total)
            transport.abort()
            return
        self._peer = ip
        self._raw = transport
        self._limits.waiting(self, self._evict)
        assert self._init_args is not None
        args, kwargs = self._init_args
        self._init_args = None
        super().__init__(*args, **kwargs)
        if self._ssl_context is None:
            self._ready_on(transport)
            return
        transport.pause_reading()  # the ClientHello waits for start_tls
        task = self.loop.create_task(self._handshake(transport))
        self.tasks.add(task)  # uvicorn cancels these on shutdown
        task.add_done_callback(self.tasks.discard)

    async def _handshake(self, raw: asyncio.Transport) -> None:
        assert self._ssl_context is not None
        try:
            tls = await self.loop.start_tls(raw, self, self._ssl_context, server_side=True,
                                            ssl_handshake_timeout=self._handshake_timeout)
        except asyncio.CancelledError:  # the server is shutting down
            raw.abort()
            self._release()
            raise
        except (OSError, ssl.SSLError, EOFError) as exc:  # reset, handshake failed or too slow
            log.debug("TLS handshake with %s failed: %r", self._peer, exc)
            raw.abort()
            self._release()
            return
        if self._lost or tls is None:  # closed between the handshake and now: connection_lost has run
            self._release()
            return
        self._ready_on(tls)

    def _ready_on(self, transport: asyncio.Transport) -> None:
        self._ready = True
        super().connection_made(transport)
        self._arm()
        early, self._early = self._early, None
        for data in early or ():
            super().data_received(data)

    def data_received(self, data: bytes) -> None:
        if not self._ready:
            self._early = [*(self._early or ()), data]
            return
        super().data_received(data)

    def _release(self) -> None:
        if self._peer is not None:
            self._limits.release(self._peer, self)
            self._peer = None

    def _evict(self) -> None:
        """Make room for a new connection: this one has waited longest for a request."""
        log.debug("evicted a waiting connection from %s (%d open)", self._peer, self._limits.open)
        self._release()
        if self._raw is not None:
            self._raw.abort()  # under TLS too: the socket goes, the TLS layer reports the loss

    def _arm(self) -> None:
        """Waiting for a request head: the idle clock runs, and the connection may be evicted."""
        if self._head_timer is None and not self.transport.is_closing():
            self._head_timer = self.loop.call_later(self._idle_timeout, self._idle)
            if self._peer is not None:
                self._limits.waiting(self, self._evict)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
            self._limits.busy(self)

    def _idle(self) -> None:
        self._head_timer = None
        if self.conn.their_state is self._h11_idle and not self.transport.is_closing():
            log.debug("closed a connection from %s: no request head within %g s", self._peer, self._idle_timeout)
            self.transport.abort()

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is self._h11_idle:
            self._arm()  # waiting for a request head: the clock runs (not restarted by each byte)
        else:
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is self._h11_idle:
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._disarm()
        self._release()
        if self._ready:
            super().connection_lost(exc)
        self._collector.closed()


def guarded_protocol(
    ssl_context: ssl.SSLContext | None,
    limits: ConnectionLimits,
    *,
    handshake_timeout: float = 10.0,
    idle_timeout: float = 15.0,
) -> type[asyncio.Protocol]:
    """A uvicorn HTTP/1.1 (h11) protocol class that guards each connection.

    Before the TLS handshake a connection is counted against ``limits`` (over a limit: closed
    at once, nothing allocated for TLS); the handshake (done here, with ``ssl_context``; pass
    uvicorn no certificate) must finish within ``handshake_timeout`` seconds; then a request's
    head must be complete within ``idle_timeout`` seconds of the connection opening or of the
    previous response (uvicorn itself only times out idle keep-alive connections, and
    restarts its clock on every byte). Request heads are limited to :data:`~topofl.deploy.proxy_rules.MAX_HEADER_BYTES`
    by the uvicorn config :func:`topofl.deploy.proxy.serve` makes.
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    _positive("handshake_timeout", handshake_timeout, float)
    _positive("idle_timeout", idle_timeout, float)

    class GuardedH11Protocol(_GuardedH11, H11Protocol):
        _ssl_context = ssl_context
        _limits = limits
        _handshake_timeout = handshake_timeout
        _idle_timeout = idle_timeout
        _throttle = _Throttle()
        _collector = _Collector()
        _h11_idle = h11.IDLE

    return GuardedH11Protocol
