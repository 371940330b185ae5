"""The TTL sweep on Redis (``CLEANUP``) removes exactly the expired rows, batch after
batch, and leaves every part of the table's layout in step: scopes that expire whole
(a flood's one-row scopes, and larger ones) are deleted in bulk, scopes that expire in
part lose their oldest rows and are re-filed."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from mcp_cancellation.storage._base import Limits

from ...support import async_wait_until
from ._helpers import MakeStorage, assert_layout_in_step

pytestmark = pytest.mark.redis

UNBOUNDED = Limits(max_rows=None, max_rows_per_scope=None)


async def _server_now(raw: Redis) -> float:
    seconds, micros = await raw.time()
    return seconds + micros / 1e6


@pytest.mark.parametrize("batch", [1, 3, 1000])
async def test_the_ttl_sweep_removes_exactly_the_expired_rows(
    make_storage: MakeStorage, raw: Redis, batch: int
) -> None:
    storage = make_storage(cleanup_batch=batch)
    old: dict[str, int] = {}
    # Old rows: one-row scopes, scopes of 2 and 3 rows that expire whole, and scopes that
    # will also get new rows (they expire in part).
    for i in range(12):
        old[f"ip:10.0.0.{i}"] = 1
    for i in range(4):
        old[f"principal:two-{i}"] = 2
        old[f"session:three-{i}"] = 3
    for i in range(3):
        old[f"ip:10.9.0.{i}"] = 2 + i
    ids = dict.fromkeys(old, 0)
    for n in range(max(old.values())):  # round-robin: the rows of scopes interleave
        for scope, size in old.items():
            if n < size:
                await storage.add(scope, str(ids[scope]), None, limits=UNBOUNDED)
                ids[scope] += 1
    last_old = await _server_now(raw)
    # A gap of a second on the server's clock between the old rows and the new ones.

    async def gap_passed() -> bool:
        return await _server_now(raw) >= last_old + 1.0

    await async_wait_until(gap_passed, within=10)
    new = {f"ip:10.9.0.{i}": 2 for i in range(3)} | {"ip:10.5.0.1": 1, "other:x": 4}
    for scope, size in new.items():
        for _ in range(size):
            await storage.add(scope, str(ids.get(scope, 0)), None, limits=UNBOUNDED)
            ids[scope] = ids.get(scope, 0) + 1
    await assert_layout_in_step(raw, storage)

    # Expire what is older than half-way through the gap.
    ttl = await _server_now(raw) - (last_old + 0.5)
    removed, _ = await storage.cleanup(ttl, [])
    assert removed == sum(old.values())
    counts = await assert_layout_in_step(raw, storage)
    assert counts == new
    # The survivors of the scopes that expired in part are their newest rows.
    for i in range(3):
        scope = f"ip:10.9.0.{i}"
        assert await storage.get(scope, str(2 + i)) == (True, None)
        assert await storage.get(scope, "0") == (False, None)
