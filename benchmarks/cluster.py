"""Capacity of one shard, and of three: cancels and request lives per second on a single
redis-server, on the Redis Cluster shard that holds the table (every key shares one hash
tag), and on a table partitioned across the cluster's three masters
(``PartitionedRedisStorage``, ``partitions=3``).

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
comparison. For the partitioned table the figures add up the three masters, and the goal
line prints the largest share of the script calls one master ran (goal: at most 45 %).
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


#: The goal: with three masters, no master runs more than this share of the script calls.
MAX_SHARE = 0.45


def _load(
    url: str, prefix: str, partitions: int, operation: str, start_at: float, results: Any
) -> None:
    from mcp_cancellation import CancellationRegistry, RedisStorage
    from mcp_cancellation.storage import Storage
    from mcp_cancellation.storage.redis import PartitionedRedisStorage

    async def run() -> int:
        storage: Storage
        if partitions > 1:
            storage = PartitionedRedisStorage.from_url(
                url, partitions=partitions, prefix=prefix, max_connections=CONCURRENCY
            )
        else:
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


def measure(
    url: str, ports: list[int], prefix: str, operation: str, partitions: int = 1
) -> dict[str, Any]:
    """Run the load against the table *prefix* at *url*, which lives on the servers at
    *ports*."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    start_at = time.time() + 4.0  # every process connected and warm by then
    processes = [
        context.Process(target=_load, args=(url, prefix, partitions, operation, start_at, results))
        for _ in range(WORKERS)
    ]
    for process in processes:
        process.start()
    time.sleep(max(0.0, start_at - time.time()))
    before = [_server_counters(port) for port in ports]
    wall_0 = time.monotonic()
    done = sum(results.get(timeout=SECONDS + 60) for _ in processes)
    wall = time.monotonic() - wall_0
    after = [_server_counters(port) for port in ports]
    for process in processes:
        process.join(timeout=30)
    rate = done / SECONDS
    busy = [(a[0] - b[0]) / wall for a, b in zip(after, before, strict=True)]
    calls = [a[1] - b[1] for a, b in zip(after, before, strict=True)]
    usec = sum(a[2] - b[2] for a, b in zip(after, before, strict=True))
    return {
        "rate": rate,
        "busy": sum(busy),
        "usec_per_call": usec / max(1, sum(calls)),
        "ceiling": rate / max(busy),  # the busiest server saturates first
        "cpu_per_op": sum(busy) / rate,
        "shares": [n / max(1, sum(calls)) for n in calls],
    }


def main() -> int:
    print(f"{WORKERS} client processes x {CONCURRENCY} tasks, {SECONDS:.0f} s per figure")
    with RedisServer() as server, RedisClusterServers() as cluster:
        masters = sorted({cluster.master_of(f"{{k{n}}}").port for n in range(64)})
        for operation, label in (("life", "request life"), ("cancel", "cancel")):
            rates = {}
            for target in ("single", "cluster", "3 parts"):
                prefix = f"bench-{uuid.uuid4().hex[:8]}"
                partitions = 1
                if target == "single":
                    url, ports = server.url, [server.port]
                elif target == "cluster":  # the prefix's hash tag decides the shard
                    url = cluster.url
                    ports = [cluster.master_of("{" + prefix + "}:scopes").port]
                else:
                    url, ports, partitions = cluster.url, masters, 3
                f = measure(url, ports, prefix, operation, partitions)
                rates[target] = f["rate"]
                print(
                    f"  {label:<13} {target:<8} {f['rate']:9.0f} /s  redis busy {f['busy']:5.0%}"
                    f"  {f['usec_per_call']:6.1f} us/script  {1e6 * f['cpu_per_op']:6.1f} us CPU/op"
                    f"  ceiling ~{f['ceiling']:9.0f} /s"
                )
                if partitions > 1:
                    share = max(f["shares"])
                    mark = "PASS" if share <= MAX_SHARE else "FAIL"
                    shares = " ".join(f"{n:.0%}" for n in f["shares"])
                    print(
                        f"  {label:<13} script calls per master {shares}; goal: busiest"
                        f" <= {MAX_SHARE:.0%}: {share:.0%} {mark}"
                    )
            ratio = rates["cluster"] / rates["single"]
            print(f"  {label:<13} cluster / single achieved rate: {ratio:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
