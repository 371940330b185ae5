"""Two real uvicorn worker processes sharing one real redis-server.

Each worker (``tests/storage/redis/_worker.py``) serves the demo MCP app behind
CancellationMiddleware with a RedisStorage. A ``tools/call`` goes to one worker and the
``notifications/cancelled`` to the other, as a load balancer would send them.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from mcp_cancellation import REQUEST_CANCELLED
from mcp_cancellation.storage.redis import RedisStorage

from ...jsonrpc import SSE_AND_JSON, cancel_body
from ...support import RedisServer, async_wait_until
from ._helpers import StartWorkers, lives
from ._workers import CALLER, call_body, empty, tracked

pytestmark = [pytest.mark.redis, pytest.mark.e2e]


async def test_cancel_sent_to_another_worker_stops_the_tool(
    redis_server: RedisServer,
    start_workers: StartWorkers,
    observer: RedisStorage,
    http: httpx.AsyncClient,
) -> None:
    tool_worker, other_worker = start_workers(redis_server)

    # Another caller (another loopback address: another scope) cannot cancel it.
    call = asyncio.create_task(http.post(tool_worker.url, json=call_body(2, 1)))
    await async_wait_until(lambda: tracked(observer, 2), within=10)
    stranger = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
    async with httpx.AsyncClient(transport=stranger, headers=SSE_AND_JSON, timeout=15) as other:
        answer = await other.post(other_worker.url, json=cancel_body(2, "not yours"))
    assert answer.status_code == 202  # accepted and ignored, as MCP permits
    response = await call
    assert response.json()["result"]["content"][0]["text"] == "counted to 1"
    await async_wait_until(lambda: empty(observer), within=5)

    # The caller itself can, through the other worker. slow_count(30) would take 30 s;
    # the client gives up after 15 s, so the answer shows the tool stopped early.
    call = asyncio.create_task(http.post(tool_worker.url, json=call_body(1, 30)))
    await async_wait_until(lambda: tracked(observer, 1), within=10)
    answer = await http.post(other_worker.url, json=cancel_body(1, "changed my mind"))
    assert answer.status_code == 202
    response = await call
    error = response.json()["error"]
    assert error["code"] == REQUEST_CANCELLED
    assert error["data"] == {"reason": "changed my mind"}
    # Both rows are gone: the request is untracked and its cancellation cleared.
    await async_wait_until(lambda: empty(observer), within=5)


async def test_a_killed_workers_rows_go_after_the_heartbeat_ttl(
    redis_server: RedisServer,
    start_workers: StartWorkers,
    observer: RedisStorage,
    http: httpx.AsyncClient,
) -> None:
    doomed, survivor = start_workers(redis_server, heartbeat_ttl=1.0, janitor_interval=0.3)
    call = asyncio.create_task(http.post(doomed.url, json=call_body(3, 30)))
    await async_wait_until(lambda: tracked(observer, 3), within=10)
    flight = observer.key("f:", f"{len(CALLER)}:{CALLER}3")
    (track,) = await observer.client.hvals(flight)  # sequence, start, worker, tool
    assert isinstance(track, bytes)
    worker = track.decode().split("\t")[2]
    doomed.kill()
    with pytest.raises(httpx.TransportError):
        await call

    # The worker died without a word: its row stays as long as its heartbeat lives (the
    # row read after the heartbeat, in each check), then the survivor's janitor removes it.
    async def removed_after_heartbeat() -> bool:
        beating = await lives(observer.client, observer.prefix, worker, 1000)
        row = await observer.client.exists(flight)
        assert row or not beating, "the row went while the worker's heartbeat lived"
        return not row

    await async_wait_until(removed_after_heartbeat, within=15, interval=0.05)
    await async_wait_until(lambda: empty(observer), within=10)
    assert survivor.alive


async def test_redis_outage_and_recovery_step_by_step(
    own_redis: RedisServer,
    start_workers: StartWorkers,
    prefix: str,
    http: httpx.AsyncClient,
) -> None:
    server = own_redis
    tool_worker, other_worker = start_workers(server)
    observer = RedisStorage.from_url(
        server.url, prefix=prefix, socket_timeout=0.5, connect_timeout=0.5, timeout=1.5
    )
    try:
        # 0. Redis up: a long call starts and is tracked.
        long_call = asyncio.create_task(http.post(tool_worker.url, json=call_body(10, 30)))
        await async_wait_until(lambda: tracked(observer, 10), within=10)

        # 1. Redis down.
        server.stop()
        # A cancellation cannot be recorded: a JSON-RPC error with 503, not a 500.
        answer = await http.post(other_worker.url, json=cancel_body(10, "now"))
        assert answer.status_code == 503
        assert answer.json()["error"]["code"] < 0
        assert answer.headers["retry-after"] == "1"
        # New calls still run (uncancellable for now) and complete.
        short = await http.post(tool_worker.url, json=call_body(11, 1))
        assert short.json()["result"]["content"][0]["text"] == "counted to 1"
        # Nothing crashed; the long call keeps running.
        assert tool_worker.alive
        assert other_worker.alive
        assert not long_call.done()

        # 2. Redis back (empty: no persistence). Service resumes without a restart: the
        # tool worker re-tracks its in-flight call (resync), and a cancellation sent to
        # the other worker reaches it.
        server.start()
        await async_wait_until(lambda: tracked(observer, 10), within=10)
        answer = await http.post(other_worker.url, json=cancel_body(10, "after the outage"))
        assert answer.status_code == 202
        response = await long_call
        assert response.json()["error"]["code"] == REQUEST_CANCELLED
        assert response.json()["error"]["data"] == {"reason": "after the outage"}
        await async_wait_until(lambda: empty(observer), within=5)

        # 3. A fresh call on the other worker, cancelled through the first one.
        call = asyncio.create_task(http.post(other_worker.url, json=call_body(12, 30)))
        await async_wait_until(lambda: tracked(observer, 12), within=10)
        answer = await http.post(tool_worker.url, json=cancel_body(12, "again"))
        assert answer.status_code == 202
        assert (await call).json()["error"]["code"] == REQUEST_CANCELLED
    finally:
        await observer.aclose()
