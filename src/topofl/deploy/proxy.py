"""The Fleet proxy: a TLS reverse proxy that lets only SuperNode-signed Fleet API requests reach a SuperLink.

Run it as its own process: ``python -m topofl.deploy.proxy --listen HOST:PORT --superlink 127.0.0.1:PORT
--certfile server.pem --keyfile server.key --authorized-keys supernodes.pub`` (``--help`` lists the limits).
This module holds :func:`serve` and :func:`main` and re-exports the proxy's public names; what the proxy
guarantees against whoever reaches its port is in ``docs/deployment.md``.
"""

from __future__ import annotations

import argparse
import logging
import ssl
from collections.abc import Sequence

from topofl.deploy.proxy_app import FleetProxy, create_app
from topofl.deploy.proxy_auth import (
    SIGNATURE_MAX_AGE,
    AuthorizedKeys,
    NodeAuthenticator,
    Refusal,
    load_authorized_keys,
    signed_headers,
)
from topofl.deploy.proxy_connections import ConnectionLimits, guarded_protocol
from topofl.deploy.proxy_rules import (
    ARRAY_CHUNK_BYTES,
    FLEET_PATH,
    HOP_BY_HOP,
    MAX_BODY_BYTES,
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_IP,
    MAX_HEADER_BYTES,
    TLS_READ_BUFFER,
    _positive,
    allowed,
    default_max_body_bytes,
    parse_address,
)

__all__ = [
    "FLEET_PATH", "HOP_BY_HOP", "MAX_BODY_BYTES", "AuthorizedKeys", "ConnectionLimits", "FleetProxy",
    "NodeAuthenticator", "Refusal", "allowed", "create_app", "default_max_body_bytes", "guarded_protocol",
    "load_authorized_keys", "main", "parse_address", "serve", "signed_headers",
]

log = logging.getLogger("topofl.deploy.proxy")  # one name for the whole proxy's log


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

    Parameters
    ----------
    app
        The proxy (:func:`create_app`).
    host, port
        Where to listen.
    certfile, keyfile
        The PEM certificate the proxy serves and its private key (both or neither).
    max_connections, max_connections_per_ip
        Connections open at once, in all and from one address (see :class:`ConnectionLimits`).
    handshake_timeout, idle_timeout
        Seconds for a TLS handshake, and for a request head to arrive (see :func:`guarded_protocol`).
    log_level
        uvicorn's log level.
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
    """Command line: ``python -m topofl.deploy.proxy --listen ... --superlink ...``.

    Parameters
    ----------
    argv
        The arguments (default ``sys.argv[1:]``); ``--help`` lists them.

    Returns
    -------
    int
        0 once the proxy has stopped (bad arguments exit with status 2).
    """
    parser = argparse.ArgumentParser(
        prog="python -m topofl.deploy.proxy",
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
                        help=f"connections open at once (default {MAX_CONNECTIONS}); when full, the one that has "
                        "waited longest for a request is closed for a new one")
    parser.add_argument("--max-connections-per-ip", type=int, default=MAX_CONNECTIONS_PER_IP,
                        help=f"connections open at once from one address (default {MAX_CONNECTIONS_PER_IP}; "
                        "a SuperNode uses up to ~6)")
    parser.add_argument("--handshake-timeout", type=float, default=10.0,
                        help="seconds for a TLS handshake (default 10)")
    parser.add_argument("--idle-timeout", type=float, default=15.0,
                        help="seconds for a request's headers to arrive after connecting or after the previous "
                        "response (default 15)")
    parser.add_argument("--signature-max-age", type=float, default=SIGNATURE_MAX_AGE,
                        help=f"oldest signed timestamp accepted, seconds (default and most {SIGNATURE_MAX_AGE:g}, "
                        "Flower's)")
    parser.add_argument("--log-level", default="info",
                        choices=["critical", "error", "warning", "info", "debug"])
    args = parser.parse_args(argv)

    try:
        host, port = parse_address(args.listen, "--listen")
        for flag, kind in (("timeout", float), ("max_body_bytes", int), ("max_connections", int),
                           ("max_connections_per_ip", int), ("handshake_timeout", float), ("idle_timeout", float),
                           ("signature_max_age", float)):
            _positive("--" + flag.replace("_", "-"), getattr(args, flag), kind)
        if args.max_connections_per_ip > args.max_connections:
            raise ValueError(f"--max-connections-per-ip ({args.max_connections_per_ip}) must be <= "
                             f"--max-connections ({args.max_connections})")
        if args.signature_max_age > SIGNATURE_MAX_AGE:
            raise ValueError(f"--signature-max-age must be <= {SIGNATURE_MAX_AGE:g} s (the SuperLink's own window); "
                             f"got {args.signature_max_age!r}")
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
