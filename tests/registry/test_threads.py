"""Thread stress: 8 threads, each with its own event loop, run 10 000 mixed operations each
on one registry over the embedded storage. Nothing may raise (other than a quota rejection
that was due), and after every insert the invariants hold: no scope over its quota, the
table not over its cap, a caller certainly under quota never rejected."""

from __future__ import annotations

import asyncio
import random
import sys
import threading
from collections.abc import Iterator

import pytest

from mcp_cancellation import CancellationLimitReached, CancellationRegistry, MemoryStorage

from ..support import MakeRegistry

THREADS = 8
OPERATIONS = 10_000
MAX_ROWS = 200  # eviction batch of 10
QUOTA = 16
SHARED = [f"shared-{n}" for n in range(12)]
IDS = range(40)


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Switch threads far more often than the default 5 ms, to interleave operations."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


class _Violation(AssertionError):
    pass


async def _check(registry: CancellationRegistry) -> None:
    stats = await registry.stats()
    total = sum(stats.rows.values())
    if total > MAX_ROWS:
        raise _Violation(f"table holds {total} rows over the cap {MAX_ROWS}")
    over = {scope: n for scope, n in stats.rows.items() if n > QUOTA}
    if over:
        raise _Violation(f"scopes over quota: {over}")


async def _worker(
    registry: CancellationRegistry, seed: int, counts: dict[str, int], operations: int
) -> None:
    rng = random.Random(seed)
    private = f"private-{seed}"
    # Keys this thread inserted in its private scope that may still be there: only this
    # thread inserts there, so the scope holds at most this many rows.
    mine: set[str] = set()

    async def cancel(scope: str, request_id: int) -> None:
        try:
            await registry.cancel(request_id, f"r{seed}", scope=scope)
        except CancellationLimitReached:
            counts["rejected"] += 1
            if scope == private and len(mine) < QUOTA and str(request_id) not in mine:
                raise _Violation(
                    f"{private} rejected while holding at most {len(mine)} rows"
                ) from None
        else:
            counts["recorded"] += 1
            if scope == private:
                mine.add(str(request_id))
        await _check(registry)

    for _ in range(operations):
        op = rng.random()
        request_id = rng.choice(IDS)
        scope = private if rng.random() < 0.3 else rng.choice(SHARED)
        if op < 0.30:
            await cancel(scope, request_id)
        elif op < 0.40:
            try:
                recorded = await registry.cancel_in_flight(request_id, "inflight", scope=scope)
            except CancellationLimitReached:
                # (Not in flight, it waits for a track, and what waits counts against the
                # quota, which the other threads may have filled.)
                counts["rejected"] += 1
            else:
                counts["in_flight_recorded" if recorded else "in_flight_ignored"] += 1
            await _check(registry)
        elif op < 0.55:
            await registry.clear(request_id, scope=scope)
            if scope == private:
                mine.discard(str(request_id))
        elif op < 0.68:
            await registry.is_cancelled(request_id, scope=scope)
            await registry.reason(request_id, scope=scope)
        elif op < 0.80:
            async with registry.request(request_id, scope=private) as token:
                assert await registry.in_flight(request_id, scope=private)
                try:
                    recorded = await registry.cancel_in_flight(request_id, "me", scope=private)
                except CancellationLimitReached:
                    recorded = False
                    if len(mine) < QUOTA and str(request_id) not in mine:
                        raise _Violation("own request refused under quota") from None
                else:
                    mine.add(str(request_id))
                if recorded and not token.cancelled:
                    raise _Violation("recorded cancellation did not flip the token")
            mine.discard(str(request_id))  # leaving request() clears the row
            counts["requests"] += 1
        elif op < 0.90:
            token = await registry.track(request_id, scope=scope)
            await registry.in_flight(request_id, scope=scope)
            if rng.random() < 0.5:
                # This thread tracks the request itself, so whatever the other threads do
                # (they untrack only their own rows), the cancellation must be recorded
                # unless the quota refuses it.
                try:
                    recorded = await registry.cancel_in_flight(request_id, "t", scope=scope)
                except CancellationLimitReached:
                    pass
                else:
                    if not recorded:
                        raise _Violation("a request this thread tracks was not in flight")
                    if not token.cancelled:
                        raise _Violation("tracked token not flipped")
                    counts["own_in_flight_recorded"] += 1
                    if scope == private:
                        mine.add(str(request_id))
            await registry.untrack(request_id, scope=scope)
        elif op < 0.95:
            await registry.in_flight(request_id, scope=scope)
        elif op < 0.98:
            await registry.stats()
            await _check(registry)
        else:
            await registry.cleanup(ttl=None if rng.random() < 0.5 else 0.001)
            counts["cleanups"] += 1


COUNTERS = (
    "recorded",
    "rejected",
    "in_flight_recorded",
    "in_flight_ignored",
    "own_in_flight_recorded",
    "requests",
    "cleanups",
)


def _run_threads(registry: CancellationRegistry, threads: int, operations: int) -> dict[str, int]:
    """Run *threads* workers, each on its own loop; return the summed counters."""
    errors: list[BaseException] = []
    counts = [dict.fromkeys(COUNTERS, 0) for _ in range(threads)]
    start = threading.Barrier(threads)

    def run(n: int) -> None:
        try:
            start.wait(timeout=30)
            asyncio.run(_worker(registry, n, counts[n], operations))
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(n,), name=f"stress-{n}") for n in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(timeout=100)
    assert not any(thread.is_alive() for thread in workers)
    assert errors == [], errors[:3]
    return {key: sum(c[key] for c in counts) for key in COUNTERS}


@pytest.mark.slow  # (a minute of thread switching)
def test_eight_threads_each_with_its_own_loop(busy_switching: None) -> None:
    storage = MemoryStorage()
    registry = CancellationRegistry(
        storage, max_rows=MAX_ROWS, max_rows_per_scope=QUOTA, janitor_interval=None
    )
    totals = _run_threads(registry, THREADS, OPERATIONS)
    asyncio.run(_check(registry))
    assert sum(storage.stats_from_thread(0).in_flight.values()) == 0  # every request ended
    assert len(registry.owners) == 0
    # The mix really exercised each path. (Whether a cancel_in_flight into a shared scope
    # met another thread's request, or the random mix hit the quota, depends on how the
    # scheduler interleaved the threads: both are proven on the stressed registry below,
    # with the interleaving forced.)
    assert totals["recorded"] > 1_000
    assert totals["requests"] > 1_000
    assert totals["cleanups"] > 0
    _cross_thread_cancel_is_recorded(registry)
    asyncio.run(_quota_still_rejects(registry))


def _cross_thread_cancel_is_recorded(registry: CancellationRegistry) -> None:
    """A request tracked on one thread's loop is cancelled in flight from another's."""
    tracked, done = threading.Event(), threading.Event()
    flipped: list[bool] = []

    async def serve() -> None:
        async with registry.request("cross", scope="cross-thread") as token:
            tracked.set()
            await asyncio.to_thread(done.wait, 30)
            flipped.append(token.cancelled)

    server = threading.Thread(target=asyncio.run, args=(serve(),))
    server.start()
    try:
        assert tracked.wait(30)
        assert asyncio.run(registry.cancel_in_flight("cross", "other thread", scope="cross-thread"))
    finally:
        done.set()
        server.join(30)
    assert flipped == [True]


async def _quota_still_rejects(registry: CancellationRegistry) -> None:
    await asyncio.sleep(0.02)
    await registry.cleanup(ttl=0.01)  # an empty table: no eviction can interfere
    assert (await registry.stats()).rows == {}
    for request_id in range(QUOTA):
        await registry.cancel(request_id, scope="after-the-stress")
    with pytest.raises(CancellationLimitReached):
        await registry.cancel(QUOTA, scope="after-the-stress")
    await _check(registry)


async def test_threads_on_every_backend(make_registry: MakeRegistry) -> None:
    """A smaller run on each backend; the registry's own loop keeps running meanwhile
    (a shared storage may serve other threads' calls on it)."""
    registry = make_registry(max_rows=MAX_ROWS, max_rows_per_scope=QUOTA)
    await registry.stats()  # first used from this (long-lived) loop, as a server would
    totals = await asyncio.to_thread(_run_threads, registry, 4, 400)
    await _check(registry)
    assert sum((await registry.stats()).in_flight.values()) == 0
    assert totals["recorded"] > 100
    assert totals["requests"] > 50


def test_a_cancellation_from_another_threads_loop_reaches_a_polling_worker() -> None:
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
    entered, polled = threading.Event(), threading.Event()
    result: list[bool] = []

    async def serve() -> None:
        async with registry.request(1, scope="s") as token:
            entered.set()

            def poll() -> None:  # a tool running in a worker thread
                while not token.cancelled:
                    polled.wait(0.001)
                result.append(token.cancelled)

            await asyncio.to_thread(poll)

    server = threading.Thread(target=asyncio.run, args=(serve(),))
    server.start()
    assert entered.wait(30)
    assert asyncio.run(registry.cancel_in_flight(1, scope="s"))
    server.join(30)
    assert not server.is_alive()
    assert result == [True]
    assert asyncio.run(registry.stats()).rows == {}


async def test_threads_that_use_the_storage_first_then_end(make_registry: MakeRegistry) -> None:
    """Short-lived threads, each with its own loop, are the first and only users of the
    registry: when one of them ends, the others must carry on (no error, no hang)."""
    registry = make_registry(max_rows=MAX_ROWS, max_rows_per_scope=QUOTA)
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def run(n: int) -> None:
        try:
            start.wait(timeout=30)
            asyncio.run(_worker(registry, n, dict.fromkeys(COUNTERS, 0), 50 + 150 * n))
        except BaseException as exc:
            errors.append(exc)

    # Daemon threads joined with a timeout: a hang fails this test instead of the suite.
    workers = [threading.Thread(target=run, args=(n,), daemon=True) for n in range(4)]
    for thread in workers:
        thread.start()
    for thread in workers:
        await asyncio.to_thread(thread.join, 10)
    assert not any(thread.is_alive() for thread in workers), "a thread hung"
    assert errors == [], errors[:3]
