"""Fixtures for the Redis storage tests: storages on the session's redis-server (or on a
server of the test's own, for outages), all closed after the test; the helpers are in
``_helpers.py``."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from mcp_cancellation.storage.redis import RedisStorage

from ...jsonrpc import SSE_AND_JSON
from ...support import MakeRegistry, RedisServer, Registries
from ._helpers import MakeStorage, StartWorkers
from ._workers import Worker


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
        storage = RedisStorage.from_url(server.url, **kwargs)
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
    async with httpx.AsyncClient(headers=SSE_AND_JSON, timeout=15) as client:
        yield client
