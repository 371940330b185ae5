"""The task table on Redis (private): the ``TASK_*`` scripts' encoders and decoders.

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
from ._codec import split_netstrings, text

if TYPE_CHECKING:
    from ._storage import RedisStorage

__all__ = ["RedisTaskTable"]

#: Tasks the operators' view reads per page (each page its own bounded call).
LIST_PAGE = 500
#: The most tasks one ``TASK_REAP`` ends (a few milliseconds of Redis time at most).
REAP_BATCH = 200

_CREATED: dict[int, Created] = {1: "created", 0: "quota", 2: "full"}
_CLAIMED: dict[int, Claim] = {0: "running", 1: "restored", 2: "ended"}


def _flat(fields: Mapping[str, str]) -> list[str]:
    return [item for pair in fields.items() for item in pair]


def _now_ms() -> str:
    return str(int(time.time() * 1000))


class RedisTaskTable(TaskTable):
    """The tasks of one :class:`RedisStorage`'s table."""

    shared = True

    def __init__(self, storage: RedisStorage) -> None:
        super().__init__()
        self._storage = storage

    @property
    def _grace_ms(self) -> str:
        return str(int(self._storage.heartbeat_ttl * 1000))

    async def create(self, record: TaskRecord, quota: int | None, max_tasks: int | None) -> Created:
        argv: list[bytes | str] = [
            self._storage._prefix,
            record.scope,
            record.task_id,
            "" if quota is None else str(quota),
            "" if max_tasks is None else str(max_tasks),
            record.worker,
            *_flat(record.fields()),
        ]
        return _CREATED[int(await self._storage._run("TASK_CREATE", argv, "task"))]

    async def get(self, scope: str, task_id: str, dead_worker_error: str) -> TaskRecord | None:
        argv: list[bytes | str] = [
            self._storage._prefix,
            scope,
            task_id,
            self._grace_ms,
            dead_worker_error,
            _now_ms(),
            _message_of(dead_worker_error),
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

    async def claim(self, record: TaskRecord) -> Claim:
        argv: list[bytes | str] = [
            self._storage._prefix,
            record.scope,
            record.task_id,
            record.worker,
            *_flat(record.fields()),
        ]
        return _CLAIMED[int(await self._storage._run("TASK_CLAIM", argv, "task"))]

    async def reap(self, dead_worker_error: str) -> list[TaskRecord]:
        argv: list[bytes | str] = [
            self._storage._prefix,
            self._grace_ms,
            dead_worker_error,
            _now_ms(),
            str(REAP_BATCH),
            _message_of(dead_worker_error),
        ]
        reply = await self._storage._run("TASK_REAP", argv, "task")
        ended: list[TaskRecord] = []
        for i in range(0, len(reply) - 2, 3):
            scope, task_id = _member(reply[i])
            fields = {"tool": text(reply[i + 1]), "created": text(reply[i + 2])}
            fields["status"] = "failed"
            record = TaskRecord.from_fields(scope, task_id, fields)
            ended.append(dataclasses.replace(record, orphaned=True))
        return ended

    def pushed(self, data: bytes) -> None:
        """An answer pushed to this worker (``a`` then netstrings of scope and task id,
        lua/task_answer.lua): wake the tool waiting for it."""
        scope, task_id = split_netstrings(data[1:])
        self.wakeups.wake(text(scope), text(task_id))

    async def tasks(self) -> list[TaskRecord]:
        """Every task not expired, read a page at a time (each its own bounded call),
        without results: never one long command, however large the table."""
        client = self._storage.client
        index = self._storage.key("tasks")
        found: list[TaskRecord] = []
        offset = 0
        while True:

            async def read(start: int = offset) -> list[tuple[bytes, list[Any]]]:
                now_ms = int(time.time() * 1000)
                reply = await client.zrangebyscore(
                    index, now_ms, "+inf", start=start, num=LIST_PAGE
                )
                members = [m for m in reply if isinstance(m, bytes)]
                if not members:
                    return []
                pipe = client.pipeline(transaction=False)
                for m in members:
                    pipe.hmget(self._storage.key("task:") + m, list(LISTED))
                return list(zip(members, await pipe.execute(), strict=True))

            page = await self._storage._home.call(read, "task")
            for m, values in page:
                if values and values[1] is not None:  # (a task that expired meanwhile)
                    scope, task_id = _member(m)
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


def _pairs(reply: list[Any]) -> dict[str, str]:
    return {text(reply[i]): text(reply[i + 1]) for i in range(0, len(reply) - 1, 2)}


def _member(m: bytes) -> tuple[str, str]:
    """(scope, task id) of a row member ``<len>:<scope><id>``."""
    length, _, rest = m.partition(b":")
    size = int(length)
    return text(rest[:size]), text(rest[size:])
