"""A request cancelled in the middle of a Redis call (track, untrack, cleanup) leaves
no in-flight row behind."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from ...support import MakeRegistry, async_wait_until

pytestmark = pytest.mark.redis


async def _cancel_at_first_await(coro: object) -> None:
    """Run *coro* as a task and cancel it at its first suspension (a Redis round trip)."""
    task = asyncio.ensure_future(coro)  # type: ignore[call-overload]
    await asyncio.sleep(0)  # the task runs up to its first await on the network
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_request_cancelled_while_tracking_leaves_no_in_flight_row(
    make_registry: MakeRegistry,
) -> None:
    # A client disconnect cancels the request's task; if that lands during the TRACK round
    # trip, the row must not stay in flight forever (re-tracked by every resync, never
    # swept because the registry forgot its owner).
    registry = make_registry()
    await registry.stats()  # start the storage's background tasks first

    async def enter() -> None:
        async with registry.request(7, "ip:10.0.0.1"):
            await asyncio.sleep(10)

    await _cancel_at_first_await(enter())
    await registry.storage.resync()  # type: ignore[attr-defined]
    await registry.cleanup()
    assert not await registry.in_flight(7, "ip:10.0.0.1")
    assert (await registry.stats()).in_flight == {}
    # A notifications/cancelled for the finished request is ignored, as on memory.
    assert not await registry.cancel_in_flight(7, "late", "ip:10.0.0.1")


async def test_untrack_cancelled_midway_leaves_no_in_flight_row(
    make_registry: MakeRegistry,
) -> None:
    registry = make_registry()
    await registry.stats()
    scope = "session:s"
    tracked = asyncio.Event()

    async def run() -> None:
        await registry.track(3, scope)
        tracked.set()
        await registry.untrack(3, scope)  # cancelled during its round trip
        await asyncio.sleep(10)

    task = asyncio.ensure_future(run())
    await tracked.wait()  # resumes once the task waits inside untrack
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await registry.storage.resync()  # type: ignore[attr-defined]
    await registry.cleanup()
    assert not await registry.in_flight(3, scope)
    assert (await registry.stats()).in_flight == {}


async def test_cleanup_cancelled_midway_still_releases_dead_owners_later(
    make_registry: MakeRegistry, raw: Redis
) -> None:
    # Two connections: the listener's, and one that a blocking command holds below, so
    # that the cleanup is cancelled while it waits for a connection, before its script.
    registry = make_registry(storage={"max_connections": 2, "socket_timeout": 5})
    await registry.stats()
    await async_wait_until(lambda: registry.storage.subscribed)  # type: ignore[attr-defined]

    async def abandoned() -> None:  # tracks and ends without untracking
        await registry.track(5, "s")

    await asyncio.ensure_future(abandoned())
    assert await registry.in_flight(5, "s")
    client = registry.storage.client  # type: ignore[attr-defined]
    blocking = asyncio.ensure_future(client.blpop(["review-nothing"], timeout=2))

    async def blocked() -> bool:  # the pool's last connection is held by the BLPOP
        clients = await raw.client_list()
        return any(c.get("cmd") == "blpop" for c in clients)

    await async_wait_until(blocked, within=10)
    await _cancel_at_first_await(registry.cleanup())
    await blocking
    await registry.cleanup()
    assert not await registry.in_flight(5, "s")
    assert (await registry.stats()).in_flight == {}
