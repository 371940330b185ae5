"""The memory storage's task table: a scope's quota counts its live tasks only, expired
tasks go at the next call, and a creation does not scan every task the process keeps.
A clock of the test's own stands in for time."""

from __future__ import annotations

from mcp_cancellation import MemoryStorage
from mcp_cancellation.storage._task_table import TaskRecord


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def record(scope: str, task_id: str, ttl_ms: int = 10_000) -> TaskRecord:
    return TaskRecord(
        task_id=task_id,
        scope=scope,
        tool="slow",
        status="working",
        worker="w",
        created_ms=0,
        updated_ms=0,
        ttl_ms=ttl_ms,
        poll_ms=1000,
    )


async def test_the_quota_counts_a_scope_s_live_tasks_and_expiry_frees_it() -> None:
    clock = Clock()
    table = MemoryStorage(clock=clock).task_table
    assert await table.create(record("ip:a", "1"), quota=2)
    assert await table.create(record("ip:a", "2", ttl_ms=20_000), quota=2)
    assert not await table.create(record("ip:a", "3"), quota=2)  # at its quota
    assert await table.create(record("ip:b", "1"), quota=2)  # another scope's own
    clock.now += 10.0  # "1" of both scopes expire; "2" lives on
    assert await table.get("ip:a", "1", "") is None
    assert await table.create(record("ip:a", "3"), quota=2)
    assert not await table.create(record("ip:a", "4"), quota=2)
    assert sorted((r.scope, r.task_id) for r in await table.tasks()) == [
        ("ip:a", "2"),
        ("ip:a", "3"),
    ]
    clock.now += 20.0
    assert await table.tasks() == []
    assert await table.create(record("ip:a", "5"), quota=1)


async def test_an_id_recorded_again_replaces_its_record_and_counts_once() -> None:
    clock = Clock()
    table = MemoryStorage(clock=clock).task_table
    assert await table.create(record("ip:a", "1", ttl_ms=1_000), quota=2)
    assert await table.create(record("ip:a", "1", ttl_ms=5_000), quota=2)
    assert await table.create(record("ip:a", "2"), quota=2)
    clock.now += 2.0  # the first record's expiry passes: the second one stays
    found = await table.get("ip:a", "1", "")
    assert found is not None
    assert found.ttl_ms == 5_000
    assert not await table.create(record("ip:a", "3"), quota=2)
