"""Telemetry cost: cancel() with the bridges attached, and a Prometheus scrape.

Run with ``./dev bench telemetry`` (or ``python benchmarks/telemetry.py``). Each figure is
printed beside a baseline measured in the same run; the ratio is the number to read.

1. ``cancel()`` (memory storage, no limit reached) with no receiver connected, against the
   same with the Prometheus bridge (goal: at most 1.5x), the OpenTelemetry bridge (SDK
   providers, no request span: the counter only; goal: at most 3x), and both;
2. a rejected ``cancel()`` (quota) with and without both bridges (the Prometheus bridge
   also feeds the heavy-hitters structure there);
3. one scrape (``PrometheusBridge.render()``: await the summary, collect, encode) with
   10 000 rows over 5 000 scopes, against a scrape of an empty registry and against the
   bare ``summary_from_thread()`` read; then the same after 100 000 distinct scopes were
   rejected. (``benchmarks/scopes.py`` sweeps the number of scopes up to 1 000 000.)
4. one evicting ``cancel()`` at a cap of 22 000 one-row scopes (a batch of 1 100 of them:
   an address-rotation flood), with each bridge against none, and the OpenTelemetry bridge
   once more inside a recording request span (where it adds ``mcp_cancellation.evict``
   events); printed per evicted scope, and what the bridge adds to each (no goal).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import address_scope, best_of, check, quiet_gc, report
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from mcp_cancellation import CancellationLimitReached, CancellationRegistry, MemoryStorage, signals
from mcp_cancellation.storage import Limits
from mcp_cancellation.telemetry import otel
from mcp_cancellation.telemetry.prometheus import PrometheusBridge

ROUNDS = 7
N = 20_000


def _registry(**limits: int | None) -> CancellationRegistry:
    limits.setdefault("max_rows", None)
    limits.setdefault("max_rows_per_scope", None)
    return CancellationRegistry(MemoryStorage(), janitor_interval=None, **limits)  # type: ignore[arg-type]


def _one_row_scopes(n: int, **limits: int | None) -> CancellationRegistry:
    """A registry whose first *n* flood scopes hold one row each."""
    registry = _registry(**limits)
    storage = registry.storage
    assert isinstance(storage, MemoryStorage)
    _fill(storage, ((address_scope(i), "seed") for i in range(n)), registry.limits)
    return registry


def _fill(storage: MemoryStorage, rows: Iterable[tuple[str, str]], limits: Limits) -> None:
    """Insert *rows* ``(scope, key)`` without reasons, on one event loop."""

    async def fill() -> None:
        for scope, key in rows:
            await storage.add(scope, key, None, limits=limits)

    asyncio.run(fill())


async def _cancels(registry: CancellationRegistry, n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        await registry.cancel(i, "stop", f"ip:10.0.{i % 250}.1")
    return (time.perf_counter() - start) / n


async def _rejections(registry: CancellationRegistry, n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        with contextlib.suppress(CancellationLimitReached):
            await registry.cancel(i, None, address_scope(i))
    return (time.perf_counter() - start) / n


EVICT_CAP = 22_000


async def _evicting(registry: CancellationRegistry, n: int) -> float:
    """The one insert that hits the cap, per evicted scope (*n* is unused)."""
    start = time.perf_counter()
    await registry.cancel(1, None, "ip:203.0.113.1")
    elapsed = time.perf_counter() - start
    assert (await registry.stats()).total_rows == EVICT_CAP - EVICT_CAP // 20 + 1
    return elapsed / (EVICT_CAP // 20)


def _one(mode: str, bench: str) -> float:
    """Time per call with *mode* bridges attached, on a fresh registry."""
    if bench == "cancel":
        registry = _registry()
    elif bench == "evict":  # the table at its cap, one row in each scope
        registry = _one_row_scopes(EVICT_CAP, max_rows=EVICT_CAP)
    else:  # every scope already holds its one allowed row: each call is rejected
        registry = _one_row_scopes(N, max_rows_per_scope=1)
    bridges: list[PrometheusBridge | otel.OpenTelemetryBridge] = []
    if mode in ("prometheus", "both"):
        bridges.append(PrometheusBridge(registry, collector_registry=CollectorRegistry()).install())
    span: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if mode in ("otel", "otel-span", "both"):
        tracer_provider = TracerProvider()
        bridges.append(
            otel.OpenTelemetryBridge(
                registry,
                tracer_provider=tracer_provider,
                meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]),
            ).install()
        )
        if mode == "otel-span":  # the calls run inside a recording request span
            span = tracer_provider.get_tracer("bench").start_as_current_span("POST /mcp")
    try:
        run = {"cancel": _cancels, "reject": _rejections, "evict": _evicting}[bench]
        with span:
            return asyncio.run(run(registry, N))
    finally:
        for bridge in bridges:
            bridge.uninstall()


def _measure(modes: tuple[str, ...], bench: str) -> dict[str, float]:
    """Best time per call for each mode; modes alternate within each round so that the
    noise of a shared machine falls on all of them alike."""
    best = dict.fromkeys(modes, float("inf"))
    with quiet_gc():
        for _ in range(ROUNDS):
            for mode in modes:
                best[mode] = min(best[mode], _one(mode, bench))
    return best


def bench_cancel() -> None:
    print(f"1. cancel(), {N} calls over 250 scopes, memory storage")
    t = _measure(("none", "prometheus", "otel", "both"), "cancel")
    report("no bridge (baseline)", t["none"], t["none"])
    prometheus = report("Prometheus bridge", t["prometheus"], t["none"])
    opentelemetry = report("OpenTelemetry bridge (no request span)", t["otel"], t["none"])
    report("both bridges", t["both"], t["none"])
    check(
        "cancel() with the Prometheus bridge <= 1.5x bare", prometheus <= 1.5, f"{prometheus:.2f}x"
    )
    check(
        "cancel() with the OpenTelemetry bridge <= 3x bare",
        opentelemetry <= 3.0,
        f"{opentelemetry:.2f}x",
    )
    print(f"2. rejected cancel() (quota), {N} distinct scopes")
    t = _measure(("none", "prometheus", "both"), "reject")
    report("no bridge (baseline)", t["none"], t["none"])
    report("Prometheus bridge (counter + heavy hitters)", t["prometheus"], t["none"])
    report("both bridges", t["both"], t["none"])


async def _render(bridge: PrometheusBridge, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        await bridge.render()
    return (time.perf_counter() - start) / n


def bench_scrape() -> None:
    print("3. one scrape: 10 000 rows over 5 000 scopes (top_k=20)")
    empty = _registry()
    empty_bridge = PrometheusBridge(empty, collector_registry=CollectorRegistry()).install()
    registry = _registry(max_rows_per_scope=2)
    storage = registry.storage
    assert isinstance(storage, MemoryStorage)
    rows = ((f"ip:10.0.{(i // 2) >> 8}.{(i // 2) & 255}", str(i)) for i in range(10_000))
    _fill(storage, rows, registry.limits)
    assert len(storage.stats_from_thread(0).rows) == 5_000
    bridge = PrometheusBridge(registry, collector_registry=CollectorRegistry()).install()
    body, _ = asyncio.run(bridge.render())
    base = read = full = float("inf")
    with quiet_gc():
        for _ in range(ROUNDS):  # alternated, so that machine noise falls on all alike
            base = min(base, asyncio.run(_render(empty_bridge, 200)))
            read = min(read, _stats_read(storage, 50))
            full = min(full, asyncio.run(_render(bridge, 50)))
    report("scrape of an empty registry (baseline)", base, base, "ms", 1e3)
    report("summary_from_thread(20, 0) alone, 10 000 rows", read, base, "ms", 1e3)
    report("scrape, 10 000 rows / 5 000 scopes", full, base, "ms", 1e3)
    lines = body.count(b"\n")
    print(f"  exposition: {len(body)} bytes, {lines} lines")
    # A flood of 100 000 distinct rejected scopes (the signal the registry sends on each
    # rejection): the heavy hitters stay at their capacity, the scrape does not grow.
    for i in range(100_000):
        signals.cancellation_rejected.send(
            registry,
            scope=address_scope(i),
            request_id="1",
            reason="quota",
        )
    flooded = best_of(ROUNDS, lambda: asyncio.run(_render(bridge, 50)))
    report("scrape after 100 000 rejected scopes", flooded, full, "ms", 1e3)
    print(f"  heavy hitters tracked: {len(bridge.hitters)} (capacity {bridge.hitters.capacity})")
    check("a 10 000-row scrape <= 2x an empty one", full <= 2 * base, f"{full / base:.2f}x")
    bridge.uninstall()
    empty_bridge.uninstall()


def _stats_read(storage: MemoryStorage, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        storage.summary_from_thread(20, 0)
    return (time.perf_counter() - start) / n


def bench_evict() -> None:
    batch = EVICT_CAP // 20
    print(f"4. one evicting cancel(): {batch} one-row scopes of {EVICT_CAP}, per evicted scope")
    t = _measure(("none", "prometheus", "otel", "otel-span"), "evict")
    report("no bridge (baseline)", t["none"], t["none"])
    for mode, name in (
        ("prometheus", "Prometheus bridge"),
        ("otel", "OpenTelemetry bridge"),
        ("otel-span", "OpenTelemetry bridge, in a request span"),
    ):
        report(name, t[mode], t["none"])
        print(f"    {name} adds {(t[mode] - t['none']) * 1e6:.2f} us per evicted scope")


def main() -> None:
    bench_cancel()
    bench_scrape()
    bench_evict()


if __name__ == "__main__":
    main()
