"""The Fleet proxy's rules and limits: which paths it forwards, which headers it drops, the default caps."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

__all__ = [
    "ARRAY_CHUNK_BYTES", "CLIENT_CLAIMS", "FLEET_PATH", "HOP_BY_HOP", "MAX_BODY_BYTES", "MAX_CONNECTIONS",
    "MAX_CONNECTIONS_PER_IP", "MAX_HEADER_BYTES", "TLS_READ_BUFFER", "allowed", "default_max_body_bytes",
    "parse_address",
]

log = logging.getLogger("topofl.deploy.proxy")  # one name for the whole proxy's log

FLEET_PATH = re.compile(rb"/v1/fleet/[a-z][a-z-]*")
"""Raw request paths forwarded with ``POST`` (the Fleet API's routes)."""

HEALTH_PATH = b"/health"

ACTIVATE_PATH = b"/v1/fleet/activate-node"
ACTIVATION_FAILED = {"code": 2004, "detail": "Failed to activate SuperNode."}
"""What the SuperLink answers (412) when an unregistered key activates (Flower's ``FLEET_NODE_ACTIVATION_FAILED``).

The proxy answers the same to a key it does not know, without reading the body: Flower's SuperNode then
exits with "[code: 2004] Failed to activate SuperNode.", where a 401 would make it stop itself
silently with exit status 0 ("SuperNode terminated gracefully").
"""

HOP_BY_HOP = frozenset(
    {
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
        "proxy-connection", "te", "trailer", "trailers", "transfer-encoding", "upgrade",
        "host",
    }
)
"""Request/response headers that are not forwarded (they describe one connection)."""

CLIENT_CLAIMS = frozenset({"forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip"})
"""Request headers a client could use to make the SuperLink log another address: dropped."""

ARRAY_CHUNK_BYTES = int(os.environ.get("FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE", str(5 * 2**20)))
"""Flower splits every array into chunks of at most this many bytes and pushes one object per
request (``FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE``, 5 MiB by default): no Fleet request body grows
with the model."""


def default_max_body_bytes(chunk_bytes: int = ARRAY_CHUNK_BYTES) -> int:
    """The default cap on a Fleet request body: ``max(16 MiB, chunk_bytes + 8 MiB)``.

    What a SuperNode legitimately sends in one request is one object: an array chunk (at most
    ``chunk_bytes``, 5 MiB in Flower 1.41/1.42 whatever the model size), a record that is not
    chunked (metrics, configs: a MetricRecord of a million floats is ~9 MB) or a message with its
    object tree (~100 bytes per object). 8 MiB of room covers the records; raise the cap with
    ``--max-body-bytes`` if a ClientApp sends larger metric or config records.
    """
    return max(16 * 2**20, int(chunk_bytes) + 8 * 2**20)


MAX_BODY_BYTES = default_max_body_bytes()
"""Default cap on a request body (16 MiB; see :func:`default_max_body_bytes`)."""

MAX_CONNECTIONS = 256
"""Default cap on connections open at once (each held one costs the proxy ~80 KB; 256: ~20 MB)."""

MAX_CONNECTIONS_PER_IP = 64
"""Default cap on connections open at once from one address (a SuperNode holds up to ~6)."""

TLS_READ_BUFFER = 32 * 2**10
"""Read buffer of each TLS connection (asyncio's default is 256 KiB; see :func:`topofl.deploy.proxy.serve`)."""

MAX_HEADER_BYTES = 16 * 2**10
"""Largest request head (request line and headers) accepted; a SuperNode's is under 2 KiB."""

_REFUSED_HEADERS = {"content-type": "application/json", "connection": "close"}


def allowed(method: str, raw_path: bytes) -> bool | None:
    """Whether a request may go through.

    Returns ``True`` (forward it), ``False`` (a forwarded path, wrong method: 405) or
    ``None`` (not a forwarded path: 404). ``raw_path`` is the path as sent, without the
    query string and before percent-decoding.
    """
    if raw_path == HEALTH_PATH:
        return method in ("GET", "HEAD")
    if FLEET_PATH.fullmatch(raw_path):  # fullmatch: "$" would also accept a trailing newline
        return method == "POST"
    return None


def parse_address(text: str, field: str) -> tuple[str, int]:
    """Split ``host:port`` (IPv6 as ``[::1]:port``); ``ValueError`` naming ``field``."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{field} must be HOST:PORT with a port in 1-65535; got {text!r}")
    return host, int(port)


def _filter(
    headers: Sequence[tuple[str, str]] | httpx.Headers, drop: frozenset[str] = HOP_BY_HOP
) -> list[tuple[str, str]]:
    items = headers.multi_items() if hasattr(headers, "multi_items") else headers
    return [(k, v) for k, v in items if k.lower() not in drop]


def _positive(name: str, value: object, kind: type = int) -> None:
    """``ValueError`` naming ``name`` unless ``value`` is a positive ``kind`` (int; float accepts ints)."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float) if kind is float else int)
    if not ok or not value > 0:  # type: ignore[operator]
        raise ValueError(f"{name} must be a positive {'number' if kind is float else 'integer'}; got {value!r}")


class _Throttle:
    """At most one log record per ``interval`` seconds per kind; how many were left out is said."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}
        self._dropped: dict[str, int] = {}

    def warning(self, kind: str, msg: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last.get(kind, -1e9) < self.interval:
            self._dropped[kind] = self._dropped.get(kind, 0) + 1
            return
        dropped = self._dropped.pop(kind, 0)
        self._last[kind] = now
        log.warning(msg + (f" (and {dropped} more like it)" if dropped else ""), *args)
