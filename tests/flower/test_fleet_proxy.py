"""The Fleet-only proxy's refusals, without a SuperLink: nothing but a well-formed, small Fleet
request is ever forwarded (the forwarding itself is tested end to end in test_deployment.py)."""
from __future__ import annotations

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from topofl.flower.fleet_proxy import allowed, create_app  # noqa: E402

UNREACHABLE = "127.0.0.1:9"  # discard port: a forwarded request would get 502


def test_only_fleet_posts_and_health_pass_the_path_rule():
    assert allowed("POST", b"/v1/fleet/pull-messages") is True
    assert allowed("GET", b"/v1/fleet/pull-messages") is False
    assert allowed("GET", b"/health") is True
    for path in (b"/v1/fleet/pull-messages\n", b"/v1/control/list-nodes", b"/v1/fleet/../control/x", b"/v1/fleet/%2e%2e/x",
                 b"/v1/runtime/acquire-task", b"/V1/fleet/x", b"//v1/fleet/x"):
        assert allowed("POST", path) is None, path


def test_oversized_or_foreign_requests_never_reach_the_superlink():
    with TestClient(create_app(UNREACHABLE, timeout=2.0, max_body_bytes=100)) as client:
        assert client.post("/v1/control/register-node", content=b"x").status_code == 404
        assert client.post("/v1/fleet/push-messages", content=b"x" * 101).status_code == 413
        assert client.get("/v1/fleet/push-messages").status_code == 405
        assert client.post("/v1/fleet/push-messages", content=b"x" * 100).status_code == 502  # allowed: forwarded, no SuperLink
    with pytest.raises(ValueError, match="max_body_bytes must be a positive integer"):
        create_app(UNREACHABLE, max_body_bytes=0)
