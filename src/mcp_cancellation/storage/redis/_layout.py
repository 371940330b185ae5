"""Where a table lives: the prefix of each partition, and the check that a named table
exists with the layout an operator gave (private).

A worker's first ``SYNC`` creates its table: ``P epoch`` and ``P layout``
(``<partition>/<partitions>``). The operator tools read both before anything else, so a
wrong ``--prefix`` or ``--partitions`` is an error that says what the server holds, not
an empty answer.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..._errors import ConfigurationError
from ..._extras import requires
from ._table import Keys, table_prefix

with requires("redis", "RedisStorage"):
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster
    from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

__all__ = ["check_layout", "partition_prefixes"]

#: Partition counts probed when the one given finds no table.
_PROBED = range(1, 33)
#: Keys a search for other tables' prefixes reads at most (``SCAN``, a page at a time).
_SCAN_LIMIT = 100_000


def partition_prefixes(prefix: str, partitions: int) -> list[str]:
    """The prefix of each partition: ``<prefix>.<i>.<n>`` with the smallest *n* whose hash
    slot lies in the *i*-th of *partitions* equal slot ranges (just *prefix* for one).
    Every process computes the same list, so they all share the same partitions."""
    found = []
    for i in range(partitions):
        low = i * REDIS_CLUSTER_HASH_SLOTS // partitions
        high = (i + 1) * REDIS_CLUSTER_HASH_SLOTS // partitions
        n = 0
        while not low <= key_slot(f"{prefix}.{i}.{n}".encode()) < high:
            n += 1
        found.append(f"{prefix}.{i}.{n}")
    return found


def _tables(prefix: str, partitions: int) -> list[str]:
    """The prefixes of a table of *partitions* (a ``RedisStorage`` for one)."""
    return [prefix] if partitions == 1 else partition_prefixes(prefix, partitions)


async def _read(client: Redis | RedisCluster, prefixes: list[str]) -> list[tuple[Any, Any]]:
    """``(epoch, layout)`` of each prefix's table (``None`` where absent)."""
    pipe = client.pipeline(transaction=False)
    for prefix in prefixes:
        keys = Keys(table_prefix(prefix))
        pipe.get(keys.epoch)
        pipe.get(keys.layout)
    replies = await pipe.execute()
    return list(zip(replies[0::2], replies[1::2], strict=True))


async def _other_prefixes(client: Redis | RedisCluster) -> list[str]:
    """The prefixes of the tables on this server (a bounded ``SCAN``; partitions shown
    by their table's prefix)."""
    found: set[str] = set()
    seen = 0
    async for key in client.scan_iter(match="{*}:epoch", count=1000):
        name = bytes(key).decode("utf-8", "replace")[1:].rsplit("}:", 1)[0]
        base, dot, rest = name.rpartition(".")
        head, dot2, _ = base.rpartition(".")
        found.add(head if dot and dot2 and rest.isdigit() else name)
        seen += 1
        if seen >= _SCAN_LIMIT:
            break
    return sorted(found)


async def check_layout(client: Redis | RedisCluster, prefix: str, partitions: int) -> None:
    """Raise :class:`~mcp_cancellation.ConfigurationError`, saying what the server holds,
    unless a table of *partitions* partitions exists at *prefix*. Only reads."""
    # Each partition read on its own: a stalled master leaves its partition unknown,
    # not the check undone (the others tell the layout).
    reads = await asyncio.gather(
        *(_read(client, [part]) for part in _tables(prefix, partitions)), return_exceptions=True
    )
    tables = [(None, None) if isinstance(t, BaseException) else t[0] for t in reads]
    if all(isinstance(t, BaseException) for t in reads):
        raise next(t for t in reads if isinstance(t, BaseException))
    expected = [f"{i}/{partitions}" for i in range(partitions)]
    for (_, layout), want in zip(tables, expected, strict=True):
        if layout is not None and bytes(layout).decode() != want:
            found = bytes(layout).decode().partition("/")[2]
            raise ConfigurationError(
                f"the table at prefix {prefix!r} has {found} partition(s), not {partitions}:"
                f" pass --partitions {found}"
            )
    if any(epoch is not None for epoch, _ in tables):
        return
    for count in _PROBED:
        if count == partitions:
            continue
        (_, layout), *_ = await _read(client, _tables(prefix, count)[:1])
        if layout is not None and bytes(layout).decode().endswith(f"/{count}"):
            raise ConfigurationError(
                f"no table of {partitions} partition(s) at prefix {prefix!r}, but one of "
                f"{count}: pass --partitions {count}"
            )
    others = [p for p in await _other_prefixes(client) if p != prefix]
    hint = f" (tables found: {', '.join(repr(p) for p in others)})" if others else ""
    raise ConfigurationError(
        f"no table at prefix {prefix!r} on this server{hint}: give the prefix the servers "
        "use (RedisStorage(prefix=...), the demo's --redis-prefix; no worker has served a "
        "request there yet)"
    )
