"""Quota and storage outages answer clear JSON-RPC errors, never a 500, and tools still
stop when their client leaves."""

from __future__ import annotations

import logging

import anyio
import httpx
import pytest

from mcp_cancellation import CancellationRegistry, MemoryStorage

from ..jsonrpc import SSE_AND_JSON, call_body, cancel_body
from ..support import RedisServer, async_wait_until
from ._helpers import Calls, FlakyStorage, Serve, workers_sharing

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


@pytest.mark.redis
async def test_with_redis_down_the_worker_running_a_call_still_cancels_it(
    serve: Serve, http: httpx.AsyncClient
) -> None:
    """The receiving worker knows its own calls: it stops them (202); a call it cannot
    see (another worker's) gets 503, never a 202 that does nothing."""
    with RedisServer() as redis_server:
        async with workers_sharing(redis_server.url) as registries:
            near, far = (serve(json_response=True, registry=r, tools=["poll"]) for r in registries)
            async with anyio.create_task_group() as tg:
                calls = Calls(tg)
                calls.start(http, near, "mine")
                calls.start(http, far, "theirs")
                await near.wait_started(1)
                await far.wait_started(1)
                redis_server.stop()
                elsewhere = await http.post(
                    near.url, json=cancel_body("theirs"), headers=SSE_AND_JSON
                )
                assert elsewhere.status_code == 503
                here = await http.post(near.url, json=cancel_body("mine"), headers=SSE_AND_JSON)
                assert here.status_code == 202
                await calls.ended("mine")
                assert "theirs" not in calls.answers  # not cancelled, and not lost silently
                redis_server.start()
                again = await http.post(far.url, json=cancel_body("theirs"), headers=SSE_AND_JSON)
                assert again.status_code in (202, 503)
                if again.status_code == 503:  # the worker is still reconnecting: retry
                    await async_wait_until(
                        lambda: _accepted(http, far.url, "theirs"), within=15, interval=0.2
                    )
                await calls.ended("theirs")
            assert [c["method"] for c in near.cancellations] == ["notifications/cancelled"]


async def _accepted(http: httpx.AsyncClient, url: str, request_id: str) -> bool:
    answer = await http.post(url, json=cancel_body(request_id), headers=SSE_AND_JSON)
    return answer.status_code == 202
