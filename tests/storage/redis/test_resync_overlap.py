"""A request that ends while a resync runs stays ended: the resync re-tracks this worker's
rows as they were when it began, so a release that reached Redis before the resync's
script would be undone. The release is queued behind the resync instead (one sender), and
the request does not wait for it.

A real client on the session's redis-server holds the resync's script back, which forces
the interleaving that a loaded machine produces by chance (the registry matrix once saw
it on the cluster: a request's row back in flight after the request had ended).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
from redis.asyncio import Redis

from mcp_cancellation import CancellationRegistry
from mcp_cancellation.storage.redis import RedisStorage
from mcp_cancellation.storage.redis import _scripts as scripts

from ...support import RedisServer, async_wait_until
from ._helpers import settled

pytestmark = pytest.mark.redis

_NAMES = {
    hashlib.sha1(scripts.source(name, sharded=False).encode()).hexdigest(): name
    for name in scripts.NAMES
}


class ScriptLog(Redis):
    """A real client that records the storage's scripts that Redis ran, in order, and
    can hold one script's next call back until :attr:`release` is set."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ran: list[str] = []
        self.hold: str | None = None
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    async def evalsha(self, sha: str, numkeys: int, *args: Any) -> Any:
        name = _NAMES.get(sha, sha)
        if name == self.hold:
            self.hold = None
            self.held.set()
            await self.release.wait()
        result = await super().evalsha(sha, numkeys, *args)
        self.ran.append(name)
        return result


@pytest.fixture
async def client(redis_server: RedisServer) -> AsyncIterator[ScriptLog]:
    client = ScriptLog(
        host="127.0.0.1", port=redis_server.port, socket_timeout=5, socket_connect_timeout=5
    )
    yield client
    client.release.set()
    await client.aclose()


@pytest.fixture
async def registry(client: ScriptLog, prefix: str) -> AsyncIterator[CancellationRegistry]:
    storage = RedisStorage(client, prefix=prefix, track_delay=0)  # (tracked at once)
    registry = CancellationRegistry(storage, janitor_interval=None)
    await registry.stats()
    await settled(storage)  # the resync after the first subscription has run
    yield registry
    await registry.aclose()


Serve = Callable[[asyncio.Event, asyncio.Event], Coroutine[Any, Any, None]]


async def _end_during_a_resync(
    registry: CancellationRegistry,
    client: ScriptLog,
    caplog: pytest.LogCaptureFixture,
    serve: Serve,
) -> None:
    """Run *serve* (in a task of its own: it tracks request 1 in scope ``s``, sets its
    first event, waits for its second and ends the request). While the request is in
    flight, start a resync and hold its script; end the request, and let the resync's
    script run only once the request has ended."""
    storage = registry.storage
    assert isinstance(storage, RedisStorage)
    caplog.set_level(logging.DEBUG, "mcp_cancellation.redis")
    entered, leave = asyncio.Event(), asyncio.Event()
    served = asyncio.create_task(serve(entered, leave))
    await entered.wait()
    client.ran.clear()
    client.hold = "SYNC"
    resync = asyncio.create_task(storage.resync())
    await async_wait_until(client.held.is_set)  # its snapshot, with the row, is taken
    leave.set()
    await asyncio.wait_for(served, 5)  # the request ends, its release queued
    client.release.set()
    await resync
    # The resync's script ran before the release, not after it (which re-tracks the row).
    assert not await registry.in_flight(1, "s")
    assert client.ran[:2] == ["SYNC", "SYNC"], client.ran
    assert (await registry.stats()).in_flight == {}


async def test_a_request_that_ends_during_a_resync_is_not_tracked_again(
    registry: CancellationRegistry, client: ScriptLog, caplog: pytest.LogCaptureFixture
) -> None:
    async def serve(entered: asyncio.Event, leave: asyncio.Event) -> None:
        async with registry.request(1, "s"):
            entered.set()
            await leave.wait()

    await _end_during_a_resync(registry, client, caplog, serve)


async def test_an_untrack_during_a_resync_is_not_undone(
    registry: CancellationRegistry, client: ScriptLog, caplog: pytest.LogCaptureFixture
) -> None:
    async def serve(entered: asyncio.Event, leave: asyncio.Event) -> None:
        await registry.track(1, "s")
        entered.set()
        await leave.wait()
        await registry.untrack(1, "s")

    await _end_during_a_resync(registry, client, caplog, serve)
