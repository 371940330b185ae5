"""Redis faults at the storage boundary: bounded waits, StorageUnavailable, requests that
still complete, rows that are never leaked, and service that resumes by itself."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from redis import exceptions as redis_errors
from redis.asyncio import Redis

from mcp_cancellation import CancellationRegistry, RequestToken, StorageUnavailable
from mcp_cancellation.storage._base import Limits
from mcp_cancellation.storage.redis import RedisStorage

from ...support import HeldRequest, MakeRegistry, RedisServer, async_wait_until
from ._helpers import settled

pytestmark = pytest.mark.redis

FAST = {
    "socket_timeout": 0.3,
    "connect_timeout": 0.3,
    "timeout": 1.0,
    "reconnect_backoff": (0.05, 0.2),
}


@pytest.fixture
def server(own_redis: RedisServer) -> RedisServer:
    """Every test here gets a redis-server of its own to break."""
    return own_redis


@pytest.fixture
def black_hole() -> Iterator[str]:
    """A TCP port that accepts connections and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"redis://127.0.0.1:{sock.getsockname()[1]}/0"


async def test_a_server_that_never_answers_costs_a_bounded_wait(black_hole: str) -> None:
    registry = CancellationRegistry(
        RedisStorage.from_url(black_hole, prefix="hole", **FAST),
        janitor_interval=None,
    )
    try:
        with pytest.raises(StorageUnavailable) as info:
            await registry.cancel(1, "x", scope="s")
        assert isinstance(info.value.__cause__, redis_errors.RedisError | TimeoutError)
        with pytest.raises(StorageUnavailable):
            await registry.is_cancelled(1, scope="s")
        async with registry.request(1, "s") as token:  # tracks without the storage
            assert not token.cancelled
    finally:
        await registry.aclose()


async def test_outage_then_recovery_without_restarting(
    server: RedisServer, make_registry: MakeRegistry
) -> None:
    tool_worker = make_registry(storage=dict(FAST))
    other_worker = make_registry(storage=dict(FAST))
    release = {"before": asyncio.Event(), "during": asyncio.Event()}
    tokens: dict[str, object] = {}

    async def tool(request_id: str) -> str:
        async with tool_worker.request(request_id, "s") as token:
            tokens[request_id] = token
            await release[request_id].wait()
            return "cancelled" if token.cancelled else "completed"

    # Up: a request is in flight.
    before = asyncio.create_task(tool("before"))
    await async_wait_until(lambda: other_worker.in_flight("before", scope="s"))

    # Down: every call raises StorageUnavailable (from the redis error) ...
    server.stop()
    with pytest.raises(StorageUnavailable) as info:
        await other_worker.cancel_in_flight("before", "now", scope="s")
    assert isinstance(info.value.__cause__, redis_errors.ConnectionError)
    with pytest.raises(StorageUnavailable):
        await other_worker.cancel("before", scope="s")
    with pytest.raises(StorageUnavailable):
        await other_worker.cleanup()
    # ... yet a request starts, runs uncancelled and completes.
    during = asyncio.create_task(tool("during"))
    await async_wait_until(lambda: "during" in tokens)
    release["during"].set()
    assert await during == "completed"
    assert not before.done()

    # Back (empty): the in-flight request is tracked again and can be cancelled from
    # the other worker, without restarting either.
    server.start()
    await async_wait_until(_quietly(other_worker.in_flight, "before", scope="s"), within=10)
    assert await other_worker.cancel_in_flight("before", "after", scope="s")
    await async_wait_until(lambda: tokens["before"].cancelled, within=5)  # type: ignore[attr-defined]
    release["before"].set()
    assert await before == "cancelled"
    stats = await other_worker.stats()
    assert stats.total_rows == 0
    assert stats.total_in_flight == 0


def _quietly(fn: object, *args: object, **kwargs: object) -> object:
    async def check() -> bool:
        try:
            return bool(await fn(*args, **kwargs))  # type: ignore[operator]
        except StorageUnavailable:
            return False

    return check


async def test_a_request_ends_at_once_while_redis_holds_its_release(
    make_registry: MakeRegistry, server: RedisServer
) -> None:
    # Commands wait in Redis far longer than this test holds them: no timeout is involved.
    registry = make_registry(storage={"socket_timeout": 30.0, "timeout": 30.0})
    inside = asyncio.Event()
    leave = asyncio.Event()

    async def tool() -> None:
        async with registry.request("r", "s"):
            inside.set()
            await leave.wait()

    await registry.cancel("r", "reason", scope="s")
    task = asyncio.create_task(tool())
    await inside.wait()
    await settled(registry.storage)
    pauser = Redis.from_url(server.url, socket_timeout=10)
    try:
        # Writes (scripts included) wait until the unpause below; reads still answer.
        await pauser.client_pause(60_000, all=False)
        held = await _scripts_held(pauser)
        leave.set()
        # The request's release is sent and held by Redis, yet the request ends (it waits
        # at most max_wait), and a cancelled one too.
        await async_wait_until(lambda: _more_scripts_held(pauser, held), within=10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
        # Not released yet: a plain read, which Redis answers while it holds writes (the
        # storage's own reads would first wait for this worker's queued release).
        storage = registry.storage
        assert isinstance(storage, RedisStorage)
        assert await pauser.hget(storage.key("fs"), "s") == b"1"
        await pauser.client_unpause()
    finally:
        await pauser.client_unpause()
        await pauser.aclose()
    # The release reaches Redis once it answers.
    await async_wait_until(_quietly(_not_in_flight, registry), within=10)
    assert not await registry.is_cancelled("r", scope="s")


async def _not_in_flight(registry: CancellationRegistry) -> bool:
    return not await registry.in_flight("r", scope="s")


async def _scripts_held(client: Redis) -> set[int]:
    """The ids of the clients whose script a ``CLIENT PAUSE`` holds."""
    clients: list[dict[str, Any]] = await client.client_list()
    return {
        int(c["id"])
        for c in clients
        if "b" in c["flags"] and c["cmd"] in ("evalsha", "eval", "fcall")
    }


async def _more_scripts_held(client: Redis, before: set[int]) -> bool:
    return bool(await _scripts_held(client) - before)


async def test_rows_a_failed_finish_left_are_released_when_redis_returns() -> None:
    # A persistent Redis: its rows survive the restart, so a failed finish() would leak
    # the in-flight row for as long as this (live) worker keeps its heartbeat.
    with RedisServer("--appendonly", "yes", "--appendfsync", "always") as server:
        storage = RedisStorage.from_url(server.url, prefix="aof", **FAST)
        registry = CancellationRegistry(storage, janitor_interval=None)
        observer = RedisStorage.from_url(server.url, prefix="aof", **FAST)
        try:
            async with registry.request("r", "s"):
                # (Tracked in Redis once it has run its track delay.)
                await async_wait_until(lambda: observer.is_tracked("s", "r"), within=5)
                server.stop()
            # finish() failed; the request ended normally all the same.
            server.start()
            assert await observer.is_tracked("s", "r")  # the row came back from disk ...
            # ... and the worker releases it by itself once it reconnects (resync).
            await async_wait_until(_quietly(_untracked, observer), within=10)
            assert (await observer.stats()).in_flight == {}
        finally:
            await registry.aclose()
            await observer.aclose()


async def _table_empty(observer: RedisStorage) -> bool:
    stats = await observer.stats()
    return (stats.total_rows, stats.total_in_flight) == (0, 0)


async def _untracked(observer: RedisStorage) -> bool:
    return not await observer.is_tracked("s", "r")


def _persistent() -> RedisServer:
    """A redis-server whose rows survive a restart (every write on disk first)."""
    return RedisServer("--appendonly", "yes", "--appendfsync", "always")


async def _row_gone(observer: RedisStorage) -> bool:
    found, _ = await observer.get("s", "r")
    return not found


async def test_a_cancellation_row_a_failed_finish_left_is_removed_when_redis_returns() -> None:
    # Left in place, the row would start the next request with the same id cancelled until
    # its TTL (clients reuse ids: every new mcp client session counts from the same start).
    with _persistent() as server:
        storage = RedisStorage.from_url(server.url, prefix="aof", **FAST)
        registry = CancellationRegistry(storage, janitor_interval=None)
        observer = RedisStorage.from_url(server.url, prefix="aof", **FAST)
        try:
            async with registry.request("r", "s") as token:
                assert await registry.cancel_in_flight("r", "stop", scope="s")
                assert token.cancelled
                server.stop()
            # finish() failed: neither its untrack nor its row removal reached Redis.
            server.start()
            assert (await observer.get("s", "r")) == (True, "stop")  # back from disk ...
            # ... and removed by the worker itself once it reconnects, with the in-flight row.
            await async_wait_until(_quietly(_row_gone, observer), within=10)
            await async_wait_until(_quietly(_untracked, observer), within=10)
            async with registry.request("r", "s") as token:
                assert not token.cancelled
            # (The end of a call that was not cancelled lingers up to 0.5 s to share a
            # SYNC with others.)
            await async_wait_until(functools.partial(_table_empty, observer), within=5)
        finally:
            await registry.aclose()
            await observer.aclose()


async def test_a_late_finish_leaves_the_cancellation_of_a_request_still_in_flight() -> None:
    # The finish that failed reaches Redis later and removes the row, as a finish does;
    # the other worker's request with that id stays cancelled (its own mark in Redis),
    # even through a resync.
    with _persistent() as server:
        options: dict[str, Any] = {"prefix": "aof", **FAST}
        failing = RedisStorage.from_url(server.url, **options)
        running = RedisStorage.from_url(server.url, **options)
        first = CancellationRegistry(failing, janitor_interval=None)
        second = CancellationRegistry(running, janitor_interval=None)
        observer = RedisStorage.from_url(server.url, **options)
        inside, leave = asyncio.Event(), asyncio.Event()
        other: list[RequestToken] = []

        async def still_running() -> None:
            async with second.request("r", "s") as token:
                other.append(token)
                inside.set()
                await leave.wait()

        try:
            task = asyncio.create_task(still_running())
            await inside.wait()
            async with first.request("r", "s") as token:
                assert await first.cancel_in_flight("r", "stop", scope="s")
                assert token.cancelled
                await async_wait_until(lambda: other[0].cancelled)  # pushed to the other
                server.stop()
            resyncs = failing.resyncs
            server.start()
            # The failing worker's first whole resync after the restart (a resync that
            # fails raises before it is counted) sent the queued finish.
            await async_wait_until(lambda: failing.resyncs > resyncs, within=10)
            assert await _row_gone(observer)
            assert await observer.is_tracked("s", "r")  # the other request, still running
            # A resync of the other worker would find its request's cancellation: the
            # mark, at the sequence of the request's last track, reaches its owner.
            mark = await observer.client.hget(observer.key("fw:", "1:sr"), "!")
            assert isinstance(mark, bytes)
            assert mark.endswith(b":+stop")
            await running.resync()
            assert other[0].cancelled
            leave.set()
            await asyncio.wait_for(task, 10)
            assert not await observer.is_tracked("s", "r")
        finally:
            leave.set()
            await first.aclose()
            await second.aclose()
            await observer.aclose()


class _LoadsElsewhere(Redis):
    """A client whose ``SCRIPT LOAD`` reaches another node than its scripts run on: what a
    cluster client does after a failover, when it loads scripts on the primaries it knew
    of and the slot's new master is not among them."""

    async def script_load(self, script: Any) -> str:
        return hashlib.sha1(script.encode() if isinstance(script, str) else script).hexdigest()


async def test_a_node_that_missed_the_script_load_is_sent_the_script(
    server: RedisServer, prefix: str
) -> None:
    # Found failing over a cluster under load: one notifications/cancelled in ~100
    # answered 500 (NoScriptError out of the storage) instead of being recorded.
    client = _LoadsElsewhere.from_url(server.url)
    await client.script_flush()
    registry = CancellationRegistry(RedisStorage(client, prefix=prefix), janitor_interval=None)
    try:
        async with registry.request("r", "s") as token:
            assert await registry.cancel_in_flight("r", "stop", scope="s")
            assert token.cancelled
        assert not await registry.is_cancelled("r", scope="s")
        assert (await registry.stats()).total_rows == 0
    finally:
        await registry.aclose()
        await client.aclose()


async def test_a_silent_pub_sub_connection_is_replaced(
    make_registry: MakeRegistry, server: RedisServer
) -> None:
    """No error ever arrives from a connection that silently stopped answering (here: a
    paused server); the listener notices the missing pong and subscribes again."""
    registry = make_registry(storage={**FAST, "heartbeat_ttl": 0.6})
    storage = registry.storage
    assert isinstance(storage, RedisStorage)
    async with registry.request(1, "s"):
        await async_wait_until(lambda: storage.subscribed, within=5)
        pauser = Redis.from_url(server.url)
        try:
            await pauser.client_pause(2000)
            await async_wait_until(lambda: not storage.subscribed, within=5)
        finally:
            await pauser.aclose()
        await async_wait_until(lambda: storage.subscribed, within=10)


async def test_a_resync_releases_the_rows_redis_holds_for_this_worker_beyond_its_own(
    make_registry: MakeRegistry, raw: Redis
) -> None:
    """What a failover to a replica that missed some releases leaves: in-flight rows of
    this worker's ended requests, one of them cancelled. The resync removes both (the
    live request stays), and the reused id starts uncancelled."""
    registry = make_registry()
    storage = registry.storage
    assert isinstance(storage, RedisStorage)
    async with registry.request(1, "s"):
        await settled(storage)
        worker = storage.worker_id
        flight = storage.key("f:", "1:s2")
        entry = b"4:1:s2" + b"gone-owner"
        await raw.hset(flight, b"gone-owner", f"1\t0\t{worker}\t")
        await raw.hset(storage.key("fw:", "1:s2"), mapping={worker: 1})
        await raw.hincrby(storage.key("fs"), "s", 1)
        await raw.sadd(storage.key("w:", worker), entry)
        result = await storage.add("s", "2", "old", limits=Limits(), require_in_flight=True)
        assert result.outcome == "recorded"
        await storage.resync()
        assert not await registry.in_flight(2, "s")
        assert not await registry.is_cancelled(2, "s")
        assert await registry.in_flight(1, "s")
        async with registry.request(2, "s") as token:
            assert not token.cancelled
    stats = await registry.stats()
    assert (stats.total_rows, stats.total_in_flight) == (0, 0)


async def test_a_lost_table_is_noticed_by_the_next_call_and_rebuilt_by_every_worker(
    make_registry: MakeRegistry, raw: Redis
) -> None:
    tool_worker = make_registry()
    other_worker = make_registry()
    storage = tool_worker.storage
    assert isinstance(storage, RedisStorage)
    async with tool_worker.request(1, "s") as token:
        await settled(storage)
        # The other worker knows the table too, and the call is tracked in it.
        await async_wait_until(lambda: other_worker.in_flight(1, "s"), within=5)
        resyncs = storage.resyncs
        keys = [key async for key in raw.scan_iter(match=storage.key("*"))]
        await raw.delete(*keys)
        # The other worker's next call finds the table lost: refused, and every worker
        # told to resynchronise ...
        with pytest.raises(StorageUnavailable, match="resynchronising"):
            await other_worker.cancel_in_flight(1, "now", scope="s")
        await async_wait_until(lambda: storage.resyncs > resyncs, within=10)
        # ... after which the cancellation is recorded and reaches the request.
        assert await other_worker.cancel_in_flight(1, "now", scope="s")
        await async_wait_until(lambda: token.cancelled, within=10)


class HoldingProxy:
    """A TCP proxy to a real redis-server that can hold what its clients send while the
    server's answers still flow: one worker's slow path to Redis, the others' unaffected."""

    def __init__(self, port: int) -> None:
        self._target = port
        self._open = asyncio.Event()
        self._open.set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.url = ""

    async def __aenter__(self) -> HoldingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"redis://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/0"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._open.set()
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._target)

        async def pump(
            source: asyncio.StreamReader, sink: asyncio.StreamWriter, held: bool
        ) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await source.read(65536):
                    if held:
                        await self._open.wait()
                    sink.write(data)
                    await sink.drain()
            sink.close()

        for task in (
            asyncio.create_task(pump(reader, up_writer, True)),
            asyncio.create_task(pump(up_reader, writer, False)),
        ):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)


async def test_a_cancellation_that_overtakes_a_track_on_its_way_still_stops_the_request(
    server: RedisServer, prefix: str, raw: Redis
) -> None:
    """Worker A's track is held on its way to Redis while worker B records a cancellation
    of that request: B finds nothing in flight and waits (``track_wait``); the track, once
    it lands within the wait, claims the cancellation (B's client gets its 202 after it).
    A request that starts after B answered is not touched by that cancellation, however
    late its track lands."""
    async with HoldingProxy(server.port) as proxy:
        slow = RedisStorage.from_url(proxy.url, prefix=prefix, max_wait=0)
        a = CancellationRegistry(slow, janitor_interval=None)
        b = CancellationRegistry(
            RedisStorage.from_url(server.url, prefix=prefix), janitor_interval=None, track_wait=1.0
        )
        try:
            assert not await a.in_flight("warm", scope="s")
            assert not await b.in_flight("warm", scope="s")
            await settled(slow)
            proxy.hold()
            async with a.request(7, scope="s") as token:
                cancel = asyncio.create_task(b.cancel_in_flight(7, "overtaken", scope="s"))
                await async_wait_until(lambda: _waiting(raw, prefix), within=10)
                proxy.release()
                assert await cancel  # the late track claimed it
                assert token.cancelled
                assert token.reason == "overtaken"
            async with a.request(7, scope="s") as again:  # the id reused: nothing is left
                await async_wait_until(lambda: b.in_flight(7, scope="s"), within=10)
                assert not again.cancelled

            assert not await b.cancel_in_flight(8, "too early", scope="s")  # answered
            proxy.hold()
            async with a.request(8, scope="s") as later:
                proxy.release()
                await async_wait_until(lambda: b.in_flight(8, scope="s"), within=10)
                assert not later.cancelled
            assert not await _waiting(raw, prefix)
        finally:
            proxy.release()
            await a.aclose()
            await b.aclose()


async def _waiting(client: Redis, prefix: str) -> bool:
    """Whether a waiting cancellation is in the table."""
    return bool([key async for key in client.scan_iter(match="{" + prefix + "}:wait:*")])


async def _redis_ms(client: Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def _later_than(client: Redis, ms: int) -> bool:
    return await _redis_ms(client) > ms


async def test_a_worker_whose_calls_timed_out_puts_only_its_own_scopes_in_recovery(
    make_registry: MakeRegistry, raw: Redis
) -> None:
    """One caller's flood slows its worker until the worker's writes time out (here: Redis
    paused past the worker's timeout, with the flood's tracks queued). The tracks go first
    when Redis answers, so only their scopes are in doubt meanwhile: a cancellation of an
    unknown id there is refused (503), anywhere else it is answered as usual."""
    flooded = make_registry(storage={"timeout": 0.5, "track_delay": 0})
    other = make_registry()
    storage = flooded.storage
    assert isinstance(storage, RedisStorage)
    await flooded.stats()
    await other.stats()
    await settled(storage)
    await raw.client_pause(1200, all=False)  # (writes only)
    async with HeldRequest(flooded, "flood", "ip:10.0.0.1"):
        await async_wait_until(lambda: not storage.available, within=5)  # a timeout
        await async_wait_until(lambda: other.in_flight("flood", "ip:10.0.0.1"), within=10)
        # Redis answers again, and the worker's queued track has landed.
        assert not await other.cancel_in_flight("unknown", "x", scope="ip:10.0.0.2")
        with pytest.raises(StorageUnavailable, match="resynchronising"):
            await other.cancel_in_flight("unknown", "x", scope="ip:10.0.0.1")
