"""A dead worker's orphaned task end is reported once, by the worker it is handed to, even
when the call that ended it timed out (its caller never heard of it): it waits in
``P orphans`` until a worker reports and acknowledges it, and is handed again when its
lease lapses. A real redis-server."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from mcp_cancellation.storage._task_table import TaskRecord
from mcp_cancellation.storage.redis import _tasks
from mcp_cancellation.storage.redis._contracts import Orphaning, TaskReapCall
from mcp_cancellation.storage.redis._scripts import source

from ...support import async_wait_until
from ._helpers import MakeStorage

pytestmark = pytest.mark.redis

DEAD = '{"code": -32603, "message": "The worker running this task stopped."}'


async def test_an_orphaned_end_whose_caller_never_heard_is_handed_again_and_reported_once(
    make_storage: MakeStorage, raw: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_tasks, "ORPHAN_LEASE_MS", 300)
    storage = make_storage(heartbeat_ttl=0.3)
    table = storage.task_table
    record = TaskRecord(
        task_id="t",
        scope="ip:a",
        tool="slow",
        status="working",
        worker="dead",  # (it never beat)
        created_ms=0,
        updated_ms=0,
        ttl_ms=60_000,
        poll_ms=1000,
    )
    assert await table.create(record, None, None) == "created"
    await asyncio.sleep(0.4)  # (older than the heartbeat TTL: its worker may be judged)
    # A reaper's call that ran, and whose reply its caller never read (it timed out).
    keys = storage.table.keys
    call = TaskReapCall(Orphaning("300", DEAD, "0", "dead", 300), 100)
    lost = await raw.eval(source("TASK_REAP"), 1, keys.scopes, *call.argv(keys.prefix))
    assert [task_id for _, _, task_id, _ in TaskReapCall.decode(lost)] == ["t"]
    found = await table.get("ip:a", "t", DEAD)
    assert found is not None
    assert found.status == "failed"
    assert not found.orphaned  # (ended by that call, not by this read)
    assert await table.reap(DEAD) == []  # handed to that caller: nobody else reports it yet
    reported: list[TaskRecord] = []

    async def handed_again() -> bool:
        reported.extend(await table.reap(DEAD))
        return bool(reported)

    await async_wait_until(handed_again, within=10, interval=0.05)
    assert [(r.task_id, r.status, r.tool, r.orphaned) for r in reported] == [
        ("t", "failed", "slow", True)
    ]
    await asyncio.sleep(0.4)  # (past another lease: acknowledged ends are never handed again)
    assert await table.reap(DEAD) == []
    assert await raw.zcard(keys.prefix + b"orphans") == 0
