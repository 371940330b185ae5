"""Helpers of the Redis storage tests: an observed storage, command counters, the table
layout's consistency check, and the types of the fixtures."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.connection import Connection

from mcp_cancellation.scope import scope_kind
from mcp_cancellation.storage import Storage
from mcp_cancellation.storage.redis import RedisStorage
from mcp_cancellation.storage.redis._operator_view import beat_lives

from ...support import async_wait_until
from ._workers import Worker

MakeStorage = Callable[..., RedisStorage]


async def settled(storage: Storage) -> None:
    """Wait until the listener is subscribed and its first resync has finished: from then
    on the storage makes no round trip of its own (but its heartbeat's)."""
    assert isinstance(storage, RedisStorage)
    await async_wait_until(lambda: storage.subscribed and storage.resyncs >= 1, within=10)
    if storage.track_delay > 0:  # (and calls stay young: see RedisStorage.keeps_young_calls)
        await async_wait_until(lambda: storage.keeps_young_calls, within=10)


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


async def lives(
    raw: Redis | RedisCluster, prefix: str, worker: str, heartbeat_ms: int = 8000
) -> bool:
    """Whether the table takes *worker* for alive now, as a judge with a *heartbeat_ms*
    TTL does (lua/liveness.lua): its last beat (``P hb:<worker>``, ``<table ms>:<its
    TTL>``) lags the table's clock (``P pulse`` advanced by Redis's time since, by at
    most 3/8 of the TTL) by at most its TTL."""
    pipe = raw.pipeline(transaction=True)
    pipe.time()
    pipe.get(f"{{{prefix}}}:pulse")
    pipe.get(f"{{{prefix}}}:hb:{worker}")
    (seconds, micros), pulse, beat = await pipe.execute()
    now = int(seconds) * 1000 + int(micros) // 1000
    clock = now
    if pulse is not None:
        last, _, at = pulse.decode().partition(":")
        clock = int(at) + max(0, min(now - int(last), heartbeat_ms * 3 // 8))
    return beat_lives(beat, clock)
