"""Young calls: a worker tracks a call in Redis only once it has run ``track_delay`` (0.2 s
by default), or at once when a cancellation seeks it. A short call costs Redis nothing;
every cancellation still reaches the calls it should, of any age, and no later one.

In process (two registries on one redis-server) and on real uvicorn workers, some with a
busy event loop."""

from __future__ import annotations

import asyncio
import functools

import httpx
import pytest
from redis.asyncio import Redis

from mcp_cancellation import CancellationRegistry
from mcp_cancellation.storage.redis import RedisStorage

from ...jsonrpc import cancel_body
from ...support import HeldRequest, MakeRegistry, RedisServer, async_wait_until
from ._helpers import StartWorkers, calls_between, command_calls, settled
from ._workers import CALLER, call_body, tracked
from .test_busy_owner import hog
from .test_worker_faults import answer_of, cancelled_with, completed

pytestmark = pytest.mark.redis

QUIET = {"heartbeat_ttl": 600.0}  # (the loop's heartbeat stays out of the counts)
#: The registry's default track_wait (the suite sets a shorter one for speed).
WAIT = 0.5


async def test_a_short_call_sends_redis_nothing(make_registry: MakeRegistry, raw: Redis) -> None:
    registry = make_registry(storage=QUIET)
    storage = registry.storage
    assert isinstance(storage, RedisStorage)
    assert storage.track_delay == 0.2
    async with registry.request(0, "s"):
        pass  # the listener starts with the first track
    await settled(storage)
    before = await command_calls(raw)
    for n in range(200):
        async with registry.request(n, "s") as token:
            token.raise_if_cancelled()
    spent = await calls_between(raw, before)
    # Nothing but the heartbeat thread's beats (a SET every 150 s here): no script.
    assert set(spent) <= {"set"}, spent


async def test_a_call_that_runs_past_its_delay_is_tracked_listed_and_untracked_once(
    make_registry: MakeRegistry, raw: Redis
) -> None:
    worker, operator = make_registry(storage=QUIET), make_registry(track_wait=WAIT)
    storage = worker.storage
    assert isinstance(storage, RedisStorage)
    async with HeldRequest(worker, "long", "s") as token:
        await settled(storage)
        before = await command_calls(raw)
        await async_wait_until(lambda: operator.in_flight("long", "s"), within=5)
        listed = [(r.scope, r.request_id) for r in await operator.requests()]
        assert listed == [("s", "long")]
        assert await operator.cancel_as_operator("long", "by hand", "s")
        await async_wait_until(lambda: token.cancelled, within=5)
        assert token.reason == "by hand"
    await async_wait_until(lambda: _empty(operator), within=5)
    spent = await calls_between(raw, before)
    assert spent.get("evalsha", 0) >= 2  # its track, its end (and the operator's ADD)


async def _empty(registry: CancellationRegistry) -> bool:
    stats = await registry.stats()
    return stats.total_in_flight == 0 and stats.total_rows == 0


@pytest.mark.parametrize("age", [0.0, 0.1, 0.2, 0.4])
async def test_a_cancellation_from_another_worker_reaches_a_call_of_any_age(
    make_registry: MakeRegistry, age: float
) -> None:
    worker, other = make_registry(), make_registry(track_wait=WAIT)
    for trial in range(3):
        request_id = f"call-{trial}"
        async with HeldRequest(worker, request_id, "s") as token:
            await asyncio.sleep(age)  # (the call's age when its cancellation comes)
            assert await other.cancel_in_flight(request_id, f"at {age}", scope="s")
            await async_wait_until(lambda: token.cancelled, within=5)
            assert token.reason == f"at {age}"
        assert not await other.is_cancelled(request_id, scope="s")  # its end cleared it
        # The id again: a new call, never reached by the cancellation before it.
        async with HeldRequest(worker, request_id, "s") as again:
            await async_wait_until(functools.partial(other.in_flight, request_id, "s"), within=5)
            assert not again.cancelled


async def test_a_mark_reaches_a_young_call_that_started_before_it_and_no_later_one(
    make_registry: MakeRegistry,
) -> None:
    """Another worker's tracked call of the id makes the cancellation bind at once (a
    mark, not a wait): the young call that started before the mark is reached when its
    track lands after it; one that starts after the mark is not."""
    one, two, canceller = make_registry(), make_registry(), make_registry(track_wait=WAIT)
    async with HeldRequest(one, 7, "s") as tracked_call:
        await async_wait_until(lambda: canceller.in_flight(7, "s"), within=5)
        async with HeldRequest(two, 7, "s") as young:
            assert await canceller.cancel_in_flight(7, "both", scope="s")
            await async_wait_until(lambda: tracked_call.cancelled and young.cancelled, within=5)
            async with HeldRequest(two, 7, "s") as later:
                await async_wait_until(lambda: _tracked_twice(canceller), within=5)
                assert not later.cancelled


async def _tracked_twice(registry: CancellationRegistry) -> bool:
    return (await registry.stats()).in_flight.get("s", 0) == 3


async def test_a_library_cancel_of_a_young_call_on_another_worker_stops_it(
    make_registry: MakeRegistry,
) -> None:
    worker, other = make_registry(), make_registry(track_wait=WAIT)
    async with HeldRequest(worker, 3, "s") as token:
        await other.cancel(3, "from code", scope="s")
        await async_wait_until(lambda: token.cancelled, within=5)
        assert token.reason == "from code"
    # The call's end removed the row: the next call of the id starts clean.
    async with HeldRequest(worker, 3, "s") as again:
        await async_wait_until(lambda: other.in_flight(3, "s"), within=5)
        assert not again.cancelled


# -- on real uvicorn workers -------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("busy_ms", [0, 300])
@pytest.mark.parametrize("age_ms", [0, 100, 200, 500])
async def test_a_cancellation_through_another_worker_stops_a_call_of_any_age(
    redis_server: RedisServer,
    start_workers: StartWorkers,
    http: httpx.AsyncClient,
    age_ms: int,
    busy_ms: int,
) -> None:
    owner, idle = start_workers(redis_server, track_wait=0.5)
    for trial in range(2):
        request_id = 300 + trial
        call = asyncio.create_task(http.post(owner.url, json=call_body(request_id, 30)))
        await asyncio.sleep(age_ms / 1000)  # (the call's age when its cancellation comes)
        busy = asyncio.create_task(hog(http, owner, busy_ms)) if busy_ms else None
        answer = await http.post(idle.url, json=cancel_body(request_id, f"trial {trial}"))
        assert answer.status_code == 202, answer.text
        response = await asyncio.wait_for(call, 20)
        assert cancelled_with(response) == f"trial {trial}", "it ran on behind a 202"
        if busy is not None:
            await busy
        # The id reused at once: a new call, which the cancellation never reaches.
        assert completed(await http.post(owner.url, json=call_body(request_id, 0)), 0)


@pytest.mark.e2e
async def test_a_library_cancel_recorded_before_a_call_makes_it_start_cancelled(
    redis_server: RedisServer,
    start_workers: StartWorkers,
    http: httpx.AsyncClient,
    observer: RedisStorage,
) -> None:
    """The seed's pending row: ``cancel()`` in code elsewhere, before the call is sent; the
    call (of a tool that returns at once) starts cancelled on a worker that tracks no call
    at its start."""
    (owner,) = start_workers(redis_server, count=1)
    canceller = CancellationRegistry(observer, janitor_interval=None)
    assert completed(await http.post(owner.url, json=call_body(1, 0)), 0)  # (listening)
    for trial in range(5):
        request_id = 400 + trial
        await canceller.cancel(request_id, f"early {trial}", scope=CALLER)
        response = await http.post(owner.url, json=call_body(request_id, 0))
        assert cancelled_with(response) == f"early {trial}", answer_of(response)
        await async_wait_until(functools.partial(_cleared, canceller, request_id), within=5)
        assert not await tracked(observer, request_id)


async def _cleared(registry: CancellationRegistry, request_id: int) -> bool:
    return not await registry.is_cancelled(request_id, scope=CALLER)


@pytest.mark.e2e
@pytest.mark.parametrize("killed", ["before", "with", "after"])
async def test_a_pending_cancellation_is_claimed_by_the_first_call_whatever_the_subscription_does(
    redis_server: RedisServer,
    start_workers: StartWorkers,
    http: httpx.AsyncClient,
    observer: RedisStorage,
    raw: Redis,
    killed: str,
) -> None:
    """The worker's pub/sub connection is killed just before, with, or right after a
    library ``cancel()`` of a request not yet started (the client reconnects and
    resubscribes under the listener; a seek published meanwhile is lost): the first call
    of the id, shorter than the track delay, starts cancelled all the same, and the next
    call of the id, never."""
    (owner,) = start_workers(redis_server, count=1)
    canceller = CancellationRegistry(observer, janitor_interval=None)
    assert completed(await http.post(owner.url, json=call_body(1, 0)), 0)  # (listening)
    for trial in range(8):
        request_id = 700 + trial
        cancel = canceller.cancel(request_id, f"early {trial}", scope=CALLER)
        if killed == "before":
            await raw.client_kill_filter(_type="pubsub")
            await cancel
        elif killed == "with":
            await asyncio.gather(raw.client_kill_filter(_type="pubsub"), cancel)
        else:
            await cancel
            await raw.client_kill_filter(_type="pubsub")
        first = await http.post(owner.url, json=call_body(request_id, 0))
        assert cancelled_with(first) == f"early {trial}", answer_of(first)
        second = await http.post(owner.url, json=call_body(request_id, 0))
        assert completed(second, 0), f"trial {trial}: a later call took the cancellation"
