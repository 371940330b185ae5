"""The Redis storage on a real Redis Cluster (three masters, three replicas): built from a
URL or from your own client, push by sharded pub/sub on the table's shard, and a failover
of the master that holds the table survived as docs/deployment.md says."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio.cluster import RedisCluster

from mcp_cancellation import CancellationRegistry, ConfigurationError, StorageUnavailable, signals
from mcp_cancellation.storage.redis import RedisStorage
from mcp_cancellation.storage.redis._cluster import cluster_client_supported
from mcp_cancellation.telemetry.prometheus import metrics_app

from ...support import HeldRequest, RedisClusterServers, RedisServer, async_wait_until

pytestmark = [pytest.mark.redis, pytest.mark.cluster]


def _first_node(cluster: RedisClusterServers) -> str:
    return f"127.0.0.1:{cluster.nodes[0].port}"


async def _subscribed(*registries: CancellationRegistry) -> None:
    for registry in registries:
        storage = registry.storage
        assert isinstance(storage, RedisStorage)
        await registry.in_flight("warm-up", "session:s")  # starts the listener
        await async_wait_until(lambda s=storage: s.subscribed, within=15)


async def test_from_url_builds_a_cluster_client_and_workers_share_the_table(
    redis_cluster: RedisClusterServers,
) -> None:
    by_url = RedisStorage.from_url(redis_cluster.url, prefix="cluster-url")
    by_flag = RedisStorage.from_url(
        f"redis://{_first_node(redis_cluster)}/0", prefix="cluster-url", cluster=True
    )
    own_client = RedisCluster.from_url(f"redis://{_first_node(redis_cluster)}")
    by_client = RedisStorage(own_client, prefix="cluster-url")
    storages = (by_url, by_flag, by_client)
    registries = [CancellationRegistry(s, janitor_interval=None) for s in storages]
    try:
        for storage in (by_url, by_flag, by_client):
            assert storage.cluster
            assert isinstance(storage.client, RedisCluster)
        assert by_url.identity.startswith("redis+cluster://127.0.0.1:")
        assert by_url.identity.endswith("?prefix=cluster-url")
        await _subscribed(*registries)
        async with HeldRequest(registries[0], "job", "session:s") as token:
            await registries[2].cancel("job", "from the third worker", "session:s")
            await async_wait_until(lambda: token.cancelled, within=10)
            assert token.reason == "from the third worker"
            assert await registries[1].is_cancelled("job", "session:s")
        stats = await registries[1].stats()
        assert (stats.total_rows, stats.total_in_flight) == (0, 0)
    finally:
        for registry in registries:
            await registry.aclose()
        await own_client.aclose()


@pytest.mark.parametrize(
    ("version", "supported"),
    [
        ("5.0.8", False),
        ("7.4.0", False),
        ("8.0.0", True),
        ("8.1.0", True),
        ("8.2.0", True),
        ("8.10.1", True),
        ("9.0.0b1", True),
    ],
)
def test_a_cluster_needs_redis_py_8(version: str, supported: bool) -> None:
    """8.0 brought asyncio sharded pub/sub (tests/packaging/test_redis_clients.py runs a
    cluster on 8.0.0); a single server works with every redis-py the extra admits."""
    assert cluster_client_supported(version) is supported


@pytest.mark.parametrize(
    ("url", "options"),
    [
        ("redis+cluster://127.0.0.1:7000/1", {}),  # a cluster has database 0 only
        ("redis+cluster://", {}),  # no node
        ("redis+cluster://127.0.0.1:7000", {"cluster": False}),
        ("unix+cluster:///tmp/redis.sock", {}),
    ],
)
def test_bad_cluster_urls_are_configuration_errors(url: str, options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        RedisStorage.from_url(url, **options)


async def test_push_uses_sharded_pub_sub_on_the_tables_shard(
    redis_cluster: RedisClusterServers,
) -> None:
    registries = [
        CancellationRegistry(
            RedisStorage.from_url(redis_cluster.url, prefix="cluster-push"), janitor_interval=None
        )
        for _ in range(2)
    ]
    try:
        await _subscribed(*registries)
        storage = registries[0].storage
        assert isinstance(storage, RedisStorage)
        channel = storage.key("c:", storage.worker_id)
        master = redis_cluster.master_of(channel)
        from redis.client import Redis as SyncRedis

        with SyncRedis(port=master.port) as client:
            sharded = client.execute_command("PUBSUB", "SHARDNUMSUB", channel)
            classic = client.execute_command("PUBSUB", "NUMSUB", channel)
        assert list(sharded) == [channel, 1]
        assert classic[1] == 0  # nothing on a cluster-wide channel
        async with HeldRequest(registries[0], "pushed", "session:s") as token:
            await registries[1].cancel("pushed", "pushed", "session:s")
            await async_wait_until(lambda: token.cancelled, within=10)
    finally:
        for registry in registries:
            await registry.aclose()


async def test_a_burst_larger_than_the_pool_waits_its_turn(
    redis_cluster: RedisClusterServers,
) -> None:
    """redis-py's cluster pool refuses a command when all of its connections are busy; the
    storage queues its calls instead, as a single server's blocking pool does."""
    registry = CancellationRegistry(
        RedisStorage.from_url(redis_cluster.url, prefix="cluster-burst", max_connections=4),
        max_rows_per_scope=None,
        janitor_interval=None,
    )

    async def life(n: int) -> None:
        async with registry.request(n, f"ip:10.0.0.{n % 9}"):
            await asyncio.sleep(0)

    try:
        await asyncio.gather(
            *(life(n) for n in range(150)),
            *(registry.cancel(f"c{n}", "burst", f"ip:10.0.1.{n % 9}") for n in range(150)),
        )
        stats = await registry.stats()
        assert (stats.total_rows, stats.total_in_flight) == (150, 0)
        assert registry.storage.available
    finally:
        await registry.aclose()


@pytest.fixture
def own_cluster() -> Iterator[RedisClusterServers]:
    """A cluster for this test only: it SIGKILLs one of its masters."""
    with RedisClusterServers() as cluster:
        yield cluster


async def test_a_killed_master_is_replaced_and_the_registry_keeps_serving(
    own_cluster: RedisClusterServers,
) -> None:
    """SIGKILL the master that holds the table while a request is in flight: the storage
    reports the gap, then serves again through the promoted replica; the worker's resync
    re-tracks its in-flight request (whose row may have been lost with the master), a
    cancellation sent after the failover stops it, and nothing is left behind."""
    workers = [
        CancellationRegistry(
            RedisStorage.from_url(own_cluster.url, prefix="failover", timeout=10),
            janitor_interval=None,
        )
        for _ in range(2)
    ]
    apps = [metrics_app(r, collector_registry=CollectorRegistry()) for r in workers]
    gaps: list[tuple[object, str, bool]] = []

    def on_error(sender: object, *, operation: str, **_: object) -> None:
        gaps.append((sender, operation, getattr(sender, "available", None) is True))

    try:
        with signals.storage_error.connected_to(on_error):
            await _subscribed(*workers)
            storage = workers[0].storage
            assert isinstance(storage, RedisStorage)
            async with HeldRequest(workers[0], "long job", "session:s") as token:
                loop = asyncio.get_running_loop()
                victim = await loop.run_in_executor(
                    None, own_cluster.kill_master_of, storage.key("scopes")
                )
                assert victim.process is None
                # The listener's connection died with the master: the gap is reported.
                await async_wait_until(lambda: any(s is storage for s, _, _ in gaps), within=15)
                assert all(not up for _, _, up in gaps), gaps  # storage_up read 0 meanwhile
                # Served again: the request is tracked on the new master (re-tracked by the
                # resync that follows the new subscription) and can be cancelled from the
                # other worker.
                await async_wait_until(lambda: storage.subscribed, within=20)
                await async_wait_until(
                    lambda: workers[1].in_flight("long job", "session:s"), within=20
                )
                await workers[1].cancel("long job", "after the failover", "session:s")
                await async_wait_until(lambda: token.cancelled, within=10)
                assert token.reason == "after the failover"
            # A new request after the failover works end to end too.
            async with HeldRequest(workers[0], "new job", "session:s") as token:
                await workers[1].cancel("new job", None, "session:s")
                await async_wait_until(lambda: token.cancelled, within=10)
        for registry in workers:
            stats = await registry.stats()
            assert (stats.total_rows, stats.total_in_flight) == (0, 0)
            assert registry.storage.available
        body, _ = await apps[0].bridge.render()
        assert any(
            line.startswith("mcp_cancellation_storage_up{") and line.endswith(" 1.0")
            for line in body.decode().splitlines()
        ), body.decode()
    finally:
        for app in apps:
            app.bridge.uninstall()
        for registry in workers:
            await registry.aclose()


async def test_rows_a_lagging_replica_brings_back_never_cancel_a_new_request(
    own_cluster: RedisClusterServers,
) -> None:
    """The table's master released some requests' rows that its replica never received
    (stopped meanwhile); the master dies and the replica takes over with those rows, a
    cancellation among them. The worker's resync releases them: a new request reusing
    each id starts uncancelled, and nothing is left behind."""
    options: dict[str, Any] = {"prefix": "lagging", "timeout": 10.0}
    tool = CancellationRegistry(
        RedisStorage.from_url(own_cluster.url, **options), janitor_interval=None
    )
    other = CancellationRegistry(
        RedisStorage.from_url(own_cluster.url, **options), janitor_interval=None
    )
    storage = tool.storage
    assert isinstance(storage, RedisStorage)
    ids = [f"job {n}" for n in range(5)]
    loop = asyncio.get_running_loop()
    try:
        await _subscribed(tool, other)
        master = own_cluster.master_of(storage.key("scopes"))
        replica = own_cluster.replica_of(master)
        assert replica.process is not None
        held = [HeldRequest(tool, i, "session:s") for i in ids]
        for request_id, request in zip(ids, held, strict=True):
            await request.started()
            assert await other.cancel_in_flight(request_id, "old", "session:s")
        # The replica stops, and its link is cut (a stopped replica cannot reconnect):
        # it misses what follows.
        os.kill(replica.process.pid, signal.SIGSTOP)
        try:
            await loop.run_in_executor(None, _cut_replicas, master)
            for request in held:
                await request.finish()
            stats = await other.stats()
            assert (stats.total_rows, stats.total_in_flight) == (0, 0)  # on the master
            master.kill()
        finally:
            os.kill(replica.process.pid, signal.SIGCONT)
        await loop.run_in_executor(None, _take_over, own_cluster, replica)
        resyncs = storage.resyncs
        await async_wait_until(lambda: storage.resyncs > resyncs, within=30)
        for i in ids:
            async with tool.request(i, "session:s") as token:
                assert not token.cancelled
        await async_wait_until(lambda: _empty(other), within=10)
    finally:
        await tool.aclose()
        await other.aclose()


def _cut_replicas(master: RedisServer) -> None:
    from redis.client import Redis as SyncRedis

    with SyncRedis(port=master.port, socket_timeout=5) as client:
        client.execute_command("CLIENT", "KILL", "TYPE", "replica")


def _take_over(cluster: RedisClusterServers, replica: RedisServer) -> None:
    """Promote *replica* at once (its master is dead), as an operator's ``CLUSTER
    FAILOVER TAKEOVER`` does, and wait until the cluster is healthy."""
    from redis.client import Redis as SyncRedis

    with SyncRedis(port=replica.port, socket_timeout=5) as client:
        if client.execute_command("ROLE")[0] != b"master":
            client.execute_command("CLUSTER", "FAILOVER", "TAKEOVER")
    cluster.wait_healthy()


async def _empty(registry: CancellationRegistry) -> bool:
    try:
        stats = await registry.stats()
    except StorageUnavailable:
        return False
    return (stats.total_rows, stats.total_in_flight) == (0, 0)
