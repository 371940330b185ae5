"""What only the Redis storage has: key layout, server clock, one round trip per operation,
identical eviction to memory, push between workers, heartbeats and resync.

The registry's semantic suite (tests/registry) runs on this storage too, through the shared
backend matrix; these tests cover the rest against a real redis-server.
"""

from __future__ import annotations

import asyncio
import random
import re
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.crc import key_slot

from mcp_cancellation import (
    CancellationLimitReached,
    CancellationRegistry,
    ConfigurationError,
    MemoryStorage,
    RequestToken,
)
from mcp_cancellation.storage._base import Limits
from mcp_cancellation.storage.redis import RedisStorage

from ...support import HeldRequest, MakeRegistry, RedisServer, async_wait_until, env
from ._helpers import (
    CountingConnection,
    MakeStorage,
    calls_between,
    command_calls,
    lives,
    settled,
)

pytestmark = pytest.mark.redis


async def _keys(raw: Redis, pattern: str = "*") -> list[bytes]:
    return [key async for key in raw.scan_iter(match=pattern, count=1000)]


async def test_every_key_carries_the_prefix_hash_tag(
    make_registry: MakeRegistry, raw: Redis, prefix: str
) -> None:
    registry = make_registry(max_rows=4, max_rows_per_scope=3)
    for n in range(6):
        await registry.cancel(n, "r", scope=f"ip:10.0.0.{n % 3}")
    async with registry.request(1, "session:abc"):
        await registry.cleanup()
        keys = await _keys(raw, f"{{{prefix}}}:*")
        assert len(keys) >= 8  # rows, scopes, levels, in flight, worker, heartbeat ...
        assert keys == await _keys(raw, f"*{prefix}*")  # nothing outside the prefix
        assert {key_slot(k) for k in keys} == {key_slot(f"{{{prefix}}}".encode())}


async def test_prefixes_keep_apps_apart(make_registry: MakeRegistry) -> None:
    one = make_registry(storage={"prefix": "app-one-x"})
    two = make_registry(storage={"prefix": "app-two-x"})
    also_one = make_registry(storage={"prefix": "app-one-x"})
    try:
        await one.cancel(5, "mine", scope="s")
        assert not await two.is_cancelled(5, scope="s")
        assert await also_one.reason(5, scope="s") == "mine"
        assert (await two.stats()).rows == {}
    finally:
        await one.clear(5, scope="s")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:6379/0", "redis+cluster://"),  # names every accepted scheme
        ("localhost:6379", "rediss://"),
        ("redis://127.0.0.1:6379/notanumber", "must be a number"),  # was db 0, silently
        ("unix:///tmp/redis.sock?db=x", "not a usable Redis URL"),
    ],
)
def test_a_bad_url_is_a_configuration_error_that_says_what_is_accepted(url: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(says)):
        RedisStorage.from_url(url)


def test_prefix_may_not_contain_braces() -> None:
    for bad in ("", "a{b", "a}b"):
        with pytest.raises(ConfigurationError):
            RedisStorage.from_url("redis://127.0.0.1:1/0", prefix=bad)


async def test_ages_come_from_the_server_clock_and_always_increase(
    make_storage: MakeStorage, raw: Redis, prefix: str
) -> None:
    storage = make_storage()
    limits = Limits(max_rows=None, max_rows_per_scope=None)
    await storage.add("s", "a", None, limits=limits)
    seconds, micros = await raw.time()
    age = await raw.zscore(f"{{{prefix}}}:s:s", "a")
    assert age is not None
    assert abs(age - (seconds * 1_000_000 + micros)) < 5_000_000
    # A server clock stepping back (failover to a host whose clock is behind) cannot
    # reorder rows: ages stay strictly increasing, so "oldest first" keeps meaning
    # "first recorded".
    ahead = int(age) + 3_600_000_000
    await raw.set(f"{{{prefix}}}:clock", ahead)
    await storage.add("s", "b", None, limits=limits)
    await storage.add("s", "c", None, limits=limits)
    ages: list[Any] = await raw.zrange(f"{{{prefix}}}:s:s", 0, -1, withscores=True)
    assert [k for k, _ in ages] == [b"a", b"b", b"c"]
    assert ages[1][1] == ahead + 1
    assert ages[2][1] == ahead + 2


async def test_same_microsecond_inserts_keep_insertion_order(make_storage: MakeStorage) -> None:
    storage = make_storage()
    limits = Limits(max_rows=40, max_rows_per_scope=None)
    # 40 concurrent inserts: many land within one server microsecond.
    await asyncio.gather(*(storage.add("s", f"k{n:02}", None, limits=limits) for n in range(40)))
    result = await storage.add("s", "last", None, limits=limits)  # cap: evicts 2 oldest
    assert result.evicted == (("s", 2),)
    present = [n for n in range(40) if (await storage.get("s", f"k{n:02}"))[0]]
    assert len(present) == 38


async def test_add_at_the_cap_is_one_script_call(make_storage: MakeStorage, raw: Redis) -> None:
    storage = make_storage(heartbeat_ttl=600, connection_class=CountingConnection)
    limits = Limits(max_rows=100, max_rows_per_scope=None)
    for n in range(100):
        await storage.add(f"scope-{n % 7}", str(n), "why", limits=limits)
    await settled(storage)  # the listener's first resync is done
    before, sent = await command_calls(raw), CountingConnection.sent
    result = await storage.add("new", "x", "why", limits=limits)
    assert sum(n for _, n in result.evicted) == 5
    assert CountingConnection.sent - sent == 1  # one round trip ...
    assert (await calls_between(raw, before))["evalsha"] == 1  # ... running one script


async def test_polling_a_token_costs_no_round_trip(make_registry: MakeRegistry, raw: Redis) -> None:
    registry = make_registry(storage={"heartbeat_ttl": 600})
    storage = registry.storage
    assert isinstance(storage, RedisStorage)
    async with registry.request(9, "s") as token:
        # Let the listener subscribe and run its first resync before counting.
        await settled(storage)
        before = await command_calls(raw)
        assert not any(token.cancelled for _ in range(10_000))
        assert await calls_between(raw, before) == {}


async def test_a_tracked_request_life_is_two_script_calls(
    make_registry: MakeRegistry, raw: Redis
) -> None:
    # (Tracked at its start: track_delay=0. A young call's life costs none:
    # test_young_calls.py.)
    registry = make_registry(
        storage={"heartbeat_ttl": 600, "connection_class": CountingConnection, "track_delay": 0}
    )
    storage = registry.storage
    assert isinstance(storage, RedisStorage)
    async with registry.request(1, "s"):
        pass  # start the background tasks (subscription, first resync) before counting
    await settled(storage)
    before, sent = await command_calls(raw), CountingConnection.sent
    async with registry.request(2, "s") as token:
        for _ in range(100):
            token.raise_if_cancelled()
    assert CountingConnection.sent - sent == 2  # track, finish
    assert (await calls_between(raw, before))["evalsha"] == 2


@pytest.mark.parametrize("seed", range(4))
async def test_eviction_and_quota_match_memory_step_by_step(
    make_storage: MakeStorage, seed: int
) -> None:
    """Random adds, removes and tracks on both storages give identical results."""
    rng = random.Random(seed)
    limits = Limits(max_rows=rng.choice([12, 25, 40]), max_rows_per_scope=rng.choice([5, 9]))
    memory, redis = MemoryStorage(), make_storage(track_delay=0)  # (in flight at once)
    scopes = [f"scope-{n}" for n in range(6)]
    for step in range(300):
        scope = rng.choice(scopes[: rng.randint(1, 6)])
        key = str(rng.randint(0, 14))
        roll = rng.random()
        if roll < 0.7:
            reason = rng.choice([None, "r", f"step {step}"])
            require = rng.random() < 0.2
            got = await redis.add(scope, key, reason, limits=limits, require_in_flight=require)
            want = await memory.add(scope, key, reason, limits=limits, require_in_flight=require)
            assert got == want, f"step {step}"
        elif roll < 0.85:
            assert await redis.remove(scope, key) == await memory.remove(scope, key)
        elif roll < 0.95:
            owner = f"{redis.worker_id}:{rng.randint(1, 3)}"
            await redis.track(scope, key, owner, RequestToken(key, scope))
            await memory.track(scope, key, owner, RequestToken(key, scope))
        else:
            owner = f"{redis.worker_id}:{rng.randint(1, 3)}"
            await redis.finish(scope, key, owner)
            await memory.finish(scope, key, owner)
        assert await redis.get(scope, key) == await memory.get(scope, key)
        assert await redis.stats() == await memory.stats(), f"step {step}"


async def test_tie_between_scopes_goes_to_the_oldest_row(make_storage: MakeStorage) -> None:
    storage = make_storage()
    limits = Limits(max_rows=6, max_rows_per_scope=None)  # batch of 1
    for key, scope in enumerate(["b", "a", "c", "a", "c", "b"]):
        await storage.add(scope, str(key), None, limits=limits)
    # All scopes hold 2: the oldest row ("0" in b) goes, whatever the names' order.
    assert (await storage.add("d", "x", None, limits=limits)).evicted == (("b", 1),)
    # Now a and c tie at 2, a's oldest row is older.
    assert (await storage.add("d", "y", None, limits=limits)).evicted == (("a", 1),)


async def test_a_cancellation_on_another_worker_is_pushed(make_registry: MakeRegistry) -> None:
    tool_worker, other_worker = make_registry(), make_registry()
    assert tool_worker.instance_id != other_worker.instance_id
    async with tool_worker.request("call-1", "ip:10.1.1.1") as token:
        # (Another worker sees it once it has run its track delay.)
        await async_wait_until(lambda: other_worker.in_flight("call-1", scope="ip:10.1.1.1"))
        # Nobody else's scope reaches it, and unknown ids are ignored.
        assert not await other_worker.cancel_in_flight("call-1", "x", scope="ip:10.9.9.9")
        assert not await other_worker.cancel_in_flight("call-2", "x", scope="ip:10.1.1.1")
        assert await other_worker.cancel_in_flight("call-1", "stop", scope="ip:10.1.1.1")
        await async_wait_until(lambda: token.cancelled, within=5)
        assert token.reason == "stop"
    assert not await other_worker.in_flight("call-1", scope="ip:10.1.1.1")
    assert not await other_worker.is_cancelled("call-1", scope="ip:10.1.1.1")


async def test_push_flips_only_the_owners_that_tracked_at_the_time(
    make_registry: MakeRegistry,
) -> None:
    tool_worker, other_worker = make_registry(), make_registry()
    hold = asyncio.Event()
    tokens: list[RequestToken] = []

    async def request() -> None:
        async with tool_worker.request(3, "s") as token:
            tokens.append(token)
            await hold.wait()

    first = asyncio.create_task(request())
    await async_wait_until(lambda: len(tokens) == 1)
    await other_worker.cancel(3, "once", scope="s")
    await async_wait_until(lambda: tokens[0].cancelled, within=5)
    hold.set()
    await first
    # The row is gone with the first request; a new request with the same id is clean.
    hold.clear()
    second = asyncio.create_task(request())
    await async_wait_until(lambda: len(tokens) == 2)
    await asyncio.sleep(0.1)
    assert not tokens[1].cancelled
    hold.set()
    await second


async def test_a_push_reaches_only_the_owners_tracked_at_or_before_its_mark(
    make_registry: MakeRegistry, raw: Redis
) -> None:
    """A pushed message carries the sequence of its mark: a message that arrives late,
    after a later call of the id was tracked, does not flip that call."""
    worker, other = make_registry(storage={"track_delay": 0}), make_registry()
    storage = worker.storage
    assert isinstance(storage, RedisStorage)
    async with HeldRequest(worker, 9, "s") as first:
        await settled(storage)
        assert await other.cancel_in_flight(9, "stop", scope="s")
        await async_wait_until(lambda: first.cancelled, within=5)
        async with HeldRequest(worker, 9, "s") as second:
            await storage.stats()  # its track has reached Redis: the table's last one
            at = int(await raw.get(storage.key("seq")) or 0)
            channel = storage.key("c:", storage.worker_id)
            # The first cancellation's message again, as if delayed (a mark before the
            # second call's sequence), then one whose mark reaches the second call
            # (messages on a channel keep their order).
            for reason, mark in (("stop", at - 1), ("late", at)):
                sequence = str(mark).encode()
                message = (
                    b"1:s1:95:+" + reason.encode() + b"1:@" + b"%d:%s" % (len(sequence), sequence)
                )
                await raw.publish(channel, message)
            await async_wait_until(lambda: second.cancelled, within=5)
            assert second.reason == "late"


async def test_a_message_lost_while_disconnected_is_recovered_by_resync(
    make_registry: MakeRegistry, raw: Redis
) -> None:
    # No immediate retry inside redis-py: the listener's own backoff leaves a window.
    tool_worker = make_registry(storage={"reconnect_backoff": (0.5, 0.5), "retries": 0})
    other_worker = make_registry()
    storage = tool_worker.storage
    assert isinstance(storage, RedisStorage)
    async with tool_worker.request(11, "s") as token:
        # (Tracked in Redis once it has run its track delay.)
        await async_wait_until(lambda: other_worker.in_flight(11, "s"), within=5)
        await async_wait_until(lambda: storage.subscribed, within=5)
        await raw.client_kill_filter(_type="pubsub")
        await async_wait_until(lambda: not storage.subscribed, within=5)
        # Published to nobody: the tool worker is between two subscriptions.
        assert await other_worker.cancel_in_flight(11, "while away", scope="s")
        await async_wait_until(lambda: token.cancelled, within=10)
        assert token.reason == "while away"


async def test_heartbeat_keeps_a_live_workers_rows(
    make_registry: MakeRegistry, raw: Redis, prefix: str
) -> None:
    # A 3 s TTL refreshed every second: a loaded machine's scheduling delays stay far
    # below the 2 s margin, and the test waits for the refreshes themselves.
    tool_worker = make_registry(storage={"heartbeat_ttl": 3.0})
    janitor = make_registry()
    heartbeat = f"{{{prefix}}}:hb:{tool_worker.instance_id}"
    async with tool_worker.request(1, "s"):
        await async_wait_until(lambda: raw.exists(heartbeat))  # (the first beat)
        refreshes = 0
        last = await raw.get(heartbeat)

        async def refreshed() -> bool:
            # Never lapsed, and the janitor never sweeps the live worker's row.
            nonlocal refreshes, last
            assert await lives(raw, prefix, tool_worker.instance_id, 3000), "it lapsed"
            assert await janitor.cleanup() == (0, 0)
            beat = await raw.get(heartbeat)
            if beat != last:
                refreshes += 1
            last = beat
            return refreshes >= 4

        # Four refreshes span three intervals, a whole TTL: without them the worker would
        # lapse, and its rows would be gone.
        await async_wait_until(refreshed, within=30, interval=0.05)
        assert await janitor.in_flight(1, scope="s")


async def test_rows_of_a_worker_whose_heartbeat_expired_are_removed(
    make_registry: MakeRegistry, raw: Redis, prefix: str
) -> None:
    dying = make_registry(storage={"heartbeat_ttl": 0.3, "track_delay": 0})
    janitor = make_registry()
    hold = asyncio.Event()

    async def tool() -> None:
        async with dying.request("long", "s"):
            await hold.wait()

    task = asyncio.create_task(tool())
    await async_wait_until(lambda: janitor.in_flight("long", scope="s"))
    # The worker goes silent without untracking (as after SIGKILL): stop its background
    # tasks and its connections, leaving its rows behind.
    storage = dying.storage
    assert isinstance(storage, RedisStorage)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)  # finish() removes the row ...
    await janitor.cancel("long", "x", scope="s")
    async with dying.request("orphan", "s"):
        await storage.aclose()  # ... but this one is left behind by a dead worker
    assert await janitor.in_flight("orphan", scope="s")
    # (Dead once its beats lag the table's clock, which the janitor's beats advance.)
    await async_wait_until(lambda: _dead(raw, prefix, dying.instance_id), within=10)
    # Every in-flight row of the dead worker goes: the orphan, and "long" too if a resync
    # (after the subscription, or a lapsed 0.3 s heartbeat on a loaded machine) re-tracked
    # it while it finished; the worker's next resync would have released it, but a dead
    # worker runs none. Which of the two happened is the scheduler's choice.
    removed, in_flight_removed = await janitor.cleanup()
    assert removed == 0
    assert in_flight_removed in (1, 2)
    assert not await janitor.in_flight("orphan", scope="s")
    assert not await janitor.in_flight("long", scope="s")
    assert (await janitor.stats()).in_flight == {}
    assert await _keys(raw, f"{{{prefix}}}:w:*") == []


async def _dead(raw: Redis, prefix: str, worker: str) -> bool:
    return not await lives(raw, prefix, worker)


async def test_quota_rejects_across_workers(make_registry: MakeRegistry) -> None:
    one = make_registry(max_rows_per_scope=2)
    two = make_registry(max_rows_per_scope=2)
    await one.cancel(1, scope="s")
    await two.cancel(2, scope="s")
    with pytest.raises(CancellationLimitReached):
        await one.cancel(3, scope="s")
    await two.cancel(1, "updated, not refused", scope="s")
    assert await one.reason(1, scope="s") == "updated, not refused"


async def test_calls_from_another_threads_loop_are_forwarded(
    make_registry: MakeRegistry,
) -> None:
    registry = make_registry()
    await registry.cancel(4, "here", scope="s")

    def elsewhere() -> str | None:
        return asyncio.run(registry.reason(4, scope="s"))

    assert await asyncio.to_thread(elsewhere) == "here"


async def test_a_client_built_elsewhere_is_accepted(raw: Redis, prefix: str) -> None:
    storage = RedisStorage(raw, prefix=prefix)
    registry = CancellationRegistry(storage, janitor_interval=None)
    try:
        await registry.cancel(1, "r", scope="s")
        assert await registry.reason(1, scope="s") == "r"
    finally:
        await registry.aclose()
    assert await raw.ping()  # not ours to close


async def test_a_cancellation_recorded_here_flips_local_tokens_at_once(
    make_registry: MakeRegistry,
) -> None:
    registry = make_registry()
    async with registry.request(5, "s") as first, registry.request(5, "s") as second:
        assert await registry.cancel_in_flight(5, "now", scope="s")
        # No waiting: the worker that records flips its own tokens before returning
        # (the script publishes only to other workers).
        assert first.cancelled
        assert second.cancelled
        assert second.reason == "now"


async def test_the_environment_variable_selects_redis(redis_server: RedisServer) -> None:
    with env(MCP_CANCELLATION_REDIS_URL=redis_server.url):
        registry = CancellationRegistry(janitor_interval=None)
    try:
        storage = registry.storage
        assert isinstance(storage, RedisStorage)
        assert storage.prefix == "mcp-cancellation"
        request_id = f"env-{registry.instance_id}"
        await registry.cancel(request_id, "via env", scope="s")
        assert await registry.reason(request_id, scope="s") == "via env"
        await registry.clear(request_id, scope="s")
    finally:
        await registry.aclose()
