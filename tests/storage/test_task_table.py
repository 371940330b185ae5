"""The task table's contract (``storage/_task_table.py``), one suite on every storage:
memory, a real redis-server, the real Redis Cluster and a partitioned table. A scope's
quota and the table's bound count every running task; a running task never expires and
an ended one expires ``ttl`` after its end; a terminal status never changes; answers
wake the waiting tool; a worker claims its tasks again after a resync (rewritten after a
table loss, refused once another ended them); a dead worker's tasks end ``failed`` once.
On Redis the expiry is the server's own clock: the tests use TTLs of a fraction of a
second and wait for the condition; on memory a clock of the test's own moves."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator

import pytest

from mcp_cancellation import MemoryStorage
from mcp_cancellation.storage import Storage
from mcp_cancellation.storage._task_table import TaskRecord, TaskTable

from ..support import BACKENDS, SteppedClock, async_wait_until, redis_url

#: The heartbeat TTL of the Redis legs' storages: a dead worker's task is failed once its
#: heartbeat is gone and the task is older than this.
HEARTBEAT_TTL = 0.5
DEAD = '{"code": -32603, "message": "The worker running this task stopped."}'


#: The worker id of the legs' storages (a live worker: its heartbeat beats).
ME = "me"


def record(scope: str, task_id: str, *, ttl_ms: int = 300, worker: str = ME) -> TaskRecord:
    return TaskRecord(
        task_id=task_id,
        scope=scope,
        tool="slow",
        status="working",
        worker=worker,
        created_ms=0,
        updated_ms=0,
        ttl_ms=ttl_ms,
        poll_ms=1000,
    )


class Table:
    """The leg's storage and its task table, and how time passes on it."""

    def __init__(self, backend: str, storage: Storage, clock: SteppedClock) -> None:
        self.backend = backend
        self.storage = storage
        self.table: TaskTable = storage.task_table
        self._clock = clock

    @property
    def shared(self) -> bool:
        return self.backend != "memory"

    async def until_gone(self, scope: str, task_id: str) -> None:
        """Until the task has expired (the memory leg's clock moves past any TTL)."""
        if not self.shared:
            self._clock.advance(3600)
        await async_wait_until(lambda: _gone(self.table, scope, task_id), within=10, interval=0.05)

    async def flush(self) -> None:
        """Lose the whole table (FLUSHALL, on every node)."""
        from mcp_cancellation.storage.redis import PartitionedRedisStorage, RedisStorage

        parts = (
            self.storage.partitions
            if isinstance(self.storage, PartitionedRedisStorage)
            else (self.storage,)
        )
        for part in parts:
            assert isinstance(part, RedisStorage)
            client = part.client
            if hasattr(client, "get_primaries"):
                for node in client.get_primaries():
                    await client.flushall(target_nodes=node)
            else:
                await client.flushall()


async def _gone(table: TaskTable, scope: str, task_id: str) -> bool:
    return await table.get(scope, task_id, DEAD) is None


SHARED = [leg for leg in BACKENDS if getattr(leg, "values", (leg,))[0] != "memory"]


@pytest.fixture(params=BACKENDS)
async def tasks(request: pytest.FixtureRequest) -> AsyncIterator[Table]:
    async for table in _table(request):
        yield table


@pytest.fixture(params=SHARED)
async def shared_tasks(request: pytest.FixtureRequest) -> AsyncIterator[Table]:
    """The Redis legs only: tables that outlive a process, or are lost."""
    async for table in _table(request):
        yield table


async def _table(request: pytest.FixtureRequest) -> AsyncIterator[Table]:
    backend: str = request.param
    clock = SteppedClock()
    storage: Storage
    if backend == "memory":
        storage = MemoryStorage(clock=clock)
    else:
        from mcp_cancellation.storage.redis import PartitionedRedisStorage, RedisStorage

        url = redis_url(backend, request)
        prefix = f"tt-{uuid.uuid4().hex[:10]}"
        if backend == "redis-partitioned":
            storage = PartitionedRedisStorage.from_url(
                url, partitions=3, prefix=prefix, heartbeat_ttl=HEARTBEAT_TTL
            )
        else:
            storage = RedisStorage.from_url(url, prefix=prefix, heartbeat_ttl=HEARTBEAT_TTL)
        storage.bind(ME)
        for part in getattr(storage, "partitions", (storage,)):
            await part.ping()  # its first call: the worker beats from now on
        await async_wait_until(lambda: _beating(storage))
    try:
        yield Table(backend, storage, clock)
    finally:
        await storage.aclose()


async def end(table: TaskTable, scope: str, task_id: str, status: str = "completed") -> bool:
    return await table.write(scope, task_id, {"status": status, "result": "{}"})


async def test_a_task_reads_back_in_its_scope_only(tasks: Table) -> None:
    table = tasks.table
    assert await table.create(record("ip:a", "1"), None, None) == "created"
    found = await table.get("ip:a", "1", DEAD)
    assert found is not None
    assert (found.status, found.tool, found.worker, found.ttl_ms) == ("working", "slow", ME, 300)
    assert not found.orphaned
    assert await table.get("ip:b", "1", DEAD) is None
    assert await table.get("ip:a", "2", DEAD) is None
    assert not await table.write("ip:b", "1", {"message": "x"})
    assert not await table.answer("ip:b", "1", {"k": "{}"})


async def test_a_running_task_never_expires_and_an_ended_one_expires_ttl_after_its_end(
    tasks: Table,
) -> None:
    table = tasks.table
    assert await table.create(record("ip:a", "1", ttl_ms=200), 1, None) == "created"
    if tasks.shared:
        await asyncio.sleep(0.5)  # past its TTL (the server's clock): still there, running
    else:
        tasks._clock.advance(3600)
    assert (await table.get("ip:a", "1", DEAD)) is not None
    assert await table.create(record("ip:a", "2"), 1, None) == "quota"  # it holds the quota
    assert await end(table, "ip:a", "1")
    assert (await table.get("ip:a", "1", DEAD)) is not None  # kept for its TTL
    await tasks.until_gone("ip:a", "1")
    assert await table.create(record("ip:a", "2"), 1, None) == "created"


async def test_the_table_bound_counts_every_scope_s_tasks(tasks: Table) -> None:
    table = tasks.table
    # (A partitioned table splits the bound across its partitions: one each here.)
    bound = 3
    created = 0
    refused = 0
    for i in range(12):
        outcome = await table.create(record(f"ip:{i}", "t", ttl_ms=200), None, bound)
        created += outcome == "created"
        refused += outcome == "full"
    assert created <= bound
    assert refused == 12 - created
    assert created >= 1
    listed = await table.tasks()
    assert len(listed) == created
    for task in listed:  # ended tasks leave the bound once they expire
        assert await end(table, task.scope, task.task_id)
    for task in listed:
        await tasks.until_gone(task.scope, task.task_id)
    assert await table.create(record("ip:0", "again"), None, bound) == "created"


async def test_a_terminal_status_never_changes(tasks: Table) -> None:
    table = tasks.table
    await table.create(record("ip:a", "1"), None, None)
    assert await table.write("ip:a", "1", {"message": "half"})
    assert await end(table, "ip:a", "1", "cancelled")
    assert not await end(table, "ip:a", "1", "completed")
    assert not await table.write("ip:a", "1", {"message": "late"})
    found = await table.get("ip:a", "1", DEAD)
    assert found is not None
    assert (found.status, found.message) == ("cancelled", "half")


async def test_answers_are_kept_for_waiting_keys_and_wake_the_waiting_tool(tasks: Table) -> None:
    table = tasks.table
    await table.create(record("ip:a", "1"), None, None)
    await table.write("ip:a", "1", {"status": "input_required", "i:k1": "{}", "i:k2": "{}"})
    if tasks.shared:  # the push reaches this worker once it listens
        await tasks.storage.ping()
        await async_wait_until(lambda: _subscribed(tasks.storage))
    with table.watch("ip:a", "1") as changed:
        assert await table.answer("ip:a", "1", {"k1": '{"a":1}', "nope": "{}"})
        await asyncio.wait_for(changed.wait(), 5)
    found = await table.get("ip:a", "1", DEAD)
    assert found is not None
    assert dict(found.answers) == {"k1": '{"a":1}'}
    assert found.status == "input_required"  # k2 still waits
    assert await table.answer("ip:a", "1", {"k1": '{"a":2}', "k2": '{"b":1}'})
    found = await table.get("ip:a", "1", DEAD)
    assert found is not None
    assert dict(found.answers) == {"k1": '{"a":1}', "k2": '{"b":1}'}  # the first answer stays
    assert found.status == "working"


async def _beating(storage: Storage) -> bool:
    from mcp_cancellation.storage.redis import RedisStorage

    for part in getattr(storage, "partitions", (storage,)):
        assert isinstance(part, RedisStorage)
        if not await part.client.exists(part.key("hb:", ME)):
            return False
    return True


def _subscribed(storage: Storage) -> bool:
    parts = getattr(storage, "partitions", (storage,))
    return all(getattr(part, "subscribed", True) for part in parts)


async def test_the_operators_listing_shows_every_task_without_its_result(tasks: Table) -> None:
    table = tasks.table
    for i in range(7):
        await table.create(record("ip:a", str(i)), None, None)
    await table.write("ip:a", "0", {"status": "completed", "result": '{"big":"x"}'})
    await table.write("ip:a", "1", {"status": "input_required", "i:k": "{}"})
    listed = {r.task_id: r for r in await table.tasks()}
    assert sorted(listed) == [str(i) for i in range(7)]
    assert listed["0"].status == "completed"
    assert listed["0"].result is None
    assert listed["1"].status == "input_required"
    assert not listed["1"].inputs


async def test_a_worker_claims_its_running_task_and_learns_one_that_ended(tasks: Table) -> None:
    table = tasks.table
    running, ended = record("ip:a", "run"), record("ip:a", "gone")
    await table.create(running, None, None)
    await table.create(ended, None, None)
    await end(table, "ip:a", "gone", "failed")
    assert await table.claim(running) == "running"
    assert await table.claim(ended) == "ended"


async def test_after_a_table_loss_a_claim_writes_the_running_task_again(
    shared_tasks: Table,
) -> None:
    tasks = shared_tasks
    table = tasks.table
    task = record("ip:a", "run")
    await table.create(task, 1, None)
    await tasks.flush()
    assert await table.get("ip:a", "run", DEAD) is None
    assert await table.claim(task) == "restored"
    found = await table.get("ip:a", "run", DEAD)
    assert found is not None
    assert found.status == "working"
    assert await table.create(record("ip:a", "other"), 1, None) == "quota"  # counted again
    assert await table.claim(task) == "running"


async def test_the_summary_counts_the_running_tasks_of_the_whole_table_by_tool(
    tasks: Table,
) -> None:
    """What ``tasks_running`` shows: the table's own count, whichever process reads it;
    a claim of a running task counts it once, a task written again after a table loss
    counts again."""
    table = tasks.table
    for i in range(3):
        await table.create(record("ip:a", f"t{i}"), None, None)
    await table.create(dataclasses.replace(record("ip:b", "o"), tool="report"), None, None)
    assert (await tasks.storage.summary(5)).tasks_running == {"slow": 3, "report": 1}
    await end(table, "ip:a", "t0", "completed")
    await end(table, "ip:b", "o", "failed")
    assert await table.claim(record("ip:a", "t1")) == "running"
    assert (await tasks.storage.summary(5)).tasks_running == {"slow": 2}
    if tasks.shared:
        await tasks.flush()
        assert (await tasks.storage.summary(5)).tasks_running == {}
        assert await table.claim(record("ip:a", "t1")) == "restored"
        assert (await tasks.storage.summary(5)).tasks_running == {"slow": 1}


async def test_a_dead_worker_s_tasks_end_failed_once(shared_tasks: Table) -> None:
    table = shared_tasks.table
    # Worker "dead" never beat: once the tasks are older than the heartbeat TTL, a read
    # or a reap ends each, and only the call that ended it says so.
    for i in range(4):
        await table.create(record(f"ip:{i}", "t", worker="dead", ttl_ms=60_000), 1, None)
    assert await table.reap(DEAD) == []  # too young: its worker may not have beaten yet
    await asyncio.sleep(HEARTBEAT_TTL + 0.1)
    first = await table.get("ip:0", "t", DEAD)
    assert first is not None
    assert first.orphaned
    assert first.status == "failed"
    reaped = await table.reap(DEAD)
    assert sorted(r.scope for r in reaped) == ["ip:1", "ip:2", "ip:3"]
    assert all(r.orphaned and r.status == "failed" and r.tool == "slow" for r in reaped)
    assert await table.reap(DEAD) == []
    again = await table.get("ip:0", "t", DEAD)
    assert again is not None
    assert not again.orphaned
    assert again.error == DEAD
    # Each ended task expires ttl after its end: the scope's quota is held until then.
    assert await table.create(record("ip:1", "u"), 1, None) == "quota"


async def test_the_memory_table_keeps_creations_cheap_with_many_tasks() -> None:
    clock = SteppedClock()
    table = MemoryStorage(clock=clock).task_table
    for i in range(2000):
        assert await table.create(record(f"ip:{i % 50}", str(i), ttl_ms=1000), None, None)
        await end(table, f"ip:{i % 50}", str(i))
    clock.advance(2.0)
    assert await table.create(record("ip:x", "y"), 1, 1) == "created"
    assert len(await table.tasks()) == 1
