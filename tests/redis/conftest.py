"""Fixtures for the Redis storage tests: storages on the session's redis-server (or on a
server of the test's own, for outages), all closed after the test."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import Connection

from mcp_cancellation import CancellationRegistry
from mcp_cancellation.scope import scope_kind
from mcp_cancellation.storage import Storage
from mcp_cancellation.storage.redis import RedisStorage

from ..support import RedisServer, Registries, async_wait_until
from ._workers import HEADERS, Worker

MakeStorage = Callable[..., RedisStorage]
MakeRegistry = Callable[..., CancellationRegistry]


class ObservedRedisStorage(RedisStorage):
    """A ``RedisStorage`` that counts its finished resyncs, so tests can wait for the one
    that follows the listener's subscription instead of sleeping."""

    resyncs = 0

    async def resync(self) -> int:
        flipped = await super().resync()
        self.resyncs += 1
        return flipped


async def settled(storage: Storage) -> None:
    """Wait until the listener is subscribed and its first resync has finished: from then
    on the storage makes no round trip of its own (but its heartbeat's)."""
    assert isinstance(storage, ObservedRedisStorage)
    await async_wait_until(lambda: storage.subscribed and storage.resyncs >= 1, within=10)


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own."""
    return f"test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server for this test only (it may stop and restart it)."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def server(redis_server: RedisServer) -> RedisServer:
    """The server the ``make_*`` fixtures connect to (override with ``own_redis``)."""
    return redis_server


@pytest.fixture
async def make_storage(server: RedisServer, prefix: str) -> AsyncIterator[MakeStorage]:
    """Build ``RedisStorage.from_url`` storages (same *prefix* unless given); closed after."""
    made: list[RedisStorage] = []

    def make(**kwargs: Any) -> RedisStorage:
        kwargs.setdefault("prefix", prefix)
        storage = ObservedRedisStorage.from_url(server.url, **kwargs)
        made.append(storage)
        return storage

    yield make
    for storage in made:
        await storage.aclose()


@pytest.fixture
async def make_registry(make_storage: MakeStorage) -> AsyncIterator[MakeRegistry]:
    """Registries over new storages (a worker each); storage options go in ``storage=``."""
    registries = Registries(make_storage)
    yield registries
    await registries.aclose()


@pytest.fixture
async def raw(server: RedisServer) -> AsyncIterator[Redis]:
    """A plain client on the same server, to look at keys and counters."""
    client = Redis.from_url(server.url, socket_timeout=5, socket_connect_timeout=5)
    yield client
    await client.aclose()


async def command_calls(client: Redis) -> dict[str, int]:
    """Commands served so far, by name (INFO commandstats)."""
    info: dict[str, Any] = await client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in info.items()}


async def calls_between(client: Redis, before: dict[str, int]) -> dict[str, int]:
    """Commands served since *before*, the INFO call that measures it excluded."""
    after = await command_calls(client)
    delta = {name: n - before.get(name, 0) for name, n in after.items()}
    delta["info"] -= 1
    return {name: n for name, n in delta.items() if n}


class CountingConnection(Connection):
    """A redis-py connection that counts what it sends: one count per round trip (a
    pipeline is sent at once, a script call is one command)."""

    sent = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        await super().send_packed_command(command, check_health)


async def assert_layout_in_step(raw: Any, storage: RedisStorage) -> dict[str, int]:
    """Check every index of the table against its rows (``P s:<scope>``); the row count
    of each scope. (*raw* is a ``redis.asyncio.Redis``, typed loosely: its replies are.)"""
    p = storage.key("")
    rows: dict[str, list[tuple[bytes, float]]] = {}
    async for name in raw.scan_iter(match=p + b"s:*"):
        scope = name[len(p) + 2 :].decode()
        rows[scope] = await raw.zrange(name, 0, -1, withscores=True)
    counts = {scope: len(r) for scope, r in rows.items()}
    assert all(counts.values()), "an empty scope key was left behind"
    scopes = {
        s.decode(): int(n) for s, n in await raw.zrange(p + b"scopes", 0, -1, withscores=True)
    }
    assert scopes == counts
    levels: dict[int, dict[str, float]] = {}
    async for name in raw.scan_iter(match=p + b"l:*"):
        size = int(name[len(p) + 2 :])
        levels[size] = {s.decode(): a for s, a in await raw.zrange(name, 0, -1, withscores=True)}
    expected_levels: dict[int, dict[str, float]] = {}
    for scope, r in rows.items():
        expected_levels.setdefault(len(r), {})[scope] = min(age for _, age in r)
    assert levels == expected_levels
    members = {f"{len(s.encode())}:{s}".encode() + key for s, r in rows.items() for key, _ in r}
    ages = await raw.zrange(p + b"ages", 0, -1)
    assert set(ages) == members
    assert len(ages) == len(members)
    assert set(await raw.hkeys(p + b"reasons")) == members
    kinds: dict[str, int] = {}
    for scope, n in counts.items():
        kinds[scope_kind(scope)] = kinds.get(scope_kind(scope), 0) + n
    stored = {k.decode(): int(v) for k, v in (await raw.hgetall(p + b"kinds")).items()}
    assert {k: v for k, v in stored.items() if k != "_v" and v} == kinds
    return counts


StartWorkers = Callable[..., list[Worker]]


@pytest.fixture
def start_workers(prefix: str) -> Iterator[StartWorkers]:
    """Start uvicorn workers on a server (``start(server, count=2, **options)``); each is
    stopped after the test, even if stopping another one raised or was interrupted."""
    with contextlib.ExitStack() as started:

        def start(server: RedisServer, count: int = 2, **options: float) -> list[Worker]:
            workers = []
            for _ in range(count):
                worker = Worker(server.url, prefix, **options)
                started.callback(worker.stop)
                workers.append(worker)
            return workers

        yield start


@pytest.fixture
async def observer(server: RedisServer, prefix: str) -> AsyncIterator[RedisStorage]:
    """The test's own view of the shared rows (same prefix, not a worker)."""
    storage = RedisStorage.from_url(
        server.url, prefix=prefix, socket_timeout=0.5, connect_timeout=0.5, timeout=1.5
    )
    yield storage
    await storage.aclose()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(headers=HEADERS, timeout=15) as client:
        yield client
