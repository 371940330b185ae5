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
from ...support import RedisServer
from ._helpers import StartWorkers
from ._workers import Worker, call_body
from .test_worker_faults import answer_of, completed

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
