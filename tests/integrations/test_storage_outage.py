"""Quota and storage outages answer clear JSON-RPC errors, never a 500, and tools still
stop when their client leaves."""

from __future__ import annotations

import logging

import anyio
import httpx
import pytest

from mcp_cancellation import CancellationRegistry, MemoryStorage

from ..jsonrpc import SSE_AND_JSON, call_body, cancel_body
from ._helpers import FlakyStorage, Serve

pytestmark = pytest.mark.e2e


async def test_quota_answers_32000(serve: Serve, http: httpx.AsyncClient) -> None:
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None, max_rows_per_scope=1)
    harness = serve("sdk", json_response=True, registry=registry)
    answers: list[httpx.Response] = []

    async def call(request_id: str) -> None:
        answers.append(
            await http.post(
                harness.url, json=call_body(request_id, "hold", {"key": "q"}), headers=SSE_AND_JSON
            )
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "a")
        tg.start_soon(call, "b")
        await harness.wait_started(2)
        first = await http.post(harness.url, json=cancel_body("a"), headers=SSE_AND_JSON)
        assert first.status_code == 202
        second = await http.post(harness.url, json=cancel_body("b"), headers=SSE_AND_JSON)
        assert second.status_code == 429
        assert second.json() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32000,
                "message": "Too many outstanding cancellations; try again shortly.",
            },
        }
        harness.log.release("q")
    await harness.wait_empty()


async def test_storage_down_cancel_answers_error_not_500(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    storage = FlakyStorage()
    registry = CancellationRegistry(storage, janitor_interval=None)
    harness = serve("sdk", json_response=True, registry=registry)
    storage.down = True
    response = await http.post(harness.url, json=cancel_body(1), headers=SSE_AND_JSON)
    assert response.status_code == 503
    assert response.json()["error"] == {
        "code": -32603,
        "message": "Cancellation storage unavailable; try again shortly.",
    }
    # Requests are still served while the storage is down.
    response = await http.post(
        harness.url, json=call_body(2, "echo", {"text": "up"}), headers=SSE_AND_JSON
    )
    assert "up" in response.text


async def test_storage_down_disconnect_still_stops_the_tool(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    storage = FlakyStorage()
    registry = CancellationRegistry(storage, janitor_interval=None)
    harness = serve("sdk", json_response=True, registry=registry, stream_cancel_timeout=None)

    async def call() -> None:
        await http.post(
            harness.url, json=call_body("d", "poll", {"seconds": 30}), headers=SSE_AND_JSON
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        (key,) = await harness.wait_started()
        storage.down = True
        tg.cancel_scope.cancel()
    # A disconnect writes nothing to the storage: the token flipped, the tool stopped.
    assert await harness.wait_outcome(key, "cancelled", "completed") == "cancelled"
    assert [c["method"] for c in harness.cancellations] == ["disconnect"]
    storage.down = False
    await harness.wait_empty()


@pytest.mark.redis
async def test_a_storage_down_at_start_up_is_reported_before_any_request(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    from mcp_cancellation.storage.redis import RedisStorage

    from ..support import async_wait_until, free_port

    caplog.set_level(logging.WARNING, "mcp_cancellation")
    storage = RedisStorage.from_url(
        f"redis://127.0.0.1:{free_port()}/0", socket_timeout=0.5, connect_timeout=0.5, timeout=1
    )
    registry = CancellationRegistry(storage, janitor_interval=None)
    try:
        serve("sdk", json_response=True, registry=registry)  # its lifespan has started
        await async_wait_until(lambda: "Redis storage unavailable" in caplog.text, within=10)
        assert "Connection refused" in caplog.text or "Errno 111" in caplog.text
    finally:
        await registry.aclose()
