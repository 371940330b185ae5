"""A worker whose heartbeat lapsed (and whose rows another worker swept) re-tracks its
requests, even when a new request recreated the heartbeat first."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from mcp_cancellation import CancellationRegistry
from mcp_cancellation.storage.redis import RedisStorage

from ...support import HeldRequest, MakeRegistry, RedisServer, async_wait_until

pytestmark = pytest.mark.redis


async def test_a_worker_whose_heartbeat_lapsed_resyncs_even_if_a_request_starts_first(
    server: RedisServer, make_registry: MakeRegistry, raw: Redis, prefix: str
) -> None:
    # The worker's heartbeat key vanished (it expired while the worker's loop stalled, or
    # maxmemory evicted it) and another worker's cleanup removed its in-flight rows. The
    # heartbeat then finds the key missing and resyncs, unless a request tracked first:
    # TRACK recreated the key, the heartbeat saw nothing wrong, and the worker's earlier
    # requests stayed untracked in Redis, so cancellations of them were ignored.
    #
    # A 60 s heartbeat TTL (refreshed every 20 s) keeps the periodic heartbeat out of the
    # test: only the resync after the subscription and the one TRACK asks for can run.
    storage = RedisStorage.from_url(server.url, prefix=prefix, heartbeat_ttl=60, track_delay=0)
    worker = CancellationRegistry(storage, janitor_interval=None)
    other = make_registry()
    old = HeldRequest(worker, "old", "s")
    try:
        await old.started()
        # The resync that follows the listener's first subscription has run: nothing else
        # re-tracks the worker's rows until TRACK finds the heartbeat missing.
        await async_wait_until(lambda: storage.subscribed and storage.resyncs >= 1)
        assert await other.in_flight("old", scope="s")
        await raw.delete(f"{{{prefix}}}:hb:{worker.instance_id}")
        assert await other.cleanup() == (0, 1)  # the lapsed worker's rows are swept
        assert not await other.in_flight("old", scope="s")
        async with worker.request("new", "s"):  # recreates the heartbeat key ...
            # ... and so asks for a resync, which re-tracks "old".
            await async_wait_until(lambda: storage.resyncs >= 2)
            assert await other.in_flight("old", scope="s")
            assert await other.cancel_in_flight("old", "stop", scope="s")
        await old.finish()
    finally:
        old.release.set()
        await asyncio.gather(old.task, return_exceptions=True)
        await worker.aclose()
