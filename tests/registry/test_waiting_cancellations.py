"""A cancellation that finds its request not in flight waits, ``track_wait`` seconds, for
that request's track, on every backend: a request tracked meanwhile is cancelled (its
track was still on its way); nothing of the cancellation outlives its answer, so a request
of the id tracked after it never is; and what waits counts against the scope's quota."""

from __future__ import annotations

import asyncio

import pytest

from mcp_cancellation import (
    CancellationLimitReached,
    CancellationRegistry,
    ConfigurationError,
    MemoryStorage,
)

from ..support import HeldRequest, MakeRegistry, async_wait_until

WAIT = 0.4


async def waiting_in(registry: CancellationRegistry, scope: str, count: int) -> bool:
    """Whether *scope* holds *count* waiting cancellations (read where each storage keeps
    them: the memory storage's count, the Redis table's ``P waiting:<scope>``)."""
    from mcp_cancellation.storage.redis import PartitionedRedisStorage, RedisStorage

    storage = registry.storage
    if isinstance(storage, MemoryStorage):
        return storage._waiting_by_scope.get(scope, 0) == count
    if isinstance(storage, PartitionedRedisStorage):
        storage = storage.partition_of(scope)
    assert isinstance(storage, RedisStorage)
    return int(await storage.client.zcard(storage.key("waiting:", scope))) == count


async def test_a_request_tracked_while_its_cancellation_waits_is_cancelled(
    make_registry: MakeRegistry,
) -> None:
    registry = make_registry(track_wait=2.0)
    cancel = asyncio.create_task(registry.cancel_in_flight(7, "late track", scope="s"))
    await async_wait_until(lambda: waiting_in(registry, "s", 1), within=10)
    held = HeldRequest(registry, 7, "s")
    token = await held.started()
    assert await cancel  # recorded: it stopped a request
    assert token.cancelled
    assert token.reason == "late track"
    await held.finish()


async def test_a_request_tracked_after_the_answer_is_not_cancelled(
    make_registry: MakeRegistry,
) -> None:
    registry = make_registry(track_wait=WAIT)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert not await registry.cancel_in_flight(8, "stale", scope="s")
    assert loop.time() - started >= WAIT * 0.9  # it did wait
    async with registry.request(8, scope="s") as token:
        assert not token.cancelled
    assert not await registry.is_cancelled(8, scope="s")


async def test_a_waiting_cancellation_counts_against_the_quota(
    make_registry: MakeRegistry,
) -> None:
    registry = make_registry(track_wait=3.0, max_rows_per_scope=2)
    waiting = [asyncio.create_task(registry.cancel_in_flight(n, scope="s")) for n in (1, 2)]
    await async_wait_until(lambda: waiting_in(registry, "s", 2), within=10)
    with pytest.raises(CancellationLimitReached):
        await registry.cancel_in_flight(3, scope="s")
    other = asyncio.create_task(registry.cancel_in_flight(1, scope="other"))  # not refused
    await async_wait_until(lambda: waiting_in(registry, "other", 1), within=10)
    assert await asyncio.gather(*waiting, other) == [False, False, False]
    assert await waiting_in(registry, "s", 0)  # withdrawn: room again


async def test_a_cancelled_wait_is_withdrawn(make_registry: MakeRegistry) -> None:
    registry = make_registry(track_wait=30.0, max_rows_per_scope=1)
    cancel = asyncio.create_task(registry.cancel_in_flight(9, scope="s"))
    await async_wait_until(lambda: waiting_in(registry, "s", 1), within=10)
    cancel.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancel
    async with registry.request(9, scope="s") as token:
        assert not token.cancelled
    # And it no longer counts against the quota (of one): another may wait.
    assert await waiting_in(registry, "s", 0)
    task = asyncio.create_task(registry.cancel_in_flight(10, scope="s"))
    await async_wait_until(lambda: waiting_in(registry, "s", 1), within=10)
    assert not task.done()  # waiting, not refused
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_track_wait_is_a_number_of_seconds(make_registry: MakeRegistry) -> None:
    assert make_registry(track_wait=0.25).track_wait == 0.25
    with pytest.raises(ConfigurationError):
        make_registry(track_wait=None)
    with pytest.raises(ConfigurationError):
        make_registry(track_wait=-1)
