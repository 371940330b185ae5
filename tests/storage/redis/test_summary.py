"""What a scrape reads from Redis (``RedisStorage.summary``): the Lua scripts' scope kinds
are exactly Python's, a table written before the kind totals existed is counted once, and a
summary is one script call whatever the size of the table."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from mcp_cancellation.scope import scope_kind
from mcp_cancellation.storage import TableSummary
from mcp_cancellation.storage._base import Limits

from ._helpers import CountingConnection, MakeStorage, calls_between, command_calls, settled

pytestmark = pytest.mark.redis

UNBOUNDED = Limits(max_rows=None, max_rows_per_scope=None)

# Every edge of scope_kind: prefixes with and without a colon, empty parts, case, bytes
# that are not ASCII, colons inside the rest.
SCOPES = [
    "global",
    "global:x",
    "Global",
    "ip:192.0.2.1",
    "ip:",
    "ip",
    "IP:1",
    "session:a:b",
    "session",
    "principal:p",
    ":principal",
    "",
    ":",
    "other:x",
    "ïp:x",
    "ip:é",
    "x\x00:y",
]


async def test_lua_scope_kinds_are_pythons(make_storage: MakeStorage) -> None:
    storage = make_storage()
    for n, scope in enumerate(SCOPES):
        for key in range(n % 3 + 1):
            await storage.add(scope, str(key), None, limits=UNBOUNDED)
    summary = await storage.summary(len(SCOPES))
    expected = TableSummary.of(await storage.stats(), len(SCOPES))
    assert summary.rows == expected.rows
    assert {scope_kind(s) for s in SCOPES} == {
        "global",
        "ip",
        "session",
        "principal",
        "other",
    }
    # Largest first; equal sizes oldest row first (here: the order of insertion).
    sizes = {scope: n % 3 + 1 for n, scope in enumerate(SCOPES)}
    assert list(summary.largest) == sorted(sizes.items(), key=lambda kv: -kv[1])


async def test_a_table_from_before_the_kind_totals_is_counted_once(
    make_storage: MakeStorage, raw: Redis
) -> None:
    storage = make_storage()
    for n in range(12):
        await storage.add(f"ip:10.0.0.{n % 4}", str(n), None, limits=UNBOUNDED)
        await storage.add("session:s", str(n), None, limits=UNBOUNDED)
    await raw.delete(storage.key("kinds"))  # as version 0.1.0 left it
    await storage.add("global", "1", None, limits=UNBOUNDED)  # counts the table, then +1
    assert (await storage.summary(3)).rows == {"ip": 12, "session": 12, "global": 1}
    await raw.delete(storage.key("kinds"))
    summary = await storage.summary(3)  # a scrape counts it too
    assert summary.rows == {"ip": 12, "session": 12, "global": 1}
    assert summary.largest == (("session:s", 12), ("ip:10.0.0.0", 3), ("ip:10.0.0.1", 3))
    await storage.remove("session:s", "0")
    assert (await storage.summary(1)).rows == {"ip": 12, "session": 11, "global": 1}


async def test_a_summary_is_one_script_call(make_storage: MakeStorage, raw: Redis) -> None:
    storage = make_storage(heartbeat_ttl=600, connection_class=CountingConnection)
    for n in range(300):
        await storage.add(f"ip:192.0.2.{n}", "1", None, limits=UNBOUNDED)
    await settled(storage)
    before, sent = await command_calls(raw), CountingConnection.sent
    summary = await storage.summary(5)
    assert CountingConnection.sent - sent == 1
    # The script's own commands (commandstats counts them too): the largest size, one
    # level, the three hashes (rows by kind, owners by scope, running tasks by tool), and
    # the check that the kind totals are kept. No scan.
    assert await calls_between(raw, before) == {
        "evalsha": 1,
        "zrevrange": 1,
        "zrange": 1,
        "hgetall": 3,
        "hsetnx": 1,
    }
    assert summary.rows == {"ip": 300}
    assert summary.largest == tuple((f"ip:192.0.2.{n}", 1) for n in range(5))
