r"""A TLS reverse proxy that exposes only a Flower SuperLink's Fleet API, safe against outsiders.

In Flower 1.41/1.42 one SuperLink port serves the Fleet API (``/v1/fleet/*``, for
SuperNodes), the Control API (``/v1/control/*``, for the ``flwr`` CLI) and the
ServerApp Runtime API (``/v1/runtime/*``), and the Control API has no authentication
in the open-source distribution: anyone who reaches the port can register their own
SuperNode key (defeating ``--enable-supernode-auth``), list or unregister nodes, and
start or stop runs. This proxy is the only port SuperNodes need. It forwards exactly

* ``POST /v1/fleet/<name>`` (``<name>`` made of lower-case letters and ``-``), and
* ``GET``/``HEAD /health``

to a SuperLink bound to the loopback interface, and answers everything else with 404
(a path it forwards, asked with another method: 405). The raw request path is checked,
before any percent-decoding or dot-segment normalisation, so ``/v1/fleet/../control/...``
or ``/v1/fleet/%2e%2e/...`` never reach the SuperLink. The query string and
client-supplied forwarding headers (``Forwarded``, ``X-Forwarded-*``, ``X-Real-IP``) are
dropped.

What it guarantees against someone who can reach its port (see also ``docs/flower.md``):

* **No body is read before the sender is authenticated.** A Fleet ``POST`` must carry the
  headers a SuperNode signs every request with (``flwr-public-key``: its public key,
  ``flwr-timestamp``: an ISO-8601 time, ``flwr-signature``: ECDSA/SHA-256 over that
  timestamp; Flower's ``NodeAuthHttpInterceptor``). The key must be one of
  ``--authorized-keys`` (the SuperNode public keys registered with the SuperLink, OpenSSH
  format, one a line; the file is re-read when it changes), the timestamp within Flower's
  window (signed less than 305 s ago, at most 5 s ahead), the signature valid
  (``cryptography``) and not seen before: each (key, timestamp) is accepted once while it
  is valid, so captured headers cannot be replayed. Otherwise: 401 (the SuperLink's own
  answer; 412 "Failed to activate SuperNode." to an unknown key activating, as the
  SuperLink answers it) and the connection is closed, with the body unread.
  ``--no-node-auth`` (for a SuperLink without ``--enable-supernode-auth``) turns this off
  explicitly.
* **Bodies are bounded and streamed.** A Fleet ``POST`` must declare its ``Content-Length``
  (411 otherwise), at most ``--max-body-bytes`` (413, before reading; 16 MiB by default,
  see :func:`default_max_body_bytes`). The body is streamed to the SuperLink as it arrives,
  never held whole (uvicorn stops reading a connection while 64 KiB of its body wait to be
  forwarded), must arrive whole within ``--timeout`` (408) and may not differ from its
  declared length (400).
* **Connections are bounded.** At most ``--max-connections`` at once and
  ``--max-connections-per-ip`` from one address; more are closed before their TLS handshake.
  A TLS handshake must finish within ``--handshake-timeout``; a request's headers (at most
  16 KiB) must arrive within ``--idle-timeout`` of the connection opening or of the previous
  response, else the connection is closed.

SuperNode-authentication headers pass through unchanged, so the SuperLink checks them
again (and checks that the key belongs to the node ID in the body). When the SuperLink
cannot be reached the proxy answers 502 (504 on a timeout), which SuperNodes retry, so a
SuperLink restart behind the proxy looks to them like any other outage::

    python -m topofl.flower.fleet_proxy --listen 0.0.0.0:9092 \
        --superlink 127.0.0.1:9093 --superlink-root-certificates ca.pem \
        --certfile server.pem --keyfile server.key --authorized-keys supernodes.pub

Starlette, httpx, uvicorn, h11 and cryptography are Flower dependencies, so nothing more is
installed.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import datetime
import gc
import heapq
import logging
import os
import re
import ssl
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx
    from cryptography.hazmat.primitives.asymmetric import ec
    from starlette.responses import Response
    from starlette.types import Receive, Scope, Send

__all__ = [
    "FLEET_PATH", "HOP_BY_HOP", "MAX_BODY_BYTES", "AuthorizedKeys", "ConnectionLimits", "FleetProxy",
    "NodeAuthenticator", "Refusal", "allowed", "create_app", "default_max_body_bytes", "guarded_protocol",
    "load_authorized_keys", "main", "parse_address", "serve", "signed_headers",
]

log = logging.getLogger(__name__)

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

# SuperNode authentication over Flower's protobuf-over-HTTP Fleet API (flwr 1.41/1.42:
# flwr.supercore.constant.FLEET_HTTP_*_HEADER, flwr.common.constant.TIMESTAMP_*; a test checks
# these against the installed flwr).
PUBLIC_KEY_HEADER = "flwr-public-key"
"""Base64 of the SuperNode's public key, PEM SubjectPublicKeyInfo (what ``flwr supernode register`` stores)."""
TIMESTAMP_HEADER = "flwr-timestamp"
"""``datetime.now(timezone.utc).isoformat()`` when the request was signed."""
SIGNATURE_HEADER = "flwr-signature"
"""Base64 of the DER ECDSA/SHA-256 signature of the timestamp's ASCII bytes."""
TIMESTAMP_TOLERANCE = 300.0
"""Seconds a signed timestamp stays valid (Flower's ``TIMESTAMP_TOLERANCE``)."""
SYSTEM_TIME_TOLERANCE = 5.0
"""Clock drift allowed either way (Flower's ``SYSTEM_TIME_TOLERANCE``)."""
SIGNATURE_MAX_AGE = TIMESTAMP_TOLERANCE + SYSTEM_TIME_TOLERANCE
"""The SuperLink accepts a timestamp ``-5 s < age < 305 s``; so does the proxy by default."""

MAX_SIGNATURES_PER_KEY = 10_000
"""Signatures of one key remembered at once (against replays): ~33 requests/s over the 305 s window."""

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
"""Read buffer of each TLS connection (asyncio's default is 256 KiB; see :func:`serve`)."""

MAX_HEADER_BYTES = 16 * 2**10
"""Largest request head (request line and headers) accepted; a SuperNode's is under 2 KiB."""

_REFUSED_HEADERS = {"content-type": "application/json", "connection": "close"}


# ------------------------------------------------------------------------------- path rules


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


def _filter(headers: Sequence[tuple[str, str]] | httpx.Headers, drop: frozenset[str] = HOP_BY_HOP) -> list[tuple[str, str]]:
    items = headers.multi_items() if hasattr(headers, "multi_items") else headers
    return [(k, v) for k, v in items if k.lower() not in drop]


def _positive(name: str, value: object, kind: type = int) -> None:
    """``ValueError`` naming ``name`` unless ``value`` is a positive ``kind`` (int; float accepts ints)."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float) if kind is float else int)
    if not ok or not value > 0:  # type: ignore[operator]
        raise ValueError(f"{name} must be a positive {'number' if kind is float else 'integer'}; got {value!r}")


# ---------------------------------------------------------------------- SuperNode auth


def _spki_pem(key: ec.EllipticCurvePublicKey) -> bytes:
    """The key as Flower's SuperNode sends it and the SuperLink stores it (PEM SubjectPublicKeyInfo)."""
    from cryptography.hazmat.primitives import serialization

    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def load_authorized_keys(path: str | os.PathLike[str]) -> dict[bytes, ec.EllipticCurvePublicKey]:
    """The SuperNode public keys in an authorized-keys file, by their PEM (SubjectPublicKeyInfo) bytes.

    One OpenSSH public key a line (``ecdsa-sha2-nistp384 AAAA... comment``: what
    ``ssh-keygen -t ecdsa`` writes to ``.pub`` and ``flwr supernode register`` reads); blank
    lines and lines starting with ``#`` are skipped. Keys must be EC keys on a NIST curve, as
    Flower requires. ``ValueError`` naming the file and line otherwise.
    """
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    path = Path(path)
    keys: dict[bytes, ec.EllipticCurvePublicKey] = {}
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith(b"#"):
            continue
        try:
            key = serialization.load_ssh_public_key(line)
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
            raise ValueError(f"authorized keys {str(path)!r}, line {number}: not an OpenSSH public key ({exc})") from None
        if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(
            key.curve, (ec.SECP256R1, ec.SECP384R1, ec.SECP521R1)
        ):
            raise ValueError(
                f"authorized keys {str(path)!r}, line {number}: a SuperNode key must be ECDSA on "
                f"NIST P-256/P-384/P-521; got {type(key).__name__}"
            )
        keys[_spki_pem(key)] = key
    return keys


class AuthorizedKeys:
    """An authorized-keys file (see :func:`load_authorized_keys`), re-read when it changes.

    The file's size, modification time and inode are looked at most every ``recheck``
    seconds. A file that no longer parses keeps the keys last read (and logs an error).

    Parameters
    ----------
    path
        The file. It must exist and parse when this object is made.
    recheck
        Seconds between looks at the file (> 0).
    """

    def __init__(self, path: str | os.PathLike[str], recheck: float = 1.0) -> None:
        _positive("recheck", recheck, float)
        self.path = Path(path)
        self.recheck = float(recheck)
        self._keys = load_authorized_keys(self.path)
        self._stamp = self._stat()
        self._checked = time.monotonic()

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def __len__(self) -> int:
        return len(self._keys)

    def get(self, pem: bytes) -> ec.EllipticCurvePublicKey | None:
        """The key whose PEM bytes are ``pem``, or ``None`` when it is not authorized."""
        now = time.monotonic()
        if now - self._checked >= self.recheck:
            self._checked = now
            stamp = self._stat()
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._keys = load_authorized_keys(self.path)
                    log.info("re-read %s: %d authorized SuperNode keys", self.path, len(self._keys))
                except (OSError, ValueError) as exc:
                    log.error("kept the %d keys read before: %s", len(self._keys), exc)
        return self._keys.get(pem)


@dataclass(frozen=True)
class Refusal:
    """Why a request was refused: the HTTP status and a reason for the proxy's log (never sent)."""

    status: int
    reason: str
    unknown_key: bool = False
    """The key is not an authorized one (whatever the signature)."""


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The value of header ``name`` (lower case); ``None`` if absent, and also if repeated."""
    values = [v for k, v in headers if k.lower() == name]
    return values[0] if len(values) == 1 else None


@dataclass
class _Seen:
    """The timestamps one key signed that are still valid: a set, and a heap to forget them in order."""

    stamps: set[str] = field(default_factory=set)
    heap: list[tuple[float, float, str]] = field(default_factory=list)


class NodeAuthenticator:
    """Checks a request's SuperNode-authentication headers, without its body.

    A request passes when ``flwr-public-key`` is an authorized key, ``flwr-timestamp`` is
    within ``(-SYSTEM_TIME_TOLERANCE, max_age)`` seconds of now, ``flwr-signature`` is that
    key's ECDSA/SHA-256 signature of the timestamp, and this (key, timestamp) pair has not
    passed before. Accepted pairs are remembered until their timestamp can no longer pass
    (wall clock) and ``max_age + SYSTEM_TIME_TOLERANCE`` seconds have gone by (monotonic
    clock), so neither a replay nor a clock step lets one through twice. The pair is the
    key, not the signature bytes: ECDSA signatures are malleable (``(r, s)`` and
    ``(r, n - s)`` both verify), so a replay with a re-encoded signature is refused too.

    Parameters
    ----------
    keys
        The authorized keys.
    max_age
        Oldest accepted signature, seconds (0 < max_age <= 305, Flower's window).
    max_per_key
        Pairs remembered per key at once; a key that signs faster than
        ``max_per_key / max_age`` requests a second gets 503 (which SuperNodes retry).
    clock, monotonic
        Wall clock (epoch seconds) and monotonic clock; for tests.
    """

    def __init__(
        self,
        keys: AuthorizedKeys,
        *,
        max_age: float = SIGNATURE_MAX_AGE,
        max_per_key: int = MAX_SIGNATURES_PER_KEY,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        _positive("max_age", max_age, float)
        if max_age > SIGNATURE_MAX_AGE:
            raise ValueError(f"max_age must be <= {SIGNATURE_MAX_AGE} s (the SuperLink's own window); got {max_age!r}")
        _positive("max_per_key", max_per_key)
        self.keys = keys
        self.max_age = float(max_age)
        self.max_per_key = max_per_key
        self._clock, self._monotonic = clock, monotonic
        self._seen: dict[bytes, _Seen] = {}

    def remembered(self) -> int:
        """Number of (key, timestamp) pairs remembered now."""
        return sum(len(s.stamps) for s in self._seen.values())

    def _forget_expired(self, seen: _Seen, now: float, mono: float) -> None:
        hold = self.max_age + SYSTEM_TIME_TOLERANCE
        while seen.heap and seen.heap[0][0] + self.max_age <= now and seen.heap[0][1] + hold <= mono:
            _, _, stamp = heapq.heappop(seen.heap)
            seen.stamps.discard(stamp)

    def check(self, headers: Sequence[tuple[bytes, bytes]]) -> Refusal | None:
        """``None`` when the request may go on (and its signature is remembered); else why not.

        ``headers`` are the raw request headers (names in lower case, as ASGI gives them).
        Nothing here reads the request body.
        """
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        raw_key, raw_stamp, raw_sig = (
            _header(headers, name.encode()) for name in (PUBLIC_KEY_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER)
        )
        if raw_key is None or raw_stamp is None or raw_sig is None:
            return Refusal(401, "no SuperNode-authentication headers (or one repeated)")
        if len(raw_key) > 2048 or len(raw_stamp) > 64 or len(raw_sig) > 512:
            return Refusal(401, "SuperNode-authentication header too long")
        try:
            pem = base64.b64decode(raw_key, validate=True)
            signature = base64.b64decode(raw_sig, validate=True)
            stamp = raw_stamp.decode("ascii")
            signed_at = datetime.datetime.fromisoformat(stamp)
        except (binascii.Error, ValueError) as exc:
            return Refusal(401, f"malformed SuperNode-authentication header: {exc}")
        if signed_at.utcoffset() is None:
            return Refusal(401, f"{TIMESTAMP_HEADER} {stamp!r} has no time zone")
        key = self.keys.get(pem)
        if key is None:
            return Refusal(401, "public key not in the authorized keys", unknown_key=True)
        now, mono = self._clock(), self._monotonic()
        age = now - signed_at.timestamp()
        if not -SYSTEM_TIME_TOLERANCE < age < self.max_age:
            return Refusal(401, f"{TIMESTAMP_HEADER} {stamp!r} is {age:.0f} s old, outside (-{SYSTEM_TIME_TOLERANCE:.0f}, {self.max_age:.0f}) s")
        seen = self._seen.setdefault(pem, _Seen())
        self._forget_expired(seen, now, mono)
        if stamp in seen.stamps:
            return Refusal(401, f"replayed signature ({TIMESTAMP_HEADER} {stamp!r} was already used)")
        try:
            key.verify(signature, stamp.encode("ascii"), ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return Refusal(401, "bad signature")
        if len(seen.stamps) >= self.max_per_key:
            return Refusal(503, f"more than {self.max_per_key} signed requests of one key within {self.max_age:.0f} s")
        seen.stamps.add(stamp)
        heapq.heappush(seen.heap, (signed_at.timestamp(), mono, stamp))
        return None


def signed_headers(private_key: ec.EllipticCurvePrivateKey, timestamp: str | None = None) -> dict[str, str]:
    """The authentication headers a SuperNode sends with every Fleet request (as Flower's
    ``NodeAuthHttpInterceptor`` makes them): for tests, benchmarks and clients of the proxy.

    ``timestamp`` defaults to now (UTC, ISO 8601).
    """
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    stamp = timestamp if timestamp is not None else datetime.datetime.now(datetime.timezone.utc).isoformat()
    signature = private_key.sign(stamp.encode("ascii"), ec.ECDSA(hashes.SHA256()))
    return {
        PUBLIC_KEY_HEADER: base64.b64encode(_spki_pem(private_key.public_key())).decode("ascii"),
        TIMESTAMP_HEADER: stamp,
        SIGNATURE_HEADER: base64.b64encode(signature).decode("ascii"),
    }


# ------------------------------------------------------------------------------ the app


class _BodyError(Exception):
    """The client's body did not arrive as declared: ``status`` goes back to it."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


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


def _json(status: int, payload: dict[str, object]) -> Response:
    """A JSON refusal, closing the connection."""
    import json

    from starlette.responses import Response

    return Response(json.dumps(payload), status_code=status, headers=_REFUSED_HEADERS)


class FleetProxy:
    """The proxy as an ASGI application (build it with :func:`create_app`)."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        base: str,
        authenticator: NodeAuthenticator | None,
        *,
        timeout: float,
        max_body_bytes: int,
    ) -> None:
        self.client = client
        self.base = base
        self.authenticator = authenticator
        self.timeout = timeout
        self.max_body_bytes = max_body_bytes
        self._throttle = _Throttle()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        response = await self._handle(scope, receive)
        await response(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _refuse(self, status: int, text: str, peer: str = "", reason: str = "") -> Response:
        """A refusal; the connection is closed after it (``Connection: close``), the body unread.

        Authentication refusals (401, 503) read as the SuperLink's own (``{"detail": ...}`` JSON);
        the others are plain text, so clients such as the ``flwr`` CLI show the status code.
        """
        from starlette.responses import Response

        if reason:
            self._throttle.warning(f"{status}", "refused %s from %s: %s", status, peer or "?", reason)
        if status in (401, 503):
            return _json(status, {"detail": text})
        return Response(text, status_code=status, media_type="text/plain", headers={"connection": "close"})

    async def _handle(self, scope: Scope, receive: Receive) -> Response:
        method: str = scope["method"]
        raw_path: bytes = (scope.get("raw_path") or scope["path"].encode()).split(b"?", 1)[0]
        headers: list[tuple[bytes, bytes]] = list(scope["headers"])
        client = scope.get("client")
        peer = str(client[0]) if client else ""
        verdict = allowed(method, raw_path)
        if verdict is None:
            return self._refuse(404, "Not Found")
        if not verdict:
            return self._refuse(405, "Method Not Allowed")
        if raw_path == HEALTH_PATH:
            closes = _header(headers, b"content-length") not in (None, b"0") or _header(headers, b"transfer-encoding") is not None
            return await self._forward(method, raw_path, headers, None, close=closes)
        if self.authenticator is not None:
            refusal = self.authenticator.check(headers)
            if refusal is not None and refusal.unknown_key and raw_path == ACTIVATE_PATH:
                self._throttle.warning("412", "refused activation from %s: %s", peer or "?", refusal.reason)
                return _json(412, ACTIVATION_FAILED)
            if refusal is not None:
                text = "Invalid SuperNode authentication" if refusal.status == 401 else "Service Unavailable"
                return self._refuse(refusal.status, text, peer, refusal.reason)
        if any(k.lower() == b"transfer-encoding" for k, _ in headers):
            return self._refuse(411, "Length Required", peer, "a Fleet request must declare its Content-Length (no chunked body)")
        declared = _header(headers, b"content-length")
        if declared is None or not declared.isdigit() or len(declared) > 18:
            return self._refuse(411, "Length Required", peer, f"Content-Length {declared!r} is not one non-negative integer")
        size = int(declared)
        if size > self.max_body_bytes:
            return self._refuse(413, "Payload Too Large", peer, f"Content-Length {size} > --max-body-bytes {self.max_body_bytes}")
        return await self._forward(method, raw_path, headers, self._body(receive, size), size=size)

    async def _body(self, receive: Receive, size: int) -> AsyncIterator[bytes]:
        """The request body as it arrives: exactly ``size`` bytes within ``timeout`` seconds, else :class:`_BodyError`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        got = 0
        more = True
        while more:
            try:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0.0))
            except asyncio.TimeoutError:
                raise _BodyError(408, f"body not received within {self.timeout:g} s ({got} of {size} bytes)") from None
            if message["type"] == "http.disconnect":
                raise _BodyError(400, f"client gone after {got} of {size} bytes")
            chunk: bytes = message.get("body", b"")
            more = bool(message.get("more_body", False))
            got += len(chunk)
            if got > size:  # the HTTP parser stops at Content-Length; this is a second line of defence
                raise _BodyError(413, f"body longer than its Content-Length {size}")
            if chunk:
                yield chunk
        if got != size:
            raise _BodyError(400, f"body of {got} bytes, Content-Length {size}")

    async def _forward(
        self,
        method: str,
        raw_path: bytes,
        headers: list[tuple[bytes, bytes]],
        body: AsyncIterator[bytes] | None,
        *,
        size: int = 0,
        close: bool = False,
    ) -> Response:
        import httpx
        from starlette.background import BackgroundTask
        from starlette.responses import StreamingResponse

        url = self.base + raw_path.decode("ascii")  # no query string: the Fleet API takes none
        drop = HOP_BY_HOP | CLIENT_CLAIMS | {"content-length", "expect"}
        out = _filter([(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers], drop)
        if body is not None:
            out.append(("content-length", str(size)))  # streamed with this length, not chunked
        request = self.client.build_request(method, url, headers=out, content=body if body is not None else b"")
        where = raw_path.decode("latin-1")
        try:
            response = await self.client.send(request, stream=True)
        except _BodyError as exc:
            self._throttle.warning("body", "%s %s: %s", method, where, exc)
            return self._refuse(exc.status, {408: "Request Timeout", 413: "Payload Too Large"}.get(exc.status, "Bad Request"))
        except httpx.TimeoutException as exc:
            log.warning("%s %s: SuperLink timed out: %s", method, where, exc)
            return self._refuse(504, "Gateway Timeout")
        except httpx.TransportError as exc:
            log.warning("%s %s: SuperLink unreachable: %s", method, where, exc)
            return self._refuse(502, "Bad Gateway")
        out_headers = dict(_filter(response.headers))
        if close:
            out_headers["connection"] = "close"
        return StreamingResponse(
            response.aiter_raw(),
            status_code=response.status_code,
            headers=out_headers,
            background=BackgroundTask(response.aclose),
        )


def create_app(
    superlink: str,
    *,
    authorized_keys: str | os.PathLike[str] | AuthorizedKeys | None,
    root_certificates: str | None = None,
    timeout: float = 60.0,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_connections: int = 256,
    signature_max_age: float = SIGNATURE_MAX_AGE,
    max_signatures_per_key: int = MAX_SIGNATURES_PER_KEY,
    transport: httpx.AsyncBaseTransport | None = None,
) -> FleetProxy:
    """The proxy as an ASGI app.

    Parameters
    ----------
    superlink
        ``host:port`` of the SuperLink (normally on ``127.0.0.1``).
    authorized_keys
        The SuperNode public keys the SuperLink has registered: an authorized-keys file (see
        :func:`load_authorized_keys`; re-read when it changes) or an :class:`AuthorizedKeys`.
        ``None`` turns SuperNode authentication off (a SuperLink started without
        ``--enable-supernode-auth``): then anyone may send bodies up to ``max_body_bytes``.
    root_certificates
        CA bundle that signed the SuperLink's certificate: the proxy speaks HTTPS to it
        and verifies it. ``None``: plain HTTP (a SuperLink started with ``--insecure``).
    timeout
        Seconds to wait for the SuperLink to connect, send or answer, and for a client to send
        its whole request body (> 0).
    max_body_bytes
        Larger declared request bodies get 413 before any byte of them is read (> 0).
    max_connections
        Connections to the SuperLink at once; more requests wait (504 after ``timeout``).
    signature_max_age
        Oldest signed timestamp accepted, seconds (<= 305, the SuperLink's own window).
    max_signatures_per_key
        Signed requests of one key remembered against replays (see :class:`NodeAuthenticator`).
    transport
        The httpx transport to the SuperLink (``httpx.MockTransport`` in tests); default: TCP.
    """
    import httpx

    host, port = parse_address(superlink, "superlink")
    _positive("timeout", timeout, float)
    _positive("max_body_bytes", max_body_bytes)
    _positive("max_connections", max_connections)
    _positive("signature_max_age", signature_max_age, float)
    if signature_max_age > SIGNATURE_MAX_AGE:
        raise ValueError(f"signature_max_age must be <= {SIGNATURE_MAX_AGE:g} s (the SuperLink's own window); got {signature_max_age!r}")
    authenticator = None
    if authorized_keys is not None:
        keys = authorized_keys if isinstance(authorized_keys, AuthorizedKeys) else AuthorizedKeys(authorized_keys)
        authenticator = NodeAuthenticator(keys, max_age=signature_max_age, max_per_key=max_signatures_per_key)
        if not len(keys):
            log.warning("no key in %s: every Fleet request will be refused", keys.path)
    scheme = "https" if root_certificates else "http"
    verify: ssl.SSLContext | bool = (
        ssl.create_default_context(cafile=root_certificates) if root_certificates else False
    )
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    client = httpx.AsyncClient(
        verify=verify, timeout=httpx.Timeout(timeout), trust_env=False, follow_redirects=False,
        limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=min(max_connections, 64)),
        transport=transport,
    )
    return FleetProxy(client, f"{scheme}://{netloc}", authenticator, timeout=timeout, max_body_bytes=max_body_bytes)


# ------------------------------------------------------------------------ connections


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
    restarts its clock on every byte). Request heads are limited to :data:`MAX_HEADER_BYTES`
    by the uvicorn config :func:`serve` makes.
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    _positive("handshake_timeout", handshake_timeout, float)
    _positive("idle_timeout", idle_timeout, float)
    throttle = _Throttle()
    collector = _Collector()

    class GuardedH11Protocol(H11Protocol):
        _peer: str | None = None
        _ready = False  # uvicorn's connection_made has run (TLS is up)
        _lost = False
        _early: list[bytes] | None = None  # data decrypted before _ready (the request may follow the handshake at once)
        _head_timer: asyncio.TimerHandle | None = None
        _raw: asyncio.Transport | None = None  # the TCP transport (under TLS)

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            # uvicorn's set-up (an h11 parser, loggers...) waits until the connection is let in:
            # one refused in a flood costs this small object only
            self._init_args: tuple[tuple[Any, ...], dict[str, Any]] | None = (args, kwargs)

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            peername = transport.get_extra_info("peername")
            ip = str(peername[0]) if peername else ""
            if not limits.acquire(ip):
                throttle.warning("limit", "closed a connection from %s: %d open from it, %d in all (limits %d, %d)",
                                 ip, limits.by_ip.get(ip, 0), limits.open, limits.per_ip, limits.total)
                transport.abort()
                return
            self._peer = ip
            self._raw = transport
            limits.waiting(self, self._evict)
            assert self._init_args is not None
            args, kwargs = self._init_args
            self._init_args = None
            super().__init__(*args, **kwargs)
            if ssl_context is None:
                self._ready_on(transport)
                return
            transport.pause_reading()  # the ClientHello waits for start_tls
            task = self.loop.create_task(self._handshake(transport))
            self.tasks.add(task)  # uvicorn cancels these on shutdown
            task.add_done_callback(self.tasks.discard)

        async def _handshake(self, raw: asyncio.Transport) -> None:
            assert ssl_context is not None
            try:
                tls = await self.loop.start_tls(raw, self, ssl_context, server_side=True, ssl_handshake_timeout=handshake_timeout)
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
                limits.release(self._peer, self)
                self._peer = None

        def _evict(self) -> None:
            """Make room for a new connection: this one has waited longest for a request."""
            log.debug("evicted a waiting connection from %s (%d open)", self._peer, limits.open)
            self._release()
            if self._raw is not None:
                self._raw.abort()  # under TLS too: the socket goes, the TLS layer reports the loss

        def _arm(self) -> None:
            """Waiting for a request head: the idle clock runs, and the connection may be evicted."""
            if self._head_timer is None and not self.transport.is_closing():
                self._head_timer = self.loop.call_later(idle_timeout, self._idle)
                if self._peer is not None:
                    limits.waiting(self, self._evict)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
                limits.busy(self)

        def _idle(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                log.debug("closed a connection from %s: no request head within %g s", self._peer, idle_timeout)
                self.transport.abort()

        def handle_events(self) -> None:
            super().handle_events()
            if self.conn.their_state is h11.IDLE:
                self._arm()  # waiting for a request head: the clock runs (not restarted by each byte)
            else:
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.their_state is h11.IDLE:
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._lost = True
            self._disarm()
            self._release()
            if self._ready:
                super().connection_lost(exc)
            collector.closed()

    return GuardedH11Protocol


def serve(
    app: FleetProxy,
    host: str,
    port: int,
    *,
    certfile: str | None,
    keyfile: str | None,
    max_connections: int = MAX_CONNECTIONS,
    max_connections_per_ip: int = MAX_CONNECTIONS_PER_IP,
    handshake_timeout: float = 10.0,
    idle_timeout: float = 15.0,
    log_level: str = "info",
) -> None:
    """Run ``app`` with uvicorn on ``host:port`` (TLS with ``certfile``/``keyfile``; both ``None``: plain
    HTTP, for tests), each connection guarded by :func:`guarded_protocol`. Blocks until SIGINT/SIGTERM.
    """
    import uvicorn

    context: ssl.SSLContext | None = None
    if certfile is not None or keyfile is not None:
        if certfile is None or keyfile is None:
            raise ValueError("certfile and keyfile go together")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(certfile, keyfile)
    # asyncio gives every TLS connection a 256 KiB read buffer (SSLProtocol.max_size, Python >= 3.11),
    # resident from the first read: 256 connections held open cost 64 MB. 32 KiB (two TLS records)
    # uploaded a 5 MiB body as fast as 64 KiB (170 MB/s on loopback; 16 KiB: 133 MB/s) in a trial.
    # Process-wide: serve() runs the proxy's process.
    import asyncio.sslproto

    if getattr(asyncio.sslproto.SSLProtocol, "max_size", 0) > TLS_READ_BUFFER:
        asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER  # type: ignore[attr-defined]
    limits = ConnectionLimits(max_connections, max_connections_per_ip)
    protocol = guarded_protocol(context, limits, handshake_timeout=handshake_timeout, idle_timeout=idle_timeout)
    # loop="asyncio": the guard pauses a new connection's reading until start_tls takes it over,
    # which uvloop does not honour (its ClientHello reached the plain protocol in a trial)
    config = uvicorn.Config(
        app, host=host, port=port, http=protocol, ws="none", lifespan="on", interface="asgi3", loop="asyncio",
        log_level=log_level, proxy_headers=False, server_header=False, date_header=False,
        timeout_keep_alive=max(1, int(idle_timeout)), timeout_graceful_shutdown=2,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
    )
    uvicorn.Server(config).run()


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m topofl.flower.fleet_proxy --listen ... --superlink ...``."""
    parser = argparse.ArgumentParser(
        prog="python -m topofl.flower.fleet_proxy",
        description="TLS reverse proxy that forwards only a SuperLink's Fleet API "
        "(/v1/fleet/*) and /health, and only SuperNode-signed Fleet requests; everything else "
        "gets 404 (or 401).",
    )
    parser.add_argument("--listen", required=True, help="HOST:PORT to serve on (TLS)")
    parser.add_argument("--superlink", required=True, help="HOST:PORT of the SuperLink")
    parser.add_argument("--certfile", required=True, help="PEM certificate the proxy serves")
    parser.add_argument("--keyfile", required=True, help="PEM private key of --certfile")
    parser.add_argument(
        "--superlink-root-certificates", default=None,
        help="CA that signed the SuperLink's certificate (HTTPS to the SuperLink); "
        "without it the SuperLink is spoken to in plain HTTP",
    )
    auth = parser.add_mutually_exclusive_group(required=True)
    auth.add_argument("--authorized-keys", default=None,
                      help="file of the SuperNode public keys registered with the SuperLink (OpenSSH, one a "
                      "line; re-read when it changes): Fleet requests not signed by one get 401, body unread")
    auth.add_argument("--no-node-auth", action="store_true",
                      help="forward Fleet requests without SuperNode-authentication headers (a SuperLink "
                      "without --enable-supernode-auth)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for the SuperLink, and for a client's whole body (default 60)")
    parser.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES,
                        help=f"largest request body forwarded (default {MAX_BODY_BYTES}: Flower sends arrays in "
                        f"{ARRAY_CHUNK_BYTES}-byte chunks, one per request); larger ones get 413 unread")
    parser.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS,
                        help=f"connections open at once (default {MAX_CONNECTIONS}); when full, the one that has waited "
                        "longest for a request is closed for a new one")
    parser.add_argument("--max-connections-per-ip", type=int, default=MAX_CONNECTIONS_PER_IP,
                        help=f"connections open at once from one address (default {MAX_CONNECTIONS_PER_IP}; a SuperNode "
                        "uses up to ~6)")
    parser.add_argument("--handshake-timeout", type=float, default=10.0, help="seconds for a TLS handshake (default 10)")
    parser.add_argument("--idle-timeout", type=float, default=15.0,
                        help="seconds for a request's headers to arrive after connecting or after the previous "
                        "response (default 15)")
    parser.add_argument("--signature-max-age", type=float, default=SIGNATURE_MAX_AGE,
                        help=f"oldest signed timestamp accepted, seconds (default and most {SIGNATURE_MAX_AGE:g}, Flower's)")
    parser.add_argument("--log-level", default="info",
                        choices=["critical", "error", "warning", "info", "debug"])
    args = parser.parse_args(argv)

    try:
        host, port = parse_address(args.listen, "--listen")
        for flag, kind in (("timeout", float), ("max_body_bytes", int), ("max_connections", int), ("max_connections_per_ip", int),
                           ("handshake_timeout", float), ("idle_timeout", float), ("signature_max_age", float)):
            _positive("--" + flag.replace("_", "-"), getattr(args, flag), kind)
        if args.max_connections_per_ip > args.max_connections:
            raise ValueError(f"--max-connections-per-ip ({args.max_connections_per_ip}) must be <= --max-connections ({args.max_connections})")
        if args.signature_max_age > SIGNATURE_MAX_AGE:
            raise ValueError(f"--signature-max-age must be <= {SIGNATURE_MAX_AGE:g} s (the SuperLink's own window); got {args.signature_max_age!r}")
        app = create_app(
            args.superlink, authorized_keys=args.authorized_keys,
            root_certificates=args.superlink_root_certificates,
            timeout=args.timeout, max_body_bytes=args.max_body_bytes,
            signature_max_age=args.signature_max_age,
        )
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    if args.no_node_auth:
        log.warning("--no-node-auth: Fleet requests are forwarded without SuperNode authentication")
    log.info("Fleet proxy on https://%s:%d -> %s (bodies <= %d bytes)", host, port, args.superlink, args.max_body_bytes)
    serve(
        app, host, port, certfile=args.certfile, keyfile=args.keyfile,
        max_connections=args.max_connections, max_connections_per_ip=args.max_connections_per_ip,
        handshake_timeout=args.handshake_timeout, idle_timeout=args.idle_timeout, log_level=args.log_level,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
