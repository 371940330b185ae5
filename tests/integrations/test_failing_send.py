"""A server whose ``send`` raises once the client is gone (uvicorn's returns quietly; others
raise ``OSError``) gets the same disconnect handling as an ``http.disconnect``: the
request's token flips, ``request.cancelled`` fires once, its work stops, no row is left.

Real uvicorn serves the demo's ``MCPServer`` behind the middleware, under an outer layer
that plays such a server: the first body message sent after the response started (the
first SSE progress event of ``slow_count``) raises, and the client is never told."""

from __future__ import annotations

import contextlib
from typing import Any

import httpx
import pytest

from mcp_cancellation import CancellationRegistry, signals
from mcp_cancellation._asgi import ASGIApp, Message, Receive, Scope, Send
from mcp_cancellation._demo import build_demo_server
from mcp_cancellation.integrations._middleware import CancellationMiddleware
from mcp_cancellation.storage._memory import MemoryStorage

from ..jsonrpc import SSE_AND_JSON, call_body
from ..support import UvicornThread, async_wait_until, stats_now

pytestmark = pytest.mark.e2e


class RaisingServer:
    """Its ``send`` raises ``OSError`` for every event after the first progress event."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.sent: list[bytes] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def raising_send(message: Message) -> None:
            body = message.get("body", b"")
            if message["type"] == "http.response.body" and body:
                self.sent.append(body)
                raise OSError("connection reset by peer")
            await send(message)

        try:
            await self.app(scope, receive, raising_send)
        except* OSError:
            pass  # what such a server does with its own error: the connection is gone


async def test_a_send_that_raises_is_a_disconnect() -> None:
    inner = build_demo_server(poll_interval=0.05).streamable_http_app(stateless_http=True)
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    server = RaisingServer(CancellationMiddleware(inner, registry=registry))
    cancelled: list[dict[str, Any]] = []
    stopped: list[dict[str, Any]] = []
    call = call_body("gone", "slow_count", {"seconds": 30})
    call["params"]["_meta"] = {"progressToken": 1}  # slow_count streams progress events
    with (
        signals.request_cancelled.connected_to(
            lambda _, **kw: cancelled.append(kw), sender=registry
        ),
        signals.request_stopped.connected_to(lambda _, **kw: stopped.append(kw), sender=registry),
        UvicornThread(server, proxy_headers=False) as uvicorn,
    ):
        # The response starts, then its first event fails: the client sees the stream end.
        async with (
            httpx.AsyncClient(timeout=20) as http,
            http.stream("POST", f"{uvicorn.url}/mcp", json=call, headers=SSE_AND_JSON) as r,
        ):
            assert r.status_code == 200
            with contextlib.suppress(httpx.HTTPError):  # the connection is dropped
                await r.aread()
        await async_wait_until(lambda: bool(stopped), within=10)
        assert b"notifications/progress" in server.sent[0]  # the first event failed, mid-call
        assert [(c["request_id"], c["method"]) for c in cancelled] == [("gone", "disconnect")]
        assert [s["outcome"] for s in stopped] in (["stopped"], ["killed"])
        stats = stats_now(registry)
        assert (stats.total_rows, stats.total_in_flight) == (0, 0)
