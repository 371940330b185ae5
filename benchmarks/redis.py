"""Redis storage: round trips and time per request life and per cancel() at the cap.

Run with ``./dev bench redis`` (or ``python benchmarks/redis.py``); it starts its own
redis-server on a free loopback port. Each figure is printed beside a baseline measured in
the same run against the same server: a straightforward multi-command implementation
(:class:`NaiveRedis`) that

* tracks with HSET then reads the cancellation row (2 round trips),
* answers every ``cancelled()`` poll with a round trip (no push),
* untracks and clears with two more commands,
* records a cancellation with separate commands (quota read, cap read, insert) and, at
  the cap, reads every row back to pick the eviction batch (the seed's algorithm).

Round trips are counted by a connection class that counts what it sends (a pipeline or
a script call is one); times are the best of several rounds. Case 5 (``owners``) has no
naive baseline: its baseline is the same cancellation with two owners, against thousands.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

# This script is named redis.py: keep its directory from shadowing the redis package,
# then make _common (same directory) and tests.support (project root) importable.
sys.path.remove(str(Path(__file__).resolve().parent))  # this script's own directory

sys.path.append(str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import contextlib

from _common import address_scope, check, quiet_gc, report
from redis.asyncio import Redis
from redis.asyncio.connection import Connection
from tests.support import HeldRequest, RedisServer, async_wait_until

from mcp_cancellation import CancellationLimitReached, CancellationRegistry
from mcp_cancellation.storage._base import Limits
from mcp_cancellation.storage.redis import RedisStorage

ROUNDS = 3
POLLS = 10


class CountingConnection(Connection):
    """Counts commands sent: one per round trip."""

    sent = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        await super().send_packed_command(command, check_health)


class NaiveRedis:
    """The straightforward multi-command implementation (the baseline)."""

    def __init__(self, client: Redis, limits: Limits, prefix: str = "naive") -> None:
        self.r = client
        self.limits = limits
        self.p = prefix

    def _m(self, scope: str, key: str) -> str:
        return f"{scope}\x00{key}"

    async def track(self, scope: str, key: str, owner: str) -> bool:
        await self.r.hset(f"{self.p}:f:{self._m(scope, key)}", owner, "1")
        return bool(await self.r.hexists(f"{self.p}:reasons", self._m(scope, key)))

    async def poll(self, scope: str, key: str) -> bool:
        return bool(await self.r.hexists(f"{self.p}:reasons", self._m(scope, key)))

    async def finish(self, scope: str, key: str, owner: str) -> None:
        await self.r.hdel(f"{self.p}:f:{self._m(scope, key)}", owner)
        if await self.r.hexists(f"{self.p}:reasons", self._m(scope, key)):
            await self._delete([(scope, key)])

    async def _delete(self, rows: list[tuple[str, str]]) -> None:
        pipe = self.r.pipeline(transaction=False)
        for scope, key in rows:
            m = self._m(scope, key)
            pipe.hdel(f"{self.p}:reasons", m)
            pipe.zrem(f"{self.p}:ages", m)
            pipe.hincrby(f"{self.p}:counts", scope, -1)
        await pipe.execute()

    async def cancel(self, request_id: object, reason: str | None, scope: str) -> None:
        key = str(request_id)
        m = self._m(scope, key)
        if await self.r.hexists(f"{self.p}:reasons", m):
            await self.r.hset(f"{self.p}:reasons", m, reason or "")
            return
        quota = self.limits.max_rows_per_scope
        count = int(await self.r.hget(f"{self.p}:counts", scope) or 0)
        if quota is not None and count >= quota:
            raise CancellationLimitReached(scope, quota)
        cap = self.limits.max_rows
        if cap is not None and await self.r.zcard(f"{self.p}:ages") >= cap:
            rows: list[Any] = await self.r.zrange(f"{self.p}:ages", 0, -1, withscores=True)
            sizes: dict[str, int] = {}
            parsed = []
            for member, age in rows:
                row_scope, row_key = member.decode().split("\x00", 1)
                sizes[row_scope] = sizes.get(row_scope, 0) + 1
                parsed.append((row_scope, row_key, age))
            parsed.sort(key=lambda row: (-sizes[row[0]], row[2]))
            await self._delete([(s, k) for s, k, _ in parsed[: self.limits.eviction_batch]])
        pipe = self.r.pipeline(transaction=False)
        pipe.hset(f"{self.p}:reasons", m, reason or "")
        pipe.zadd(f"{self.p}:ages", {m: time.time()})
        pipe.hincrby(f"{self.p}:counts", scope, 1)
        await pipe.execute()


# -- 1. request life ------------------------------------------------------------------


async def _ours_life(url: str, n: int) -> tuple[float, float]:
    storage = RedisStorage.from_url(url, prefix="bench-life", connection_class=CountingConnection)
    async with CancellationRegistry(storage, janitor_interval=None) as registry:
        async with registry.request("warm-up", "s"):
            pass
        await asyncio.sleep(0.05)  # background tasks settle
        sent = CountingConnection.sent
        start = time.perf_counter()
        for i in range(n):
            async with registry.request(i, "ip:192.0.2.1") as token:
                for _ in range(POLLS):
                    if token.cancelled:
                        raise AssertionError("never cancelled")
        elapsed = time.perf_counter() - start
        trips = CountingConnection.sent - sent
    return elapsed / n, trips / n


async def _naive_life(url: str, n: int) -> tuple[float, float]:
    client = Redis.from_url(url, connection_class=CountingConnection)
    naive = NaiveRedis(client, Limits())
    try:
        sent = CountingConnection.sent
        start = time.perf_counter()
        for i in range(n):
            key = str(i)
            if await naive.track("ip:192.0.2.1", key, "owner"):
                raise AssertionError("never cancelled")
            for _ in range(POLLS):
                if await naive.poll("ip:192.0.2.1", key):
                    raise AssertionError("never cancelled")
            await naive.finish("ip:192.0.2.1", key, "owner")
        elapsed = time.perf_counter() - start
        trips = CountingConnection.sent - sent
    finally:
        await client.aclose()
    return elapsed / n, trips / n


def bench_request_life(url: str) -> dict[str, float]:
    print(f"1. request life (track, {POLLS} polls, untrack + clear)")
    n = 2_000
    with quiet_gc():
        ours = min((asyncio.run(_ours_life(url, n)) for _ in range(ROUNDS)), key=lambda r: r[0])
        base = min((asyncio.run(_naive_life(url, n)) for _ in range(ROUNDS)), key=lambda r: r[0])
    print(f"  round trips per request life: {ours[1]:.2f}  baseline {base[1]:.2f}")
    ratio = report("request() life", ours[0], base[0])
    check("a request life is 2 round trips, whatever the polls", ours[1] == 2, f"{ours[1]:.2f}")
    check("request life faster than the polling baseline", ratio < 1, f"{ratio:.2f}x")
    return {"life_us": ours[0] * 1e6, "life_base_us": base[0] * 1e6, "life_ratio": ratio}


# -- 2. cancel() at the cap -----------------------------------------------------------

SCOPES = 40
CAP = 10_000
QUOTA = 256


async def _at_cap(cancel: Any, inserts: int) -> tuple[float, float, float]:
    """Fill to the cap round-robin over 40 scopes, then time *inserts* accepted inserts
    (every 500th evicts a batch). Returns (mean s, slowest s, round trips per insert)."""
    ids = itertools.count()
    names = [f"ip:10.0.0.{i}" for i in range(SCOPES)]
    for _ in range(QUOTA + 1):
        for scope in names:
            with contextlib.suppress(CancellationLimitReached):
                await cancel(next(ids), None, scope)
    timings: list[float] = []
    trips: list[int] = []
    perf = time.perf_counter
    while len(timings) < inserts:
        for scope in names:
            before = CountingConnection.sent
            start = perf()
            try:
                await cancel(next(ids), None, scope)
            except CancellationLimitReached:
                continue
            timings.append(perf() - start)
            trips.append(CountingConnection.sent - before)
            if len(timings) == inserts:
                break
    # The storage's heartbeat shares the counting pool and may land inside an insert's
    # window: the typical (median) insert is the round-trip figure of an insert.
    return sum(timings) / len(timings), max(timings), statistics.median(trips)


async def _ours_cap(url: str, inserts: int) -> tuple[float, float, float]:
    storage = RedisStorage.from_url(url, prefix="bench-cap", connection_class=CountingConnection)
    async with CancellationRegistry(
        storage, max_rows=CAP, max_rows_per_scope=QUOTA, janitor_interval=None
    ) as registry:
        await storage.client.flushdb()
        return await _at_cap(registry.cancel, inserts)


async def _naive_cap(url: str, inserts: int) -> tuple[float, float, float]:
    client = Redis.from_url(url, connection_class=CountingConnection)
    try:
        await client.flushdb()
        naive = NaiveRedis(client, Limits(max_rows=CAP, max_rows_per_scope=QUOTA))
        return await _at_cap(naive.cancel, inserts)
    finally:
        await client.aclose()


def bench_cancel_at_cap(url: str) -> dict[str, float]:
    print(f"2. cancel() at the cap ({SCOPES} scopes x {QUOTA}, cap {CAP}, batch {CAP // 20})")
    inserts = 2_000
    with quiet_gc():
        ours = min(asyncio.run(_ours_cap(url, inserts)) for _ in range(ROUNDS))
        base = min(asyncio.run(_naive_cap(url, inserts)) for _ in range(ROUNDS))
    print(f"  round trips per accepted cancel() (median): {ours[2]:.0f}  baseline {base[2]:.0f}")
    mean = report("cancel() at the cap, mean", ours[0], base[0])
    worst = report("cancel() at the cap, slowest (evicting)", ours[1], base[1])
    check("one round trip per cancel(), evictions included", ours[2] == 1, f"{ours[2]:.2f}")
    check("mean cancel() at the cap faster than the baseline", mean < 1, f"{mean:.2f}x")
    check("evicting cancel() faster than the baseline", worst < 1, f"{worst:.2f}x")
    return {
        "cap_mean_us": ours[0] * 1e6,
        "cap_mean_base_us": base[0] * 1e6,
        "cap_worst_us": ours[1] * 1e6,
        "cap_worst_base_us": base[1] * 1e6,
    }


#: The eviction-shape benchmark: a cap whose batch is the brief's 5 500 rows.
FLOOD_CAP = 110_000
#: Rows per victim scope in the flood shapes (1: an address-rotation flood; 2, 4: a few
#: cancellations per rotated address).
FLOOD_SHAPES = (1, 2, 4)


async def _fill_shape(storage: RedisStorage, rows_per_scope: int, limits: Limits) -> int:
    """FLOOD_CAP rows: the batch's worth from one large scope first when *rows_per_scope*
    is 0 (the baseline), then scopes of *rows_per_scope* rows each (at least 1), filled
    round-robin so that their oldest rows interleave. Returns the rows written."""
    batch = FLOOD_CAP // 20
    big = batch if rows_per_scope == 0 else 0
    size = max(1, rows_per_scope)
    jobs = [("principal:big", f"k{i}") for i in range(big)]
    jobs += [
        (address_scope(i), str(n)) for n in range(size) for i in range((FLOOD_CAP - big) // size)
    ]
    for start in range(0, len(jobs), 2_000):
        await asyncio.gather(
            *(storage.add(s, k, None, limits=limits) for s, k in jobs[start : start + 2_000])
        )
    return len(jobs)


async def _longest_script(client: Any) -> float:
    """The longest script Redis ran since SLOWLOG was last reset (every command is
    logged while this benchmark runs): how long Redis served nobody else."""
    entries = await client.slowlog_get(10_000)
    return float(max(e["duration"] for e in entries if e["command"].startswith(b"EVAL"))) / 1e6


@contextlib.asynccontextmanager
async def _flood_table(
    url: str, prefix: str, rows_per_scope: int, limits: Limits
) -> AsyncIterator[tuple[RedisStorage, int]]:
    """A table filled by :func:`_fill_shape`, with SLOWLOG recording every command from
    then on; the storage and the rows written. Flushed and closed afterwards."""
    storage = RedisStorage.from_url(url, prefix=prefix, max_connections=64)
    client = storage.client
    try:
        await client.flushdb()
        filled = await _fill_shape(storage, rows_per_scope, limits)
        await client.config_set("slowlog-log-slower-than", 0)
        await client.config_set("slowlog-max-len", 10_000)
        await client.slowlog_reset()
        yield storage, filled
    finally:
        await client.config_set("slowlog-log-slower-than", 10_000)
        await client.flushdb()
        await storage.aclose()


async def _evicting_insert(url: str, prefix: str, rows_per_scope: int) -> tuple[float, float]:
    """Fill a table to FLOOD_CAP, then time the one insert that evicts a batch: from
    scopes of *rows_per_scope* rows each, or (0, the baseline) the same number of rows
    taken from one large scope. Returns the insert's time and its longest single script."""
    limits = Limits(max_rows=FLOOD_CAP, max_rows_per_scope=None)
    batch = limits.eviction_batch
    async with _flood_table(url, prefix, rows_per_scope, limits) as (storage, _):
        with quiet_gc():  # the fill left many objects: keep a collection out of the timing
            started = time.perf_counter()
            result = await storage.add("ip:203.0.113.1", "1", None, limits=limits)
            elapsed = time.perf_counter() - started
        longest = await _longest_script(storage.client)
    size = max(1, rows_per_scope)
    assert sum(n for _, n in result.evicted) == batch, result.evicted[:3]
    assert len(result.evicted) == (-(-batch // size) if rows_per_scope else 1)
    return elapsed, longest


async def _expiring_sweep(url: str, prefix: str, rows_per_scope: int) -> tuple[float, float]:
    """Fill a table with FLOOD_CAP rows in scopes of *rows_per_scope* rows each (FLOOD_CAP:
    one scope, the baseline), without a cap, then time the janitor's pass that finds every
    row expired (the flood's rows, a TTL later). Returns the pass's time per row and its
    longest single script."""
    limits = Limits(max_rows=None, max_rows_per_scope=None)
    async with _flood_table(url, prefix, rows_per_scope, limits) as (storage, filled):
        with quiet_gc():
            started = time.perf_counter()
            removed, _ = await storage.cleanup(0.0, [])
            elapsed = time.perf_counter() - started
        longest = await _longest_script(storage.client)
    assert removed == filled, (removed, filled)
    return elapsed / removed, longest


def _time_shapes(
    measure: Callable[[str, str, int], Coroutine[Any, Any, tuple[float, float]]],
    url: str,
    name: str,
    shapes: tuple[int, ...],
) -> tuple[dict[int, float], float]:
    """*measure* for each shape, ROUNDS times: the best time of each shape, and the
    longest single script of all the runs."""
    runs = {
        shape: [asyncio.run(measure(url, f"{name}{shape}", shape)) for _ in range(ROUNDS)]
        for shape in shapes
    }
    best = {shape: min(t for t, _ in shape_runs) for shape, shape_runs in runs.items()}
    return best, max(s for shape_runs in runs.values() for _, s in shape_runs)


def _shape_label(shape: int, rows: int) -> str:
    return f"{rows // shape} scopes of {shape} row{'s' if shape > 1 else ''}"


def bench_small_scope_victims(url: str) -> dict[str, float]:
    batch = FLOOD_CAP // 20
    print(f"3. one evicting insert at cap {FLOOD_CAP}: {batch} rows from many small scopes")
    best, longest = _time_shapes(_evicting_insert, url, "flood", (0, *FLOOD_SHAPES))
    one = best[0]
    figures = {"one_scope_evict_ms": one * 1e3}
    for shape in FLOOD_SHAPES:
        flood = best[shape]
        label = _shape_label(shape, batch)
        ratio = report(f"{label} vs the same rows from one scope", flood, one)
        check(f"{label} cost at most 3x one scope's rows", ratio <= 3, f"{ratio:.2f}x")
        figures[f"flood{shape}_evict_ms"] = flood * 1e3
    print(f"  longest single script in any of these inserts: {longest * 1e3:.2f} ms")
    check(
        "evicting insert: no single script holds Redis for more than 10 ms",
        longest <= 0.010,
        f"{longest * 1e3:.2f} ms",
    )
    figures["longest_script_ms"] = longest * 1e3
    return figures


def bench_expiry(url: str) -> dict[str, float]:
    print(
        f"4. a janitor pass that finds {FLOOD_CAP} rows expired, from many small scopes (per row)"
    )
    best, longest = _time_shapes(_expiring_sweep, url, "expiry", (FLOOD_CAP, *FLOOD_SHAPES))
    one = best[FLOOD_CAP]
    figures = {"one_scope_expiry_us": one * 1e6}
    for shape in FLOOD_SHAPES:
        # No goal on the ratio: a scope that loses its oldest row is re-filed (three
        # sorted-set updates), which a row of one large scope mostly is not. The goal is
        # that the sweep never holds Redis for long.
        flood = best[shape]
        label = _shape_label(shape, FLOOD_CAP)
        report(f"{label} vs the same rows in one scope", flood, one, unit="us")
        figures[f"flood{shape}_expiry_us"] = flood * 1e6
    print(f"  longest single script in any of these passes: {longest * 1e3:.2f} ms")
    check(
        "janitor pass: no single script holds Redis for more than 10 ms",
        longest <= 0.010,
        f"{longest * 1e3:.2f} ms",
    )
    figures["longest_expiry_script_ms"] = longest * 1e3
    return figures


# -- 5. a cancellation of one id with thousands of owners --------------------------------

#: Owners of one id, split over two workers: the baseline, and thousands.
OWNER_COUNTS = (2, 200, 5_000)


async def _cancel_owners(url: str, prefix: str, owners: int) -> tuple[float, float]:
    """Two workers hold *owners* calls of one id between them; a third cancels it. Returns
    the ``ADD`` script's Redis time (SLOWLOG) and the time until every token was flipped."""
    storages = [RedisStorage.from_url(url, prefix=prefix) for _ in range(3)]
    registries = [CancellationRegistry(s, janitor_interval=None) for s in storages]
    workers, canceller = registries[:2], registries[2]
    client = storages[0].client
    held: list[HeldRequest] = []
    try:
        await client.flushdb()
        for registry in registries:
            await registry.stats()  # its first call: the listener subscribes, then resyncs
        await async_wait_until(lambda: all(s.subscribed and s.resyncs for s in storages))
        held = [HeldRequest(workers[i % 2], 7, "s") for i in range(owners)]
        tokens = await asyncio.gather(*(h.started() for h in held))
        for registry in workers:
            await registry.stats()  # every track has reached Redis
        await client.config_set("slowlog-log-slower-than", 0)
        await client.slowlog_reset()
        with quiet_gc():
            started = time.perf_counter()
            assert await canceller.cancel_in_flight(7, "owners-bench", scope="s")
            await async_wait_until(lambda: all(t.cancelled for t in tokens), 30, 0.001)
            elapsed = time.perf_counter() - started
        entries = await client.slowlog_get(128)
        # (A first EVALSHA that finds no script is logged too, and is the shorter.)
        add = max(e["duration"] for e in entries if b"owners-bench" in e["command"])
        return add / 1e6, elapsed
    finally:
        await client.config_set("slowlog-log-slower-than", 10_000)
        for h in held:
            h.release.set()
        await asyncio.gather(*(h.task for h in held), return_exceptions=True)
        for registry in registries:
            await registry.aclose()


def bench_many_owners(url: str) -> dict[str, float]:
    print("5. a cancellation of one id held by many owners (two workers): ADD's Redis time")
    best: dict[int, tuple[float, float]] = {}
    for owners in OWNER_COUNTS:
        runs = [asyncio.run(_cancel_owners(url, f"owners{owners}", owners)) for _ in range(ROUNDS)]
        best[owners] = (min(a for a, _ in runs), min(e for _, e in runs))
    base_add, base_flip = best[OWNER_COUNTS[0]]
    figures = {"two_owners_add_us": base_add * 1e6}
    for owners in OWNER_COUNTS[1:]:
        add, flip = best[owners]
        report(f"ADD, {owners} owners vs {OWNER_COUNTS[0]}", add, base_add)
        report(
            f"until all {owners} tokens flipped vs {OWNER_COUNTS[0]}", flip, base_flip, "ms", 1e3
        )
        figures[f"owners{owners}_add_us"] = add * 1e6
        figures[f"owners{owners}_flip_ms"] = flip * 1e3
    worst = best[OWNER_COUNTS[-1]][0] / base_add
    check(
        f"ADD's Redis time does not grow with the owners ({OWNER_COUNTS[-1]} within 2x of "
        f"{OWNER_COUNTS[0]})",
        worst <= 2,
        f"{worst:.2f}x",
    )
    return figures


CASES = {
    "life": bench_request_life,
    "cap": bench_cancel_at_cap,
    "flood": bench_small_scope_victims,
    "expiry": bench_expiry,
    "owners": bench_many_owners,
}


def main() -> int:
    """``python benchmarks/redis.py [life] [cap] [flood] [expiry] [owners]``: the cases named, else
    all."""
    names = sys.argv[1:] or list(CASES)
    unknown = [name for name in names if name not in CASES]
    if unknown:
        print(f"unknown case(s) {unknown}; choose from {list(CASES)}", file=sys.stderr)
        return 2
    with RedisServer() as server:
        print(f"redis-server on {server.url}")
        for name in names:
            CASES[name](server.url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
