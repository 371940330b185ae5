"""Each Lua script's contract, named (private): one encoder of its ARGV and one typed
decoder of its reply, in the order its header (``lua/<name>.lua``) lists them. No other
code builds a script's arguments or reads its reply by position.

The scripts and the table they keep are described once, in docs/architecture.md, "The
Redis table".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from .._base import Limits
from ._codec import collect_evicted, decode_reason, decode_summary, encode_reason, text, to_bytes

__all__ = [
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
    "decode_summary",
    "summary_argv",
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

    def argv(self, prefix: bytes) -> Argv:
        return [prefix, to_bytes(self.scope), to_bytes(self.key), self.waiter]

    @staticmethod
    def claimed(reply: Any) -> bool:
        return bool(int(reply))


@dataclasses.dataclass(frozen=True, slots=True)
class SyncOp:
    """One queued write as ``SYNC`` takes it: ``T`` track (with the request's age in µs
    when sent and its tool), ``U`` untrack, ``R`` release, ``F`` finish."""

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

    def argv(self, prefix: bytes) -> Argv:
        return [prefix, self.worker, _optional(self.ttl_us), str(self.batch)]


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


def summary_argv(prefix: bytes, top_k: int, at_least: int | None) -> Argv:
    """``SUMMARY``'s arguments (lua/summary.lua); :func:`decode_summary` its reply."""
    return [prefix, str(max(0, top_k)), _optional(at_least)]
