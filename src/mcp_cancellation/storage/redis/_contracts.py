"""Each Lua script's contract, named (private): one encoder of its ARGV and one typed
decoder of its reply, in the order its header (``lua/<name>.lua``) lists them. No other
code builds a script's arguments or reads its reply by position.

The scripts and the table they keep are described once, in docs/architecture.md, "The
Redis table".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ...scope import scope_kind
from .._base import Limits, TableSummary
from .._task_table import Claim as TaskClaim
from .._task_table import Created
from ._codec import collect_evicted, decode_reason, encode_reason, split_member, text, to_bytes

__all__ = [
    "BeatCall",
    "AddCall",
    "Claim",
    "AddReply",
    "CleanupCall",
    "CleanupReply",
    "SyncCall",
    "SyncOp",
    "SyncReply",
    "Tracked",
    "WithdrawCall",
    "RemoveCall",
    "SummaryCall",
    "TaskAnswerCall",
    "TaskClaimCall",
    "TaskCreateCall",
    "Orphaning",
    "TaskGetCall",
    "TaskReapCall",
    "TaskWriteCall",
]

Argv = list[bytes | str]


def _optional(n: int | None) -> str:
    return "" if n is None else str(n)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AddCall:
    """``ADD``'s arguments (lua/add.lua)."""

    scope: str
    key: str
    reason: str | None
    in_flight: bool
    limits: Limits
    worker: str
    budget: int | None
    owed: int = 0
    partial: bytes = b""
    epoch: str
    grace_ms: str
    #: What the call marks as recovering: see :meth:`._journal.Journal.recovering`.
    recovering: bytes
    operator: bool
    waiter: str
    wait_ms: int

    def argv(self, prefix: bytes) -> Argv:
        return [
            prefix,
            to_bytes(self.scope),
            to_bytes(self.key),
            encode_reason(self.reason),
            "1" if self.in_flight else "0",
            _optional(self.limits.max_rows_per_scope),
            _optional(self.limits.max_rows),
            str(self.limits.eviction_batch),
            self.worker,
            _optional(self.budget),
            str(self.owed) if self.owed else "",
            self.partial,
            "1" if self.limits.shadow_quota else "0",
            self.epoch,
            self.grace_ms,
            self.recovering,
            "@operator" if self.operator else "@",
            self.waiter,
            str(max(1, self.wait_ms)),
        ]


@dataclasses.dataclass(frozen=True, slots=True)
class AddReply:
    """``ADD``'s reply: its outcome, the rows still owed of an eviction batch and the scope
    left part-way, whether it went past the quota (shadow mode), whether this worker's
    epoch is old (the table was lost: resync), and its evictions, appended to the caller's
    list by :meth:`collect`."""

    outcome: str
    owed: int
    partial: bytes
    over_quota: bool
    lost: bool
    _raw: Sequence[Any]

    @classmethod
    def decode(cls, reply: Sequence[Any]) -> AddReply:
        return cls(
            text(reply[0]),
            int(reply[2]),
            to_bytes(reply[3]),
            bool(int(reply[4])),
            bool(int(reply[6])),
            reply,
        )

    def collect(self, evicted: list[tuple[str, int]]) -> None:
        collect_evicted(evicted, list(self._raw))


@dataclasses.dataclass(frozen=True, slots=True)
class WithdrawCall:
    """``WITHDRAW``'s arguments (lua/withdraw.lua); its reply is whether a track claimed
    the waiting cancellation (:meth:`claimed`)."""

    scope: str
    key: str
    waiter: str
    #: How long an unclaimed one is kept as a lapsed cancellation (ms; 0: not kept).
    lapse_ms: int = 0
    #: The most lapsed cancellations its scope keeps (the oldest go first).
    kept: int = 0

    def argv(self, prefix: bytes) -> Argv:
        return [
            prefix,
            to_bytes(self.scope),
            to_bytes(self.key),
            self.waiter,
            str(self.lapse_ms),
            str(self.kept),
        ]

    @staticmethod
    def claimed(reply: Any) -> bool:
        return bool(int(reply))


@dataclasses.dataclass(frozen=True, slots=True)
class SyncOp:
    """One queued write as ``SYNC`` takes it: ``T`` track (with the request's age in µs
    when sent and its tool), ``U`` untrack, ``S`` sweep (a dead owner's), ``F`` finish."""

    op: str
    scope: str
    key: str
    owner: str
    age_us: int = 0
    tool: str | None = None

    def argv(self) -> Argv:
        op = self.op
        if op == "T":
            op += str(max(0, self.age_us)) + (":" + self.tool if self.tool else "")
        return [op, to_bytes(self.scope), to_bytes(self.key), to_bytes(self.owner)]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SyncCall:
    """``SYNC``'s arguments (lua/sync.lua)."""

    worker: str
    beat_ms: str
    epoch: str
    grace_ms: str
    full: bool
    #: What the call marks as recovering: see :meth:`._journal.Journal.recovering`.
    recovering: bytes
    layout: str
    ops: Sequence[SyncOp]

    def argv(self, prefix: bytes) -> Argv:
        argv: Argv = [
            prefix,
            self.worker,
            self.beat_ms,
            self.epoch,
            self.grace_ms,
            "1" if self.full else "0",
            self.recovering,
            self.layout,
        ]
        for op in self.ops:
            argv += op.argv()
        return argv


@dataclasses.dataclass(frozen=True, slots=True)
class SyncReply:
    """``SYNC``'s reply: the table's epoch, whether the epoch the worker knew is lost,
    whether its heartbeat was missing, what each track got (:class:`Tracked`, in the
    order of the tracks sent), and the rows a resync released as stale."""

    epoch: str
    lost: bool
    beat_missing: bool
    tracks: list[Tracked]
    stale: int

    @classmethod
    def decode(cls, reply: Sequence[Any]) -> SyncReply:
        pairs = reply[3:-1]
        return cls(
            text(reply[0]),
            bool(int(reply[1])),
            bool(int(reply[2])),
            [
                Tracked(
                    int(pairs[i]),
                    None if pairs[i + 1] is None else Claim(decode_reason(pairs[i + 1])),
                )
                for i in range(0, len(pairs), 2)
            ],
            int(reply[-1]),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Claim:
    """The cancellation that reaches an owner as it is tracked (a pending row or a waiting
    cancellation it claimed; for an owner tracked again, the request's mark), with its
    reason."""

    reason: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Tracked:
    """What one track got: its owner's *sequence* (the request's tracks are numbered in
    the order Redis took them; a mark cancels those at or before its own) and the
    :class:`Claim` that reaches it, if any."""

    sequence: int
    claim: Claim | None


@dataclasses.dataclass(frozen=True, slots=True)
class CleanupCall:
    """``CLEANUP``'s arguments (lua/cleanup.lua)."""

    worker: str
    ttl_us: int | None
    batch: int
    heartbeat_ms: str

    def argv(self, prefix: bytes) -> Argv:
        return [prefix, self.worker, _optional(self.ttl_us), str(self.batch), self.heartbeat_ms]


@dataclasses.dataclass(frozen=True, slots=True)
class BeatCall:
    """``BEAT``'s arguments (lua/beat.lua); its reply is 0 lived, 1 lapsed, 2 none."""

    worker: str
    heartbeat_ms: str

    def argv(self, prefix: bytes) -> Argv:
        return [prefix, self.worker, self.heartbeat_ms]


@dataclasses.dataclass(frozen=True, slots=True)
class CleanupReply:
    """``CLEANUP``'s reply: rows removed, in-flight rows removed, whether more expired
    rows are left (the batch limit was hit)."""

    removed: int
    in_flight_removed: int
    more: bool

    @classmethod
    def decode(cls, reply: Sequence[Any]) -> CleanupReply:
        return cls(int(reply[0]), int(reply[1]), bool(int(reply[2])))


@dataclasses.dataclass(frozen=True, slots=True)
class RemoveCall:
    """``REMOVE``'s arguments (lua/remove.lua); :meth:`removed` its reply."""

    scope: str
    key: str

    def argv(self, prefix: bytes) -> Argv:
        return [prefix, to_bytes(self.scope), to_bytes(self.key)]

    @staticmethod
    def removed(reply: Any) -> bool:
        return bool(reply)


@dataclasses.dataclass(frozen=True, slots=True)
class SummaryCall:
    """``SUMMARY``'s arguments (lua/summary.lua); :meth:`decode` its reply."""

    top_k: int
    at_least: int | None

    def argv(self, prefix: bytes) -> Argv:
        return [prefix, str(max(0, self.top_k)), _optional(self.at_least)]

    @staticmethod
    def decode(reply: list[Any]) -> TableSummary:
        """Rows by kind (``P kinds``, without its ``_v`` marker), the owners in flight by
        scope (summed by kind here), the largest scopes, the near-quota count, the running
        tasks by tool."""
        kinds, flights, largest, near, running = reply
        in_flight: dict[str, int] = {}
        for scope, n in _pairs(flights):
            kind = scope_kind(scope)
            in_flight[kind] = in_flight.get(kind, 0) + n
        return TableSummary(
            rows={kind: n for kind, n in _pairs(kinds) if kind != "_v" and n},
            in_flight={kind: n for kind, n in in_flight.items() if n > 0},
            largest=tuple(_pairs(largest)),
            at_least=int(near),
            tasks_running={tool: n for tool, n in _pairs(running) if n > 0},
        )


def _pairs(flat: list[Any]) -> list[tuple[str, int]]:
    """A flat ``[name, count, name, count, ...]`` reply as ``(name, count)`` pairs."""
    return [(text(flat[i]), int(flat[i + 1])) for i in range(0, len(flat), 2)]


def _flat(fields: Mapping[str, str]) -> list[bytes | str]:
    return [item for pair in fields.items() for item in pair]


def _fields(reply: list[Any]) -> dict[str, str]:
    return {text(reply[i]): text(reply[i + 1]) for i in range(0, len(reply) - 1, 2)}


_CREATED: dict[int, Created] = {1: "created", 0: "quota", 2: "full"}
_CLAIMED: dict[int, TaskClaim] = {0: "running", 1: "restored", 2: "ended"}


@dataclasses.dataclass(frozen=True, slots=True)
class TaskCreateCall:
    """``TASK_CREATE``'s arguments (lua/task_create.lua); :meth:`decode` its reply."""

    scope: str
    task_id: str
    quota: int | None
    max_tasks: int | None
    worker: str
    fields: Mapping[str, str]

    def argv(self, prefix: bytes) -> Argv:
        head: Argv = [prefix, self.scope, self.task_id, _optional(self.quota)]
        return [*head, _optional(self.max_tasks), self.worker, *_flat(self.fields)]

    @staticmethod
    def decode(reply: Any) -> Created:
        return _CREATED[int(reply)]


@dataclasses.dataclass(frozen=True, slots=True)
class Orphaning:
    """How a dead worker's task is ended, as ``TASK_GET`` and ``TASK_REAP`` both take it
    (lua/tasks.lua, ``orphan``): a worker is dead once silent *heartbeat_ms* (and a task
    younger than that is left), the task ends ``failed`` with *error* and its *message*,
    ``updated`` at *now_ms*, and its end is the caller's alone to report for *lease_ms*."""

    heartbeat_ms: str
    error: str
    now_ms: str
    message: str
    lease_ms: int

    def argv(self) -> Argv:
        return [self.heartbeat_ms, self.error, self.now_ms, self.message, str(self.lease_ms)]


@dataclasses.dataclass(frozen=True, slots=True)
class TaskGetCall:
    """``TASK_GET``'s arguments (lua/task_get.lua); :meth:`decode` its reply."""

    scope: str
    task_id: str
    orphaning: Orphaning

    def argv(self, prefix: bytes) -> Argv:
        return [prefix, self.scope, self.task_id, *self.orphaning.argv()]

    @staticmethod
    def decode(reply: Any) -> tuple[bool, dict[str, str]] | None:
        """``(ended here, fields)``, or ``None`` for no such task in the scope."""
        if not reply:
            return None
        ended, fields = reply
        return bool(ended), _fields(fields)


@dataclasses.dataclass(frozen=True, slots=True)
class TaskWriteCall:
    """``TASK_WRITE``'s arguments (lua/task_write.lua), and ``TASK_ANSWER``'s
    (:class:`TaskAnswerCall`); :meth:`decode` their reply: whether it was written."""

    scope: str
    task_id: str
    fields: Mapping[str, str]

    def argv(self, prefix: bytes) -> Argv:
        return [prefix, self.scope, self.task_id, *_flat(self.fields)]

    @staticmethod
    def decode(reply: Any) -> bool:
        return bool(reply)


class TaskAnswerCall(TaskWriteCall):
    """``TASK_ANSWER``'s arguments (lua/task_answer.lua): the answers by input key."""

    __slots__ = ()


@dataclasses.dataclass(frozen=True, slots=True)
class TaskClaimCall:
    """``TASK_CLAIM``'s arguments (lua/task_claim.lua); :meth:`decode` its reply."""

    scope: str
    task_id: str
    worker: str
    fields: Mapping[str, str]

    def argv(self, prefix: bytes) -> Argv:
        return [prefix, self.scope, self.task_id, self.worker, *_flat(self.fields)]

    @staticmethod
    def decode(reply: Any) -> TaskClaim:
        return _CLAIMED[int(reply)]


@dataclasses.dataclass(frozen=True, slots=True)
class TaskReapCall:
    """``TASK_REAP``'s arguments (lua/task_reap.lua); :meth:`decode` its reply."""

    orphaning: Orphaning
    #: The most tasks one call ends, and the most ends it hands to its caller.
    batch: int
    #: The orphaned ends the caller reported since its last call (members).
    acks: Sequence[bytes] = ()

    def argv(self, prefix: bytes) -> Argv:
        return [prefix, *self.orphaning.argv(), str(self.batch), *self.acks]

    @staticmethod
    def decode(reply: list[Any]) -> list[tuple[bytes, str, str, dict[str, str]]]:
        """The orphaned ends handed to the caller to report: ``(member, scope, task id,
        {tool, created})`` each."""
        ended = []
        for i in range(0, len(reply) - 2, 3):
            m = to_bytes(reply[i])
            scope, task_id = split_member(m)
            fields = {"tool": text(reply[i + 1]), "created": text(reply[i + 2])}
            ended.append((m, scope, task_id, fields))
        return ended
