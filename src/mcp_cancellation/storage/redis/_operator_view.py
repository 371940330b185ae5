"""The operators' view of a table: every request in flight, read in pages, each with
whether its worker is alive (private). Only reads: ``HSCAN`` of ``P info``, a thousand
entries a command, then the owners' tracks, their requests' marks and the workers'
heartbeats in pipelines; never one long command, however large the table
(docs/architecture.md, "The Redis table")."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from ..._extras import requires
from .._base import InFlightRequest
from ._codec import decode_in_flight, flight_of, to_bytes

with requires("redis", "RedisStorage"):
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

__all__ = ["PAGE", "read_in_flight"]

#: Entries one command of the operator view reads (a fraction of a millisecond of Redis).
PAGE = 1000


async def read_in_flight(client: Redis | RedisCluster, prefix: bytes) -> list[InFlightRequest]:
    """Every request in flight in the table at *prefix*."""
    info = prefix + b"info"
    entries: dict[bytes, bytes] = {}
    cursor: int = 0
    while True:
        cursor, page = await client.hscan(info, cursor, count=PAGE)
        entries.update(cast(dict[bytes, bytes], page))
        if not cursor:
            break
    pairs = list(entries.items())
    read: list[Any] = []  # per entry: its owner's track, then the request's mark
    for start in range(0, len(pairs), PAGE):
        pipe = client.pipeline(transaction=False)
        for entry, _ in pairs[start : start + PAGE]:
            row, owner = flight_of(entry)
            pipe.hget(prefix + b"f:" + row, owner)
            pipe.hget(prefix + b"fw:" + row, b"!")
        read += await pipe.execute()
    found = [
        decode_in_flight(entry, value, read[2 * i], read[2 * i + 1])
        for i, (entry, value) in enumerate(pairs)
    ]
    workers = sorted({request.worker for request in found})
    if not workers:
        return found
    pipe = client.pipeline(transaction=False)
    for worker in workers:
        pipe.exists(prefix + b"hb:" + to_bytes(worker))
    alive = dict(zip(workers, [bool(n) for n in await pipe.execute()], strict=True))
    return [dataclasses.replace(r, alive=alive[r.worker]) for r in found]
