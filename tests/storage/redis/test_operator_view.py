"""The operators' view of a large table: 40 000 calls in flight are listed in pages (a
thousand owners a command), never in one long command, and the view writes nothing."""

from __future__ import annotations

import time

import pytest
from redis.asyncio import Redis

from mcp_cancellation.storage.redis import RedisStorage

from ...support import RedisServer
from ._helpers import MakeStorage, calls_between, command_calls

#: (Tables of tens of thousands of rows: seconds each, left out of ./dev quick.)
pytestmark = [pytest.mark.redis, pytest.mark.slow]

CALLS = 40_000
WORKERS = ("alive-worker", "dead-worker")


@pytest.fixture
def server(own_redis: RedisServer) -> RedisServer:
    """A server of this test's own: it counts every command the server serves."""
    return own_redis


async def _fill(raw: Redis, storage: RedisStorage) -> None:
    """CALLS owners in flight, as workers' tracks leave them (docs/architecture.md, "The
    Redis table"), split over a worker with a heartbeat and one without; every tenth
    request cancelled by its mark."""
    pipe = raw.pipeline(transaction=False)
    await raw.sadd(storage.key("workers"), *WORKERS)
    seconds, _ = await raw.time()  # (a beat now, '<table ms>:<TTL ms>': see lua/liveness.lua)
    await raw.set(storage.key("hb:", WORKERS[0]), f"{seconds * 1000}:600000", ex=600)
    for i in range(CALLS):
        worker = WORKERS[i % 2]
        scope, key, owner = f"ip:10.0.{i // 256 % 256}.{i % 256}", str(i), f"{worker}:{i}"
        m = f"{len(scope)}:{scope}{key}"
        pipe.hset(storage.key("f:", m), owner, f"1\t{1_700_000_000_000 + i}\t{worker}\tslow")
        pipe.hset(storage.key("fw:", m), mapping={worker: 1})
        if i % 10 == 0:
            pipe.hset(storage.key("fw:", m), "!", "1:0:+stop")
        pipe.sadd(storage.key("w:", worker), f"{len(m)}:{m}{owner}")
        if len(pipe) >= 5_000:
            await pipe.execute()
    await pipe.execute()


async def test_forty_thousand_calls_are_listed_in_pages_and_nothing_is_written(
    make_storage: MakeStorage, raw: Redis
) -> None:
    storage = make_storage(operator=True)
    await _fill(raw, storage)
    keys = await raw.dbsize()
    before = await command_calls(raw)
    listed = await storage.in_flight_requests()
    calls = await calls_between(raw, before)

    assert len(listed) == CALLS
    assert sum(r.cancelled for r in listed) == CALLS // 10
    assert {r.reason for r in listed if r.cancelled} == {"stop"}
    assert {(r.worker, r.alive) for r in listed} == {(WORKERS[0], True), (WORKERS[1], False)}
    assert {r.tool for r in listed} == {"slow"}
    # Read in pages: one SSCAN per thousand owners (or so: a SCAN's COUNT is a hint), then
    # single-key reads; no script, and no command that returns a whole large key.
    assert calls.get("sscan", 0) >= CALLS // 1_000
    assert calls["hget"] == 2 * CALLS
    assert not {"eval", "evalsha", "hgetall", "hscan"} & calls.keys()
    connecting = {"hello", "client", "select", "ping"}  # a new connection's handshake
    assert set(calls) - connecting <= {"sscan", "hget", "smembers", "get", "time"}
    assert await raw.dbsize() == keys


async def test_the_timeout_bounds_each_page_not_the_whole_listing(
    make_storage: MakeStorage, raw: Redis
) -> None:
    # The listing of 40 000 calls takes seconds; each page a few milliseconds. A timeout
    # far shorter than the listing, and far longer than a page, lists it all.
    storage = make_storage(operator=True, timeout=0.5)
    await _fill(raw, storage)
    started = time.monotonic()
    listed = await storage.in_flight_requests()
    took = time.monotonic() - started
    assert len(listed) == CALLS
    assert took > 0.5, f"the listing took {took:.2f} s: the test proves nothing"
