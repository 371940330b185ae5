"""The servers of the task tests (see ``_app.py``, ``_workers.py``)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from mcp_cancellation import CancellationRegistry, MemoryStorage

from ..support import BACKENDS, UvicornThread, redis_url
from ._app import build_tasks_app
from ._workers import QUOTA, TaskWorker


@pytest.fixture(scope="module", params=BACKENDS)
def servers(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """Two workers' base URLs: two processes on the leg's Redis, or, on memory, one
    server twice (a memory table is one process's)."""
    backend: str = request.param
    if backend == "memory":
        registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
        with UvicornThread(build_tasks_app(registry, max_tasks_per_scope=QUOTA)) as server:
            yield server.url, server.url
        return
    url = redis_url(backend, request)
    prefix = f"tasks-{uuid.uuid4().hex[:8]}"
    options: dict[str, float] = {"quota": QUOTA}
    if backend == "redis-partitioned":
        options["partitions"] = 3
    a = TaskWorker(url, prefix, **options)
    try:
        b = TaskWorker(url, prefix, **options)
    except BaseException:
        a.stop()
        raise
    try:
        yield a.url, b.url
    finally:
        a.stop()
        b.stop()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
        yield client
