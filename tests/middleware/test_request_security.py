"""Requests a web page can forge cancel nothing: a cross-site ``text/plain`` POST, a
DNS-rebinding Host."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest

from mcp_cancellation import CancellationRegistry
from mcp_cancellation.storage.memory import MemoryStorage

from ..support import UvicornThread, async_wait_until
from .conftest import SSE_AND_JSON, Serve, call_body, cancel_body, final_message

pytestmark = pytest.mark.e2e


async def test_cross_site_text_plain_cancel_is_not_recorded(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    """A web page can make the user's browser POST a ``text/plain`` body cross-site
    without a CORS preflight (a "simple" request), from the user's own address. The SDK
    refuses any POST that is not ``application/json``; the middleware must not record a
    cancellation from one either."""
    harness = serve("sdk", json_response=True)
    answers: dict[str, httpx.Response] = {}

    async def call() -> None:
        answers["call"] = await http.post(
            harness.url, json=call_body(3, "poll", {"seconds": 1.5}), headers=SSE_AND_JSON
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await harness.wait_started()
        forged = await http.post(
            harness.url,
            content=json.dumps(cancel_body(3, "csrf")).encode(),
            headers={
                "content-type": "text/plain;charset=UTF-8",
                "origin": "https://evil.example",
                "accept": "*/*",
            },
        )
        assert forged.status_code == 400  # the SDK's status for that Content-Type
        assert forged.json()["error"]["code"] == -32600
    message = final_message(answers["call"])
    assert "result" in message, message
    assert harness.cancellations == []
    await harness.wait_empty()


async def test_dns_rebinding_host_cannot_cancel() -> None:
    """A page rebound to the loopback server sends same-origin JSON with a foreign Host:
    the SDK refuses it (421) for its own endpoint, and so must the middleware for the
    notifications/cancelled it answers in front of the SDK."""
    from mcp_cancellation.demo import build_demo_app

    registry = CancellationRegistry(janitor_interval=None)
    app = build_demo_app(registry, json_response=True, host="127.0.0.1")
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    with UvicornThread(app, proxy_headers=False) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            results: list[httpx.Response] = []

            async def call() -> None:
                call_body = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "slow_count", "arguments": {"seconds": 2}},
                }
                results.append(await client.post("/mcp", json=call_body, headers=headers))

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                assert isinstance(registry.storage, MemoryStorage)
                storage: MemoryStorage = registry.storage
                await async_wait_until(lambda: storage.stats_nowait().in_flight)
                evil = {
                    **headers,
                    "host": f"evil.example:{server.port}",
                    "origin": f"http://evil.example:{server.port}",
                }
                cancel = {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": 1},
                }
                refused = await client.post("/mcp", json=cancel, headers=evil)
                assert refused.status_code == 421
            answer = json.loads(results[0].text)
            assert "error" not in answer, answer
            assert answer["result"]["isError"] is False
            assert storage.stats_nowait().rows == {}
