"""A worker whose event loop is busy (CPU-bound work between two requests, as real
servers have) tracks its calls late. A cancellation that reaches the idle worker first
waits for the track (the registry's ``track_wait``, the default half second here): the
late call is cancelled, never run to its end behind a 202; and a call that reuses an id
after its cancellation was answered never starts cancelled. No clock of one machine is
compared with another's. Two real uvicorn workers on a real redis-server."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from ...jsonrpc import cancel_body
from ...support import RedisServer, redis_url
from ._helpers import StartWorkers
from ._workers import Worker, call_body
from .test_worker_faults import answer_of, cancelled_with, completed

pytestmark = [pytest.mark.redis, pytest.mark.e2e]

TRIALS = 6


async def hog(http: httpx.AsyncClient, worker: Worker, ms: int) -> None:
    """Keep *worker*'s event loop busy for *ms* milliseconds."""
    answer = await http.post(worker.url.removesuffix("/mcp") + f"/hog?ms={ms}")
    assert answer.status_code == 204


@pytest.mark.parametrize("busy_ms", [150, 350])
async def test_a_cancellation_that_reaches_the_idle_worker_first_stops_the_late_call(
    redis_server: RedisServer, start_workers: StartWorkers, http: httpx.AsyncClient, busy_ms: int
) -> None:
    owner, idle = start_workers(redis_server, track_wait=0.5)
    for trial in range(TRIALS):
        request_id = 100 + trial
        busy = asyncio.create_task(hog(http, owner, busy_ms))
        await asyncio.sleep(0.02)  # the hog has the loop: the call waits behind it
        call = asyncio.create_task(http.post(owner.url, json=call_body(request_id, 30)))
        await asyncio.sleep(0.05)
        answer = await http.post(idle.url, json=cancel_body(request_id, f"trial {trial}"))
        assert answer.status_code == 202, answer.text
        response = await asyncio.wait_for(call, 20)
        error = answer_of(response).get("error")
        assert error is not None, f"trial {trial}: the call ran to its end behind a 202"
        assert error["data"]["reason"] == f"trial {trial}"
        await busy


@pytest.mark.parametrize("busy_ms", [150, 350])
async def test_an_id_reused_after_its_cancellation_was_answered_starts_uncancelled(
    redis_server: RedisServer, start_workers: StartWorkers, http: httpx.AsyncClient, busy_ms: int
) -> None:
    owner, idle = start_workers(redis_server, track_wait=0.5)
    for trial in range(TRIALS):
        request_id = 200 + trial
        answer = await http.post(idle.url, json=cancel_body(request_id, "stale"))
        assert answer.status_code == 202  # nothing in flight: ignored, as MCP permits
        busy = asyncio.create_task(hog(http, owner, busy_ms))
        await asyncio.sleep(0.02)
        response = await asyncio.wait_for(http.post(owner.url, json=call_body(request_id, 0)), 20)
        assert completed(response, 0), f"trial {trial}: a stale cancellation stopped it"
        await busy


class _At:
    """A server's URL, for ``start_workers`` (which takes a server)."""

    def __init__(self, url: str) -> None:
        self.url = url


@pytest.mark.parametrize(
    "backend", ["redis", pytest.param("redis-cluster", marks=pytest.mark.cluster)]
)
async def test_a_push_applied_late_never_cancels_a_call_that_reuses_the_id(
    start_workers: StartWorkers,
    http: httpx.AsyncClient,
    backend: str,
    request: pytest.FixtureRequest,
) -> None:
    # The owner's loop is busy while a cancellation of its call A is recorded and pushed
    # to it, and a new call B of the same id arrives right after the 202: when the loop
    # runs again it may read the push before Redis has answered B's track. The mark
    # reaches A (tracked before it) and never B (tracked after it), whatever the order.
    server = _At(redis_url(backend, request))
    owner, idle = start_workers(server, track_wait=0.5)
    for trial in range(REUSE_TRIALS):
        request_id = 300 + trial
        first = asyncio.create_task(http.post(owner.url, json=call_body(request_id, 30)))
        await asyncio.sleep(0.3)  # A is tracked and counting
        busy = asyncio.create_task(hog(http, owner, 400))
        await asyncio.sleep(0.02)
        answer = await http.post(idle.url, json=cancel_body(request_id, f"trial {trial}"))
        assert answer.status_code == 202, answer.text
        second = asyncio.create_task(http.post(owner.url, json=call_body(request_id, 1)))
        assert cancelled_with(await asyncio.wait_for(first, 20)) == f"trial {trial}"
        assert completed(await asyncio.wait_for(second, 20), 1), f"trial {trial}: B cancelled"
        await busy


#: Trials of the reused-id race (each takes about a second and a half).
REUSE_TRIALS = 12


#: (SSE or JSON, the call's age when the loop blocks: before its cancellation's seek
#: arrives, or before the timer's track).
SHAPES = [pytest.param(0, 50, id="json-before-seek"), pytest.param(1, 150, id="sse-before-timer")]


@pytest.mark.parametrize(("sse", "age_ms"), SHAPES)
@pytest.mark.parametrize("busy_ms", [300, 800, 2000, 5000])
async def test_a_202_stops_a_young_call_however_long_its_owner_s_loop_is_blocked(
    redis_server: RedisServer,
    start_workers: StartWorkers,
    http: httpx.AsyncClient,
    busy_ms: int,
    age_ms: int,
    sse: int,
) -> None:
    # The call is young (untracked) when its worker's loop blocks: before the seek of
    # its cancellation arrives (50 ms), or before the timer's track (150 ms). The
    # cancellation sent to the idle worker 20 ms later waits track_wait (0.5 s), lapses
    # and is answered 202: the lapsed cancellation still stops the call once the loop
    # runs again, and never the call that reuses the id right after the 202.
    owner, idle = start_workers(redis_server, track_wait=0.5, sse=sse)
    for trial in range(2 if busy_ms < 2000 else 1):
        request_id = 500 + trial
        call = asyncio.create_task(http.post(owner.url, json=call_body(request_id, 30)))
        await asyncio.sleep(age_ms / 1000)  # (the call's age when the loop blocks)
        busy = asyncio.create_task(hog(http, owner, busy_ms))
        await asyncio.sleep(0.02)
        answer = await http.post(idle.url, json=cancel_body(request_id, f"trial {trial}"))
        assert answer.status_code == 202, answer.text
        reused = asyncio.create_task(http.post(owner.url, json=call_body(request_id, 1)))
        response = await asyncio.wait_for(call, 30)
        assert cancelled_with(response) == f"trial {trial}", "it ran on behind a 202"
        assert completed(await asyncio.wait_for(reused, 30), 1), "the reused id was cancelled"
        await busy
