"""Benchmark: the Fleet proxy (``topofl.deploy.proxy``) under pre-authentication load.

What an outsider who can reach the proxy's port (and has ``ca.pem``, which every site gets) can do
to the memory of the proxy and of what is behind it, on loopback:

1. **flood**: ``--requests`` concurrent ``POST /v1/fleet/push-object`` without SuperNode-authentication
   headers, each declaring ``--declared-mb`` MB and sending up to ``--send-mb`` MB as fast as the proxy
   takes them (from 127.0.0.2);
2. **idle**: ``--idle`` connections held open ``--hold`` seconds (from 127.0.0.2, or from ``--spread``
   addresses 127.0.0.2, 127.0.0.3, ...), half of them bare TCP
   (no TLS ClientHello), half after a completed TLS handshake but without a request;
   repeated ``--idle-rounds`` times (what each round leaves behind shows as growth between rounds);
3. **honest**: while the last round's idle connections are held, a request signed as a SuperNode does
   (``flwr-public-key``/``flwr-timestamp``/``flwr-signature`` made with Flower's own helpers, from
   127.0.0.1) must get 200, and the same signed headers sent again (a replay) must not;
4. **upload** (dummy upstream): a signed upload of ``--upload-mb`` (Flower's largest request: one 5 MiB
   array chunk), timed, best of 3.

Behind the proxy is either a dummy upstream (``--upstream dummy``: a small HTTP server that counts the
request-body bytes it receives and never buffers them) or a real SuperLink (``--upstream superlink``:
:class:`topofl.deploy.LocalDeployment` with one SuperNode, started as the tests start it,
with the proxy it launches; the honest request is a signed ``send-node-heartbeat`` of node 0).
The resident set size (RSS, psutil) of the proxy and of the upstream is printed idle, at its peak
during each phase (sampled every 50 ms) and after, with the bytes the upstream received.

``--proxy-script PATH`` runs another proxy script with only the options every version takes
(``--listen --superlink --certfile --keyfile [--superlink-root-certificates]``): how the "before"
figures of the pre-hardening proxy were measured.

Run: ``python benchmarks/bench_proxy_load.py`` (defaults: dummy upstream, 10 requests declaring
300 MB and sending up to 64 MB each, 3 rounds of 1,000 idle connections held 5 s); ``--upstream superlink`` for a
real SuperLink; ``--json`` for one JSON line. Needs the flower extra (psutil, cryptography, flwr).
"""
from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

MB = 1e6
ATTACKER_IP = "127.0.0.2"  # all of 127.0.0.0/8 is loopback on Linux: the outsider is another address
HONEST_IP = "127.0.0.1"
PUSH_OBJECT = "/v1/fleet/push-object"

# A dummy SuperLink: counts the request-body bytes it is sent (discarding them), answers 200 "ok";
# GET /stats answers {"bytes": ..., "requests": ...} (POSTs only). One asyncio task per connection.
UPSTREAM_SCRIPT = r"""
import asyncio, json, sys
stats = {"bytes": 0, "requests": 0}
async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target = lines[0].split(" ")[:2]
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            remaining = int(headers.get("content-length", "0"))
            if method == "POST":
                stats["requests"] += 1
            while remaining:
                chunk = await reader.read(min(remaining, 1 << 16))
                if not chunk:
                    return
                remaining -= len(chunk)
                stats["bytes"] += len(chunk)
            body = json.dumps(stats).encode() if target == "/stats" else b"ok"
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
            await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()
async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]))
    async with server:
        await server.serve_forever()
asyncio.run(main())
"""


# ------------------------------------------------------------------------------------- helpers


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def rss_mb(pid: int) -> float:
    """Resident set size of one process, MB (0 if it is gone)."""
    try:
        return float(psutil.Process(pid).memory_info().rss) / MB
    except psutil.Error:
        return 0.0


class PeakSampler:
    """Largest RSS of each watched process, sampled every ``interval`` seconds in a thread."""

    def __init__(self, pids: dict[str, int], interval: float = 0.05) -> None:
        self.pids, self.interval = pids, interval
        self.peak = {name: rss_mb(pid) for name, pid in pids.items()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            for name, pid in self.pids.items():
                self.peak[name] = max(self.peak[name], rss_mb(pid))

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for name, pid in self.pids.items():
            self.peak[name] = max(self.peak[name], rss_mb(pid))


def wait_health(url: str, ca: Path | None, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    context = ssl.create_default_context(cafile=str(ca)) if ca else None
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as resp:  # noqa: S310 (loopback)
                if resp.status == 200:
                    return
        except OSError:
            pass
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{url}: the process exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} not healthy after {timeout} s")
        time.sleep(0.2)


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, then SIGKILL after 10 s: only the process this benchmark started, by its PID."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def tls_context(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


def signed_headers(private_key_path: Path) -> dict[str, str]:
    """The headers a SuperNode sends (Flower's NodeAuthHttpInterceptor), made with Flower's helpers."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from flwr.supercore.primitives.asymmetric import public_key_to_bytes, sign_message

    key = serialization.load_ssh_private_key(private_key_path.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    timestamp = datetime.datetime.now(datetime.timezone.utc).isoformat()
    return {
        "flwr-public-key": base64.b64encode(public_key_to_bytes(key.public_key())).decode("ascii"),
        "flwr-timestamp": timestamp,
        "flwr-signature": base64.b64encode(sign_message(key, timestamp.encode("ascii"))).decode("ascii"),
    }


def post(address: tuple[str, int], ca: Path, path: str, body: bytes, headers: dict[str, str],
         source: str = HONEST_IP, timeout: float = 30.0) -> tuple[int, bytes]:
    """One HTTPS POST over a fresh connection from ``source``: (status, body); status 0 if the connection broke."""
    head = f"POST {path} HTTP/1.1\r\nhost: {address[0]}\r\ncontent-type: application/protobuf\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    head += f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    try:
        with socket.create_connection(address, timeout=timeout, source_address=(source, 0)) as raw, \
                tls_context(ca).wrap_socket(raw, server_hostname=address[0]) as sock:
            sock.sendall(head.encode("latin-1") + body)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
    except OSError:
        return 0, b""
    status_line, _, rest = data.partition(b"\r\n")
    parts = status_line.split(b" ")
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    return status, rest.partition(b"\r\n\r\n")[2]


# ------------------------------------------------------------------------------------- phases


@dataclass
class FloodResult:
    """What :func:`flood` saw."""

    statuses: dict[str, int] = field(default_factory=dict)
    """How each request ended: ``"401"``, ``"413"``... or ``"broken"`` (connection reset before a status)."""
    sent_mb: float = 0.0
    """Body bytes the clients managed to send, in total."""
    seconds: float = 0.0


def flood(address: tuple[str, int], ca: Path, requests: int, declared: int, send_limit: int,
          source: str = ATTACKER_IP, timeout: float = 120.0) -> FloodResult:
    """``requests`` concurrent unauthenticated POSTs declaring ``declared`` bytes, each sending up to ``send_limit``."""
    result = FloodResult()
    lock = threading.Lock()
    barrier = threading.Barrier(requests)
    chunk = b"\0" * (1 << 20)

    def one() -> None:
        sent, status = 0, "broken"
        try:
            with socket.create_connection(address, timeout=timeout, source_address=(source, 0)) as raw, \
                    tls_context(ca).wrap_socket(raw, server_hostname=address[0]) as sock:
                barrier.wait(timeout)
                sock.sendall(f"POST {PUSH_OBJECT} HTTP/1.1\r\nhost: x\r\ncontent-type: application/protobuf\r\n"
                             f"content-length: {declared}\r\n\r\n".encode())
                with contextlib.suppress(OSError):
                    while sent < send_limit:
                        n = min(len(chunk), send_limit - sent)
                        sock.sendall(chunk[:n])
                        sent += n
                with contextlib.suppress(OSError):
                    line = sock.recv(4096).split(b"\r\n", 1)[0].split(b" ")
                    if len(line) > 1 and line[1].isdigit():
                        status = line[1].decode()
        except (OSError, threading.BrokenBarrierError):
            pass
        with lock:
            result.statuses[status] = result.statuses.get(status, 0) + 1
            result.sent_mb += sent / MB

    t0 = time.monotonic()
    threads = [threading.Thread(target=one) for _ in range(requests)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result.seconds = time.monotonic() - t0
    return result


@contextlib.contextmanager
def idle_connections(address: tuple[str, int], ca: Path, count: int, source: str = ATTACKER_IP, spread: int = 1) -> Iterator[dict[str, int]]:
    """Open ``count`` connections (half bare TCP, half TLS without a request) and hold them while inside.

    ``spread`` > 1: from that many addresses, 127.0.0.2, 127.0.0.3, ... in turn (``source`` ignored).

    Yields counts: ``opened`` (TCP connects that succeeded), ``tls`` (handshakes completed), and on exit
    ``still_open`` (connections the proxy had not closed when the hold ended).
    """
    raws: list[socket.socket] = []
    tls: list[ssl.SSLSocket] = []
    counts = {"opened": 0, "tls": 0, "still_open": 0}
    context = tls_context(ca)
    try:
        for i in range(count):
            origin = source if spread <= 1 else f"127.0.{(i % spread) // 250}.{2 + (i % spread) % 250}"
            try:
                sock = socket.create_connection(address, timeout=5, source_address=(origin, 0))
            except OSError:
                continue
            counts["opened"] += 1
            if i % 2 == 0:
                raws.append(sock)
                continue
            try:
                tls.append(context.wrap_socket(sock, server_hostname=address[0]))
                counts["tls"] += 1
            except OSError:
                sock.close()
        yield counts
        for s in [*raws, *tls]:
            s.setblocking(False)
            try:
                counts["still_open"] += s.recv(1) != b""
            except (BlockingIOError, ssl.SSLWantReadError):
                counts["still_open"] += 1  # nothing to read, not closed
            except OSError:  # reset (ssl.SSLError is an OSError too)
                pass
    finally:
        for s in [*raws, *tls]:
            with contextlib.suppress(OSError):
                s.close()


# ------------------------------------------------------------------------------------- set-ups


@dataclass
class Setup:
    """Where the proxy listens and what to watch."""

    address: tuple[str, int]
    ca: Path
    key: Path
    pids: dict[str, int]
    honest_path: str
    honest_body: bytes
    upstream_stats: str | None = None
    """URL of the dummy upstream's counters (``None`` for a SuperLink)."""


def _proxy_args(script: str | None, listen: str, upstream: str, certs: Path, root_ca: bool, extra: list[str]) -> list[str]:
    args = [sys.executable, script] if script else [sys.executable, "-m", "topofl.deploy.proxy"]
    args += ["--listen", listen, "--superlink", upstream, "--certfile", str(certs / "server.pem"), "--keyfile", str(certs / "server.key")]
    if root_ca:
        args += ["--superlink-root-certificates", str(certs / "ca.pem")]
    if script is None:
        args += extra
    return args


@contextlib.contextmanager
def dummy_setup(workdir: Path, proxy_script: str | None = None, proxy_extra: list[str] | None = None) -> Iterator[Setup]:
    """A dummy upstream and a proxy in front of it, both subprocesses; stopped by PID on exit."""
    from topofl.deploy.credentials import generate_credentials

    creds = generate_credentials(workdir / "certs", 1)
    keys = workdir / "authorized-keys"
    keys.write_bytes(creds.public_key(0).read_bytes())
    env = dict(os.environ, FLWR_TELEMETRY_ENABLED="0", PYTHONUNBUFFERED="1")
    up_port, proxy_port = free_port(), free_port()
    upstream = proxy = None
    try:
        upstream = subprocess.Popen([sys.executable, "-c", UPSTREAM_SCRIPT, str(up_port)], env=env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_health(f"http://127.0.0.1:{up_port}/health", None, 30, upstream)
        extra = ["--authorized-keys", str(keys), *(proxy_extra or [])]
        log = (workdir / "proxy.log").open("wb")
        proxy = subprocess.Popen(_proxy_args(proxy_script, f"127.0.0.1:{proxy_port}", f"127.0.0.1:{up_port}", creds.directory, False, extra),
                                 env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        wait_health(f"https://127.0.0.1:{proxy_port}/health", creds.ca, 30, proxy)
        yield Setup(("127.0.0.1", proxy_port), creds.ca, creds.node_keys[0], {"proxy": proxy.pid, "upstream": upstream.pid},
                    PUSH_OBJECT, b"\x01" * 1000, f"http://127.0.0.1:{up_port}/stats")
    finally:
        stop(proxy)
        stop(upstream)


@contextlib.contextmanager
def superlink_setup(workdir: Path, proxy_script: str | None = None) -> Iterator[Setup]:
    """:class:`LocalDeployment` with one SuperNode (SuperLink on loopback, node auth, its Fleet proxy)."""
    from flwr.proto.heartbeat_pb2 import SendNodeHeartbeatRequest  # type: ignore[attr-defined]
    from flwr.proto.node_pb2 import Node  # type: ignore[attr-defined]

    from topofl.deploy import LocalDeployment

    with LocalDeployment(1, workdir / "deployment") as dep:
        assert dep.credentials is not None and dep.proxy is not None and dep.superlink is not None
        body = SendNodeHeartbeatRequest(node=Node(node_id=dep.node_ids[0]), heartbeat_interval=30).SerializeToString()
        proxy = None
        try:
            if proxy_script is None:
                host, port, pid = dep.host, dep.proxy_port, dep.proxy.pid
            else:  # another proxy script in front of the same SuperLink
                host, port = "127.0.0.1", free_port()
                log = (workdir / "proxy.log").open("wb")
                proxy = subprocess.Popen(_proxy_args(proxy_script, f"{host}:{port}", dep.address, dep.credentials.directory, True, []),
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env=dict(os.environ, FLWR_TELEMETRY_ENABLED="0"))
                log.close()
                wait_health(f"https://{host}:{port}/health", dep.credentials.ca, 30, proxy)
                pid = proxy.pid
            assert port is not None
            yield Setup((host, port), dep.credentials.ca, dep.credentials.node_keys[0],
                        {"proxy": pid, "superlink": dep.superlink.pid}, "/v1/fleet/send-node-heartbeat", body)
        finally:
            stop(proxy)


# ------------------------------------------------------------------------------------- the run


def upstream_bytes(setup: Setup) -> int | None:
    if setup.upstream_stats is None:
        return None
    with urllib.request.urlopen(setup.upstream_stats, timeout=10) as resp:  # noqa: S310 (loopback)
        return int(json.loads(resp.read())["bytes"])


def measure(setup: Setup, *, requests: int = 10, declared: int = 300_000_000, send_limit: int = 64_000_000,
            idle: int = 1000, hold: float = 5.0, settle: float = 2.0, idle_rounds: int = 1, upload: int = 0,
            spread: int = 1) -> dict[str, Any]:
    """Run the phases against ``setup``; RSS figures in MB.

    ``idle_rounds``: the idle phase is repeated (RSS after each round in ``idle.rounds_rss``: memory a
    round leaves behind shows as growth from round to round). ``upload``: bytes of one signed upload
    timed after the rest (dummy upstream only; 0: none). ``spread``: the idle connections come from
    that many addresses (see :func:`idle_connections`).
    """
    out: dict[str, Any] = {}
    time.sleep(settle)
    out["idle_rss"] = {name: rss_mb(pid) for name, pid in setup.pids.items()}
    bytes0 = upstream_bytes(setup)

    with PeakSampler(setup.pids) as sampler:
        res = flood(setup.address, setup.ca, requests, declared, send_limit)
    time.sleep(settle)
    out["flood"] = {"statuses": res.statuses, "sent_mb": round(res.sent_mb, 1), "seconds": round(res.seconds, 2),
                    "peak_rss": sampler.peak, "after_rss": {n: rss_mb(p) for n, p in setup.pids.items()}}
    bytes1 = upstream_bytes(setup)
    if bytes0 is not None and bytes1 is not None:
        out["flood"]["upstream_mb"] = (bytes1 - bytes0) / MB

    rounds_rss = []
    with PeakSampler(setup.pids) as sampler:
        for k in range(idle_rounds):
            t0 = time.monotonic()
            with idle_connections(setup.address, setup.ca, idle, spread=spread) as counts:
                time.sleep(max(0.0, hold - (time.monotonic() - t0)))
                if k == idle_rounds - 1:  # while the last round's connections are held
                    headers = signed_headers(setup.key)
                    honest = post(setup.address, setup.ca, setup.honest_path, setup.honest_body, headers)
                    replay = post(setup.address, setup.ca, setup.honest_path, setup.honest_body, headers)
            time.sleep(settle)
            rounds_rss.append({n: rss_mb(p) for n, p in setup.pids.items()})
    out["idle"] = {**counts, "rounds": idle_rounds, "seconds_per_round": round(time.monotonic() - t0, 2), "peak_rss": sampler.peak,
                   "after_rss": rounds_rss[-1], "rounds_rss": rounds_rss}
    out["honest_status"], out["replay_status"] = honest[0], replay[0]
    bytes2 = upstream_bytes(setup)
    if bytes1 is not None and bytes2 is not None:
        out["honest_upstream_bytes"] = bytes2 - bytes1
    if upload and setup.upstream_stats is not None:
        body = b"\x07" * upload
        times = []
        for _ in range(3):
            t0 = time.monotonic()
            status, _ = post(setup.address, setup.ca, PUSH_OBJECT, body, signed_headers(setup.key))
            times.append(time.monotonic() - t0)
            assert status == 200, status
        out["upload"] = {"mb": upload / MB, "best_seconds": round(min(times), 3), "mb_per_s": round(upload / MB / min(times), 1)}
    out["max_growth_mb"] = {
        name: max(out["flood"]["peak_rss"][name], out["idle"]["peak_rss"][name]) - out["idle_rss"][name] for name in setup.pids
    }
    return out


def report(label: str, out: dict[str, Any]) -> None:
    print(f"== {label}")
    names = list(out["idle_rss"])
    print(f"{'RSS (MB)':<28}" + "".join(f"{n:>12}" for n in names))
    rows = [("idle", out["idle_rss"]), ("flood: peak", out["flood"]["peak_rss"]), ("flood: after", out["flood"]["after_rss"]),
            ("idle connections: peak", out["idle"]["peak_rss"]), ("idle connections: after", out["idle"]["after_rss"]),
            ("largest growth over idle", out["max_growth_mb"])]
    for title, row in rows:
        print(f"{title:<28}" + "".join(f"{row[n]:>12.0f}" for n in names))
    fl = out["flood"]
    print(f"flood: statuses {fl['statuses']}, {fl['sent_mb']:.0f} MB sent by the clients in {fl['seconds']:.1f} s"
          + (f", {fl['upstream_mb']:.0f} MB reached the upstream" if "upstream_mb" in fl else ""))
    idl = out["idle"]
    print(f"idle: {idl['opened']} TCP connects, {idl['tls']} TLS handshakes completed, {idl['still_open']} still open at the end of the hold"
          + (f"; RSS after each of {idl['rounds']} rounds: " + "; ".join(", ".join(f"{n} {r[n]:.0f}" for n in names) for r in idl["rounds_rss"])
             if idl["rounds"] > 1 else ""))
    if "upload" in out:
        up = out["upload"]
        print(f"signed upload of {up['mb']:.1f} MB through the proxy: {up['best_seconds']} s ({up['mb_per_s']} MB/s, best of 3)")
    print(f"honest signed request: {out['honest_status']}; the same headers replayed: {out['replay_status']}"
          + (f"; upstream received {out['honest_upstream_bytes']} bytes" if "honest_upstream_bytes" in out else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", choices=["dummy", "superlink"], default="dummy")
    parser.add_argument("--requests", type=int, default=10, help="concurrent unauthenticated requests (default 10)")
    parser.add_argument("--declared-mb", type=float, default=300.0, help="Content-Length each declares, MB (default 300)")
    parser.add_argument("--send-mb", type=float, default=64.0, help="body bytes each sends at most, MB (default 64)")
    parser.add_argument("--idle", type=int, default=1000, help="idle connections held (default 1000)")
    parser.add_argument("--hold", type=float, default=5.0, help="seconds the idle connections are held (default 5)")
    parser.add_argument("--idle-rounds", type=int, default=3, help="times the idle phase is repeated (default 3)")
    parser.add_argument("--spread", type=int, default=1,
                        help="idle connections from this many loopback addresses (default 1: all from 127.0.0.2)")
    parser.add_argument("--upload-mb", type=float, default=5.24288,
                        help="a signed upload timed at the end, MB (default 5.24288: Flower's array chunk; dummy upstream only; 0: none)")
    parser.add_argument("--proxy-script", default=None, help="run this proxy script instead (legacy options only)")
    parser.add_argument("--json", action="store_true", help="print one JSON line instead of the table")
    args = parser.parse_args()
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    with tempfile.TemporaryDirectory(prefix="bench-proxy-") as tmp:
        workdir = Path(tmp)
        setup_cm = dummy_setup(workdir, args.proxy_script) if args.upstream == "dummy" else superlink_setup(workdir, args.proxy_script)
        with setup_cm as setup:
            out = measure(setup, requests=args.requests, declared=int(args.declared_mb * MB), send_limit=int(args.send_mb * MB),
                          idle=args.idle, hold=args.hold, idle_rounds=args.idle_rounds, upload=int(args.upload_mb * MB), spread=args.spread)
    out["config"] = vars(args)
    if args.json:
        print(json.dumps(out))
    else:
        report(f"{args.upstream} upstream, proxy {'script ' + args.proxy_script if args.proxy_script else 'topofl.deploy.proxy'}", out)


if __name__ == "__main__":
    main()
