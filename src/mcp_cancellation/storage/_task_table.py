"""The task table: the records of tasks (SEP-2663), kept by a storage beside its rows.

A record is keyed by (scope, task id), so a task of another scope is simply not found.
Its fields are strings (as Redis keeps them); :class:`TaskRecord` decodes them. The
transitions are docs/architecture.md's "Tasks" table: ``create`` (``working``), then
``update`` by the worker that runs the task (``input_required`` and back, then one of
the terminal statuses, after which nothing changes it), ``answer`` from any worker
(which wakes the waiting tool: :meth:`TaskTable.watch`), ``claim`` by the running worker
after a resync, ``reap`` of a dead worker's tasks, and expiry ``ttl_ms`` after the end:
a running task never expires. The memory table is here; the Redis one is in
``storage.redis``.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import heapq
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "ACTIVE",
    "ENDER",
    "LISTED",
    "STATUSES",
    "TERMINAL",
    "Claim",
    "Created",
    "MemoryTaskTable",
    "TaskRecord",
    "TaskTable",
    "Wakeups",
]

#: Every status of a task, as SEP-2663 names them.
STATUSES = ("working", "input_required", "completed", "failed", "cancelled")
#: The statuses a task ends in; a task in one never changes again.
TERMINAL = frozenset({"completed", "failed", "cancelled"})
#: The field an end carries its writer's id in: the same end written again (a retry
#: after a call that timed out yet ran) is taken as written, and reported once.
ENDER = ".ender"
#: The statuses of a task whose work is running.
ACTIVE = frozenset({"working", "input_required"})

#: What :meth:`TaskTable.create` did: ``created``, or refused because the scope holds its
#: quota of tasks (``quota``) or the table its ``max_tasks`` (``full``).
Created = Literal["created", "quota", "full"]
#: What :meth:`TaskTable.claim` found: the task runs here (``running``), it was gone and is
#: written again (``restored``), or it ended meanwhile (``ended``: stop, write nothing).
Claim = Literal["running", "restored", "ended"]

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


class Wakeups:
    """The events of the tools waiting for their task's answers, set when an answer
    arrives (from any thread: each is set on its own loop)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[tuple[str, str], set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]]
        self._events = {}

    @contextlib.contextmanager
    def watch(self, scope: str, task_id: str) -> Iterator[asyncio.Event]:
        entry = (asyncio.get_running_loop(), asyncio.Event())
        key = (scope, task_id)
        with self._lock:
            self._events.setdefault(key, set()).add(entry)
        try:
            yield entry[1]
        finally:
            with self._lock:
                waiting = self._events.get(key)
                if waiting is not None:
                    waiting.discard(entry)
                    if not waiting:
                        del self._events[key]

    def wake(self, scope: str, task_id: str) -> None:
        """Wake the tools waiting on the task's answers."""
        with self._lock:
            entries = list(self._events.get((scope, task_id), ()))
        _set(entries)

    def wake_all(self) -> None:
        """Wake every waiting tool (answers may have been missed: each reads again)."""
        with self._lock:
            entries = [entry for waiting in self._events.values() for entry in waiting]
        _set(entries)


def _set(entries: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]) -> None:
    for loop, event in entries:
        with contextlib.suppress(RuntimeError):  # a loop that closed meanwhile
            loop.call_soon_threadsafe(event.set)


class TaskTable(abc.ABC):
    """Where a storage keeps its tasks: shared by every worker that shares its rows."""

    #: Whether other processes share the table (their workers may die: see :meth:`reap`).
    shared = False

    def __init__(self) -> None:
        self.wakeups = Wakeups()
        self._resync_listeners: list[Callable[[], None]] = []

    @abc.abstractmethod
    async def create(self, record: TaskRecord, quota: int | None, max_tasks: int | None) -> Created:
        """Record a new task, running; refused (nothing written) when its scope already
        holds *quota* tasks, or the table *max_tasks* (running, or ended and not expired)."""

    @abc.abstractmethod
    async def get(self, scope: str, task_id: str, orphan_error: str) -> TaskRecord | None:
        """The task, or ``None`` (unknown, expired, or another scope's). A task still
        active whose worker stopped heartbeating is first ended ``failed`` with
        *orphan_error*, and returned ``orphaned`` (a table that only one process uses
        has no such case)."""

    @abc.abstractmethod
    async def write(self, scope: str, task_id: str, fields: Mapping[str, str]) -> bool:
        """Write *fields* (and drop the ``i:``/``a:`` fields named with an empty value)
        on a task not yet ended; ``False`` when it is unknown or ended (nothing written).
        A terminal ``status`` ends the task: it expires ``ttl_ms`` from now. An end
        written again with the same :data:`ENDER` field is ``True`` (written, once)."""

    @abc.abstractmethod
    async def answer(self, scope: str, task_id: str, answers: Mapping[str, str]) -> bool:
        """Keep each answer whose key the task waits on and that has none yet (others are
        ignored), make the task ``working`` again once every request it waits on is
        answered, and wake its waiting tool on whichever worker runs it; ``False`` when
        the task is unknown."""

    async def claim(self, record: TaskRecord) -> Claim:
        """After a resync, the worker running *record*'s task claims it again: written
        anew if the table lost it. A table that one process keeps never loses its tasks."""
        found = await self.get(record.scope, record.task_id, "")
        return "running" if found is not None and found.status in ACTIVE else "ended"

    async def reap(self, orphan_error: str) -> list[TaskRecord]:
        """End ``failed`` the running tasks of workers that stopped heartbeating (a table
        that one process keeps has none); the tasks this call ended."""
        return []

    @abc.abstractmethod
    async def tasks(self) -> list[TaskRecord]:
        """Every task not expired, without its result, input requests or answers (the
        operators' view)."""

    def watch(self, scope: str, task_id: str) -> contextlib.AbstractContextManager[asyncio.Event]:
        """``with table.watch(scope, id) as changed``: *changed* is set when an answer to
        the task arrives, or when answers may have been missed (a reconnect): the tool
        then reads the task again. Waiting costs the table nothing."""
        return self.wakeups.watch(scope, task_id)

    def on_resync(self, listener: Callable[[], None]) -> None:
        """Call *listener* (on the storage's loop) after each resync of this worker's
        state: its running tasks must then be claimed again (:meth:`claim`)."""
        self._resync_listeners.append(listener)

    def resynced(self) -> None:
        """Tell the listeners that this worker's state was resynced (for the storage)."""
        for listener in list(self._resync_listeners):
            listener()


class MemoryTaskTable(TaskTable):
    """Tasks in this process (the memory storage's): expired ones go at the next call.
    A heap of expiries and a count per scope keep a creation O(log n), however many
    tasks the process keeps. A running task's expiry is infinite until it ends."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._clock = clock
        self._lock = threading.Lock()
        self._tasks: dict[tuple[str, str], tuple[float, dict[str, str]]] = {}
        self._expiries: list[tuple[float, str, str]] = []  # a heap: (expiry, scope, id)
        self._per_scope: dict[str, int] = {}

    def running(self) -> dict[str, int]:
        """The tasks whose tool runs now, by tool (at once, from any thread)."""
        counts: dict[str, int] = {}
        with self._lock:
            for _, fields in self._tasks.values():
                if fields.get("status") in ACTIVE:
                    tool = fields.get("tool", "")
                    counts[tool] = counts.get(tool, 0) + 1
        return counts

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

    async def create(self, record: TaskRecord, quota: int | None, max_tasks: int | None) -> Created:
        key = (record.scope, record.task_id)
        with self._lock:
            self._prune(self._clock())
            count = self._per_scope.get(record.scope, 0)
            if quota is not None and count >= quota:
                return "quota"
            if max_tasks is not None and len(self._tasks) >= max_tasks:
                return "full"
            if key not in self._tasks:  # (an id recorded again replaces its record)
                self._per_scope[record.scope] = count + 1
            self._tasks[key] = (math.inf, record.fields())
            return "created"

    def _live(self, scope: str, task_id: str) -> dict[str, str] | None:
        entry = self._tasks.get((scope, task_id))
        if entry is None or entry[0] <= self._clock():
            return None
        return entry[1]

    async def get(self, scope: str, task_id: str, orphan_error: str) -> TaskRecord | None:
        with self._lock:
            fields = self._live(scope, task_id)
            return None if fields is None else TaskRecord.from_fields(scope, task_id, fields)

    async def write(self, scope: str, task_id: str, fields: Mapping[str, str]) -> bool:
        with self._lock:
            current = self._live(scope, task_id)
            if current is None:
                return False
            if current.get("status") in TERMINAL:
                return ENDER in fields and current.get(ENDER) == fields[ENDER]
            for name, value in fields.items():
                if value == "" and name[:2] in (INPUT_PREFIX, ANSWER_PREFIX):
                    current.pop(name, None)
                else:
                    current[name] = value
            if current.get("status") in TERMINAL:  # its end: it expires ttl from now
                expiry = self._clock() + max(1, int(current.get("ttl", "0"))) / 1000
                self._tasks[(scope, task_id)] = (expiry, current)
                heapq.heappush(self._expiries, (expiry, scope, task_id))
            return True

    async def answer(self, scope: str, task_id: str, answers: Mapping[str, str]) -> bool:
        with self._lock:
            current = self._live(scope, task_id)
            if current is None:
                return False
            kept = 0
            for key, value in answers.items():
                if INPUT_PREFIX + key in current and ANSWER_PREFIX + key not in current:
                    current[ANSWER_PREFIX + key] = value
                    kept += 1
            waiting = [
                name
                for name in current
                if name.startswith(INPUT_PREFIX) and ANSWER_PREFIX + name[2:] not in current
            ]
            if current.get("status") == "input_required" and not waiting:
                current["status"] = "working"
        if kept:
            self.wakeups.wake(scope, task_id)
        return True

    async def tasks(self) -> list[TaskRecord]:
        with self._lock:
            self._prune(self._clock())
            return [
                TaskRecord.from_fields(scope, task_id, _listed(fields))
                for (scope, task_id), (_, fields) in self._tasks.items()
            ]


#: The fields the operators' view reads (never a result, input or answer).
LISTED = ("tool", "status", "worker", "created", "updated", "ttl", "poll", "message")


def _listed(fields: Mapping[str, str]) -> dict[str, str]:
    return {name: fields[name] for name in LISTED if name in fields}
