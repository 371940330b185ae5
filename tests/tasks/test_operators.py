"""Operators see tasks and cancel them: ``mcp-cancellation inspect`` lists a table's tasks
(running and ended) beside its requests, and ``mcp-cancellation cancel`` stops a running
task on whichever worker runs it."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from ..integrations._helpers import cli
from ..support import RedisClusterServers, RedisServer
from ._workers import Caller, TaskWorker
from .test_tasks import address, until_status

pytestmark = [pytest.mark.e2e, pytest.mark.redis]


async def _inspect_and_cancel(
    url: str, http: httpx.AsyncClient, partitions: int, worker: type[TaskWorker]
) -> None:
    prefix = f"tasks-{uuid.uuid4().hex[:8]}"
    options: dict[str, float] = {"partitions": partitions} if partitions > 1 else {}
    a = worker(url, prefix, **options)
    b = worker(url, prefix, **options)
    try:
        caller = Caller(http, address())
        finished = await caller.create(a.url, "sized", {"size": 2})
        await until_status(caller, b.url, finished, {"completed"})
        running = await caller.create(a.url, "stubborn", {"seconds": 120})
        await until_status(caller, b.url, running, {"working"})
        where = ["--redis", url, "--prefix", prefix, "--partitions", str(partitions)]

        code, out, err = await cli("inspect", *where, "--json")
        assert code == 0, err
        rows = {row["id"]: row for row in json.loads(out)["requests"]}
        assert rows[finished]["kind"] == "task"
        assert rows[finished]["status"] == "completed"
        assert rows[finished]["tool"] == "sized"
        assert rows[running]["kind"] == "task"
        assert rows[running]["status"] == "working"
        assert rows[running]["tool"] == "stubborn"
        assert rows[running]["scope"] == f"ip:{caller.address}"
        assert rows[running]["worker_alive"] is True
        code, out, err = await cli("inspect", *where, "--kind", "task", "--json")
        assert code == 0, err
        assert {row["kind"] for row in json.loads(out)["requests"]} == {"task"}
        assert {row["id"] for row in json.loads(out)["requests"]} >= {finished, running}
        code, out, err = await cli("inspect", *where, "--kind", "ip", "--json")
        assert code == 0, err
        assert {row["id"] for row in json.loads(out)["requests"]} >= {finished, running}
        code, out, err = await cli("inspect", *where, "--kind", "request", "--json")
        assert code == 0, err
        assert not {row["id"] for row in json.loads(out)["requests"]} & {finished, running}
        code, table, err = await cli("inspect", *where)
        assert code == 0, err
        assert "KIND" in table.splitlines()[0]
        assert "STATUS" in table.splitlines()[0]
        assert any(running in line and "task" in line for line in table.splitlines())

        scope = f"ip:{caller.address}"
        code, out, err = await cli(
            "cancel", *where, "--scope", scope, "--id", running, "--reason", "ops", "--json"
        )
        assert code == 0, err
        cancelled = json.loads(out)["cancelled"]
        assert [row["id"] for row in cancelled] == [running]
        assert cancelled[0]["kind"] == "task"  # as inspect names it
        ended = await until_status(caller, b.url, running, {"cancelled"}, within=20)
        assert ended["statusMessage"] == "ops"  # the operator's reason reaches the client
        code, out, err = await cli("inspect", *where, "--json")
        rows = {row["id"]: row for row in json.loads(out)["requests"]}
        assert rows[running]["worker_alive"] is None  # ended: no worker runs it any more
        assert rows[running]["reason"] == "ops"
    finally:
        a.stop()
        b.stop()


async def test_inspect_lists_tasks_and_cancel_stops_one(
    redis_server: RedisServer, http: httpx.AsyncClient, task_worker: type[TaskWorker]
) -> None:
    await _inspect_and_cancel(redis_server.url, http, 1, task_worker)


@pytest.mark.cluster
async def test_inspect_and_cancel_tasks_of_a_partitioned_table(
    redis_cluster: RedisClusterServers, http: httpx.AsyncClient, task_worker: type[TaskWorker]
) -> None:
    await _inspect_and_cancel(redis_cluster.url, http, 3, task_worker)
