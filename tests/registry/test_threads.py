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

from mcp_cancellation import (
    CancellationLimitReached,
    CancellationRegistry,
    MemoryStorage,
)

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


def _check(storage: MemoryStorage) -> None:
    stats = storage.stats_nowait()
    total = sum(stats.rows.values())
    if total > MAX_ROWS:
        raise _Violation(f"table holds {total} rows over the cap {MAX_ROWS}")
    over = {scope: n for scope, n in stats.rows.items() if n > QUOTA}
    if over:
        raise _Violation(f"scopes over quota: {over}")


async def _worker(
    registry: CancellationRegistry, storage: MemoryStorage, seed: int, counts: dict[str, int]
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
        _check(storage)

    for _ in range(OPERATIONS):
        op = rng.random()
        request_id = rng.choice(IDS)
        scope = private if rng.random() < 0.3 else rng.choice(SHARED)
        if op < 0.30:
            await cancel(scope, request_id)
        elif op < 0.40:
            recorded = await registry.cancel_in_flight(request_id, "inflight", scope=scope)
            counts["in_flight_recorded" if recorded else "in_flight_ignored"] += 1
            _check(storage)
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
                try:
                    if await registry.cancel_in_flight(request_id, "t", scope=scope):
                        if not token.cancelled:
                            raise _Violation("tracked token not flipped")
                        if scope == private:
                            mine.add(str(request_id))
                except CancellationLimitReached:
                    pass
            await registry.untrack(request_id, scope=scope)
        elif op < 0.95:
            await registry.in_flight(request_id, scope=scope)
        elif op < 0.98:
            await registry.stats()
            _check(storage)
        else:
            await registry.cleanup(ttl=None if rng.random() < 0.5 else 0.001)
            counts["cleanups"] += 1


def test_eight_threads_each_with_its_own_loop(busy_switching: None) -> None:
    storage = MemoryStorage()
    registry = CancellationRegistry(
        storage, max_rows=MAX_ROWS, max_rows_per_scope=QUOTA, janitor_interval=None
    )
    errors: list[BaseException] = []
    counts = [
        dict.fromkeys(
            (
                "recorded",
                "rejected",
                "in_flight_recorded",
                "in_flight_ignored",
                "requests",
                "cleanups",
            ),
            0,
        )
        for _ in range(THREADS)
    ]
    start = threading.Barrier(THREADS)

    def run(n: int) -> None:
        try:
            start.wait(timeout=30)
            asyncio.run(_worker(registry, storage, n, counts[n]))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,), name=f"stress-{n}") for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=100)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == [], errors[:3]

    _check(storage)
    stats = storage.stats_nowait()
    assert sum(stats.in_flight.values()) == 0  # every request and track ended
    assert registry._owners == {}
    totals = {key: sum(c[key] for c in counts) for key in counts[0]}
    # The mix really exercised each path.
    assert totals["recorded"] > 1_000
    assert totals["rejected"] > 0
    assert totals["in_flight_recorded"] > 0
    assert totals["requests"] > 1_000
    assert totals["cleanups"] > 0


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
