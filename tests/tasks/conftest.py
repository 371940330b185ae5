"""The servers of the task tests (see ``_app.py``, ``_workers.py``)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from mcp_cancellation import CancellationRegistry, MemoryStorage

from ..support import BACKENDS, UvicornThread, redis_url
from ._app import build_tasks_app
from ._fastmcp_app import build_fastmcp_tasks_app
from ._workers import QUOTA, WORKERS, FastMCPTaskWorker, TaskWorker

#: The servers the task suite runs against: the SDK's MCPServer with TasksExtension, and
#: FastMCP with FastMCPTasksExtension (one task core, two thin adapters).
FLAVORS = ["sdk", "fastmcp"]


@pytest.fixture(scope="module", params=FLAVORS)
def flavor(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(scope="module")
def task_worker(flavor: str) -> type[TaskWorker]:
    """The worker class of the flavor (a uvicorn process serving it on a table)."""
    return WORKERS[flavor]


@pytest.fixture(scope="module", params=BACKENDS)
def servers(request: pytest.FixtureRequest, flavor: str) -> Iterator[tuple[str, str]]:
    """Two workers' base URLs: two processes on the leg's Redis, or, on memory, one
    server twice (a memory table is one process's)."""
    backend: str = request.param
    build = build_tasks_app if flavor == "sdk" else build_fastmcp_tasks_app
    worker = TaskWorker if flavor == "sdk" else FastMCPTaskWorker
    if backend == "memory":
        registry = CancellationRegistry(MemoryStorage(), janitor_interval=None)
        with UvicornThread(build(registry, max_tasks_per_scope=QUOTA)) as server:
            yield server.url, server.url
        return
    url = redis_url(backend, request)
    prefix = f"tasks-{uuid.uuid4().hex[:8]}"
    options: dict[str, float] = {"quota": QUOTA}
    if backend == "redis-partitioned":
        options["partitions"] = 3
    a = worker(url, prefix, **options)
    try:
        b = worker(url, prefix, **options)
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
