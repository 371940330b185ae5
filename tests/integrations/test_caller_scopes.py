"""Whose request is whose: proxy headers only from trusted proxies, sessions the server
validated, principals the SDK authenticated."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.middleware import Middleware

from mcp_cancellation import CancellationMiddleware, CancellationRegistry, MemoryStorage
from mcp_cancellation.scope import SESSION_KEY

from ..jsonrpc import SSE_AND_JSON, cancel_body
from ..support import UvicornThread, async_wait_until
from ._helpers import Serve, ToolLog, build_sdk_app, start_and_cancel

pytestmark = pytest.mark.e2e


Scope = dict[str, Any]


async def test_trusted_proxy_headers_separate_clients(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    harness = serve("sdk", json_response=True, trusted_proxies=["127.0.0.1"])
    alice = {"x-forwarded-for": "203.0.113.7"}
    mallory = {"x-forwarded-for": "203.0.113.8"}
    answer = await start_and_cancel(harness, http, http, alice, mallory)
    assert "result" in answer  # mallory's cancel did not touch alice's request
    assert harness.cancellations == []
    harness.log.outcomes.clear()
    answer = await start_and_cancel(harness, http, http, alice, alice)
    assert answer["error"]["code"] == -32800
    assert harness.cancellations[0]["scope"] == "ip:203.0.113.7"
    await harness.wait_empty()


async def test_untrusted_proxy_headers_are_ignored(serve: Serve, http: httpx.AsyncClient) -> None:
    harness = serve("sdk", json_response=True)  # no trusted proxies
    answer = await start_and_cancel(
        harness, http, http, {"x-forwarded-for": "203.0.113.7"}, {"x-forwarded-for": "198.51.100.1"}
    )
    assert answer["error"]["code"] == -32800  # both are 127.0.0.1, whatever they claim
    assert harness.cancellations[0]["scope"] == "ip:127.0.0.1"


async def test_session_resolver_scopes_by_validated_session(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    valid = {"s-alice", "s-bob"}

    def resolver(scope: Scope) -> str | None:
        for name, value in scope.get("headers") or ():
            if name == b"x-test-session" and value.decode() in valid:
                return str(value.decode())
        return None

    harness = serve("sdk", json_response=True, session_resolver=resolver)
    alice = {"x-test-session": "s-alice"}
    answer = await start_and_cancel(harness, http, http, alice, {"x-test-session": "s-bob"})
    assert "result" in answer
    harness.log.outcomes.clear()
    answer = await start_and_cancel(harness, http, http, alice, {"x-test-session": "forged"})
    assert "result" in answer  # an unvalidated session falls back to the IP scope
    harness.log.outcomes.clear()
    answer = await start_and_cancel(harness, http, http, alice, alice)
    assert answer["error"]["code"] == -32800
    assert harness.cancellations[0]["scope"] == "session:s-alice"
    assert SESSION_KEY.startswith("mcp_cancellation.")
    await harness.wait_empty()


async def test_sdk_authenticated_principal_is_the_scope(http: httpx.AsyncClient) -> None:
    """Added to the app's own middleware, after the SDK's bearer authentication: the
    principal (OAuth client id) is the scope, so two users behind one address stay apart."""
    log = ToolLog()
    app = build_sdk_app(log, json_response=True, auth=True)
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    app.user_middleware.append(Middleware(CancellationMiddleware, registry=registry))
    recorded: list[dict[str, Any]] = []

    def record(sender: Any, **kwargs: Any) -> None:
        recorded.append(kwargs)

    from mcp_cancellation import signals

    with (
        signals.request_cancelled.connected_to(record, sender=registry),
        UvicornThread(app) as uv,
    ):

        class H:
            url = uv.url + "/mcp"

            @staticmethod
            async def wait_started() -> None:
                await async_wait_until(lambda: bool(log.started()), within=10)

        alice = {"authorization": "Bearer alice-token"}
        bob = {"authorization": "Bearer bob-token"}
        answer = await start_and_cancel(H, http, http, alice, bob)
        assert "result" in answer
        assert recorded == []
        log.outcomes.clear()
        answer = await start_and_cancel(H, http, http, alice, alice)
        assert answer["error"]["code"] == -32800
        assert recorded[0]["scope"] == "principal:alice"
        # The SDK's Host/Origin settings are found behind its auth middleware too.
        rebound = {**SSE_AND_JSON, **alice, "host": "evil.example"}
        refused = await http.post(H.url, json=cancel_body("job"), headers=rebound)
        assert refused.status_code == 421, refused.text
