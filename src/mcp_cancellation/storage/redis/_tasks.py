"""The task table on Redis (private): the ``TASK_*`` scripts' encoders and decoders.

Keys (docs/architecture.md, "Tasks"): ``P task:<m>`` (a HASH per task, ``m`` the
request-row member of (scope, task id), expiring with the task), ``P tasks:<scope>``
(the scope's tasks by expiry, for its quota) and ``P tasks`` (every task by expiry, for
the operators' view). All share the table's hash tag, so a task lives on the node, and in
the partition, of its scope's rows, and ``TASK_GET`` can read its worker's heartbeat.
Each call is one script run: one round trip.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._task_table import TaskRecord, TaskTable
from ._codec import text

if TYPE_CHECKING:
    from ._storage import RedisStorage

__all__ = ["RedisTaskTable"]

#: The most tasks the operators' view reads.
LIST_LIMIT = 10_000


def _flat(fields: Mapping[str, str]) -> list[str]:
    return [item for pair in fields.items() for item in pair]


class RedisTaskTable(TaskTable):
    """The tasks of one :class:`RedisStorage`'s table."""

    def __init__(self, storage: RedisStorage) -> None:
        self._storage = storage

    async def create(self, record: TaskRecord, quota: int | None) -> bool:
        argv: list[bytes | str] = [
            self._storage._prefix,
            record.scope,
            record.task_id,
            "" if quota is None else str(quota),
            str(record.ttl_ms),
            *_flat(record.fields()),
        ]
        return bool(await self._storage._run("TASK_CREATE", argv, "task"))

    async def get(self, scope: str, task_id: str, dead_worker_error: str) -> TaskRecord | None:
        grace_ms = str(int(self._storage.heartbeat_ttl * 1000))
        now_ms = str(int(time.time() * 1000))
        argv: list[bytes | str] = [
            self._storage._prefix,
            scope,
            task_id,
            grace_ms,
            dead_worker_error,
            now_ms,
        ]
        reply = await self._storage._run("TASK_GET", argv, "task")
        if not reply:
            return None
        ended, fields = reply
        record = TaskRecord.from_fields(scope, task_id, _pairs(fields))
        return dataclasses.replace(record, orphaned=True) if ended else record

    async def update(self, scope: str, task_id: str, fields: Mapping[str, str]) -> bool:
        argv: list[bytes | str] = [self._storage._prefix, scope, task_id, *_flat(fields)]
        return bool(await self._storage._run("TASK_SET", argv, "task"))

    async def answer(self, scope: str, task_id: str, answers: Mapping[str, str]) -> bool:
        argv: list[bytes | str] = [self._storage._prefix, scope, task_id, *_flat(answers)]
        return bool(await self._storage._run("TASK_ANSWER", argv, "task"))

    async def tasks(self) -> list[TaskRecord]:
        client = self._storage.client
        index = self._storage.key("tasks")

        async def read() -> list[TaskRecord]:
            now_ms = int(time.time() * 1000)
            reply = await client.zrangebyscore(index, now_ms, "+inf", start=0, num=LIST_LIMIT)
            members = [m for m in reply if isinstance(m, bytes)]
            if not members:
                return []
            pipe = client.pipeline(transaction=False)
            for m in members:
                pipe.hgetall(self._storage.key("task:") + m)
            found: list[TaskRecord] = []
            for m, fields in zip(members, await pipe.execute(), strict=True):
                if fields:
                    scope, task_id = _member(m)
                    decoded = {text(k): text(v) for k, v in fields.items()}
                    found.append(TaskRecord.from_fields(scope, task_id, decoded))
            return found

        result: list[TaskRecord] = await self._storage._home.call(read, "task")
        return result


def _pairs(reply: list[Any]) -> dict[str, str]:
    return {text(reply[i]): text(reply[i + 1]) for i in range(0, len(reply) - 1, 2)}


def _member(m: bytes) -> tuple[str, str]:
    """(scope, task id) of a row member ``<len>:<scope><id>``."""
    length, _, rest = m.partition(b":")
    size = int(length)
    return text(rest[:size]), text(rest[size:])
