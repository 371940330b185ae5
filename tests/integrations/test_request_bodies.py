"""Bodies reach the app byte for byte and responses stream through untouched; a body
over ``max_body_bytes`` is refused with 413."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest

from mcp_cancellation import CancellationMiddleware, CancellationRegistry, MemoryStorage
from mcp_cancellation._asgi import serve_lifespan

from ..jsonrpc import SSE_AND_JSON, call_body, cancel_body
from ..support import UvicornThread, async_wait_until, stats_now
from ._helpers import Serve

pytestmark = pytest.mark.e2e


class RecordingApp:
    """A plain ASGI app: records the body it receives, then streams two chunks, the second
    only once the test has read the first (a buffering middleware would deadlock)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.first_read = threading.Event()
        self.tokens: list[Any] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        from mcp_cancellation import current_token

        self.tokens.append(current_token())
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        self.bodies.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first;", "more_body": True})
        for _ in range(500):
            if self.first_read.is_set():
                break
            await asyncio.sleep(0.01)
        await send({"type": "http.response.body", "body": b"second", "more_body": False})


@pytest.mark.parametrize(
    "body",
    [
        call_body(1, "echo", {"text": "é" * 3000}),  # tracked
        cancel_body("unknown"),  # answered by the middleware... not for this app: see below
        {"jsonrpc": "2.0", "method": "notifications/initialized"},  # passed through
    ],
)
async def test_body_reinjected_exactly_and_response_streamed(body: dict[str, Any]) -> None:
    import json

    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    inner = RecordingApp()
    raw = json.dumps(body, ensure_ascii=False).encode()

    async def chunks() -> Any:
        for start in range(0, len(raw), 1000):
            yield raw[start : start + 1000]

    with UvicornThread(CancellationMiddleware(inner, registry=registry)) as server:
        async with (
            httpx.AsyncClient(timeout=20) as client,
            client.stream(
                "POST", server.url + "/mcp", content=chunks(), headers=SSE_AND_JSON
            ) as response,
        ):
            if body.get("method") == "notifications/cancelled":
                assert response.status_code == 202  # the middleware answers it
                assert inner.bodies == []
                return
            stream = response.aiter_raw()
            first = await anext(stream)
            assert first == b"first;"
            inner.first_read.set()
            rest = b"".join([chunk async for chunk in stream])
            assert rest == b"second"
    assert inner.bodies == [raw]
    tracked = "id" in body
    assert (inner.tokens[0] is not None) is tracked
    # The answer can arrive before the handler released its row: wait for the release.
    await async_wait_until(
        lambda: stats_now(registry).total_in_flight == 0,
        within=10,
    )


async def test_oversized_body_is_refused_with_413(serve: Serve, http: httpx.AsyncClient) -> None:
    harness = serve("sdk", json_response=True, max_body_bytes=1000)
    body = cancel_body(1, "x" * 2000)
    response = await http.post(harness.url, json=body, headers=SSE_AND_JSON)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == -32600

    async def chunked() -> Any:  # no content-length: counted while reading
        for _ in range(3):
            yield b"x" * 600

    response = await http.post(harness.url, content=chunked(), headers=SSE_AND_JSON)
    assert response.status_code == 413


@pytest.mark.parametrize("sdk_limit", [1000, 6 * 1024 * 1024])
async def test_the_body_limit_is_the_sdk_apps_own(sdk_limit: int) -> None:
    """Without ``max_body_bytes``, the limit is the wrapped SDK app's
    ``max_request_body_size``: a body the SDK accepts above the 4 MiB default reaches it,
    and one over a lower limit is refused before it can cancel anything."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("limits", log_level="WARNING")

    @server.tool()
    async def size(text: str) -> int:
        return len(text)

    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    app = CancellationMiddleware(
        server.streamable_http_app(
            stateless_http=True, json_response=True, max_request_body_size=sdk_limit
        ),
        registry=registry,
    )
    text = "x" * 5 * 1024 * 1024 if sdk_limit > 1000 else "x" * 2000
    with UvicornThread(app, proxy_headers=False) as uvicorn:
        async with httpx.AsyncClient(timeout=30) as http:
            url = uvicorn.url + "/mcp"
            answer = await http.post(
                url, json=call_body(1, "size", {"text": text}), headers=SSE_AND_JSON
            )
            if sdk_limit > 1000:
                assert answer.status_code == 200, answer.text[:300]
                assert answer.json()["result"]["structuredContent"] == {"result": len(text)}
            else:
                assert answer.status_code == 413, answer.text[:300]
                refused = await http.post(
                    url, json=cancel_body(1, "y" * 2000), headers=SSE_AND_JSON
                )
                assert refused.status_code == 413
                assert refused.json()["error"]["code"] == -32600
    assert stats_now(registry).total_rows == 0
    assert stats_now(registry).total_in_flight == 0
