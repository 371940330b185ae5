"""The scope-count sweep: eviction and scrapes against the number of scopes, both storages.

Run with ``./dev bench scopes`` (or ``python benchmarks/scopes.py [--sizes 1000,10000]
[--plot docs/img/scope-sweep.svg]``); the Redis half starts its own redis-server on a free
loopback port.

For each size N (default 1 000, 10 000, 100 000 and 1 000 000) the table is filled to its
cap of N rows with N one-row scopes, the shape an address-rotation flood leaves. Then:

* **evicting insert**: the one ``cancel()`` that hits the cap and evicts a batch
  (``N // 20`` rows, so the batch grows with N); reported per evicted row, which is the
  figure that must not grow with the number of scopes;
* **insert**: an ordinary ``cancel()`` into that table (no eviction);
* **scrape**: one ``/metrics`` render (``PrometheusBridge.render``, top K = 20) of that
  table, the storage's summary included;
* **janitor**: one ``registry.cleanup()`` pass over that table with nothing yet expired
  (the janitor's usual pass, every 60 s by default).

The scrape and the janitor pass are timed from cold caches at every size (see
``_timed``). Each is the best of a few rounds. The baseline is the same figure at the
smallest size, measured in the same run: the goal is a ratio of at most 2x at every size,
for both storages (the index makes each step O(log n), and log n grows about 2x from 1 000
to 1 000 000 scopes, which a sorted list and Redis's skiplists mostly absorb).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

# benchmarks/redis.py would shadow the redis package: this directory goes last, and the
# project root (for tests.support) first.
sys.path.remove(str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import address_scope, check, quiet_gc
from prometheus_client import CollectorRegistry

from mcp_cancellation import CancellationRegistry, MemoryStorage, signals
from mcp_cancellation.storage import Storage
from mcp_cancellation.telemetry.prometheus import PrometheusBridge

SIZES = (1_000, 10_000, 100_000, 1_000_000)
ROUNDS = 3
GOAL = 2.0
Figures = dict[str, float]


def _scope(i: int) -> str:
    """The *i*-th flood scope, unique beyond the 2**24 that addresses alone give."""
    return f"{address_scope(i)}/{i >> 24}"


async def _fill(registry: CancellationRegistry, start: int, stop: int, concurrency: int) -> None:
    """One row each for scopes start..stop-1 (concurrently on a shared storage)."""
    if concurrency == 1:
        for i in range(start, stop):
            await registry.cancel(1, None, _scope(i))
        return
    for base in range(start, stop, concurrency):
        top = min(stop, base + concurrency)
        await asyncio.gather(*(registry.cancel(1, None, _scope(i)) for i in range(base, top)))


#: Three times this machine's last-level cache (32 MiB): copying it evicts every cache.
_FLUSH = bytearray(96 << 20)


async def _timed(call: Callable[[], Awaitable[object]], *, cold: bool = False) -> float:
    """The time of one *call*; with *cold*, begun from cold caches at every table size.

    ``quiet_gc()`` collects first, and a full collection walks every object: it leaves the
    caches warm with a 1 000-scope table and cold with a 1 000 000-scope one. The scrape
    and the janitor pass are single operations that run on a timer (every 15 s, every
    60 s) and find the caches cold at any size, so they are timed *cold*: a buffer larger
    than the caches is copied after the collection. The per-row figures keep the
    collection's own bias (warm for small tables only), which counts against large ones.
    """
    with quiet_gc():
        if cold:
            bytes(_FLUSH)
        started = time.perf_counter()
        await call()
        return time.perf_counter() - started


async def _longest_script(storage: Storage) -> float | None:
    """The longest command Redis ran since the last call (SLOWLOG, every command logged):
    how long Redis served nobody else. ``None`` for a storage that is not Redis."""
    client = getattr(storage, "client", None)
    if client is None:
        return None
    entries = await client.slowlog_get(10_000)
    await client.slowlog_reset()
    scripts = [e["duration"] for e in entries if e["command"].startswith((b"EVAL", b"FCALL"))]
    return max(scripts, default=0) / 1e6


async def _sweep_one(storage: Storage, n: int, concurrency: int) -> Figures:
    registry = CancellationRegistry(
        storage, max_rows=n, max_rows_per_scope=None, janitor_interval=None
    )
    bridge = PrometheusBridge(registry, collector_registry=CollectorRegistry(), top_k=20).install()
    batch = registry.limits.eviction_batch
    plain = min(200, batch - 2)  # ordinary inserts timed per round (room the eviction made)
    evicted: list[int] = []

    def count(sender: object, *, rows: int, **_: object) -> None:
        evicted.append(rows)

    async def inserts(first: int) -> None:
        for i in range(first, first + plain):
            await registry.cancel(1, None, _scope(i))

    signals.cancellation_evicted_batch.connect(count, sender=registry)
    client = getattr(storage, "client", None)
    if client is not None:
        await client.config_set("slowlog-log-slower-than", 0)
        await client.config_set("slowlog-max-len", 10_000)
    try:
        await _fill(registry, 0, n, concurrency)
        nxt = n
        evictions, insert, scrapes, janitor, longest = [], [], [], [], []
        for _ in range(ROUNDS):
            # The table is at its cap: this insert evicts a batch.
            evicted.clear()
            await _longest_script(storage)
            cancel = functools.partial(registry.cancel, 1, None, _scope(nxt))
            evictions.append(await _timed(cancel))
            script = await _longest_script(storage)
            if script is not None:
                longest.append(script)
            assert sum(evicted) == batch, (sum(evicted), batch)
            scrapes.append(await _timed(bridge.render, cold=True))
            # Back to the cap, ready for the next round's evicting insert; the last few
            # inserts are timed (an ordinary insert into a table of n scopes).
            await _fill(registry, nxt + 1, nxt + batch - plain, concurrency)
            insert.append(await _timed(functools.partial(inserts, nxt + batch - plain)) / plain)
            # (After the refill: the inserts have freed the evicted rows, see MemoryStorage.)
            janitor.append(await _timed(functools.partial(registry.cleanup, 3600.0), cold=True))
            nxt += batch
        figures = {
            "evict_per_row": min(evictions) / batch,
            "evict": min(evictions),
            "insert": min(insert),
            "scrape": min(scrapes),
            "janitor": min(janitor),
        }
        if longest:
            figures["longest_script"] = max(longest)
        return figures
    finally:
        signals.cancellation_evicted_batch.disconnect(count, sender=registry)
        bridge.uninstall()
        await registry.aclose()


def _print(name: str, results: dict[int, Figures]) -> bool:
    sizes = sorted(results)
    base = results[sizes[0]]
    print(f"{name}: one-row scopes at the cap; ratios against {sizes[0]:,} scopes")
    print(
        f"  {'scopes':>10} {'evicting insert':>16} {'per evicted row':>16} {'ratio':>7}"
        f" {'insert':>10} {'ratio':>7} {'scrape':>10} {'ratio':>7} {'janitor':>10} {'ratio':>7}"
        + (" longest script" if "longest_script" in base else "")
    )
    highest = 0.0
    for n in sizes:
        r = results[n]
        ratios = [r[k] / base[k] for k in ("evict_per_row", "insert", "scrape", "janitor")]
        highest = max(highest, *ratios)
        print(
            f"  {n:>10,} {r['evict'] * 1e3:>13.2f} ms {r['evict_per_row'] * 1e6:>13.2f} us"
            f" {ratios[0]:>6.2f}x {r['insert'] * 1e6:>7.1f} us {ratios[1]:>6.2f}x"
            f" {r['scrape'] * 1e3:>7.2f} ms {ratios[2]:>6.2f}x"
            f" {r['janitor'] * 1e3:>7.2f} ms {ratios[3]:>6.2f}x"
            + (f" {r['longest_script'] * 1e3:>11.2f} ms" if "longest_script" in r else "")
        )
    return check(
        f"{name}: every figure at most {GOAL:g}x its value at {sizes[0]:,} scopes",
        highest <= GOAL,
        f"highest {highest:.2f}x",
    )


def _memory(sizes: tuple[int, ...]) -> dict[int, Figures]:
    results = {}
    for n in sizes:
        results[n] = asyncio.run(_sweep_one(MemoryStorage(), n, 1))
        gc.collect()
    return results


def _redis(sizes: tuple[int, ...]) -> dict[int, Figures]:
    from tests.support import RedisServer

    from mcp_cancellation.storage.redis import RedisStorage

    results = {}
    with RedisServer() as server:
        for n in sizes:
            storage = RedisStorage.from_url(server.url, prefix=f"sweep-{n}", max_connections=64)

            async def run(storage: RedisStorage = storage, n: int = n) -> Figures:
                try:
                    return await _sweep_one(storage, n, 500)
                finally:
                    # ASYNC: a foreground flush between sizes once timed out (the
                    # client's socket timeout) on a slow machine and ended the run; the
                    # background flush answers at once.
                    await storage.client.flushdb(asynchronous=True)

            results[n] = asyncio.run(run())
    return results


def _plot(path: Path, series: dict[str, dict[int, Figures]]) -> None:
    """A small SVG (no plotting library): per-row eviction, scrape and janitor time
    against the number of scopes, log-log, one line per storage and figure."""
    import math

    width, height, left, bottom, top, right = 640, 360, 70, 50, 20, 170
    lines = []
    for storage, results in series.items():
        for key, label in (
            ("evict_per_row", "evict, per row"),
            ("scrape", "scrape"),
            ("janitor", "janitor pass"),
        ):
            lines.append((f"{storage}: {label}", [(n, results[n][key]) for n in sorted(results)]))
    xs = [n for _, pts in lines for n, _ in pts]
    ys = [v for _, pts in lines for _, v in pts]
    x0, x1 = math.log10(min(xs)), math.log10(max(xs))
    y0, y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))

    def px(n: float) -> float:
        return left + (math.log10(n) - x0) / max(1e-9, x1 - x0) * (width - left - right)

    def py(v: float) -> float:
        return height - bottom - (math.log10(v) - y0) / (y1 - y0) * (height - bottom - top)

    colours = ["#1f77b4", "#aec7e8", "#9467bd", "#d62728", "#ff9896", "#8c564b"]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}"'
        ' font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for e in range(y0, y1 + 1):
        y = py(10.0**e)
        label = f"{10.0**e * 1e6:g} µs" if e < -3 else f"{10.0**e * 1e3:g} ms"
        out.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
        )
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    for n in sorted(set(xs)):
        x = px(n)
        out.append(
            f'<text x="{x:.1f}" y="{height - bottom + 16}" text-anchor="middle">{n:,}</text>'
        )
    out.append(
        f'<text x="{(left + width - right) / 2}" y="{height - 10}" text-anchor="middle">'
        "one-row scopes in the table (log)</text>"
    )
    for i, (label, pts) in enumerate(lines):
        colour = colours[i % len(colours)]
        path_d = " ".join(f"{px(n):.1f},{py(v):.1f}" for n, v in pts)
        out.append(f'<polyline points="{path_d}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for n, v in pts:
            out.append(f'<circle cx="{px(n):.1f}" cy="{py(v):.1f}" r="3" fill="{colour}"/>')
        y = top + 14 + i * 18
        out.append(
            f'<line x1="{width - right + 12}" x2="{width - right + 32}" y1="{y - 4}"'
            f' y2="{y - 4}" stroke="{colour}" stroke-width="2"/>'
        )
        out.append(f'<text x="{width - right + 38}" y="{y}">{label}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")
    print(f"plot written to {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--storage", choices=["memory", "redis", "both"], default="both")
    parser.add_argument("--plot", type=Path, help="write an SVG plot of the sweep here")
    args = parser.parse_args()
    sizes = tuple(int(s) for s in args.sizes.split(","))
    print(f"Python {sys.version.split()[0]}; sizes {', '.join(f'{n:,}' for n in sizes)}")
    series: dict[str, dict[int, Figures]] = {}
    if args.storage in ("memory", "both"):
        series["memory"] = _memory(sizes)
        _print("memory", series["memory"])
    if args.storage in ("redis", "both"):
        series["redis"] = _redis(sizes)
        _print("redis", series["redis"])
    if args.plot:
        _plot(args.plot, series)
    return 0


if __name__ == "__main__":
    sys.exit(main())
