"""Regression tests for bugs found in review of the ASGI middleware, each against a real
uvicorn server and real HTTP clients."""

from __future__ import annotations

import json
from collections.abc import Iterator

import anyio
import httpx
import pytest

from mcp_cancellation import REQUEST_CANCELLED, CancellationRegistry
from mcp_cancellation.integrations.asgi import CancellationMiddleware
from mcp_cancellation.storage.memory import MemoryStorage

from ..support import UvicornThread, async_wait_until
from .conftest import (
    SSE_AND_JSON,
    Serve,
    ToolLog,
    build_sdk_app,
    call_body,
    cancel_body,
    final_message,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def root_path_server() -> Iterator[tuple[UvicornThread, CancellationRegistry, ToolLog]]:
    """The SDK app behind the middleware, served with ``--root-path /api`` (as behind a
    proxy that strips a prefix): uvicorn puts the root path in front of ``path``."""
    log = ToolLog()
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    app = CancellationMiddleware(build_sdk_app(log, json_response=True), registry=registry)
    server = UvicornThread(app, proxy_headers=False, root_path="/api")
    server.start()
    try:
        yield server, registry, log
    finally:
        server.stop()


async def test_root_path_requests_are_tracked_and_cancellable(
    root_path_server: tuple[UvicornThread, CancellationRegistry, ToolLog],
    http: httpx.AsyncClient,
) -> None:
    """The SDK routes on the path without ``root_path``; the middleware must too, or it
    silently tracks nothing and a cancellation is ignored."""
    server, registry, log = root_path_server
    url = server.url + "/mcp"
    answers: dict[str, httpx.Response] = {}

    async def call() -> None:
        answers["call"] = await http.post(
            url, json=call_body(7, "poll", {"seconds": 4}), headers=SSE_AND_JSON
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await async_wait_until(lambda: log.started() != [], within=5)
        assert log.started() == ["7"]  # tracked: the tool sees its request's token
        answer = await http.post(url, json=cancel_body(7, "stop"), headers=SSE_AND_JSON)
        assert answer.status_code == 202
    assert final_message(answers["call"])["error"]["code"] == REQUEST_CANCELLED
    storage = registry.storage
    assert isinstance(storage, MemoryStorage)
    await async_wait_until(lambda: storage.stats_nowait().total_in_flight == 0, within=5)
    assert storage.stats_nowait().total_rows == 0


async def test_disconnect_cancels_only_the_request_whose_client_left(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    """Two clients of one scope (here one address) both use id 1, as every SDK client
    does: when A hangs up, B's request with the same id must keep running."""
    harness = serve("sdk", json_response=True)
    answers: dict[str, httpx.Response] = {}

    async def call_b() -> None:
        async with httpx.AsyncClient(timeout=20) as other:
            answers["b"] = await other.post(
                harness.url, json=call_body(1, "poll", {"seconds": 1.5}), headers=SSE_AND_JSON
            )

    async def call_a() -> None:
        body = call_body(1, "poll", {"seconds": 30})
        async with http.stream("POST", harness.url, json=body, headers=SSE_AND_JSON) as response:
            async for _ in response.aiter_bytes():
                pass

    async with anyio.create_task_group() as tg:
        tg.start_soon(call_b)
        await async_wait_until(lambda: harness.stats().total_in_flight == 1, within=5)
        async with anyio.create_task_group() as a:
            a.start_soon(call_a)
            await async_wait_until(lambda: harness.stats().total_in_flight == 2, within=5)
            a.cancel_scope.cancel()  # A hangs up
        await async_wait_until(lambda: len(harness.cancellations) == 1, within=5)
        assert harness.cancellations[0]["method"] == "disconnect"
    message = final_message(answers["b"])
    assert "result" in message, message
    assert message["result"]["isError"] is False
    await harness.wait_empty()


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
