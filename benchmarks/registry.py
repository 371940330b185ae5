"""Registry speed: request life, cancel() at the cap, and token polling.

Run with ``./dev bench registry`` (or ``python benchmarks/registry.py``). Each figure is
printed beside a baseline measured in the same run, and the ratio is compared with the
target of issue 2:

1. the life of a request that is never cancelled (enter ``request()``, poll
   ``.cancelled`` 10 times, exit) against the same dictionary operations done directly
   under a lock: at most 3x;
2. ``cancel()`` with the table at its cap (40 scopes x 256 rows, cap 10 000, so every
   500th insert evicts) against the seed's eviction done the straightforward way (scan
   every row, count per scope, sort, delete a batch; O(1) quota check): amortised cost at
   least 3x lower, slowest insert at least 20x faster; also at a cap of 100 000;
3. ``token.cancelled`` against a bare ``in`` test on a set: at most 2x; and (issue 14)
   against a plain slot attribute read: at most 2x.

1b.: the bytes an in-flight request holds against its floor (a dict entry, its key tuple
and a one-slot token): at most 2x. (Issue 14's "request life at most 2x a dict and
contextvar floor" is retired: Python's ``async with`` alone costs about 1.7x that floor,
and no end-to-end figure shows the difference.)

4. floods in memory: the memory storage's side of issue 14's correction (Redis's is
   ``benchmarks/redis.py flood`` and ``expiry``). At a cap of 110 000 rows, one evicting
   ``cancel()`` takes a batch of 5 500 rows from scopes of 1, 2 or 4 rows (an
   address-rotation flood), and a janitor pass a TTL later expires all 110 000 of them;
   each against the same rows held by one scope, in the same run; the evicting insert of
   one-row scopes also with the Prometheus bridge (one signal per evicted scope). No
   goal: the figures show what a flood costs the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import itertools
import sys
import threading
import time
import timeit
import tracemalloc
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import contextlib

from _common import address_scope, best_of, check, quiet_gc, report

from mcp_cancellation import (
    CancellationLimitReached,
    CancellationRegistry,
    MemoryStorage,
)
from mcp_cancellation.storage._base import Limits

ROUNDS = 5


# -- 1. request life ------------------------------------------------------------------


async def _registry_life(registry: CancellationRegistry, n: int) -> float:
    scope = "ip:192.0.2.1"
    start = time.perf_counter()
    for i in range(n):
        async with registry.request(i, scope) as token:
            for _ in range(10):
                if token.cancelled:
                    raise AssertionError("never cancelled")
    return (time.perf_counter() - start) / n


async def _baseline_life(n: int) -> float:
    lock = threading.Lock()
    in_flight: dict[tuple[str, str, str], object] = {}
    cancelled: dict[tuple[str, str], str] = {}
    scope, owner = "ip:192.0.2.1", "owner"
    start = time.perf_counter()
    for i in range(n):
        key = str(i)
        with lock:
            in_flight[(scope, key, owner)] = owner
        for _ in range(10):
            if (scope, key) in cancelled:
                raise AssertionError("never cancelled")
        with lock:
            del in_flight[(scope, key, owner)]
        if (scope, key) in cancelled:
            with lock:
                del cancelled[(scope, key)]
    return (time.perf_counter() - start) / n


class _FloorToken:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False


def bench_request_life() -> None:
    print("1. request life (track, 10 polls, untrack + clear)")
    n = 20_000
    registry = CancellationRegistry(janitor_interval=None)
    with quiet_gc():
        ours = best_of(ROUNDS, lambda: asyncio.run(_registry_life(registry, n)))
        base = best_of(ROUNDS, lambda: asyncio.run(_baseline_life(n)))
    ratio = report("request() life vs dict ops under a lock", ours, base)
    check("request life <= 3x the dict-and-lock baseline (issue 2)", ratio <= 3.0, f"{ratio:.2f}x")


# -- 1b. bytes per in-flight request ----------------------------------------------------


async def _ours_bytes(n: int) -> float:
    registry = CancellationRegistry(janitor_interval=None)
    contexts = [registry.request(i, "ip:192.0.2.1") for i in range(n)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for context in contexts:  # created above: what entering one holds is the figure
        await context.__aenter__()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    for context in reversed(contexts):
        await context.__aexit__(None, None, None)
    return held / n


def _floor_bytes(n: int) -> float:
    in_flight: dict[tuple[str, str], _FloorToken] = {}
    keys = [str(i) for i in range(n)]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for key in keys:
        in_flight[("ip:192.0.2.1", key)] = _FloorToken()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return held / n


def bench_bytes() -> None:
    print("1b. bytes held per in-flight request (tracemalloc, 20 000 requests)")
    n = 20_000
    ours = asyncio.run(_ours_bytes(n))
    floor = _floor_bytes(n)
    ratio = report("in-flight request", ours, floor, unit="B", scale=1)
    check(
        "an in-flight request <= 2x its floor (a dict entry, key, token)",
        ratio <= 2.0,
        f"{ratio:.2f}x",
    )


# -- 2. cancel() at the cap -----------------------------------------------------------


class NaiveEviction:
    """The seed's eviction, implemented the straightforward way (the baseline)."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.lock = threading.Lock()
        self.rows: dict[tuple[str, str], tuple[float, str | None]] = {}
        self.per_scope: dict[str, int] = {}

    async def cancel(self, request_id: object, reason: str | None, scope: str) -> None:
        key = (scope, str(request_id))
        with self.lock:
            if key in self.rows:
                return
            quota = self.limits.max_rows_per_scope
            if quota is not None and self.per_scope.get(scope, 0) >= quota:
                raise CancellationLimitReached(scope, quota)
            cap = self.limits.max_rows
            if cap is not None and len(self.rows) >= cap:
                counts: dict[str, int] = {}
                for row_scope, _ in self.rows:  # scan every row
                    counts[row_scope] = counts.get(row_scope, 0) + 1
                victims = sorted(self.rows, key=lambda k: (-counts[k[0]], self.rows[k][0]))
                for victim in victims[: self.limits.eviction_batch]:
                    del self.rows[victim]
                    self.per_scope[victim[0]] -= 1
            self.rows[key] = (time.monotonic(), reason)
            self.per_scope[scope] = self.per_scope.get(scope, 0) + 1


async def _fill_and_time(cancel: object, scopes: int, inserts: int) -> tuple[float, float, int]:
    """Fill to the cap round-robin, run a few untimed evictions so both implementations
    are measured warm (steady state, not first-call costs), then time *inserts* accepted
    inserts one by one."""
    assert callable(cancel)
    ids = itertools.count()
    names = [f"ip:10.0.{i // 256}.{i % 256}" for i in range(scopes)]
    for _ in range(256 + 40):
        for scope in names:
            with contextlib.suppress(CancellationLimitReached):
                await cancel(next(ids), None, scope)
    timings: list[float] = []
    rejected = 0
    perf = time.perf_counter
    while len(timings) < inserts:
        for scope in names:
            start = perf()
            try:
                await cancel(next(ids), None, scope)
            except CancellationLimitReached:
                rejected += 1
                continue
            timings.append(perf() - start)
    return sum(timings) / len(timings), max(timings), rejected


def bench_cap(cap: int, scopes: int, inserts: int) -> None:
    print(
        f"2. cancel() at the cap: {scopes} scopes x 256 rows, cap {cap:,}, "
        f"batch {max(1, cap // 20):,}, {inserts:,} timed inserts"
    )

    def ours() -> tuple[float, float, int]:
        registry = CancellationRegistry(max_rows=cap, max_rows_per_scope=256, janitor_interval=None)
        return asyncio.run(_fill_and_time(registry.cancel, scopes, inserts))

    def naive() -> tuple[float, float, int]:
        baseline = NaiveEviction(Limits(max_rows=cap, max_rows_per_scope=256))
        return asyncio.run(_fill_and_time(baseline.cancel, scopes, inserts))

    with quiet_gc():
        mine = [ours() for _ in range(3)]
        base = [naive() for _ in range(3)]
    mean_ours, mean_base = min(m[0] for m in mine), min(b[0] for b in base)
    max_ours, max_base = min(m[1] for m in mine), min(b[1] for b in base)
    amortised = report("amortised cancel()", mean_ours, mean_base)
    worst = report("slowest cancel() (the evicting one)", max_ours, max_base)
    check(f"cap {cap:,}: amortised at least 3x lower", amortised <= 1 / 3, f"{amortised:.2f}x")
    check(f"cap {cap:,}: slowest at least 20x faster", worst <= 1 / 20, f"{worst:.3f}x")


# -- 3. polling ---------------------------------------------------------------------


async def _token() -> object:
    registry = CancellationRegistry(janitor_interval=None)
    async with registry.request(1, "global") as token:
        return token


def bench_poll() -> None:
    print("3. token.cancelled against a plain attribute read and a bare `in` on a set")
    token = asyncio.run(_token())
    pending = {("ip:192.0.2.1", "7")}
    key = ("ip:192.0.2.1", "8")
    number = 2_000_000
    with quiet_gc():
        ours = best_of(
            ROUNDS,
            lambda: (
                timeit.timeit("token.cancelled", globals={"token": token}, number=number) / number
            ),
        )
        base = best_of(
            ROUNDS,
            lambda: (
                timeit.timeit(
                    "key in pending", globals={"key": key, "pending": pending}, number=number
                )
                / number
            ),
        )
        plain = best_of(
            ROUNDS,
            lambda: (
                timeit.timeit("token.cancelled", globals={"token": _FloorToken()}, number=number)
                / number
            ),
        )
    ratio = report("token.cancelled vs `x in set`", ours, base, unit="ns", scale=1e9)
    check("poll <= 2x a set membership test (issue 2)", ratio <= 2.0, f"{ratio:.2f}x")
    ratio = report("token.cancelled vs a slot attribute read", ours, plain, unit="ns", scale=1e9)
    check("poll <= 2x a plain attribute read (issue 14)", ratio <= 2.0, f"{ratio:.2f}x")


# -- 4. floods in memory -----------------------------------------------------------------

FLOOD_CAP = 110_000
#: Rows per scope: 0 is the baseline (the batch's rows, or all of them, in one scope).
FLOOD_SHAPES = (0, 1, 2, 4)


async def _flood_registry(
    shape: int, rows: int, max_rows: int | None
) -> tuple[CancellationRegistry, list[float]]:
    """A registry on a memory storage with a clock of its own, holding *rows* rows in
    scopes of *shape* rows each, filled round-robin (0: the first *rows* // 20 in one
    scope when evicting, all of them when not); the registry and its clock."""
    now = [0.0]
    registry = CancellationRegistry(
        MemoryStorage(clock=lambda: now[0]),
        max_rows=max_rows,
        max_rows_per_scope=None,
        ttl=None,
        janitor_interval=None,
    )
    big = (rows // 20 if max_rows is not None else rows) if shape == 0 else 0
    size = max(1, shape)
    for i in range(big):
        now[0] += 1e-3
        await registry.cancel(i, None, "principal:big")
    for n in range(size):
        for i in range((rows - big) // size):
            now[0] += 1e-3
            await registry.cancel(n, None, address_scope(i))
    return registry, now


async def _flood_evict(shape: int, bridged: bool = False) -> float:
    """The evicting insert's time; *bridged*: with a Prometheus bridge installed, which
    counts each evicted scope's ``cancellation.evicted`` signal."""
    registry, _ = await _flood_registry(shape, FLOOD_CAP, FLOOD_CAP)
    bridge = None
    if bridged:
        from prometheus_client import CollectorRegistry

        from mcp_cancellation.telemetry.prometheus import PrometheusBridge

        bridge = PrometheusBridge(registry, collector_registry=CollectorRegistry()).install()
    with quiet_gc():
        started = time.perf_counter()
        await registry.cancel(1, None, "ip:203.0.113.1")
        elapsed = time.perf_counter() - started
    assert (await registry.stats()).total_rows == FLOOD_CAP - FLOOD_CAP // 20 + 1
    if bridge is not None:
        bridge.uninstall()
    await registry.aclose()
    return elapsed


async def _flood_evict_bridged(shape: int) -> float:
    return await _flood_evict(shape, bridged=True)


_longest_hold: dict[int, float] = {}  # by shape: the longest the loop was held, any round


async def _flood_expire(shape: int) -> float:
    """The janitor pass's time per expired row; also notes, in _longest_hold, the longest
    the pass held the event loop (the longest gap between two runs of a task that yields
    at every turn of the loop)."""
    registry, now = await _flood_registry(shape, FLOOD_CAP, None)
    now[0] += 1_000.0
    ticks: list[float] = []

    async def tick() -> None:
        while True:
            ticks.append(time.perf_counter())
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    with quiet_gc():
        started = time.perf_counter()
        result = await registry.cleanup(ttl=1.0)
        elapsed = time.perf_counter() - started
    ticker.cancel()
    marks = [started, *(t for t in ticks if t > started), started + elapsed]
    hold = max(b - a for a, b in itertools.pairwise(marks))
    _longest_hold[shape] = max(hold, _longest_hold.get(shape, 0.0))
    assert result.removed == FLOOD_CAP, result
    await registry.aclose()
    return elapsed / FLOOD_CAP


def _run(measure: Callable[[int], Coroutine[Any, Any, float]], shape: int) -> float:
    return asyncio.run(measure(shape))


def _shape_name(shape: int, rows: int) -> str:
    return f"{rows // shape:,} scopes of {shape} row{'s' if shape > 1 else ''}"


def bench_floods() -> None:
    batch = FLOOD_CAP // 20
    print(f"4. floods in memory: cap {FLOOD_CAP:,}, batch {batch:,} (no goal)")
    rounds = 3
    evict = {s: best_of(rounds, functools.partial(_run, _flood_evict, s)) for s in FLOOD_SHAPES}
    for shape in FLOOD_SHAPES[1:]:
        name = f"evicting insert, {_shape_name(shape, batch)} vs one scope"
        report(name, evict[shape], evict[0], unit="ms", scale=1e3)
    bridged = {s: best_of(rounds, functools.partial(_run, _flood_evict_bridged, s)) for s in (0, 1)}
    name = f"{batch:,} one-row scopes, with the Prometheus bridge"
    report(name, bridged[1], bridged[0], unit="ms", scale=1e3)
    expire = {s: best_of(rounds, functools.partial(_run, _flood_expire, s)) for s in FLOOD_SHAPES}
    for shape in FLOOD_SHAPES[1:]:
        report(
            f"expiry per row, {_shape_name(shape, FLOOD_CAP)} vs one scope",
            expire[shape],
            expire[0],
            unit="us",
        )
    print(f"  a janitor pass expiring all {FLOOD_CAP:,} rows: ", end="")
    print(", ".join(f"{_label(s)} {expire[s] * FLOOD_CAP * 1e3:.1f} ms" for s in FLOOD_SHAPES))
    print("  the longest it held the event loop at once (any round): ", end="")
    print(", ".join(f"{_label(s)} {_longest_hold[s] * 1e3:.1f} ms" for s in FLOOD_SHAPES))


def _label(shape: int) -> str:
    return "one scope" if shape == 0 else f"{shape}-row scopes"


def main() -> None:
    print(f"Python {sys.version.split()[0]}; best of several rounds; ratios are ours/baseline")
    bench_request_life()
    bench_bytes()
    bench_cap(10_000, 40, 5_000)
    bench_cap(100_000, 400, 20_000)
    bench_poll()
    bench_floods()


if __name__ == "__main__":
    main()
