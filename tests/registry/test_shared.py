"""Two registries over one store (two workers of a server): rows, quota and in-flight requests
are shared, and a cancellation recorded through one reaches a request tracked by the other."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from mcp_cancellation import (
    CancellationLimitReached,
    CancellationRegistry,
    CleanupResult,
    MemoryStorage,
)
from mcp_cancellation.storage import Storage

from ..support import async_wait_until, redis_url
from ._util import rows

Pair = tuple[CancellationRegistry, CancellationRegistry]


@pytest.fixture
async def workers(backend: str, request: pytest.FixtureRequest) -> AsyncIterator[Pair]:
    """Two registries sharing one store: one MemoryStorage, or one Redis key prefix."""
    storages: list[Storage]
    if backend == "memory":
        shared = MemoryStorage()
        storages = [shared, shared]
    else:
        from mcp_cancellation.storage.redis import RedisStorage

        url = redis_url(backend, request)
        prefix = f"shared-{uuid.uuid4().hex[:10]}"
        storages = [RedisStorage.from_url(url, prefix=prefix) for _ in range(2)]
    first, second = (
        CancellationRegistry(storage, max_rows_per_scope=3, janitor_interval=None)
        for storage in storages
    )
    yield first, second
    await first.aclose()
    if storages[1] is not storages[0]:
        await second.aclose()


async def test_rows_are_shared(workers: Pair) -> None:
    first, second = workers
    await first.cancel(1, "from the first", scope="s")
    assert await second.is_cancelled(1, scope="s")
    assert await second.reason(1, scope="s") == "from the first"
    await second.clear(1, scope="s")
    assert not await first.is_cancelled(1, scope="s")


async def test_the_quota_is_shared(workers: Pair) -> None:
    first, second = workers
    await first.cancel(1, scope="s")
    await second.cancel(2, scope="s")
    await first.cancel(3, scope="s")
    with pytest.raises(CancellationLimitReached):
        await second.cancel(4, scope="s")
    assert await rows(first) == {"s": 3}


async def test_a_cancellation_through_one_reaches_a_request_on_the_other(workers: Pair) -> None:
    first, second = workers
    release = asyncio.Event()
    entered = asyncio.Event()
    seen: list[bool] = []

    async def serve() -> None:
        async with first.request(7, scope="s") as token:
            entered.set()
            await async_wait_until(lambda: token.cancelled, within=10)
            seen.append(token.cancelled)
            await release.wait()

    task = asyncio.create_task(serve())
    await entered.wait()
    # The request runs once its track is on its way (a worker waits for Redis at most
    # max_wait): the other worker sees it in flight as soon as the track lands.
    await async_wait_until(lambda: second.in_flight(7, scope="s"), within=10)
    assert not await second.cancel_in_flight(7, scope="other")
    assert await second.cancel_in_flight(7, "from the other worker", scope="s")
    release.set()
    await asyncio.wait_for(task, 15)
    assert seen == [True]
    assert await rows(second) == {}
    assert not await second.in_flight(7, scope="s")


async def test_one_workers_cleanup_keeps_the_others_live_requests(workers: Pair) -> None:
    first, second = workers
    token = await first.track(3, scope="s")

    async def abandon() -> None:
        await second.track(4, scope="s")

    await asyncio.create_task(abandon())
    assert await first.cleanup() == CleanupResult(0, 0)  # neither of its own is dead
    assert await second.cleanup() == CleanupResult(0, 1)  # its own finished task
    assert await first.in_flight(3, scope="s")
    assert await second.cancel_in_flight(3, scope="s")
    await async_wait_until(lambda: token.cancelled, within=10)
    await first.untrack(3, scope="s")
