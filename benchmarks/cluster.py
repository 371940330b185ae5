"""Capacity of one shard: cancels and request lives per second on a single redis-server
and on the Redis Cluster shard that holds the table (every key shares one hash tag).

Run with ``./dev bench cluster`` (or ``python benchmarks/cluster.py``); it starts a
redis-server and a six-node cluster (three masters, three replicas) on free loopback ports.
For each target, ``WORKERS`` client processes with ``CONCURRENCY`` tasks each run one
operation for ``SECONDS``:

* **request life**: ``async with registry.request(id, scope)`` around nothing (a track
  and a release, batched with those of the other tasks into ``SYNC`` script calls);
* **cancel**: ``registry.cancel(id, None, scope)`` of a request nobody runs (one ADD).

Printed per target: operations per second achieved, the share of one CPU core the Redis
server that holds the table spent meanwhile (``INFO cpu``), Redis's own microseconds per
script call (``INFO commandstats``), Redis's CPU per operation, and the *shard ceiling*:
the achieved rate divided by that share, i.e. the rate at which the shard's one thread
would be saturated. On a 2-core machine the clients compete with Redis for the CPU, so
the achieved rate is client-bound and the ceiling is an extrapolation: read it as an
order of magnitude, and the cluster/single ratio measured in the same run as the
comparison.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sys
import time
import uuid
from pathlib import Path
from typing import Any

# benchmarks/redis.py would shadow the redis package: drop this script's directory, and
# make tests.support (project root) importable.
_HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [entry for entry in sys.path if entry != _HERE]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from redis.client import Redis as SyncRedis  # noqa: E402
from tests.support import RedisClusterServers, RedisServer  # noqa: E402

WORKERS = 2
CONCURRENCY = 32
SECONDS = 5.0


def _load(url: str, prefix: str, operation: str, start_at: float, results: Any) -> None:
    from mcp_cancellation import CancellationRegistry, RedisStorage

    async def run() -> int:
        storage = RedisStorage.from_url(url, prefix=prefix, max_connections=CONCURRENCY)
        registry = CancellationRegistry(
            storage, max_rows=10_000_000, max_rows_per_scope=None, janitor_interval=None
        )
        me = uuid.uuid4().hex[:6]
        await registry.in_flight("warm-up", "global")  # scripts loaded, listener up
        await asyncio.sleep(max(0.0, start_at - time.time()))
        deadline = time.monotonic() + SECONDS
        done = 0

        async def client(n: int) -> None:
            nonlocal done
            i = 0
            while time.monotonic() < deadline:
                request_id, scope = f"{me}-{n}-{i}", f"ip:10.{n}.{i % 250}.{i % 7}"
                if operation == "life":
                    async with registry.request(request_id, scope):
                        pass
                else:
                    await registry.cancel(request_id, None, scope)
                i += 1
                done += 1

        await asyncio.gather(*(client(n) for n in range(CONCURRENCY)))
        await registry.aclose()
        return done

    results.put(asyncio.run(run()))


def _server_counters(port: int) -> tuple[float, int, int]:
    """(CPU seconds used, script calls, script microseconds) of the server at *port*."""
    with SyncRedis(port=port, decode_responses=True) as client:
        cpu = client.info("cpu")
        stats = client.info("commandstats")
    seconds = float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
    calls = usec = 0
    for name in ("cmdstat_evalsha", "cmdstat_eval"):
        if name in stats:
            calls += int(stats[name]["calls"])
            usec += int(stats[name]["usec"])
    return seconds, calls, usec


def measure(url: str, port: int, prefix: str, operation: str) -> dict[str, float]:
    """Run the load against the table *prefix* at *url*, which lives on the server at
    *port*."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    start_at = time.time() + 4.0  # every process connected and warm by then
    processes = [
        context.Process(target=_load, args=(url, prefix, operation, start_at, results))
        for _ in range(WORKERS)
    ]
    for process in processes:
        process.start()
    time.sleep(max(0.0, start_at - time.time()))
    cpu_0, calls_0, usec_0 = _server_counters(port)
    wall_0 = time.monotonic()
    done = sum(results.get(timeout=SECONDS + 60) for _ in processes)
    wall = time.monotonic() - wall_0
    cpu_1, calls_1, usec_1 = _server_counters(port)
    for process in processes:
        process.join(timeout=30)
    rate = done / SECONDS
    busy = (cpu_1 - cpu_0) / wall
    per_call = (usec_1 - usec_0) / max(1, calls_1 - calls_0)
    return {"rate": rate, "busy": busy, "usec_per_call": per_call, "ceiling": rate / busy}


def main() -> int:
    print(f"{WORKERS} client processes x {CONCURRENCY} tasks, {SECONDS:.0f} s per figure")
    with RedisServer() as server, RedisClusterServers() as cluster:
        for operation, label in (("life", "request life"), ("cancel", "cancel")):
            rates = {}
            for target in ("single", "cluster"):
                prefix = f"bench-{uuid.uuid4().hex[:8]}"
                if target == "single":
                    url, port = server.url, server.port
                else:  # the prefix's hash tag decides the slot, so the shard's master
                    url, port = cluster.url, cluster.master_of("{" + prefix + "}:scopes").port
                f = measure(url, port, prefix, operation)
                rates[target] = f["rate"]
                print(
                    f"  {label:<13} {target:<8} {f['rate']:9.0f} /s  redis busy {f['busy']:5.0%}"
                    f"  {f['usec_per_call']:6.1f} us/script  {1e6 / f['ceiling']:6.1f} us CPU/op"
                    f"  shard ceiling ~{f['ceiling']:9.0f} /s"
                )
            ratio = rates["cluster"] / rates["single"]
            print(f"  {label:<13} cluster / single achieved rate: {ratio:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
