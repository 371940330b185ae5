"""cleanup(): expired cancellation rows, and in-flight rows whose owner (a task, or a
thread) is gone without untracking; live owners of the same id stay."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

import pytest

from mcp_cancellation import CancellationRegistry, CleanupResult, ConfigurationError, MemoryStorage

from ..support import MakeRegistry
from ._util import in_flight, rows

# Rows are "old" after OLD seconds and the TTL is half of that, so a slow machine cannot
# turn a new row into an expired one. The rows are aged by moving the storage's clock (the
# memory leg's) or its table's (Redis), never by waiting.
OLD = 60.0
TTL = OLD / 2

Age = Callable[[float], Awaitable[None]]


@pytest.fixture
def age(age_rows: Age) -> Age:
    """Make the rows written so far *seconds* older."""
    return age_rows


async def test_cleanup_on_an_empty_registry(registry: CancellationRegistry) -> None:
    result = await registry.cleanup()
    assert result == CleanupResult(removed=0, in_flight_removed=0)
    assert isinstance(result, CleanupResult)
    assert (result.removed, result.in_flight_removed) == (0, 0)


async def test_cleanup_removes_rows_older_than_the_ttl(
    registry: CancellationRegistry, age: Age
) -> None:
    await registry.cancel(1, scope="a")
    await registry.cancel(2, scope="b")
    await age(OLD)
    await registry.cancel(3, scope="a")
    result = await registry.cleanup(ttl=TTL)
    assert result == CleanupResult(removed=2, in_flight_removed=0)
    assert not await registry.is_cancelled(1, scope="a")
    assert not await registry.is_cancelled(2, scope="b")
    assert await registry.is_cancelled(3, scope="a")
    assert await rows(registry) == {"a": 1}


async def test_cleanup_uses_the_registry_ttl_by_default(
    make_registry: MakeRegistry, age: Age
) -> None:
    registry = make_registry(ttl=TTL)
    assert registry.ttl == TTL
    await registry.cancel(1, scope="a")
    assert await registry.cleanup() == CleanupResult(0, 0)  # not expired yet
    await age(OLD)
    assert await registry.cleanup() == CleanupResult(1, 0)
    assert await rows(registry) == {}


async def test_cleanup_with_ttl_none_expires_nothing(make_registry: MakeRegistry, age: Age) -> None:
    registry = make_registry(ttl=None)
    await registry.cancel(1, scope="a")
    await age(0.05)
    assert await registry.cleanup() == CleanupResult(0, 0)
    assert await registry.cleanup(ttl=None) == CleanupResult(0, 0)
    assert await rows(registry) == {"a": 1}


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf"), "1", True])
async def test_cleanup_rejects_a_bad_ttl(registry: CancellationRegistry, ttl: Any) -> None:
    with pytest.raises(ConfigurationError):
        await registry.cleanup(ttl=ttl)


async def test_ttl_expiry_with_a_controlled_clock() -> None:
    now = [1000.0]
    registry = CancellationRegistry(MemoryStorage(clock=lambda: now[0]), janitor_interval=None)
    await registry.cancel(1, scope="s")
    now[0] += 10
    await registry.cancel(2, scope="s")
    await registry.cancel(1, "updated", scope="s")  # an update keeps the row's age
    now[0] += 5
    assert await registry.cleanup(ttl=15.5) == CleanupResult(0, 0)
    assert await registry.cleanup(ttl=14.5) == CleanupResult(1, 0)
    assert not await registry.is_cancelled(1, scope="s")
    assert await registry.is_cancelled(2, scope="s")
    now[0] += 300
    assert await registry.cleanup() == CleanupResult(1, 0)  # default ttl 300 s
    assert await rows(registry) == {}


async def test_an_expired_row_of_a_live_request_leaves_its_token_cancelled(
    registry: CancellationRegistry, age: Age
) -> None:
    token = await registry.track(1, scope="s")
    await registry.cancel_in_flight(1, "stop", scope="s")
    await age(OLD)
    assert await registry.cleanup(ttl=TTL) == CleanupResult(1, 0)
    assert token.cancelled
    assert await registry.in_flight(1, scope="s")  # the request itself is still live
    await registry.untrack(1, scope="s")


# -- dead owners ------------------------------------------------------------------------


async def _live_owner(
    registry: CancellationRegistry,
    request_id: object,
    scope: str,
    tracked: asyncio.Event,
    release: asyncio.Event,
) -> bool:
    token = await registry.track(request_id, scope=scope)
    tracked.set()
    await release.wait()
    await registry.untrack(request_id, scope=scope)
    return token.cancelled


async def test_a_finished_task_is_swept_while_a_live_owner_of_the_id_stays(
    registry: CancellationRegistry,
) -> None:
    tracked, release = asyncio.Event(), asyncio.Event()
    live = asyncio.create_task(_live_owner(registry, 1, "s", tracked, release))
    await tracked.wait()

    async def abandon() -> None:
        await registry.track(1, scope="s")
        await registry.track(2, scope="s")  # finishes without untracking either

    await asyncio.create_task(abandon())
    assert await in_flight(registry) == {"s": 3}

    assert await registry.cleanup() == CleanupResult(removed=0, in_flight_removed=2)
    assert await in_flight(registry) == {"s": 1}
    assert not await registry.in_flight(2, scope="s")
    assert await registry.cancel_in_flight(1, scope="s")
    assert await registry.cleanup() == CleanupResult(0, 0)  # the live owner stays
    release.set()
    assert await live
    assert await in_flight(registry) == {}


async def _track_forever(
    registry: CancellationRegistry, request_id: int, tracked: asyncio.Event
) -> None:
    """Track *request_id* in scope ``s``, set *tracked*, and never return."""
    await registry.track(request_id, scope="s")
    tracked.set()
    await asyncio.Event().wait()


async def test_a_cancelled_task_that_never_untracked_is_swept(
    registry: CancellationRegistry,
) -> None:
    started = asyncio.Event()
    task = asyncio.create_task(_track_forever(registry, 5, started))
    await started.wait()
    assert await registry.cleanup() == CleanupResult(0, 0)  # still running
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await registry.cleanup() == CleanupResult(0, 1)
    assert await in_flight(registry) == {}


async def test_requests_that_ended_normally_leave_nothing_to_sweep(
    registry: CancellationRegistry,
) -> None:
    async def serve(n: int) -> None:
        async with registry.request(n, scope="s"):
            await asyncio.sleep(0)

    await asyncio.gather(*(serve(n % 5) for n in range(50)))
    assert await in_flight(registry) == {}
    assert await registry.cleanup() == CleanupResult(0, 0)
    assert len(registry.owners) == 0  # no per-owner bookkeeping left behind


async def test_a_thread_that_died_is_swept(registry: CancellationRegistry) -> None:
    # The thread runs its own event loop, tracks, and exits without untracking.
    tracked, release = asyncio.Event(), asyncio.Event()
    live = asyncio.create_task(_live_owner(registry, 7, "s", tracked, release))
    await tracked.wait()
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            asyncio.run(registry.track(7, scope="s"))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    await asyncio.to_thread(thread.join, 30)
    assert errors == []
    assert await in_flight(registry) == {"s": 2}
    assert await registry.cleanup() == CleanupResult(0, 1)
    assert await registry.in_flight(7, scope="s")
    assert await registry.cancel_in_flight(7, scope="s")
    release.set()
    assert await live


def _drive(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends, with no event loop (as a non-asyncio caller
    would): the embedded storage never waits, so one send() completes it."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise AssertionError("the coroutine suspended")


async def test_a_thread_owner_without_an_event_loop_is_swept_once_dead() -> None:
    # With no running loop, the owner of a tracked request is the thread itself.
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    tracked, release = threading.Event(), threading.Event()

    def worker() -> None:
        _drive(registry.track(9, scope="s"))
        tracked.set()
        release.wait(30)

    thread = threading.Thread(target=worker)
    thread.start()
    assert await asyncio.to_thread(tracked.wait, 30)
    assert await registry.cleanup() == CleanupResult(0, 0)  # thread alive: row stays
    assert await registry.in_flight(9, scope="s")
    release.set()
    await asyncio.to_thread(thread.join, 30)
    assert await registry.cleanup() == CleanupResult(0, 1)
    assert not await registry.in_flight(9, scope="s")
    assert len(registry.owners) == 0


async def test_a_task_left_pending_on_a_closed_loop_is_swept() -> None:
    # A thread ran its own loop, started a request task, then closed the loop and died
    # without finishing it: the task can never run again, so its row must not live forever.
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    kept: list[asyncio.Task[None]] = []  # the task object itself is still referenced

    def worker() -> None:
        loop = asyncio.new_event_loop()
        tracked = asyncio.Event()
        task = loop.create_task(_track_forever(registry, 11, tracked))
        task._log_destroy_pending = False  # type: ignore[attr-defined]  # pending on purpose
        kept.append(task)
        loop.run_until_complete(tracked.wait())
        loop.close()

    thread = threading.Thread(target=worker)
    thread.start()
    await asyncio.to_thread(thread.join, 30)
    assert not kept[0].done()
    assert await registry.in_flight(11, scope="s")
    assert await registry.cleanup() == CleanupResult(0, 1)
    assert not await registry.in_flight(11, scope="s")


@pytest.mark.parametrize("ending", ["closed", "collected"])
async def test_a_request_block_on_the_memory_storage_ends_with_its_coroutine(
    ending: str,
) -> None:
    """A ``request()`` block's exit on the memory storage runs to its end when its
    coroutine is closed or collected mid-block (its owner, the test's task, lives on), so
    it leaves no row for a sweep that would not see it."""
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)

    class Suspend:
        """Suspends its awaiter once, with no loop: the coroutine is stepped by hand."""

        def __await__(self) -> Generator[None, None, None]:
            yield

    async def block() -> None:
        async with registry.request(7, "s"):
            await Suspend()
            raise AssertionError("never resumed")

    coro = block()
    coro.send(None)  # inside the block, suspended
    assert await registry.in_flight(7, scope="s")
    if ending == "closed":
        coro.close()
    else:
        del coro
        gc.collect()
    assert not await registry.in_flight(7, scope="s")
    assert len(registry.owners) == 0
    assert await registry.cleanup() == CleanupResult(0, 0)
