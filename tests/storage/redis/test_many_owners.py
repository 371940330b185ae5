"""Thousands of calls of one id in flight at once (a caller reusing an id, on purpose or
not): a cancellation of that id reaches all of them, on every worker, with one mark and
one message per worker; the commands it costs Redis are the same as for one call; and a
call of the id tracked after it is not cancelled. docs/architecture.md, "The Redis
table"."""

from __future__ import annotations

import asyncio
import functools

import pytest
from redis.asyncio import Redis

from mcp_cancellation import CancellationRegistry
from mcp_cancellation.storage.redis import RedisStorage

from ...support import HeldRequest, MakeRegistry, RedisServer, async_wait_until
from ._helpers import calls_between, command_calls, settled

#: (Tables of tens of thousands of rows: seconds each, left out of ./dev quick.)
pytestmark = [pytest.mark.redis, pytest.mark.slow]

#: Calls of one id per worker: 5 000 in all, past what one Lua call may unpack.
OWNERS = 2_500
#: No heartbeat while the test counts commands (the listener's PING aside).
QUIET = {"heartbeat_ttl": 600.0, "track_delay": 0}  # (every call tracked at its start)


async def _hold(registry: CancellationRegistry, request_id: int, n: int) -> list[HeldRequest]:
    held = [HeldRequest(registry, request_id, "s") for _ in range(n)]
    await asyncio.wait_for(asyncio.gather(*(h.started() for h in held)), 60)
    return held


@pytest.fixture
def server(own_redis: RedisServer) -> RedisServer:
    """A server of this test's own: it counts every command the server serves."""
    return own_redis


def _all_cancelled(held: list[HeldRequest]) -> bool:
    return all(h.token is not None and h.token.cancelled for h in held)


async def _cancel_counted(
    raw: Redis, canceller: CancellationRegistry, request_id: int
) -> dict[str, int]:
    """Cancel *request_id* of scope ``s`` from *canceller*: the commands Redis served for
    it (the listeners' PINGs left out)."""
    before = await command_calls(raw)
    assert await canceller.cancel_in_flight(request_id, "stop", scope="s")
    calls = await calls_between(raw, before)
    calls.pop("ping", None)
    return calls


async def test_a_cancellation_of_thousands_of_owners_costs_what_one_owner_s_does(
    make_registry: MakeRegistry, raw: Redis, prefix: str
) -> None:
    workers = [make_registry(storage=QUIET) for _ in range(2)]
    canceller = make_registry(storage=QUIET)
    for registry in (*workers, canceller):
        await registry.stats()  # its first call (then its resync) before counting
        await settled(registry.storage)
    for request_id in (5, 6):  # the first loads the script and starts the table's kinds
        one = [*await _hold(workers[0], request_id, 1), *await _hold(workers[1], request_id, 1)]
        single = await _cancel_counted(raw, canceller, request_id)
        await async_wait_until(functools.partial(_all_cancelled, one))
        for h in one:
            await h.finish()

    many = [*await _hold(workers[0], 7, OWNERS), *await _hold(workers[1], 7, OWNERS)]
    for registry in workers:
        await registry.storage.stats()  # every track reached Redis
    pubsub = raw.pubsub()
    await pubsub.psubscribe(f"{{{prefix}}}:c:*")
    try:
        thousands = await _cancel_counted(raw, canceller, 7)
        await async_wait_until(lambda: all(h.token and h.token.cancelled for h in many), within=30)
        messages: list[tuple[bytes, bytes]] = []

        async def two_messages() -> bool:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
            if message is not None:
                messages.append((message["channel"], message["data"]))
            return len(messages) >= 2

        await async_wait_until(two_messages, within=10)
        assert await pubsub.get_message(ignore_subscribe_messages=True, timeout=0) is None
    finally:
        await pubsub.aclose()

    assert thousands == single
    # One message per worker, each naming the mark's sequence, not the owners: the
    # table's last sequence (P seq: 2 + 2 tracks of ids 5 and 6, then the 2 x OWNERS
    # calls of this id, numbered from 1 in one counter).
    ids = sorted(r.storage.worker_id for r in workers if isinstance(r.storage, RedisStorage))
    assert sorted(c.decode().rsplit(":", 1)[1] for c, _ in messages) == ids
    assert int(await raw.get(f"{{{prefix}}}:seq") or 0) == 4 + 2 * OWNERS
    for _, data in messages:
        sequence = str(4 + 2 * OWNERS)
        assert data == b"1:s1:75:+stop1:@" + f"{len(sequence)}:{sequence}".encode()

    # A call of the id tracked after the cancellation is not cancelled by it.
    async with HeldRequest(workers[0], 7, "s") as late:
        await workers[0].storage.stats()
        assert not late.cancelled
        in_flight = await canceller.storage.in_flight_requests()
        flags = [r.cancelled for r in in_flight if r.request_id == "7"]
        assert sorted(flags) == [False] + [True] * (2 * OWNERS)
    for h in many:
        await h.finish()
    stats = await canceller.stats()
    assert (stats.total_rows, stats.total_in_flight) == (0, 0)
    # The owners' keys went with the last of them: sequences, marks and counts too.
    assert await raw.keys(f"{{{prefix}}}:f*:*") == []
