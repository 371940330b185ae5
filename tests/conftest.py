"""Shared fixtures: the real redis-server, the real Redis Cluster and the storage backend
matrix.

Every registry semantic test takes ``make_registry`` (or ``registry``) and so runs once per
backend in ``BACKENDS``: the in-memory storage, a real ``redis-server``, a real Redis
Cluster (three masters, three replicas) and the same cluster with the table partitioned
across its three masters, the servers started once per session on free loopback ports.
Redis tests get a fresh key prefix each, so they never see each other's rows.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator

import pytest

from mcp_cancellation import CancellationRegistry, MemoryStorage
from mcp_cancellation.storage import Storage

from .support import (
    BACKENDS,
    MakeRegistry,
    RedisClusterServers,
    RedisServer,
    Registries,
    ServerLog,
    SteppedClock,
    advance_table_clock,
    redis_url,
    server_log_tails,
)

#: How long a cancellation of an id not in flight waits for its track, in every registry
#: the suite builds (the servers it starts inherit it) unless a test says otherwise: the
#: default's half second would be paid by each of the thousands of such cancellations
#: the semantic tests make. The tests of the rule itself (tests/registry/
#: test_waiting_cancellations.py, the busy-worker tests) give their own, the default
#: included.
os.environ.setdefault("MCP_CANCELLATION_TRACK_WAIT", "0.05")

#: The SIGTERM handler in place before the suite's (restored when pytest ends).
_SIGTERM_HANDLER = pytest.StashKey["signal._HANDLER"]()


def pytest_configure(config: pytest.Config) -> None:
    """A SIGTERM stops the suite as Ctrl-C does: pytest then tears its fixtures down, so
    the servers they started (redis-server, Prometheus, uvicorn) stop with it. Without
    this, a CI job cancelled with SIGTERM left them running."""
    config.stash[_SIGTERM_HANDLER] = signal.signal(signal.SIGTERM, signal.default_int_handler)


def pytest_unconfigure(config: pytest.Config) -> None:
    previous = config.stash.get(_SIGTERM_HANDLER, None)
    signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


@pytest.fixture(autouse=True)
def _sigterm_stays_ours() -> Iterator[None]:
    """A test must leave the SIGTERM handler above in place, or a later SIGTERM kills the
    suite without its teardown (``run()`` of ``mcp-cancellation simulate`` once did)."""
    yield
    handler = signal.getsignal(signal.SIGTERM)
    if handler is not signal.default_int_handler:
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        raise AssertionError(f"the test left SIGTERM's handler changed: {handler!r}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test shows the log tail of every server it started (and of the session's
    redis-server) next to its own output; the logs are forgotten after its teardown."""
    report = yield
    if report.failed:
        for title, tail in server_log_tails():
            report.sections.append((title, tail))
    if report.when == "teardown":
        ServerLog.current.clear()
    return report


#: The markers a test that used each Redis fixture carries.
_REDIS_MARKERS = {
    "redis_server": ("redis",),
    "own_redis": ("redis",),
    "redis_cluster": ("redis", "cluster"),
}


@pytest.fixture(autouse=True)
def _redis_tests_are_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that used a Redis (a fixture's, or a redis-server it started) is marked, so
    that ``-m "not redis"`` (``"not cluster"``) deselects every one. Checked after the test:
    the backend matrix asks for its server only as it runs."""
    spawned = RedisServer.spawned
    yield
    needed = {mark for name in request.fixturenames for mark in _REDIS_MARKERS.get(name, ())}
    if RedisServer.spawned != spawned:
        needed.add("redis")
    missing = sorted(mark for mark in needed if request.node.get_closest_marker(mark) is None)
    if missing:
        pytest.fail(f"this test uses Redis: mark it {', '.join(missing)}", pytrace=False)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real redis-server for the session (tests that stop it start their own)."""
    with RedisServer(session=True) as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServers]:
    """One real Redis Cluster for the session (a failover test starts its own)."""
    with RedisClusterServers(session=True) as cluster:
        yield cluster


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def clock() -> SteppedClock:
    """The clock of the memory leg's storages (see :class:`SteppedClock`)."""
    return SteppedClock()


@pytest.fixture
def made_storages() -> list[Storage]:
    """Every storage ``make_storage`` built in this test (see :func:`age_rows`)."""
    return []


@pytest.fixture
def make_storage(
    backend: str, request: pytest.FixtureRequest, clock: SteppedClock, made_storages: list[Storage]
) -> Callable[[], Storage]:
    """Build a fresh storage of the current backend (a new key prefix each time on Redis)."""
    if backend == "memory":
        return lambda: MemoryStorage(clock=clock)
    url = redis_url(backend, request)
    from mcp_cancellation.storage.redis import PartitionedRedisStorage, RedisStorage

    def make() -> Storage:
        # A tiny eviction chunk: the semantic tests' batches of 3 to 5 rows then take several
        # scripts, so the whole matrix checks that a split batch keeps the exact rules.
        # Calls are tracked in the table at their start (track_delay=0), so that the
        # table's in-flight rows match the memory storage's step by step; the young calls
        # of the default delay have their own tests (tests/storage/redis/test_young_calls.py,
        # and every worker and task test, which use the default).
        prefix = f"test-{uuid.uuid4().hex[:10]}"
        storage: Storage
        options = {"prefix": prefix, "eviction_chunk": 2, "track_delay": 0}
        if backend == "redis-partitioned":
            storage = PartitionedRedisStorage.from_url(url, partitions=3, **options)
        else:
            storage = RedisStorage.from_url(url, **options)
        made_storages.append(storage)
        return storage

    return make


@pytest.fixture
def age_rows(
    backend: str, clock: SteppedClock, made_storages: list[Storage]
) -> Callable[[float], Awaitable[None]]:
    """Make the rows written so far *seconds* older, on every leg without waiting: the
    memory leg's clock moves; on Redis each table's clock (``P clock``, which the scripts
    never let fall behind) is set *seconds* ahead of the server's."""

    async def older(seconds: float) -> None:
        if backend == "memory":
            clock.advance(seconds)
            return
        for storage in made_storages:
            await advance_table_clock(storage, seconds)

    return older


@pytest.fixture
async def make_registry(make_storage: Callable[..., Storage]) -> AsyncIterator[MakeRegistry]:
    """Build registries on the current backend; all are closed after the test."""
    registries = Registries(make_storage)
    yield registries
    await registries.aclose()


@pytest.fixture
def registry(make_registry: MakeRegistry) -> CancellationRegistry:
    """A registry with default limits on the current backend."""
    return make_registry()
