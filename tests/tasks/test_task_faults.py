"""Tasks under faults, on real uvicorn workers and a real redis-server: a paused or
blocked worker, a lost table, input waits that must cost Redis nothing, a table filled by
many scopes, a TTL shorter than the tool, a cancellation racing a task's end, and a
rolling restart. Every task reaches exactly one truthful end, counted once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from redis.asyncio import Redis

from mcp_cancellation.storage.redis import RedisStorage
from mcp_cancellation.storage.redis._contracts import (
    CleanupCall,
    CleanupReply,
    Orphaning,
    TaskReapCall,
)
from mcp_cancellation.storage.redis._scripts import source
from mcp_cancellation.storage.redis._table import Keys, table_prefix

from ..support import RedisServer, async_wait_until
from ._workers import Caller, TaskWorker
from .test_tasks import address, until_status

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

DEAD = "The worker running this task stopped."
STOPPED = "The server stopped before the task finished."


class Pair:
    """Two task workers on one table (and a raw client of their Redis)."""

    #: The worker class of the test's flavor (set by the autouse fixture below).
    kind: type[TaskWorker] = TaskWorker

    def __init__(self, url: str, **options: float) -> None:
        self.redis_url = url
        self.prefix = f"tf-{uuid.uuid4().hex[:8]}"
        self.options = options
        self.workers: list[TaskWorker] = []
        self.a = self.start()
        self.b = self.start()

    def start(self) -> TaskWorker:
        worker = self.kind(self.redis_url, self.prefix, **self.options)
        self.workers.append(worker)
        return worker

    def stop(self) -> None:
        for worker in self.workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.process.pid, signal.SIGCONT)
            worker.stop()


@pytest.fixture(autouse=True)
def _flavor(task_worker: type[TaskWorker], monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test of this module runs against both servers."""
    monkeypatch.setattr(Pair, "kind", task_worker)


@pytest.fixture
def markers(redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """The tools' stop markers go to the session's Redis (``_app.mark_stopped``)."""
    monkeypatch.setenv("MCP_BENCH_MARKER_URL", redis_server.url)
    return redis_server.url


@pytest.fixture
async def raw(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


async def _scrape(http: httpx.AsyncClient, worker: TaskWorker) -> str:
    return (await http.get(f"{worker.url}/metrics")).text


def ended_count(texts: list[str], tool: str) -> float:
    """``tasks_ended_total`` of *tool*, every status, summed over the workers' scrapes."""
    total = 0.0
    pattern = re.compile(
        r'^mcp_cancellation_tasks_ended_total\{[^}]*tool="' + tool + r'"[^}]*\} (\S+)$', re.M
    )
    for text in texts:
        total += sum(float(v) for v in pattern.findall(text))
    return total


async def test_a_paused_worker_s_task_fails_once_and_its_tool_stops_when_it_resumes(
    redis_server: RedisServer, http: httpx.AsyncClient, markers: str, raw: Redis
) -> None:
    workers = Pair(redis_server.url, heartbeat_ttl=1.0, kill_after=0.5)
    try:
        a, b = workers.a, workers.b
        caller = Caller(http, address())
        marker = f"stop-{uuid.uuid4().hex}"
        args = {"n": 100_000, "step": 0.01, "marker": marker}  # 1 000 s if never stopped
        task_id = await caller.create(a.url, "slow_count", args)
        await until_status(caller, b.url, task_id, {"working"})
        before = [await _scrape(http, w) for w in (a, b)]
        os.kill(a.process.pid, signal.SIGSTOP)
        try:
            failed = await until_status(caller, b.url, task_id, {"failed"}, within=15)
        finally:
            os.kill(a.process.pid, signal.SIGCONT)
        assert failed["error"]["message"] == DEAD
        assert failed["statusMessage"] == DEAD
        # Back, the worker learns at once that its task was failed and stops its tool.
        await async_wait_until(lambda: raw.exists(marker), within=15)
        again = await caller.get(a.url, task_id)
        assert again["status"] == "failed"
        assert again["error"]["message"] == DEAD
        after = [await _scrape(http, w) for w in (a, b)]
        assert ended_count(after, "slow_count") - ended_count(before, "slow_count") == 1
        assert "had already ended" in a.output() or "was ended while" in a.output()
    finally:
        workers.stop()


@pytest.mark.parametrize(
    ("tool", "seconds", "text"),
    [("blocking", 4, "blocked 4s"), ("holding", 3.5, "held 3.5s")],
    ids=["blocked-loop", "held-interpreter-lock"],
)
async def test_a_busy_worker_past_the_heartbeat_ttl_is_not_taken_for_dead(
    redis_server: RedisServer, http: httpx.AsyncClient, tool: str, seconds: float, text: str
) -> None:
    # Its tool blocks the event loop (a sync client, CPU work), or holds the interpreter
    # lock in one C call (then no thread of the worker runs): for several heartbeat TTLs,
    # yet its task never reads failed, and ends once, completed.
    workers = Pair(redis_server.url, heartbeat_ttl=1.0)
    try:
        a, b = workers.a, workers.b
        caller = Caller(http, address())
        before = [await _scrape(http, w) for w in (a, b)]
        task_id = await caller.create(a.url, tool, {"seconds": seconds})
        seen: set[str] = set()

        async def done() -> bool:
            status = (await caller.get(b.url, task_id))["status"]
            seen.add(status)
            return status in ("completed", "failed", "cancelled")

        await async_wait_until(done, within=20, interval=0.1)
        ended = await caller.get(b.url, task_id)
        assert ended["status"] == "completed", ended
        assert ended["result"]["content"][0]["text"] == text
        assert seen <= {"working", "completed"}, seen
        after = [await _scrape(http, w) for w in (a, b)]
        assert ended_count(after, tool) - ended_count(before, tool) == 1
    finally:
        workers.stop()


async def test_after_flushall_running_tasks_read_and_cancel_again(
    redis_server: RedisServer, http: httpx.AsyncClient, raw: Redis
) -> None:
    workers = Pair(redis_server.url, heartbeat_ttl=1.0)
    try:
        a, b = workers.a, workers.b
        caller = Caller(http, address())
        task_id = await caller.create(a.url, "slow_count", {"n": 100_000, "step": 0.01})
        await until_status(caller, b.url, task_id, {"working"})
        await raw.flushall()

        async def readable() -> bool:
            answer = await caller.rpc(b.url, "tasks/get", {"taskId": task_id})
            return bool(answer.get("result", {}).get("status") == "working")

        await async_wait_until(readable, within=15, interval=0.1)
        await caller.rpc(b.url, "tasks/cancel", {"taskId": task_id})
        cancelled = await until_status(caller, b.url, task_id, {"cancelled"}, within=10)
        assert "error" not in cancelled
    finally:
        workers.stop()


async def test_after_a_redis_restart_running_tasks_read_cancel_and_end_again(
    http: httpx.AsyncClient,
) -> None:
    with RedisServer() as server:  # no persistence: the restart loses the table
        workers = Pair(server.url, heartbeat_ttl=1.0)
        try:
            a, b = workers.a, workers.b
            caller = Caller(http, address())
            cancel_me = await caller.create(a.url, "slow_count", {"n": 100_000, "step": 0.01})
            finish = await caller.create(b.url, "stubborn", {"seconds": 4})
            await until_status(caller, b.url, cancel_me, {"working"})
            server.kill()
            server.start()

            async def readable(task_id: str) -> bool:
                answer = await caller.rpc(b.url, "tasks/get", {"taskId": task_id})
                return bool(answer.get("result", {}).get("status") in ("working", "completed"))

            await async_wait_until(lambda: readable(cancel_me), within=20, interval=0.1)
            await caller.rpc(a.url, "tasks/cancel", {"taskId": cancel_me})
            await until_status(caller, b.url, cancel_me, {"cancelled"}, within=10)
            await async_wait_until(lambda: readable(finish), within=20, interval=0.1)
            done = await until_status(caller, a.url, finish, {"completed"}, within=15)
            assert done["result"]["content"][0]["text"] == "done anyway"
        finally:
            workers.stop()


async def test_a_hundred_tasks_waiting_for_input_cost_redis_nothing(
    http: httpx.AsyncClient,
) -> None:
    with RedisServer() as server:
        workers = Pair(server.url, quota=200)
        client = Redis.from_url(server.url)
        try:
            a, b = workers.a, workers.b
            caller = Caller(http, address())

            async def rate() -> float:
                """Commands Redis served per second over a 4 s window (nothing is waited
                for in it: the window is what is measured)."""
                start, started = await commands(), time.monotonic()
                await asyncio.sleep(4.0)
                return (await commands() - start - 1) / (time.monotonic() - started)

            async def commands() -> int:
                stats = await client.info("stats")
                return int(stats["total_commands_processed"])

            for worker in (a, b):  # both workers have run a task: their loops all run
                await until_status(
                    caller,
                    b.url,
                    await caller.create(worker.url, "sized", {"size": 1}),
                    {"completed"},
                )
            idle = await rate()
            ids = [await caller.create(a.url, "ask_name", {}) for _ in range(100)]
            for task_id in ids:
                await until_status(caller, b.url, task_id, {"input_required"})
            waiting = await rate()
            # The same as two idle workers (heartbeats, janitors, reapers: a few commands a
            # second either way, as their timers fall in one window or the other); polling
            # for the answers cost 100 x 20 = 2 000 scripts a second more.
            assert waiting - idle < 20, (idle, waiting)
            # Every answer still reaches its tool, pushed to the worker that runs it.
            for task_id in ids[:10]:
                for name in ("Al", "Bo"):
                    asking = await until_status(caller, b.url, task_id, {"input_required"})
                    (key,) = asking["inputRequests"]
                    answer = {key: {"action": "accept", "content": {"name": name}}}
                    await caller.rpc(
                        b.url, "tasks/update", {"taskId": task_id, "inputResponses": answer}
                    )
                    await async_wait_until(
                        lambda t=task_id, k=key: _answered(caller, b.url, t, k), within=10
                    )
                done = await until_status(caller, b.url, task_id, {"completed"})
                assert done["result"]["content"][0]["text"] == "Al & Bo"
        finally:
            await client.aclose()
            workers.stop()


async def _answered(caller: Caller, url: str, task_id: str, key: str) -> bool:
    task = await caller.get(url, task_id)
    return key not in task.get("inputRequests", {})


async def test_a_table_filled_by_many_scopes_refuses_past_max_tasks(
    redis_server: RedisServer, http: httpx.AsyncClient
) -> None:
    workers = Pair(redis_server.url, quota=3, max_tasks=5)
    try:
        a, b = workers.a, workers.b
        before = await _scrape(http, a) + await _scrape(http, b)
        created: list[tuple[Caller, str]] = []
        plain = 0
        for _ in range(4):
            caller = Caller(http, address())
            for _ in range(3):
                call = {"name": "stubborn", "arguments": {"seconds": 0.2}}
                answer = await caller.rpc(a.url, "tools/call", call)
                result = answer["result"]
                if result.get("resultType") == "task":
                    created.append((caller, result["taskId"]))
                else:
                    assert result["content"][0]["text"] == "done anyway"  # run plain
                    plain += 1
        assert len(created) == 5
        assert plain == 7
        after = await _scrape(http, a) + await _scrape(http, b)
        full = ("mcp_cancellation_tasks_rejected_total{", 'reason="full"', 'scope_kind="ip"')
        assert _value(after, full) - _value(before, full) == 7
        # The ended tasks hold the table for their TTL; the bound is the table's, not a
        # scope's: a new scope is refused too.
        late = Caller(http, address())
        answer = await late.rpc(b.url, "tools/call", {"name": "sized", "arguments": {"size": 2}})
        assert answer["result"]["content"][0]["text"] == "xx"
    finally:
        workers.stop()


def _value(text: str, series: tuple[str, ...]) -> float:
    """The sum of the samples whose line starts with ``series[0]`` and holds the rest."""
    name, *labels = series
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and all(label in line for label in labels):
            total += float(line.split()[-1])
    return total


async def test_a_task_whose_ttl_is_shorter_than_its_tool_lives_and_holds_its_quota(
    redis_server: RedisServer, http: httpx.AsyncClient
) -> None:
    workers = Pair(redis_server.url, ttl=0.5, quota=1)
    try:
        a, b = workers.a, workers.b
        caller = Caller(http, address())
        task_id = await caller.create(a.url, "stubborn", {"seconds": 2.5})
        started = time.monotonic()
        await asyncio.sleep(1.0)  # twice its TTL, while its tool runs
        assert (await caller.get(b.url, task_id))["status"] == "working"
        answer = await caller.rpc(b.url, "tools/call", {"name": "sized", "arguments": {"size": 1}})
        assert answer["result"]["content"][0]["text"] == "x"  # the quota holds: run plain
        done = await until_status(caller, b.url, task_id, {"completed"})
        assert time.monotonic() - started >= 2.4
        assert done["result"]["content"][0]["text"] == "done anyway"

        async def gone() -> bool:
            reply = await caller.rpc(b.url, "tasks/get", {"taskId": task_id})
            return bool(reply.get("error", {}).get("code") == -32602)

        await async_wait_until(gone, within=10, interval=0.05)
        await caller.create(b.url, "sized", {"size": 1})  # the quota is free again
    finally:
        workers.stop()


async def test_a_cancel_racing_a_task_s_end_leaves_no_row_behind(
    redis_server: RedisServer, http: httpx.AsyncClient
) -> None:
    workers = Pair(redis_server.url, quota=100)
    observer = RedisStorage.from_url(redis_server.url, prefix=workers.prefix, operator=True)
    try:
        a, b = workers.a, workers.b
        caller = Caller(http, address())
        scope = f"ip:{caller.address}"
        ids: list[str] = []
        for i in range(40):
            task_id = await caller.create(a.url, "sized", {"size": 1})
            ids.append(task_id)
            if i % 2:
                await asyncio.sleep(0.001 * (i % 7))  # land at different points of the run
            await caller.rpc(b.url, "tasks/cancel", {"taskId": task_id})
        for task_id in ids:
            ended = await until_status(caller, b.url, task_id, {"completed", "cancelled"})
            assert ended["status"] in ("completed", "cancelled")

        async def no_rows() -> bool:
            stats = await observer.stats()
            return stats.rows.get(scope, 0) == 0 and stats.in_flight.get(scope, 0) == 0

        await async_wait_until(no_rows, within=10)
    finally:
        await observer.aclose()
        workers.stop()


async def test_a_rolling_restart_leaves_no_task_working(
    redis_server: RedisServer, http: httpx.AsyncClient
) -> None:
    # A heartbeat TTL far longer than the test: only the shutdown can end these tasks.
    workers = Pair(redis_server.url, heartbeat_ttl=120, quota=20, drain_timeout=0.5, kill_after=0.5)
    try:
        caller = Caller(http, address())
        for old in (workers.a, workers.b):
            tasks = {
                "cooperative": await caller.create(old.url, "slow_count", {"n": 100_000}),
                "stubborn": await caller.create(old.url, "stubborn", {"seconds": 600}),
                "quick": await caller.create(old.url, "sized", {"size": 3}),
            }
            other = workers.b if old is workers.a else workers.a
            await until_status(caller, other.url, tasks["quick"], {"completed"})
            started = time.monotonic()
            old.process.terminate()  # SIGTERM, as a rolling deploy does
            old.process.wait(timeout=30)
            assert time.monotonic() - started < 10
            for name in ("cooperative", "stubborn"):
                ended = await caller.get(other.url, tasks[name])
                assert ended["status"] == "failed", (name, ended)
                assert ended["error"]["message"] == STOPPED
                assert ended["statusMessage"] == STOPPED
            assert (await caller.get(other.url, tasks["quick"]))["status"] == "completed"
            workers.workers.remove(old)
            old.stop()
            replacement = workers.start()
            if old is workers.a:
                workers.a = replacement
            else:
                workers.b = replacement
            listed = await caller.get(replacement.url, tasks["cooperative"])
            assert listed["status"] == "failed"
    finally:
        workers.stop()


async def test_a_fenced_tool_is_interrupted_at_once_not_after_kill_after(
    redis_server: RedisServer, http: httpx.AsyncClient, markers: str, raw: Redis
) -> None:
    # A tool that awaits and never looks at its cancellation, due to do its side effect
    # 9 s after it starts; its worker frozen past its heartbeat, its task failed; back,
    # the worker stops the tool at once: kill_after (10 s here) does not apply, and the
    # side effect never lands after the client read "failed".
    workers = Pair(redis_server.url, heartbeat_ttl=1.0, kill_after=10.0)
    try:
        a, b = workers.a, workers.b
        caller = Caller(http, address())
        marker = f"fenced-{uuid.uuid4().hex}"
        started = time.monotonic()
        task_id = await caller.create(a.url, "stubborn", {"seconds": 9, "marker": marker})
        await until_status(caller, b.url, task_id, {"working"})
        os.kill(a.process.pid, signal.SIGSTOP)
        try:
            failed = await until_status(caller, b.url, task_id, {"failed"}, within=15)
        finally:
            os.kill(a.process.pid, signal.SIGCONT)
        assert failed["statusMessage"] == DEAD
        assert time.monotonic() - started < 7, "too slow a machine for this test's timing"
        await async_wait_until(lambda: "was ended while" in a.output(), within=10)
        # (The side effect was due 9 s after the start: give it that, and a second more.)
        await asyncio.sleep(max(0.0, started + 10 - time.monotonic()))
        assert not await raw.exists(marker), "the fenced tool's side effect landed"
        assert (await caller.get(b.url, task_id))["status"] == "failed"
    finally:
        workers.stop()


async def _judge_right_after_a_stall(url: str, prefix: str, seconds: float) -> tuple[int, int]:
    """Stall Redis *seconds* with ``DEBUG SLEEP``, and judge the workers (``TASK_REAP``,
    then ``CLEANUP``, as another worker's reaper and janitor would) in the same pipeline:
    Redis runs them right after the sleep, before any worker could beat again. The tasks
    they ended and the owners they swept."""
    client = Redis.from_url(url)
    try:
        keys = Keys(table_prefix(prefix))
        reap = TaskReapCall(Orphaning("1000", "dead", "0", "dead", 60_000), 100)
        cleanup = CleanupCall("a-judge", None, 100, "1000")
        pipe = client.pipeline(transaction=False)
        pipe.execute_command("DEBUG", "SLEEP", str(seconds))
        pipe.eval(source("TASK_REAP"), 1, keys.scopes, *reap.argv(keys.prefix))
        pipe.eval(source("CLEANUP"), 1, keys.scopes, *cleanup.argv(keys.prefix))
        _, reaped, cleaned = await pipe.execute()
        return len(TaskReapCall.decode(reaped)), CleanupReply.decode(cleaned).in_flight_removed
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    ("how", "stall"), [("sigstop", 2.5), ("sigstop", 6.0), ("debug-sleep", 2.5)]
)
async def test_a_redis_stall_past_the_heartbeat_ttl_fails_no_live_worker_s_task(
    http: httpx.AsyncClient, how: str, stall: float
) -> None:
    # redis-server itself stalls (SIGSTOP, DEBUG SLEEP: a slow fork, a failover, a paused
    # VM) for several heartbeat TTLs while six tasks run on two healthy workers, some of
    # them due to end during the stall: by Redis's clock every heartbeat lapsed, yet the
    # table was not running, so no worker is dead, even to a judge that runs first when
    # Redis answers again. Every task ends completed, and each end is counted once, those
    # whose write timed out during the stall too.
    with RedisServer("--enable-debug-command", "yes") as server:
        workers = Pair(server.url, heartbeat_ttl=1.0)
        try:
            a, b = workers.a, workers.b
            tasks: list[tuple[Caller, str]] = []
            callers = [Caller(http, address()), Caller(http, address())]  # (3 tasks a scope)
            for i in range(6):
                caller = callers[i // 3]
                worker = (a, b)[i % 2]
                steps = 30 + 60 * i  # ends from 0.6 s to 7 s after the stall starts
                args = {"n": steps, "step": 0.02}
                tasks.append((caller, await caller.create(worker.url, "slow_count", args)))
            before = [await _scrape(http, w) for w in (a, b)]
            if how == "debug-sleep":
                assert await _judge_right_after_a_stall(server.url, workers.prefix, stall) == (0, 0)
            else:
                assert server.process is not None
                os.kill(server.process.pid, signal.SIGSTOP)
                try:
                    await asyncio.sleep(stall)  # (the fault itself: Redis stopped this long)
                finally:
                    os.kill(server.process.pid, signal.SIGCONT)
            ends: dict[str, dict[str, object]] = {}

            async def all_ended() -> bool:
                for caller, task_id in tasks:
                    if task_id not in ends:
                        found = await caller.get(b.url, task_id)
                        assert found["status"] != "failed", found
                        if found["status"] in ("completed", "cancelled"):
                            ends[task_id] = found
                return len(ends) == len(tasks)

            await async_wait_until(all_ended, within=60, interval=0.2)
            assert {found["status"] for found in ends.values()} == {"completed"}

            async def counted() -> bool:
                after = [await _scrape(http, w) for w in (a, b)]
                return ended_count(after, "slow_count") - ended_count(before, "slow_count") >= 6

            await async_wait_until(counted, within=30, interval=0.2)
            after = [await _scrape(http, w) for w in (a, b)]
            assert ended_count(after, "slow_count") - ended_count(before, "slow_count") == 6
        finally:
            workers.stop()
