"""The operators' view of a table: every request in flight, read in pages, each with
whether its worker is alive (private). Only reads: the workers (``P workers``), each one's
owners (``SSCAN`` of ``P w:<worker>``, a thousand entries a command), then the owners'
tracks, their requests' marks and the workers' heartbeats in pipelines; never one long
command, however large the table, and each page bounded by the storage's timeout on its
own (a listing of any size never times out as a whole) (docs/architecture.md, "The Redis
table")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

from ..._extras import requires
from .._base import InFlightRequest
from ._codec import decode_in_flight, flight_of, text, to_bytes
from ._table import Keys

with requires("redis", "RedisStorage"):
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

__all__ = ["PAGE", "beat_lives", "read_in_flight", "table_clock"]

#: Entries one command of the operator view reads (a fraction of a millisecond of Redis).
PAGE = 1000

T = TypeVar("T")
#: Runs one step of the listing within the storage's bounds (``HomeLoop.call``).
Bounded = Callable[[Callable[[], Awaitable[T]], str], Awaitable[T]]


async def read_in_flight(
    client: Redis | RedisCluster, keys: Keys, bounded: Bounded[Any]
) -> list[InFlightRequest]:
    """Every request in flight in the table of *keys*; each step (the workers, a page
    of one worker's owners and their tracks) runs through *bounded* on its own. A
    worker is alive while its last beat lags the table's clock by at most its own
    heartbeat TTL (:func:`table_clock`)."""

    async def heads() -> tuple[list[bytes], list[bool]]:
        workers = sorted(to_bytes(w) for w in await client.smembers(keys.workers))
        if not workers:
            return [], []
        pipe = client.pipeline(transaction=False)
        pipe.get(keys.pulse)
        for worker in workers:
            pipe.get(keys.heartbeat(worker))
        pulse, *beats = await pipe.execute()
        clock = table_clock(pulse)
        return workers, [beat_lives(beat, clock) for beat in beats]

    workers, alive = await bounded(heads, "stats")
    found: list[InFlightRequest] = []
    for worker, beating in zip(workers, alive, strict=True):
        owners = keys.owners_of(worker)
        cursor: int = 0
        while True:

            async def page(
                at: int = cursor,
                owners: bytes = owners,
                worker: bytes = worker,
                beating: bool = beating,
            ) -> tuple[int, list[InFlightRequest]]:
                after, entries = await client.sscan(owners, at, count=PAGE)
                return after, await _read_page(client, keys, text(worker), beating, entries)

            cursor, requests = await bounded(page, "stats")
            found += requests
            if not cursor:
                break
    return found


def table_clock(pulse: bytes | None) -> int | None:
    """The table's clock (ms) as its last beat or judgment left it in ``P pulse``
    (lua/liveness.lua), or ``None`` before any; read without advancing it (a read of
    Redis's own time is one command a cluster pipeline refuses), so a worker shows gone
    up to one beat interval later than the scripts judge it."""
    if pulse is None:
        return None
    return _number(text(pulse).partition(":")[2])


def beat_lives(beat: bytes | None, clock: int | None) -> bool:
    """Whether a worker whose ``P hb:<worker>`` is *beat* (``<table ms>:<its TTL ms>``)
    lives at the table's time *clock* (lua/liveness.lua, ``alive``)."""
    if beat is None:
        return False
    at, colon, ttl = text(beat).partition(":")
    return bool(colon) and (clock is None or clock - _number(at) <= _number(ttl))


def _number(value: bytes | str) -> int:
    try:
        return int(value)
    except ValueError:
        return 0


async def _read_page(
    client: Redis | RedisCluster, keys: Keys, worker: str, alive: bool, entries: list[Any]
) -> list[InFlightRequest]:
    """The requests of one page of a worker's owners (``<#m>:<m><owner>`` each): their
    tracks and their requests' marks, in one pipeline. An owner that ended meanwhile is
    left out."""
    if not entries:
        return []
    pipe = client.pipeline(transaction=False)
    for entry in entries:
        row, owner = flight_of(entry)
        pipe.hget(keys.flight_of(row), owner)
        pipe.hget(keys.marks_of(row), b"!")
    read = cast(list[bytes | None], await pipe.execute())
    return [
        decode_in_flight(entry, track, read[2 * i + 1], worker, alive)
        for i, entry in enumerate(entries)
        if (track := read[2 * i]) is not None
    ]
