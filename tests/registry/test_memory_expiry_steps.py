"""The memory storage expires a flood in steps: a janitor pass that finds more expired
scopes than one step takes lets the event loop run between steps, removes exactly what
one pass at once would, and leaves the index and the kind totals right."""

from __future__ import annotations

import asyncio

from mcp_cancellation import CancellationRegistry, MemoryStorage
from mcp_cancellation.storage._memory import _EXPIRE_STEP


async def test_a_flood_expires_in_steps_with_the_loop_running_between_them() -> None:
    now = [1_000.0]
    storage = MemoryStorage(clock=lambda: now[0])
    registry = CancellationRegistry(
        storage, max_rows=None, max_rows_per_scope=None, ttl=None, janitor_interval=None
    )
    flood = 2 * _EXPIRE_STEP + 100  # three steps of one-row scopes (about a row a step)
    for i in range(flood):
        now[0] += 0.001
        await registry.cancel(1, None, f"ip:10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}")
    for key in range(_EXPIRE_STEP + 5):  # a scope larger than a step: one step alone
        await registry.cancel(key, None, "principal:big")
    now[0] += 100.0
    for key in range(3):
        await registry.cancel(key, None, "session:fresh")
    seen: list[int] = []

    async def look() -> None:  # runs only when the pass yields to the loop
        while True:
            seen.append((await registry.stats()).total_rows)
            await asyncio.sleep(0)

    watcher = asyncio.create_task(look())
    try:
        result = await registry.cleanup(ttl=50.0)
    finally:
        watcher.cancel()
    assert result.removed == flood + _EXPIRE_STEP + 5
    stats = await registry.stats()
    assert stats.rows == {"session:fresh": 3}
    storage.check_index()
    # The watcher ran between steps, and saw the table part-way through the pass.
    assert any(flood + _EXPIRE_STEP + 8 > total > 3 for total in seen), seen
