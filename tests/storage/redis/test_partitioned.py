"""A table partitioned by scope across the masters of a real six-node Redis Cluster: each
master holds one partition, each master runs its share of the scripts, every partition
applies its share of the cap, and a scope's quota stays exact.

The registry's whole semantic matrix also runs on this storage (the ``redis-partitioned``
leg of ``BACKENDS``); the tests here are about what partitioning changes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
from redis.asyncio.cluster import RedisCluster

from mcp_cancellation import CancellationRegistry
from mcp_cancellation.storage.redis import PartitionedRedisStorage

from ...support import RedisClusterServers, async_wait_until

pytestmark = [pytest.mark.redis, pytest.mark.cluster]

Make = Callable[..., PartitionedRedisStorage]


@pytest.fixture
async def make(redis_cluster: RedisClusterServers) -> AsyncIterator[Make]:
    made: list[PartitionedRedisStorage] = []

    def build(**options: object) -> PartitionedRedisStorage:
        storage = PartitionedRedisStorage.from_url(
            redis_cluster.url,
            partitions=3,
            **{"prefix": f"test-{uuid.uuid4().hex[:10]}", **options},
        )
        made.append(storage)
        return storage

    yield build
    for storage in made:
        await storage.aclose()


def scopes_in(storage: PartitionedRedisStorage, index: int, count: int) -> list[str]:
    """*count* scope names that fall in partition *index*."""
    part = storage.partitions[index]
    found: list[str] = []
    n = 0
    while len(found) < count:
        if storage.partition_of(f"session:{n}") is part:
            found.append(f"session:{n}")
        n += 1
    return found


async def test_every_process_computes_the_same_partitions(make: Make) -> None:
    first, second = make(prefix="app"), make(prefix="app")
    prefixes = [part.prefix for part in first.partitions]
    assert prefixes == [part.prefix for part in second.partitions]
    assert len(set(prefixes)) == 3
    assert all(prefix.startswith("app.") for prefix in prefixes)


async def test_each_partition_lives_on_its_own_master(make: Make) -> None:
    storage = make()
    client = storage.client
    assert isinstance(client, RedisCluster)
    await client.initialize()
    nodes = [client.get_node_from_key(part.key("scopes").decode()) for part in storage.partitions]
    assert len({node.name for node in nodes if node is not None}) == 3


async def test_three_masters_share_the_script_calls(make: Make) -> None:
    storage = make(track_delay=0)  # (each call tracked: two script calls a life)
    client = storage.client
    assert isinstance(client, RedisCluster)
    registry = CancellationRegistry(storage, janitor_interval=None)

    async def script_calls() -> dict[str, int]:
        replies = await client.info("commandstats", target_nodes=RedisCluster.PRIMARIES)
        return {
            node: sum(
                int(stats["calls"])
                for name, stats in info.items()
                if name in ("cmdstat_evalsha", "cmdstat_eval")
            )
            for node, info in replies.items()
        }

    async def request(n: int) -> None:
        async with registry.request(n, scope=f"session:{n}"):
            await asyncio.sleep(0)

    await request(-1)  # the scripts are loaded and the listeners started
    before = await script_calls()
    for start in range(0, 300, 30):
        await asyncio.gather(*(request(n) for n in range(start, start + 30)))
    after = await script_calls()
    await registry.aclose()
    calls = {node: after[node] - before.get(node, 0) for node in after}
    total = sum(calls.values())
    assert total > 0
    assert max(calls.values()) <= 0.45 * total, calls


async def test_each_partition_evicts_its_own_largest_scope_within_its_share(make: Make) -> None:
    storage = make()
    registry = CancellationRegistry(storage, max_rows=30, max_rows_per_scope=None)
    big, small = scopes_in(storage, 0, 2)
    (elsewhere,) = scopes_in(storage, 1, 1)
    for n in range(6):
        await registry.cancel(n, scope=elsewhere)
    for n in range(8):
        await registry.cancel(n, scope=big)
    for n in range(2):
        await registry.cancel(n, scope=small)
    # Partition 0 holds its share (10 rows); one more evicts the oldest row of its largest
    # scope, and no row of another partition.
    await registry.cancel(99, scope=small)
    stats = await registry.stats()
    assert stats.rows == {big: 7, small: 3, elsewhere: 6}
    assert not await registry.is_cancelled(0, scope=big)
    assert await registry.is_cancelled(1, scope=big)
    await registry.aclose()


async def test_the_cap_adds_up_and_a_caller_under_its_quota_is_always_served(make: Make) -> None:
    storage = make()
    # Shares of 11, 10 and 10 rows; every partition gets more than its share below.
    # (The quota's exactness runs in the matrix, on this storage too.)
    registry = CancellationRegistry(storage, max_rows=31, max_rows_per_scope=4)
    scopes = [f"principal:{n}" for n in range(40)]
    assert {storage.partitions.index(storage.partition_of(s)) for s in scopes} == {0, 1, 2}
    for n in range(4):
        for scope in scopes:
            await registry.cancel(n, scope=scope)  # never refused: the cap evicts
    assert (await registry.stats()).total_rows == 31
    assert [(await part.stats()).total_rows for part in storage.partitions] == [11, 10, 10]
    await registry.aclose()


async def test_the_summary_merges_the_partitions(make: Make) -> None:
    storage = make()
    registry = CancellationRegistry(storage, max_rows=None, max_rows_per_scope=None)
    sizes = {scopes_in(storage, i, 1)[0]: 3 + i for i in range(3)}
    for scope, size in sizes.items():
        for n in range(size):
            await registry.cancel(n, scope=scope)
    summary = await storage.summary(top_k=2, at_least=4)
    assert summary.rows == {"session": 12}
    assert [size for _, size in summary.largest] == [5, 4]
    assert summary.at_least == 2
    await registry.aclose()


async def test_a_stalled_master_leaves_the_other_partitions_serving_cold_or_warm(
    make: Make,
) -> None:
    """One master paused (``CLIENT PAUSE``): the other partitions record cancellations and
    track calls within their bounds, cold (no script cached yet: a script is sent to the
    table's own node only) and warm; the operator view (its requests and its tasks) lists
    what it can read and names the partition it could not."""
    from redis.asyncio import Redis

    storage = make(timeout=1.5, socket_timeout=0.5, max_wait=0.1)
    registry = CancellationRegistry(storage, janitor_interval=None, track_wait=0.05)
    client = storage.client
    assert isinstance(client, RedisCluster)
    await client.initialize()
    paused = storage.partitions[0]
    node = client.get_node_from_key(paused.key("scopes").decode())
    assert node is not None
    healthy = [scopes_in(storage, i, 1)[0] for i in (1, 2)]
    try:
        for warm in (False, True):
            admin = Redis(host=str(node.host), port=int(node.port), socket_timeout=0.3)
            try:
                await admin.client_pause(6000, all=True)
            finally:
                await admin.aclose()
            loop = asyncio.get_running_loop()
            started = loop.time()
            for scope in healthy:
                async with registry.request(f"call-{warm}", scope) as token:
                    assert await registry.cancel_in_flight(f"call-{warm}", "stop", scope)
                    assert token.cancelled
            assert loop.time() - started < 1.0, "a healthy partition waited on the paused one"
            listed = await registry.requests()  # (nothing in flight: it must still answer)
            assert listed == []
            assert [index for index, _, _ in storage.unreadable] == [0]
            assert await storage.task_table.tasks() == []  # the tasks too, named alike
            assert [index for index, _, _ in storage.task_table.unreadable] == [0]
            await async_wait_until(lambda: _answers(str(node.host), int(node.port)), within=10)
    finally:
        await registry.aclose()


async def _answers(host: str, port: int) -> bool:
    """Whether the node answers a PING at once (its pause is over)."""
    from redis.asyncio import Redis
    from redis.exceptions import RedisError

    client = Redis(host=host, port=port, socket_timeout=0.2)
    try:
        return bool(await client.ping())
    except (RedisError, OSError):
        return False
    finally:
        await client.aclose()
