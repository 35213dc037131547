"""The Fleet proxy as an ASGI application: check the path and the sender, then stream the body to the SuperLink."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from topofl.deploy.proxy_auth import (
    MAX_SIGNATURES_PER_KEY,
    SIGNATURE_MAX_AGE,
    AuthorizedKeys,
    NodeAuthenticator,
    _header,
)
from topofl.deploy.proxy_rules import (
    _REFUSED_HEADERS,
    ACTIVATE_PATH,
    ACTIVATION_FAILED,
    CLIENT_CLAIMS,
    HEALTH_PATH,
    HOP_BY_HOP,
    MAX_BODY_BYTES,
    _filter,
    _positive,
    _Throttle,
    allowed,
    parse_address,
)

if TYPE_CHECKING:
    import httpx
    from starlette.responses import Response
    from starlette.types import Receive, Scope, Send

__all__ = ["FleetProxy", "create_app"]

log = logging.getLogger("topofl.deploy.proxy")  # one name for the whole proxy's log


class _BodyError(Exception):
    """The client's body did not arrive as declared: ``status`` goes back to it."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status



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
            closes = (_header(headers, b"content-length") not in (None, b"0")
                      or _header(headers, b"transfer-encoding") is not None)
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
            return self._refuse(411, "Length Required", peer,
                                "a Fleet request must declare its Content-Length (no chunked body)")
        declared = _header(headers, b"content-length")
        if declared is None or not declared.isdigit() or len(declared) > 18:
            return self._refuse(411, "Length Required", peer,
                                f"Content-Length {declared!r} is not one non-negative integer")
        size = int(declared)
        if size > self.max_body_bytes:
            return self._refuse(413, "Payload Too Large", peer,
                                f"Content-Length {size} > --max-body-bytes {self.max_body_bytes}")
        return await self._forward(method, raw_path, headers, self._body(receive, size), size=size)

    async def _body(self, receive: Receive, size: int) -> AsyncIterator[bytes]:
        """The request body as it arrives: exactly ``size`` bytes within ``timeout`` seconds.

        Raises :class:`_BodyError` otherwise.
        """
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
            text = {408: "Request Timeout", 413: "Payload Too Large"}.get(exc.status, "Bad Request")
            return self._refuse(exc.status, text)
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
        raise ValueError(f"signature_max_age must be <= {SIGNATURE_MAX_AGE:g} s (the SuperLink's own window); "
                         f"got {signature_max_age!r}")
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
