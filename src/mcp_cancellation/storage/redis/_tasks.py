"""The task table on Redis (private): each operation one ``TASK_*`` script, through its
typed contract (:mod:`._contracts`), on the storage's :class:`~._table.Table`.

Keys (docs/architecture.md, "Tasks"): ``P task:<m>`` (a HASH per task, ``m`` the
request-row member of (scope, task id); no TTL while it runs, ``ttl`` from its end),
``P tasks:<scope>`` (the scope's task ids by expiry, ``+inf`` while running: its quota),
``P tasks`` (every task by expiry: the table's bound and the operators' view),
``P truns:<worker>`` (a worker's running tasks) and ``P trun`` (the workers that have
some). All share the table's hash tag, so a task lives on the node, and in the
partition, of its scope's rows, and ``TASK_GET`` can read its worker's heartbeat. Each
call is one script run: one round trip.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._task_table import LISTED, Claim, Created, TaskRecord, TaskTable
from ._codec import member, split_member, split_netstrings, text
from ._contracts import (
    Orphaning,
    TaskAnswerCall,
    TaskClaimCall,
    TaskCreateCall,
    TaskGetCall,
    TaskReapCall,
    TaskWriteCall,
)

if TYPE_CHECKING:
    from ._table import Table

__all__ = ["RedisTaskTable"]

#: Tasks the operators' view reads per page (each page its own bounded call).
LIST_PAGE = 500
#: How long an orphaned end handed to one worker to report is its alone (ms): one that
#: timed out before it heard of it is reported by another worker after this.
ORPHAN_LEASE_MS = 60_000
#: The most tasks one ``TASK_REAP`` ends (a few milliseconds of Redis time at most).
REAP_BATCH = 200


def _now_ms() -> str:
    return str(int(time.time() * 1000))


class RedisTaskTable(TaskTable):
    """The tasks of one Redis table; a worker counts as dead once its heartbeat
    (``heartbeat_ttl``) is gone."""

    shared = True

    def __init__(self, table: Table, heartbeat_ms: str) -> None:
        super().__init__()
        self._table = table
        self._heartbeat_ms = heartbeat_ms
        #: The orphaned ends this worker reported, to acknowledge with its next reap.
        self._reported: list[bytes] = []

    def _orphaning(self, orphan_error: str) -> Orphaning:
        """How this worker's calls end a dead worker's task (now)."""
        return Orphaning(
            self._heartbeat_ms, orphan_error, _now_ms(), _message_of(orphan_error), ORPHAN_LEASE_MS
        )

    async def _run(self, name: str, call: Any) -> Any:
        return await self._table.run(name, call.argv(self._table.keys.prefix), "task")

    async def create(self, record: TaskRecord, quota: int | None, max_tasks: int | None) -> Created:
        fields = record.fields()
        call = TaskCreateCall(record.scope, record.task_id, quota, max_tasks, record.worker, fields)
        return TaskCreateCall.decode(await self._run("TASK_CREATE", call))

    async def get(self, scope: str, task_id: str, orphan_error: str) -> TaskRecord | None:
        call = TaskGetCall(scope, task_id, self._orphaning(orphan_error))
        found = TaskGetCall.decode(await self._run("TASK_GET", call))
        if found is None:
            return None
        ended, fields = found
        record = TaskRecord.from_fields(scope, task_id, fields)
        if not ended:
            return record
        self._reported.append(member(scope, task_id))  # (its caller reports it)
        return dataclasses.replace(record, orphaned=True)

    async def write(self, scope: str, task_id: str, fields: Mapping[str, str]) -> bool:
        call = TaskWriteCall(scope, task_id, fields)
        return TaskWriteCall.decode(await self._run("TASK_WRITE", call))

    async def answer(self, scope: str, task_id: str, answers: Mapping[str, str]) -> bool:
        call = TaskAnswerCall(scope, task_id, answers)
        return TaskAnswerCall.decode(await self._run("TASK_ANSWER", call))

    async def claim(self, record: TaskRecord) -> Claim:
        call = TaskClaimCall(record.scope, record.task_id, record.worker, record.fields())
        return TaskClaimCall.decode(await self._run("TASK_CLAIM", call))

    async def reap(self, orphan_error: str) -> list[TaskRecord]:
        acks = self._reported[:]
        call = TaskReapCall(self._orphaning(orphan_error), REAP_BATCH, acks)
        handed = TaskReapCall.decode(await self._run("TASK_REAP", call))
        del self._reported[: len(acks)]  # (acknowledged: a failed call keeps them)
        ended: list[TaskRecord] = []
        for m, scope, task_id, fields in handed:
            record = TaskRecord.from_fields(scope, task_id, {**fields, "status": "failed"})
            ended.append(dataclasses.replace(record, orphaned=True))
            self._reported.append(m)  # (its caller reports it: acknowledged next time)
        return ended

    def pushed(self, data: bytes) -> None:
        """An answer pushed to this worker (``a`` then netstrings of scope and task id,
        lua/task_answer.lua): wake the tool waiting for it."""
        scope, task_id = split_netstrings(data[1:])
        self.wakeups.wake(text(scope), text(task_id))

    async def tasks(self) -> list[TaskRecord]:
        """Every task not expired, read a page at a time (each its own bounded call),
        without results: never one long command, however large the table."""
        client, keys = self._table.client, self._table.keys
        found: list[TaskRecord] = []
        offset = 0
        while True:

            async def read(start: int = offset) -> list[tuple[bytes, list[Any]]]:
                now_ms = int(time.time() * 1000)
                reply = await client.zrangebyscore(
                    keys.tasks, now_ms, "+inf", start=start, num=LIST_PAGE
                )
                members = [m for m in reply if isinstance(m, bytes)]
                if not members:
                    return []
                pipe = client.pipeline(transaction=False)
                for m in members:
                    pipe.hmget(keys.task(m), list(LISTED))
                return list(zip(members, await pipe.execute(), strict=True))

            page = await self._table.home.call(read, "task")
            for m, values in page:
                if values and values[1] is not None:  # (a task that expired meanwhile)
                    scope, task_id = split_member(m)
                    fields = {n: text(v) for n, v in zip(LISTED, values, strict=True) if v}
                    found.append(TaskRecord.from_fields(scope, task_id, fields))
            if len(page) < LIST_PAGE:
                return found
            offset += LIST_PAGE


def _message_of(error: str) -> str:
    """The ``message`` of an encoded JSON-RPC error (its task's ``statusMessage``)."""
    try:
        message = json.loads(error).get("message") if error else None
    except (ValueError, AttributeError):
        message = None
    return message if isinstance(message, str) else ""
