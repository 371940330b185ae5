"""A server whose ``send`` raises once the client is gone (uvicorn's returns quietly; others
raise ``OSError``) gets the same disconnect handling as an ``http.disconnect``: the
request's token flips, ``request.cancelled`` fires once, its work stops, no row is left.

The demo's ``MCPServer``, wrapped by the middleware, is called in process through such a
server's ``receive`` and ``send``: ``slow_count`` streams progress over SSE, and the first
event it sends fails."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

from mcp_cancellation import CancellationRegistry, signals
from mcp_cancellation.demo import build_demo_server
from mcp_cancellation.integrations.asgi import CancellationMiddleware
from mcp_cancellation.storage.memory import MemoryStorage

from .conftest import SSE_AND_JSON


def _http_scope(body: bytes) -> dict[str, Any]:
    headers = [(b"host", b"127.0.0.1:8000"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in SSE_AND_JSON.items()]
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


async def test_a_send_that_raises_is_a_disconnect() -> None:
    inner = build_demo_server(poll_interval=0.05).streamable_http_app(stateless_http=True)
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    app = CancellationMiddleware(inner, registry=registry, stream_cancel_timeout=5.0)
    cancelled: list[dict[str, Any]] = []
    stopped: list[dict[str, Any]] = []
    call = {
        "jsonrpc": "2.0",
        "id": "gone",
        "method": "tools/call",
        "params": {
            "name": "slow_count",
            "arguments": {"seconds": 30},
            "_meta": {"progressToken": 1},
        },
    }
    body = json.dumps(call).encode()
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[bytes] = []

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await asyncio.Event().wait()  # this server never reports the disconnect
        raise AssertionError("unreachable")

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            sent.append(message["body"])
            raise OSError("connection reset by peer")

    async with inner.router.lifespan_context(inner):
        with (
            signals.request_cancelled.connected_to(
                lambda _, **kw: cancelled.append(kw), sender=registry
            ),
            signals.request_stopped.connected_to(
                lambda _, **kw: stopped.append(kw), sender=registry
            ),
        ):
            try:
                await asyncio.wait_for(app(_http_scope(body), receive, send), timeout=20)
            except TimeoutError:
                raise
            except OSError:
                pass  # the app may pass the server's error on

    assert b"notifications/progress" in sent[0]  # the first event failed, mid-call
    assert [(c["request_id"], c["method"]) for c in cancelled] == [("gone", "disconnect")]
    assert [(s["request_id"], s["outcome"]) for s in stopped] in (
        [("gone", "stopped")],
        [("gone", "killed")],
    )
    stats = await registry.stats()
    assert (stats.total_rows, stats.total_in_flight) == (0, 0)
    await registry.aclose()
