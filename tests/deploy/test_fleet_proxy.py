"""The Fleet-only proxy: nothing but a well-formed Fleet request signed by an authorized SuperNode key
ever reaches the SuperLink, and no body is read before the signature is checked.

The fast tests drive the ASGI app directly, with a fake SuperLink (an httpx transport that records what
it receives), so they can see whether the app ever asked for the request body. The ``flower`` tests run
the proxy as the deployment does (a subprocess, TLS) under the load an outside audit used — concurrent
oversized unauthenticated requests and 1,000 idle connections — in front of a dummy upstream and in front
of a real SuperLink, and measure resident memory with psutil (benchmarks/bench_proxy_load.py holds the
load generators; it prints the same figures)."""
from __future__ import annotations

import asyncio
import base64
import datetime
import importlib.util
import json
import re
import socket
import ssl
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")
pytest.importorskip("cryptography")

import httpx  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec, rsa  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from topofl.deploy import proxy as fp  # noqa: E402
from topofl.deploy import proxy_auth, proxy_rules  # noqa: E402
from topofl.deploy.proxy import (  # noqa: E402
    AuthorizedKeys,
    ConnectionLimits,
    NodeAuthenticator,
    allowed,
    create_app,
    load_authorized_keys,
    main,
    signed_headers,
)

UNREACHABLE = "127.0.0.1:9"  # discard port: a forwarded request would get 502
PUSH = "/v1/fleet/push-object"
BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_proxy_load.py"
GROWTH_MB = 50.0  # what the load may add to the RSS of the proxy and of what is behind it


# ------------------------------------------------------------------------------------ helpers


def _ssh_line(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, comment: str = "node") -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH) + f" {comment}\n".encode()


@pytest.fixture
def node(tmp_path: Path) -> tuple[ec.EllipticCurvePrivateKey, Path]:
    """A SuperNode key (P-384, as Flower makes them) and an authorized-keys file holding it."""
    key = ec.generate_private_key(ec.SECP384R1())
    path = tmp_path / "authorized-keys"
    path.write_bytes(b"# registered SuperNodes\n\n" + _ssh_line(key))
    return key, path


class FakeSuperLink(httpx.AsyncBaseTransport):
    """Stands for the SuperLink: records each request and the order its body chunks arrive in."""

    def __init__(self, events: list[tuple[str, int]] | None = None) -> None:
        self.requests: list[tuple[httpx.Request, bytes]] = []
        self.events = events if events is not None else []
        self.contacted = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.contacted += 1
        body = bytearray()
        async for chunk in request.stream:  # type: ignore[union-attr]
            self.events.append(("superlink", len(body)))
            body += chunk
        self.requests.append((request, bytes(body)))
        return httpx.Response(200, stream=httpx.ByteStream(b"ok"), headers={"content-type": "application/protobuf", "content-length": "2"})


class Reply:
    def __init__(self, status: int, headers: dict[bytes, bytes], body: bytes, reads: int) -> None:
        self.status, self.headers, self.body, self.reads = status, headers, body, reads


async def call(app: Any, method: str, path: str, headers: dict[str, str] | list[tuple[str, str]] | None = None,
               chunks: list[bytes] | None = None, *, declare: bool = True, stall: bool = False,
               events: list[tuple[str, int]] | None = None) -> Reply:
    """One request straight into the ASGI app; ``reads`` counts the app's calls for body data.

    ``chunks`` is the body as the client hands it over (``Content-Length`` declared unless
    ``declare`` is false or a header says otherwise); ``stall``: the client stops after them.
    """
    items = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    chunks = list(chunks or [])
    if declare and method == "POST" and not any(k.lower() in ("content-length", "transfer-encoding") for k, _ in items):
        items.append(("content-length", str(sum(map(len, chunks)))))
    pending = chunks or [b""]
    reads = 0

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        if pending:
            chunk = pending.pop(0)
            if events is not None:
                events.append(("client", reads - 1))
            return {"type": "http.request", "body": chunk, "more_body": bool(pending) or stall}
        await asyncio.Event().wait()  # a stalled client, or one waiting for the response: never returns
        raise AssertionError("unreachable")

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    raw_path, _, query = path.partition("?")
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1", "method": method,
        "scheme": "https", "path": raw_path, "raw_path": raw_path.encode(), "query_string": query.encode(), "root_path": "",
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in items],
        "client": ("192.0.2.7", 40000), "server": ("127.0.0.1", 9092),
    }
    await app(scope, receive, send)
    start = sent[0]
    assert start["type"] == "http.response.start"
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return Reply(start["status"], dict(start.get("headers", [])), body, reads)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_proxy_load", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_proxy_load"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------- path rules


def test_only_fleet_posts_and_health_pass_the_path_rule():
    assert allowed("POST", b"/v1/fleet/pull-messages") is True
    assert allowed("GET", b"/v1/fleet/pull-messages") is False
    assert allowed("GET", b"/health") is True
    for path in (b"/v1/fleet/pull-messages\n", b"/v1/control/list-nodes", b"/v1/fleet/../control/x", b"/v1/fleet/%2e%2e/x",
                 b"/v1/runtime/acquire-task", b"/V1/fleet/x", b"//v1/fleet/x"):
        assert allowed("POST", path) is None, path


def test_foreign_or_oversized_requests_never_reach_the_superlink(node):
    key, keys = node
    with TestClient(create_app(UNREACHABLE, authorized_keys=keys, timeout=2.0, max_body_bytes=100)) as client:
        assert client.post("/v1/control/register-node", content=b"x").status_code == 404
        assert client.get(PUSH).status_code == 405
        assert client.post(PUSH, content=b"x" * 100).status_code == 401  # not signed
        assert client.post(PUSH, content=b"x" * 101, headers=signed_headers(key)).status_code == 413
        assert client.post(PUSH, content=b"x" * 100, headers=signed_headers(key)).status_code == 502  # forwarded, no SuperLink
    with pytest.raises(ValueError, match="max_body_bytes must be a positive integer"):
        create_app(UNREACHABLE, authorized_keys=keys, max_body_bytes=0)


def test_what_is_forwarded_and_what_is_dropped(node):
    key, keys = node
    link = FakeSuperLink()
    app = create_app("127.0.0.1:9093", authorized_keys=keys, transport=link)
    auth = signed_headers(key)
    headers = {**auth, "content-type": "application/protobuf", "x-forwarded-for": "10.0.0.1", "forwarded": "for=10.0.0.1",
               "x-real-ip": "10.0.0.1", "expect": "100-continue", "connection": "close", "keep-alive": "timeout=99"}
    reply = run(call(app, "POST", PUSH + "?run=1", headers, [b"abc", b"def"]))
    assert (reply.status, reply.body) == (200, b"ok")
    request, body = link.requests[0]
    assert str(request.url) == "http://127.0.0.1:9093" + PUSH and body == b"abcdef"  # no query string
    for name in ("x-forwarded-for", "forwarded", "x-real-ip", "expect", "keep-alive", "transfer-encoding"):
        assert name not in request.headers, name
    assert request.headers["connection"] == "keep-alive"  # the proxy's own connection to the SuperLink, not the client's
    assert request.headers["content-length"] == "6"
    assert {k: request.headers[k] for k in auth} == auth  # the SuperLink checks the signature again


# --------------------------------------------------------------------- SuperNode authentication


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _unsigned(key: ec.EllipticCurvePrivateKey) -> dict[str, str]:
    return {}


def _no_signature(key: ec.EllipticCurvePrivateKey) -> dict[str, str]:
    headers = signed_headers(key)
    del headers["flwr-signature"]
    return headers


def _stranger(key: ec.EllipticCurvePrivateKey) -> dict[str, str]:
    return signed_headers(ec.generate_private_key(ec.SECP384R1()))  # a valid signature, by a key nobody registered


def _signature_of_another_time(key: ec.EllipticCurvePrivateKey) -> dict[str, str]:
    headers = signed_headers(key)
    headers["flwr-signature"] = signed_headers(key, (_now() - datetime.timedelta(seconds=1)).isoformat())["flwr-signature"]
    return headers


def _garbled(key: ec.EllipticCurvePrivateKey) -> dict[str, str]:
    return {**signed_headers(key), "flwr-public-key": "not base64 !"}


def _stale(key: ec.EllipticCurvePrivateKey) -> dict[str, str]:
    return signed_headers(key, (_now() - datetime.timedelta(seconds=306)).isoformat())


def _future(key: ec.EllipticCurvePrivateKey) -> dict[str, str]:
    return signed_headers(key, (_now() + datetime.timedelta(seconds=6)).isoformat())


def _naive(key: ec.EllipticCurvePrivateKey) -> dict[str, str]:
    return signed_headers(key, datetime.datetime.now().isoformat())


def _twice(key: ec.EllipticCurvePrivateKey) -> list[tuple[str, str]]:
    return [*signed_headers(key).items(), ("flwr-timestamp", _now().isoformat())]


@pytest.mark.parametrize("make", [_unsigned, _no_signature, _stranger, _signature_of_another_time, _garbled, _stale,
                                  _future, _naive, _twice])
def test_an_unauthenticated_request_is_refused_before_its_body_is_read(node, make):
    key, keys = node
    link = FakeSuperLink()
    app = create_app("127.0.0.1:9093", authorized_keys=keys, transport=link)
    headers = make(key)
    items = list(headers.items()) if isinstance(headers, dict) else headers
    reply = run(call(app, "POST", PUSH, [*items, ("content-length", str(400_000_000))], [b"\0" * 65536] * 3))
    assert reply.status == 401, reply.body
    assert reply.reads == 0 and link.contacted == 0  # not one body byte read, nothing sent on
    assert reply.headers[b"connection"] == b"close"
    assert json.loads(reply.body) == {"detail": "Invalid SuperNode authentication"}  # the SuperLink's own words


def test_an_unknown_key_activating_gets_the_superlinks_own_answer_unread(node):
    """The SuperLink answers an unregistered key's activate-node with 412 and Flower's error 2004
    (a 401 would make Flower's SuperNode stop itself silently, with exit status 0); so does the
    proxy, without reading the body. A registered key with a bad signature still gets 401."""
    key, keys = node
    link = FakeSuperLink()
    app = create_app("127.0.0.1:9093", authorized_keys=keys, transport=link)

    async def scenario() -> list[Reply]:
        return [await call(app, "POST", "/v1/fleet/activate-node", h, [b"\0" * 100])
                for h in (_stranger(key), _signature_of_another_time(key))]

    stranger, forged = run(scenario())
    assert (stranger.status, json.loads(stranger.body)) == (412, {"code": 2004, "detail": "Failed to activate SuperNode."})
    assert forged.status == 401 and stranger.reads == forged.reads == link.contacted == 0
    flwr_error = pytest.importorskip("flwr.supercore.error")
    from flwr.supercore.error.catalog import API_ERROR_MAP

    parsed = flwr_error.FlowerError.from_json(stranger.body.decode())
    spec = API_ERROR_MAP[flwr_error.ApiErrorCode.FLEET_NODE_ACTIVATION_FAILED]
    assert (parsed.code, parsed.message) == (2004, spec.public_message) and spec.http_status_code == 412


def test_a_replayed_signature_is_refused_even_re_encoded(node):
    key, keys = node
    link = FakeSuperLink()
    app = create_app("127.0.0.1:9093", authorized_keys=keys, transport=link)
    headers = signed_headers(key)
    # the same signature in its other valid form: ECDSA accepts (r, n - s) as well as (r, s)
    r, s = decode_dss_signature(base64.b64decode(headers["flwr-signature"]))
    order = int("ffffffffffffffffffffffffffffffffffffffffffffffffc7634d81f4372ddf581a0db248b0a77aecec196accc52973", 16)  # P-384
    twin = encode_dss_signature(r, order - s)
    key.public_key().verify(twin, headers["flwr-timestamp"].encode(), ec.ECDSA(hashes.SHA256()))  # raises if invalid
    malleated = {**headers, "flwr-signature": base64.b64encode(twin).decode()}

    async def scenario() -> list[Reply]:
        return [await call(app, "POST", PUSH, h, [b"x"]) for h in (headers, headers, malleated, signed_headers(key))]

    first, replay, re_encoded, fresh = run(scenario())
    assert (first.status, replay.status, re_encoded.status, fresh.status) == (200, 401, 401, 200)
    assert replay.reads == re_encoded.reads == 0 and len(link.requests) == 2


def test_the_replay_memory_is_bounded_and_forgets_what_can_no_longer_pass(node):
    key, keys = node
    clock = {"wall": time.time(), "mono": 1000.0}
    auth = NodeAuthenticator(AuthorizedKeys(keys), max_per_key=3, clock=lambda: clock["wall"], monotonic=lambda: clock["mono"])

    def at(offset: float) -> list[tuple[bytes, bytes]]:
        stamp = datetime.datetime.fromtimestamp(clock["wall"] + offset, datetime.timezone.utc).isoformat()
        return [(k.encode(), v.encode()) for k, v in signed_headers(key, stamp).items()]

    first = at(0.0)
    assert [auth.check(h) for h in (first, at(-1.0), at(-2.0))] == [None] * 3
    full = auth.check(at(-3.0))
    assert full is not None and full.status == 503  # a fourth: SuperNodes retry a 503
    clock["wall"] += 200.0
    clock["mono"] += 200.0
    replay = auth.check(first)
    assert replay is not None and "replayed" in replay.reason and auth.remembered() == 3  # still valid: still remembered
    clock["wall"] += 106.0  # the first three can no longer pass: forgotten on the next check
    clock["mono"] += 111.0
    assert auth.check(at(0.0)) is None and auth.remembered() == 1
    stale = auth.check(first)
    assert stale is not None and "old" in stale.reason


def test_headers_a_flower_supernode_makes_pass(node):
    flwr = pytest.importorskip("flwr")
    from flwr.common import constant as common
    from flwr.supercore import constant as supercore
    from flwr.supernode.node_auth_http_interceptor import NodeAuthHttpInterceptor

    assert (proxy_auth.PUBLIC_KEY_HEADER, proxy_auth.SIGNATURE_HEADER, proxy_auth.TIMESTAMP_HEADER) == (
        supercore.FLEET_HTTP_PUBLIC_KEY_HEADER, supercore.FLEET_HTTP_SIGNATURE_HEADER, common.TIMESTAMP_HEADER)
    assert (proxy_auth.TIMESTAMP_TOLERANCE, proxy_auth.SYSTEM_TIME_TOLERANCE) == (common.TIMESTAMP_TOLERANCE, common.SYSTEM_TIME_TOLERANCE)
    assert proxy_rules.ARRAY_CHUNK_BYTES == common.FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE, flwr.__version__
    key, keys = node
    captured: list[httpx.Request] = []
    request = httpx.Request("POST", "https://proxy" + PUSH, content=b"x")
    NodeAuthHttpInterceptor(key, key.public_key()).intercept(  # type: ignore[arg-type]
        type("Ctx", (), {"request": request})(), lambda ctx: captured.append(ctx.request))  # type: ignore[arg-type, return-value]
    headers = {k: v for k, v in captured[0].headers.items() if k.startswith("flwr-")}
    assert set(headers) == {"flwr-public-key", "flwr-timestamp", "flwr-signature"}
    link = FakeSuperLink()
    reply = run(call(create_app("127.0.0.1:9093", authorized_keys=keys, transport=link), "POST", PUSH, headers, [b"x"]))
    assert reply.status == 200 and len(link.requests) == 1


def test_the_authorized_keys_file_is_checked_and_re_read(tmp_path, node):
    key, keys = node
    bad = tmp_path / "bad"
    bad.write_bytes(_ssh_line(key) + b"ssh-ed25519 AAAA-not-a-key\n")
    with pytest.raises(ValueError, match=r"'.*bad', line 2: not an OpenSSH public key"):
        load_authorized_keys(bad)
    bad.write_bytes(_ssh_line(rsa.generate_private_key(public_exponent=65537, key_size=2048)))
    with pytest.raises(ValueError, match=r"line 1: a SuperNode key must be ECDSA on NIST P-256/P-384/P-521; got .*RSA"):
        load_authorized_keys(bad)

    later = ec.generate_private_key(ec.SECP256R1())
    authorized = AuthorizedKeys(keys, recheck=0.01)
    pem = base64.b64decode(signed_headers(later)["flwr-public-key"])
    assert authorized.get(pem) is None and len(authorized) == 1
    keys.write_bytes(keys.read_bytes() + _ssh_line(later, "registered later"))
    time.sleep(0.05)
    assert authorized.get(pem) is not None and len(authorized) == 2
    keys.write_bytes(b"garbage\n")  # a broken edit keeps the keys read before
    time.sleep(0.05)
    assert authorized.get(pem) is not None and len(authorized) == 2


def test_without_node_auth_only_when_asked(node, capsys):
    link = FakeSuperLink()
    app = create_app("127.0.0.1:9093", authorized_keys=None, transport=link)
    assert run(call(app, "POST", PUSH, {}, [b"x"])).status == 200  # explicitly off: forwarded unsigned
    _, keys = node
    common = ["--listen", "127.0.0.1:9092", "--superlink", "127.0.0.1:9093", "--certfile", "c", "--keyfile", "k"]
    for extra, message in [([], "one of the arguments --authorized-keys --no-node-auth is required"),
                           (["--authorized-keys", str(keys), "--no-node-auth"], "not allowed with argument"),
                           (["--no-node-auth", "--max-body-bytes", "0"], "--max-body-bytes must be a positive integer; got 0"),
                           (["--no-node-auth", "--idle-timeout", "-1"], "--idle-timeout must be a positive number; got -1.0"),
                           (["--no-node-auth", "--signature-max-age", "600"], "--signature-max-age must be <= 305"),
                           (["--no-node-auth", "--max-connections", "8"], r"--max-connections-per-ip \(64\) must be <= --max-connections \(8\)")]:
        with pytest.raises(SystemExit):
            main(common + extra)
        err = capsys.readouterr().err
        assert re.search(message, err), (message, err)


# ------------------------------------------------------------------------------------- bodies


def test_a_body_must_declare_its_length_within_the_cap(node):
    key, keys = node
    link = FakeSuperLink()
    app = create_app("127.0.0.1:9093", authorized_keys=keys, transport=link, max_body_bytes=1000)

    async def scenario() -> list[Reply]:
        return [
            await call(app, "POST", PUSH, {**signed_headers(key), "transfer-encoding": "chunked"}, [b"x"]),
            await call(app, "POST", PUSH, signed_headers(key), [b"x"], declare=False),
            await call(app, "POST", PUSH, {**signed_headers(key), "content-length": "+1"}, [b"x"]),
            await call(app, "POST", PUSH, {**signed_headers(key), "content-length": "1001"}, [b"x" * 1001]),
            await call(app, "POST", PUSH, signed_headers(key), [b"x" * 1000]),
        ]

    replies = run(scenario())
    assert [r.status for r in replies] == [411, 411, 411, 413, 200]
    assert [r.reads for r in replies[:4]] == [0] * 4 and len(link.requests) == 1


def test_the_body_is_streamed_to_the_superlink_not_buffered(node):
    key, keys = node
    events: list[tuple[str, int]] = []
    link = FakeSuperLink(events)
    app = create_app("127.0.0.1:9093", authorized_keys=keys, transport=link)
    chunks = [bytes([i]) * 65536 for i in range(8)]
    reply = run(call(app, "POST", PUSH, signed_headers(key), chunks, events=events))
    assert reply.status == 200 and link.requests[0][1] == b"".join(chunks)
    assert link.requests[0][0].headers["content-length"] == str(8 * 65536)
    # the SuperLink had the first chunk before the client handed over the third
    assert events.index(("superlink", 0)) < events.index(("client", 2)), events


def test_a_slow_or_short_body_is_cut_off(node):
    key, keys = node
    link = FakeSuperLink()
    app = create_app("127.0.0.1:9093", authorized_keys=keys, transport=link, timeout=0.3)

    async def scenario() -> list[Reply]:
        headers = {**signed_headers(key), "content-length": "100"}
        slow = await call(app, "POST", PUSH, headers, [b"x" * 10], stall=True)
        short = await call(app, "POST", PUSH, {**signed_headers(key), "content-length": "100"}, [b"x" * 10])
        return [slow, short]

    t0 = time.monotonic()
    slow, short = run(scenario())
    assert (slow.status, short.status) == (408, 400) and time.monotonic() - t0 < 5
    assert link.requests == []  # the SuperLink never got a whole request


def test_connection_limits_count_per_address_and_evict_the_longest_waiting():
    limits = ConnectionLimits(total=3, per_ip=2)
    assert [limits.acquire("a"), limits.acquire("a"), limits.acquire("a"), limits.acquire("b"), limits.acquire("c")] == [
        True, True, False, True, False]  # "c": full, and nobody waiting to be evicted
    limits.release("a")
    assert limits.acquire("c") and limits.by_ip == {"a": 1, "b": 1, "c": 1}
    closed: list[str] = []

    def waiting(name: str, ip: str) -> None:
        limits.waiting(name, lambda: (closed.append(name), limits.release(ip, name)))

    waiting("a1", "a")
    waiting("b1", "b")
    waiting("c1", "c")
    limits.busy("b1")  # mid-request: never evicted
    waiting("a1", "a")  # waits again after a response: now the newest
    assert limits.acquire("d") and closed == ["c1"] and limits.by_ip == {"a": 1, "b": 1, "d": 1}
    assert limits.acquire("e") and closed == ["c1", "a1"] and limits.evicted == 2
    assert not limits.acquire("f") and limits.open == 3  # only "b1" (busy) and the two new ones, not yet waiting
    with pytest.raises(ValueError, match=r"max_connections_per_ip \(4\) must be <= max_connections \(3\)"):
        ConnectionLimits(total=3, per_ip=4)


# --------------------------------------------------------------- under load, as deployed (flower)


def _assert_small(out: dict[str, Any], names: tuple[str, ...]) -> None:
    for name in names:
        assert out["max_growth_mb"][name] < GROWTH_MB, (name, out)
    assert set(out["flood"]["statuses"]) <= {"401", "broken"}, out["flood"]
    assert out["honest_status"] == 200 and out["replay_status"] == 401, out


@pytest.mark.flower
def test_a_flood_and_idle_connections_leave_the_proxy_small(tmp_path):
    """10 concurrent unauthenticated requests declaring 300 MB (each sending up to 64 MB), then 4 rounds
    of 1,000 idle connections: the proxy and the upstream grow < 50 MB, a round leaves nothing behind
    (< 5 MB from the second round to the last), no attack byte reaches the upstream, at most
    --max-connections-per-ip connections stay open, and a signed request still goes through (its
    replay does not), as does a signed 5 MiB upload. The pre-hardening proxy grew 690 MB."""
    bench = _bench()
    with bench.dummy_setup(tmp_path) as setup:
        out = bench.measure(setup, requests=10, declared=300_000_000, send_limit=64_000_000, idle=1000, hold=2.0, settle=1.0,
                            idle_rounds=4, upload=5 * 2**20)
    print(json.dumps(out))
    _assert_small(out, ("proxy", "upstream"))
    assert out["flood"]["upstream_mb"] == 0 and out["honest_upstream_bytes"] == len(setup.honest_body)
    assert out["idle"]["opened"] == 1000 and out["idle"]["still_open"] <= 64
    rounds = [r["proxy"] for r in out["idle"]["rounds_rss"]]
    assert rounds[-1] - rounds[1] < 5.0, rounds  # measure() itself asserts the upload got 200


@pytest.mark.flower
def test_idle_connections_from_many_addresses_cannot_lock_supernodes_out(tmp_path):
    """1,000 idle connections from 100 addresses fill the proxy's 256 connections: it closes the one
    that has waited longest for each newcomer, so a signed request still goes through, and the proxy
    grows < 50 MB."""
    bench = _bench()
    with bench.dummy_setup(tmp_path) as setup:
        out = bench.measure(setup, requests=1, declared=1000, send_limit=0, idle=1000, hold=2.0, settle=1.0,
                            idle_rounds=2, spread=100)
    print(json.dumps(out))
    _assert_small(out, ("proxy", "upstream"))
    assert out["idle"]["still_open"] <= fp.MAX_CONNECTIONS


@pytest.mark.flower
def test_slow_handshakes_and_slow_request_heads_are_cut_off(tmp_path):
    """A connection that never starts TLS, and one that trickles its request head a byte at a time,
    are both closed after the timeouts (1 s each here), although the second keeps sending."""
    bench = _bench()
    with bench.dummy_setup(tmp_path, proxy_extra=["--handshake-timeout", "1", "--idle-timeout", "1"]) as setup:
        bare = socket.create_connection(setup.address, timeout=10)
        tls = ssl.create_default_context(cafile=str(setup.ca)).wrap_socket(
            socket.create_connection(setup.address, timeout=10), server_hostname=setup.address[0])
        t0 = time.monotonic()
        head = b"POST /v1/fleet/push-object HTTP/1.1\r\nhost: x\r\nx-padding: " + b"a" * 100
        closed_at = None
        try:
            for byte in head:
                tls.sendall(bytes([byte]))
                time.sleep(0.05)
        except OSError:
            closed_at = time.monotonic() - t0
        assert closed_at is not None and closed_at < 4, closed_at
        assert bare.recv(1) == b""  # closed (the handshake timed out): EOF
        assert time.monotonic() - t0 < 6
        bare.close()
        tls.close()


@pytest.mark.flower
def test_a_real_superlink_behind_the_proxy_stays_small(tmp_path):
    """The same load against LocalDeployment's SuperLink (node auth on) and its proxy: neither grows
    50 MB (before: proxy 61 -> 3,015 MB and SuperLink 154 -> 1,954 MB for 3 x 300 MB), and node 0's
    signed heartbeat goes through while its replay is refused."""
    pytest.importorskip("flwr")
    pytest.importorskip("psutil")
    if sys.platform == "win32":
        pytest.skip("LocalDeployment needs POSIX process groups")
    bench = _bench()
    with bench.superlink_setup(tmp_path) as setup:
        out = bench.measure(setup, requests=10, declared=300_000_000, send_limit=64_000_000, idle=1000, hold=3.0, settle=1.0)
    print(json.dumps(out))
    _assert_small(out, ("proxy", "superlink"))
