"""The task table: the records of tasks (SEP-2663), kept by a storage beside its rows.

A record is keyed by (scope, task id), so a task of another scope is simply not found.
Its fields are strings (as Redis keeps them); :class:`TaskRecord` decodes them. The
transitions are docs/architecture.md's "Tasks" table: ``create`` (``working``), then
``update`` by the worker that runs the task (``input_required`` and back, then one of
the terminal statuses, after which nothing changes it), ``answer`` from any worker,
and expiry ``ttl_ms`` after creation. The memory table is here; the Redis one is in
``storage.redis``.
"""

from __future__ import annotations

import abc
import heapq
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "ACTIVE",
    "STATUSES",
    "TERMINAL",
    "MemoryTaskTable",
    "TaskRecord",
    "TaskTable",
]

#: Every status of a task, as SEP-2663 names them.
STATUSES = ("working", "input_required", "completed", "failed", "cancelled")
#: The statuses a task ends in; a task in one never changes again.
TERMINAL = frozenset({"completed", "failed", "cancelled"})
#: The statuses of a task whose work is running.
ACTIVE = frozenset({"working", "input_required"})

#: Field prefixes: an input request the task is waiting on, and its answer.
INPUT_PREFIX = "i:"
ANSWER_PREFIX = "a:"


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """One task as its table holds it. JSON values (``result``, ``error``, the input
    requests and answers) stay encoded: the table never parses them."""

    task_id: str
    scope: str
    tool: str
    status: str
    worker: str
    #: Wall-clock milliseconds (for the wire's timestamps only; expiry is the table's).
    created_ms: int
    updated_ms: int
    ttl_ms: int
    poll_ms: int
    message: str | None = None
    result: str | None = None
    error: str | None = None
    #: key -> encoded input request, while the task waits on it.
    inputs: Mapping[str, str] = field(default_factory=dict)
    #: key -> encoded answer, once a ``tasks/update`` gave one.
    answers: Mapping[str, str] = field(default_factory=dict)
    #: Set on the record a :meth:`TaskTable.get` returns when that read ended the task,
    #: its worker being dead (the reader reports the end: nobody else will).
    orphaned: bool = False

    def fields(self) -> dict[str, str]:
        """The record as the table's string fields."""
        out = {
            "tool": self.tool,
            "status": self.status,
            "worker": self.worker,
            "created": str(self.created_ms),
            "updated": str(self.updated_ms),
            "ttl": str(self.ttl_ms),
            "poll": str(self.poll_ms),
        }
        for name, value in (("message", self.message), ("result", self.result)):
            if value is not None:
                out[name] = value
        if self.error is not None:
            out["error"] = self.error
        out.update((INPUT_PREFIX + k, v) for k, v in self.inputs.items())
        out.update((ANSWER_PREFIX + k, v) for k, v in self.answers.items())
        return out

    @classmethod
    def from_fields(cls, scope: str, task_id: str, fields: Mapping[str, str]) -> TaskRecord:
        """A record from the table's string fields."""
        inputs = {k[2:]: v for k, v in fields.items() if k.startswith(INPUT_PREFIX)}
        answers = {k[2:]: v for k, v in fields.items() if k.startswith(ANSWER_PREFIX)}
        return cls(
            task_id=task_id,
            scope=scope,
            tool=fields.get("tool", ""),
            status=fields.get("status", "failed"),
            worker=fields.get("worker", ""),
            created_ms=int(fields.get("created", "0")),
            updated_ms=int(fields.get("updated", "0")),
            ttl_ms=int(fields.get("ttl", "0")),
            poll_ms=int(fields.get("poll", "0")),
            message=fields.get("message"),
            result=fields.get("result"),
            error=fields.get("error"),
            inputs=inputs,
            answers=answers,
        )


class TaskTable(abc.ABC):
    """Where a storage keeps its tasks: shared by every worker that shares its rows."""

    @abc.abstractmethod
    async def create(self, record: TaskRecord, quota: int | None) -> bool:
        """Record a new task; ``False`` (and nothing written) when its scope already has
        *quota* tasks that have not expired."""

    @abc.abstractmethod
    async def get(self, scope: str, task_id: str, dead_worker_error: str) -> TaskRecord | None:
        """The task, or ``None`` (unknown, expired, or another scope's). A task still
        active whose worker stopped heartbeating is first ended ``failed`` with
        *dead_worker_error* (a table that only one process uses has no such case)."""

    @abc.abstractmethod
    async def update(self, scope: str, task_id: str, fields: Mapping[str, str]) -> bool:
        """Write *fields* (and drop the ``i:``/``a:`` fields named with an empty value)
        on a task not yet ended; ``False`` when it is unknown or ended."""

    @abc.abstractmethod
    async def answer(self, scope: str, task_id: str, answers: Mapping[str, str]) -> bool:
        """Keep each answer whose key the task waits on and that has none yet (others are
        ignored), and make the task ``working`` again once every request it waits on is
        answered; ``False`` when the task is unknown."""

    @abc.abstractmethod
    async def tasks(self) -> list[TaskRecord]:
        """Every task not expired (the operators' view)."""


class MemoryTaskTable(TaskTable):
    """Tasks in this process (the memory storage's): expired ones go at the next call.
    A heap of expiries and a count per scope keep a creation O(log n), however many
    tasks the process keeps."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._tasks: dict[tuple[str, str], tuple[float, dict[str, str]]] = {}
        self._expiries: list[tuple[float, str, str]] = []  # a heap: (expiry, scope, id)
        self._per_scope: dict[str, int] = {}

    def _prune(self, now: float) -> None:
        expiries = self._expiries
        while expiries and expiries[0][0] <= now:
            expiry, scope, task_id = heapq.heappop(expiries)
            entry = self._tasks.get((scope, task_id))
            if entry is None or entry[0] != expiry:
                continue
            del self._tasks[(scope, task_id)]
            left = self._per_scope[scope] - 1
            if left:
                self._per_scope[scope] = left
            else:
                del self._per_scope[scope]

    async def create(self, record: TaskRecord, quota: int | None) -> bool:
        now = self._clock()
        key = (record.scope, record.task_id)
        with self._lock:
            self._prune(now)
            count = self._per_scope.get(record.scope, 0)
            if quota is not None and count >= quota:
                return False
            expiry = now + record.ttl_ms / 1000
            if key not in self._tasks:  # (an id recorded again replaces its record)
                self._per_scope[record.scope] = count + 1
            self._tasks[key] = (expiry, record.fields())
            heapq.heappush(self._expiries, (expiry, *key))
            return True

    def _live(self, scope: str, task_id: str) -> dict[str, str] | None:
        entry = self._tasks.get((scope, task_id))
        if entry is None or entry[0] <= self._clock():
            return None
        return entry[1]

    async def get(self, scope: str, task_id: str, dead_worker_error: str) -> TaskRecord | None:
        with self._lock:
            fields = self._live(scope, task_id)
            return None if fields is None else TaskRecord.from_fields(scope, task_id, fields)

    async def update(self, scope: str, task_id: str, fields: Mapping[str, str]) -> bool:
        with self._lock:
            current = self._live(scope, task_id)
            if current is None or current.get("status") in TERMINAL:
                return False
            for name, value in fields.items():
                if value == "" and name[:2] in (INPUT_PREFIX, ANSWER_PREFIX):
                    current.pop(name, None)
                else:
                    current[name] = value
            return True

    async def answer(self, scope: str, task_id: str, answers: Mapping[str, str]) -> bool:
        with self._lock:
            current = self._live(scope, task_id)
            if current is None:
                return False
            for key, value in answers.items():
                if INPUT_PREFIX + key in current and ANSWER_PREFIX + key not in current:
                    current[ANSWER_PREFIX + key] = value
            waiting = [
                name
                for name in current
                if name.startswith(INPUT_PREFIX) and ANSWER_PREFIX + name[2:] not in current
            ]
            if current.get("status") == "input_required" and not waiting:
                current["status"] = "working"
            return True

    async def tasks(self) -> list[TaskRecord]:
        with self._lock:
            self._prune(self._clock())
            return [
                TaskRecord.from_fields(scope, task_id, dict(fields))
                for (scope, task_id), (_, fields) in self._tasks.items()
            ]
