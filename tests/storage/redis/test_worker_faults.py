"""Redis faults under real uvicorn workers and real HTTP clients: what a client sees.

Each fault is injected while calls run on one worker and their cancellations go to the
other. Whatever the fault, no request answers 500, no cancellation is answered 202 and
then does nothing (a 503 with ``Retry-After`` tells the client to send it again), no new
call starts cancelled, and no row is left behind.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from redis import exceptions as redis_errors
from redis.asyncio import Redis

from mcp_cancellation import REQUEST_CANCELLED
from mcp_cancellation.storage._base import Limits
from mcp_cancellation.storage.redis import RedisStorage

from ...jsonrpc import cancel_body
from ...support import RedisServer, async_wait_until
from ._helpers import StartWorkers
from ._workers import CALLER, Worker, call_body, empty, tracked

pytestmark = [pytest.mark.redis, pytest.mark.e2e]


def answer_of(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a call, from a JSON body or the last SSE ``data:`` line."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        answer: dict[str, Any] = json.loads(data[-1])
        return answer
    body: dict[str, Any] = response.json()
    return body


def completed(response: httpx.Response, seconds: int) -> bool:
    assert response.status_code == 200, response.text
    answer = answer_of(response)
    assert "result" in answer, answer
    return bool(answer["result"]["content"][0]["text"] == f"counted to {seconds}")


def cancelled_with(response: httpx.Response) -> str | None:
    """The reason of a call that answered -32800 (fails for any other answer)."""
    assert response.status_code == 200, response.text
    error = answer_of(response)["error"]
    assert error["code"] == REQUEST_CANCELLED, error
    reason: str | None = (error.get("data") or {}).get("reason")
    return reason


async def cancel_until_it_stops(
    http: httpx.AsyncClient,
    worker: Worker,
    request_id: int,
    call: asyncio.Task[httpx.Response],
    reason: str,
    within: float = 20.0,
) -> httpx.Response:
    """Send the cancellation as a client would until it is taken: a 503 asks for a retry;
    a 202 must stop the call (a 202 that does nothing is the failure this file hunts)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        answer = await http.post(worker.url, json=cancel_body(request_id, reason))
        assert answer.status_code in (202, 503), answer.text
        if answer.status_code == 202:
            response = await asyncio.wait_for(call, 10)
            assert cancelled_with(response) == reason
            return response
        assert answer.headers["retry-after"] == "1"
        assert loop.time() < deadline, "the cancellation was refused for too long"
        await asyncio.sleep(0.1)  # (the client's retry pace, not a synchronisation)


async def _holding(client: Redis) -> bool:
    """Whether a ``CLIENT PAUSE`` holds a script of some client right now."""
    clients: list[dict[str, Any]] = await client.client_list()
    return any("b" in c["flags"] and c["cmd"] in ("evalsha", "eval") for c in clients)


async def test_calls_run_through_a_redis_stall_and_become_cancellable(
    own_redis: RedisServer, start_workers: StartWorkers, http: httpx.AsyncClient
) -> None:
    tool_worker, other_worker = start_workers(own_redis)
    assert completed(await http.post(tool_worker.url, json=call_body(1, 1)), 1)
    admin = Redis.from_url(own_redis.url, socket_timeout=10)
    try:
        await admin.client_pause(30_000, all=False)  # writes (every script) wait
        # A call runs at once and completes while Redis still holds its worker's write
        # (the pause lasts 30 s; the worker re-sends a write that timed out at once).
        assert completed(await http.post(tool_worker.url, json=call_body(2, 1)), 1)
        await async_wait_until(lambda: _holding(admin), within=5)
        calls = {
            i: asyncio.create_task(http.post(tool_worker.url, json=call_body(i, 30)))
            for i in range(10, 16)
        }
        # A cancellation Redis cannot take is refused, never accepted and dropped.
        refused = await http.post(other_worker.url, json=cancel_body(10, "during"))
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert not any(call.done() for call in calls.values())
    finally:
        await admin.client_unpause()
        await admin.aclose()
    # Every call started during the stall is tracked once Redis answers: cancellable
    # from the other worker.
    for i, call in calls.items():
        await cancel_until_it_stops(http, other_worker, i, call, f"after the stall {i}")


async def test_calls_run_while_redis_sleeps_and_become_cancellable(
    start_workers: StartWorkers, http: httpx.AsyncClient
) -> None:
    """``DEBUG SLEEP``: the whole server stops answering, reads included."""
    with RedisServer("--enable-debug-command", "yes") as server:
        tool_worker, other_worker = start_workers(server)
        assert completed(await http.post(tool_worker.url, json=call_body(1, 1)), 1)
        admin = Redis.from_url(server.url, socket_timeout=30)
        try:
            asleep = asyncio.create_task(admin.execute_command("DEBUG", "SLEEP", "10"))  # type: ignore[no-untyped-call]
            await async_wait_until(lambda: _stalls(http, tool_worker), within=5)
            # A call runs and completes while Redis sleeps.
            assert completed(await http.post(tool_worker.url, json=call_body(2, 1)), 1)
            calls = {
                i: asyncio.create_task(http.post(tool_worker.url, json=call_body(i, 30)))
                for i in range(10, 14)
            }
            refused = await http.post(other_worker.url, json=cancel_body(10, "asleep"))
            assert refused.status_code == 503
            assert not asleep.done()  # all of the above happened while Redis slept
            await asleep
        finally:
            await admin.aclose()
        for i, call in calls.items():
            await cancel_until_it_stops(http, other_worker, i, call, f"awake {i}")


async def _stalls(http: httpx.AsyncClient, worker: Worker) -> bool:
    """Whether the worker's Redis has stopped answering: a cancellation of an unknown id
    is refused (503) instead of answered 202."""
    answer = await http.post(worker.url, json=cancel_body(999, "probe"))
    return answer.status_code == 503


async def test_redis_out_of_memory_refuses_cancellations_and_then_recovers(
    own_redis: RedisServer, start_workers: StartWorkers, http: httpx.AsyncClient, prefix: str
) -> None:
    tool_worker, other_worker = start_workers(own_redis)
    admin = Redis.from_url(own_redis.url, socket_timeout=10)
    observer = RedisStorage.from_url(own_redis.url, prefix=prefix, timeout=2.0)
    try:
        assert completed(await http.post(tool_worker.url, json=call_body(1, 1)), 1)
        # Other data fills Redis past its limit: every write that needs memory is refused.
        await _fill(admin, b"x" * 8192)
        used = int((await admin.info("memory"))["used_memory"])
        await admin.config_set("maxmemory-policy", "noeviction")
        await admin.config_set("maxmemory", str(used // 2))
        with pytest.raises(redis_errors.OutOfMemoryError):
            await admin.set("one more", b"x")
        calls = {
            i: asyncio.create_task(http.post(tool_worker.url, json=call_body(i, 30)))
            for i in range(20, 30)
        }
        # Calls are served, plain ones complete; cancellations are refused, not lost.
        assert completed(await http.post(tool_worker.url, json=call_body(3, 1)), 1)
        for i in calls:
            refused = await http.post(other_worker.url, json=cancel_body(i, "no memory"))
            assert refused.status_code == 503, refused.text
        assert not any(call.done() for call in calls.values())
        # Memory comes back: every running call becomes cancellable.
        await admin.config_set("maxmemory", "0")
        for i, call in calls.items():
            await cancel_until_it_stops(http, other_worker, i, call, f"memory back {i}")
        await async_wait_until(lambda: empty(observer), within=10)
    finally:
        await admin.config_set("maxmemory", "0")
        await admin.aclose()
        await observer.aclose()
    assert "OutOfMemoryError" in tool_worker.output()


async def _fill(admin: Redis, value: bytes) -> None:
    pipe = admin.pipeline(transaction=False)
    for n in range(500):
        pipe.set(f"filler:{n}", value)
    await pipe.execute()


async def test_a_flushed_table_is_rebuilt_and_no_cancellation_is_dropped(
    redis_server: RedisServer, start_workers: StartWorkers, http: httpx.AsyncClient, prefix: str
) -> None:
    tool_worker, other_worker = start_workers(redis_server)
    observer = RedisStorage.from_url(redis_server.url, prefix=prefix, timeout=2.0)
    try:
        calls = {
            i: asyncio.create_task(http.post(tool_worker.url, json=call_body(i, 30)))
            for i in range(40, 45)
        }
        for i in calls:
            await async_wait_until(lambda i=i: tracked(observer, i), within=10)
        # The whole table goes (as with a restart without persistence).
        keys = [key async for key in observer.client.scan_iter(match=observer.key("*"))]
        await observer.client.delete(*keys)
        # The next cancellation finds the table lost: refused (or recorded once the tool
        # worker has re-tracked its calls), never accepted and dropped.
        for i, call in calls.items():
            await cancel_until_it_stops(http, other_worker, i, call, f"after the flush {i}")
        await async_wait_until(lambda: empty(observer), within=10)
    finally:
        await observer.aclose()


async def test_a_killed_workers_cancelled_ids_never_cancel_a_new_call(
    redis_server: RedisServer, start_workers: StartWorkers, http: httpx.AsyncClient, prefix: str
) -> None:
    doomed, survivor = start_workers(redis_server, heartbeat_ttl=1.0, janitor_interval=0.3)
    observer = RedisStorage.from_url(redis_server.url, prefix=prefix, timeout=2.0)
    try:
        ids = range(50, 55)
        calls = [asyncio.create_task(http.post(doomed.url, json=call_body(i, 60))) for i in ids]
        for i in ids:
            await async_wait_until(lambda i=i: tracked(observer, i), within=10)
        doomed.kill()  # its requests stay in flight in Redis until its heartbeat lapses
        for call in calls:
            with pytest.raises(httpx.TransportError):
                await call
        for i in ids:  # ... and are cancelled meanwhile: rows bound to dead requests
            result = await observer.add(
                CALLER, str(i), "stop", limits=Limits(), require_in_flight=True
            )
            assert result.outcome == "recorded"
        # A new call reusing each id, at once, on the survivor: never starts cancelled.
        for i in ids:
            assert completed(await http.post(survivor.url, json=call_body(i, 1)), 1)
        # The dead worker's rows, cancellations included, go with its heartbeat.
        await async_wait_until(lambda: empty(observer), within=15)
    finally:
        await observer.aclose()


async def test_a_missing_redis_permission_degrades_like_an_outage(
    own_redis: RedisServer, prefix: str, http: httpx.AsyncClient
) -> None:
    admin = Redis.from_url(own_redis.url, socket_timeout=10)
    await admin.acl_setuser(
        "noscripts",
        enabled=True,
        passwords=["+secret"],
        keys=["*"],
        channels=["*"],
        commands=["+@all", "-@scripting"],
    )
    await admin.aclose()
    url = f"redis://noscripts:secret@127.0.0.1:{own_redis.port}/0"
    worker = Worker(url, prefix)
    try:
        # Plain calls are served, a cancellation is refused with a clear answer.
        assert completed(await http.post(worker.url, json=call_body(1, 1)), 1)
        call = asyncio.create_task(http.post(worker.url, json=call_body(2, 3)))
        refused = await http.post(worker.url, json=cancel_body(2, "cannot record"))
        assert refused.status_code == 503
        assert completed(await call, 3)
        # One line names the cause, however often the worker's writes are retried, and
        # reads that Redis still allows do not pass for a recovery.
        output = worker.output()
        assert output.count("Redis storage unavailable") == 1, output
        assert "NoPermissionError" in output
        assert "answers again" not in output
        assert "Traceback" not in worker.output()
    finally:
        worker.stop()


@pytest.mark.parametrize("mode", ["json", "sse"])
async def test_an_id_reused_right_after_its_cancellation_starts_uncancelled(
    redis_server: RedisServer,
    start_workers: StartWorkers,
    http: httpx.AsyncClient,
    observer: RedisStorage,
    mode: str,
) -> None:
    tool_worker, other_worker = start_workers(redis_server, sse=float(mode == "sse"))
    for round_ in range(12):
        # Cancelled through the other worker, then through its own, in turns.
        canceller = other_worker if round_ % 2 else tool_worker
        call = asyncio.create_task(http.post(tool_worker.url, json=call_body(7, 30)))
        await async_wait_until(lambda: tracked(observer, 7), within=10)
        await cancel_until_it_stops(http, canceller, 7, call, f"round {round_}")
        # The client's next call reuses the id at once.
        assert completed(await http.post(tool_worker.url, json=call_body(7, 0)), 0)
        # (The next round's wait for its call's row must not see this one's.)
        await async_wait_until(lambda: _untracked(observer, 7), within=10)


async def _untracked(observer: RedisStorage, request_id: int) -> bool:
    return not await tracked(observer, request_id)
