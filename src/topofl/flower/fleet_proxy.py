r"""A TLS reverse proxy that exposes only a Flower SuperLink's Fleet API.

In Flower 1.41 one SuperLink port serves the Fleet API (``/v1/fleet/*``, for
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
or ``/v1/fleet/%2e%2e/...`` never reach the SuperLink. A request body is read whole, within
``--timeout`` and at most ``--max-body-bytes`` (else 408 / 413), before the SuperLink is
contacted — which would otherwise buffer any body before checking its signature; responses
are streamed. The query string and client-supplied forwarding headers (``Forwarded``,
``X-Forwarded-*``, ``X-Real-IP``) are dropped; SuperNode-authentication headers (a signed
timestamp and the public key) pass through unchanged. When the SuperLink cannot be reached the
proxy answers 502 (504 on a timeout), which SuperNodes retry, so a SuperLink restart
behind the proxy looks to them like any other outage::

    python -m topofl.flower.fleet_proxy --listen 0.0.0.0:9092 \
        --superlink 127.0.0.1:9093 --superlink-root-certificates ca.pem \
        --certfile server.pem --keyfile server.key

Starlette, httpx and uvicorn are Flower dependencies, so nothing more is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import re
import ssl
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx
    from starlette.applications import Starlette

__all__ = ["FLEET_PATH", "HOP_BY_HOP", "allowed", "create_app", "main", "parse_address"]

log = logging.getLogger(__name__)

FLEET_PATH = re.compile(rb"/v1/fleet/[a-z][a-z-]*")
"""Raw request paths forwarded with ``POST`` (the Fleet API's routes)."""

HEALTH_PATH = b"/health"

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

MAX_BODY_BYTES = 512 * 2**20
"""Default cap on a request body (a SuperNode's largest message is its model update)."""


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


def create_app(
    superlink: str,
    *,
    root_certificates: str | None = None,
    timeout: float = 60.0,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_connections: int = 256,
) -> Starlette:
    """The proxy as an ASGI app.

    Parameters
    ----------
    superlink
        ``host:port`` of the SuperLink (normally on ``127.0.0.1``).
    root_certificates
        CA bundle that signed the SuperLink's certificate: the proxy speaks HTTPS to it
        and verifies it. ``None``: plain HTTP (a SuperLink started with ``--insecure``).
    timeout
        Seconds to wait for the SuperLink to connect, send or answer, and for a client to send
        its whole request body (> 0).
    max_body_bytes
        Larger request bodies get 413 before anything reaches the SuperLink (which would buffer
        a body before checking its signature).
    max_connections
        Connections to the SuperLink at once; more requests wait (504 after ``timeout``).
    """
    import httpx
    from starlette.applications import Starlette
    from starlette.background import BackgroundTask
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response, StreamingResponse
    from starlette.routing import Route

    host, port = parse_address(superlink, "superlink")
    if not timeout > 0:
        raise ValueError(f"timeout must be > 0 s; got {timeout!r}")
    for name, value in (("max_body_bytes", max_body_bytes), ("max_connections", max_connections)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer; got {value!r}")
    scheme = "https" if root_certificates else "http"
    verify: ssl.SSLContext | bool = (
        ssl.create_default_context(cafile=root_certificates) if root_certificates else False
    )
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    base = f"{scheme}://{netloc}"
    client = httpx.AsyncClient(
        verify=verify, timeout=httpx.Timeout(timeout), trust_env=False, follow_redirects=False,
        limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=min(max_connections, 64)),
    )

    async def read_body(request: Request) -> bytes | None:
        """The whole body, or ``None`` when it exceeds ``max_body_bytes``."""
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_body_bytes:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    async def proxy(request: Request) -> Response:
        raw_path: bytes = request.scope.get("raw_path") or request.url.path.encode()
        raw_path = raw_path.split(b"?", 1)[0]
        verdict = allowed(request.method, raw_path)
        if verdict is None:
            return PlainTextResponse("Not Found", status_code=404)
        if not verdict:
            return PlainTextResponse("Method Not Allowed", status_code=405)
        url = base + raw_path.decode("ascii")  # no query string: the Fleet API takes none
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_body_bytes:
            return PlainTextResponse("Payload Too Large", status_code=413)
        try:
            body = await asyncio.wait_for(read_body(request), timeout)
        except asyncio.TimeoutError:
            return PlainTextResponse("Request Timeout", status_code=408)
        if body is None:
            return PlainTextResponse("Payload Too Large", status_code=413)
        upstream = client.build_request(
            request.method, url, headers=_filter(request.headers.items(), HOP_BY_HOP | CLIENT_CLAIMS | {"content-length"}),
            content=body,
        )
        try:
            response = await client.send(upstream, stream=True)
        except httpx.TimeoutException as exc:
            log.warning("%s %s: SuperLink timed out: %s", request.method, raw_path.decode("latin-1"), exc)
            return PlainTextResponse("Gateway Timeout", status_code=504)
        except httpx.TransportError as exc:
            log.warning("%s %s: SuperLink unreachable: %s", request.method, raw_path.decode("latin-1"), exc)
            return PlainTextResponse("Bad Gateway", status_code=502)
        return StreamingResponse(
            response.aiter_raw(),
            status_code=response.status_code,
            headers=dict(_filter(response.headers)),
            background=BackgroundTask(response.aclose),
        )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with client:  # closed when the server stops
            yield

    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    return Starlette(routes=[Route("/{path:path}", proxy, methods=methods)], lifespan=lifespan)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m topofl.flower.fleet_proxy --listen ... --superlink ...``."""
    parser = argparse.ArgumentParser(
        prog="python -m topofl.flower.fleet_proxy",
        description="TLS reverse proxy that forwards only a SuperLink's Fleet API "
        "(/v1/fleet/*) and /health; everything else gets 404.",
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
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for the SuperLink (default 60)")
    parser.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES,
                        help=f"largest request body forwarded (default {MAX_BODY_BYTES}); larger ones get 413")
    parser.add_argument("--log-level", default="info",
                        choices=["critical", "error", "warning", "info", "debug"])
    args = parser.parse_args(argv)
    import uvicorn

    try:
        host, port = parse_address(args.listen, "--listen")
        app = create_app(
            args.superlink, root_certificates=args.superlink_root_certificates,
            timeout=args.timeout, max_body_bytes=args.max_body_bytes,
        )
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    log.info("Fleet proxy on https://%s:%d -> %s", host, port, args.superlink)
    uvicorn.run(
        app, host=host, port=port, ssl_certfile=args.certfile, ssl_keyfile=args.keyfile,
        log_level=args.log_level, proxy_headers=False, server_header=False,
        timeout_graceful_shutdown=2,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
