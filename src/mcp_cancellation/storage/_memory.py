"""In-process storage: the embedded default.

All state sits behind one :class:`threading.Lock`, so the storage is safe from several
threads each running its own event loop; no method ever awaits while holding it. The
cancellation rows and their scope-size index are :class:`._scope_table.ScopeTable`'s.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
import time
from collections.abc import Callable, Collection, Mapping
from itertools import islice
from typing import TYPE_CHECKING

from .._token import OPERATOR
from ..scope import scope_kind
from ._base import (
    RECORDED,
    UPDATED,
    AddResult,
    InFlightRequest,
    Limits,
    Storage,
    StorageStats,
    TableSummary,
)
from ._in_flight import InFlightTokens
from ._scope_table import ScopeTable
from ._task_table import MemoryTaskTable

if TYPE_CHECKING:
    from .._token import RequestToken

__all__ = ["MemoryStorage"]

# Results without evictions are shared, as base's RECORDED and UPDATED are: the hot path
# allocates nothing for them.
_QUOTA = AddResult("quota")
_NOT_IN_FLIGHT = AddResult("not_in_flight")
_NO_TOKENS: tuple[RequestToken, ...] = ()

# Rows a janitor pass expires per hold of the lock, about (whole scopes: a scope larger than
# this, at most the quota, goes in one step): between two such steps it lets the event loop
# run. A step costs a few milliseconds (0.2-0.4 us a row from small scopes), so a pass that
# expires a whole flood does not stall the loop for its length.
_EXPIRE_STEP = 8_192

# Numbers the memory storages of this process, so that each names its own table.
_sequence = itertools.count(1)


async def _let_others_run() -> None:
    """Yield to the event loop once, if this is asyncio's (under another loop, carry on)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    await asyncio.sleep(0)


class MemoryStorage(Storage):
    """Rows in this process's memory: fast, and invisible to other workers."""

    name = "memory"

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._number = next(_sequence)
        self._table = ScopeTable(clock)
        self._in_flight = InFlightTokens()
        # Rows recorded while nothing of theirs was in flight (a library's cancel() of a
        # request yet to start): the next request tracked claims such a row. Every other
        # row is bound to the requests in flight when it was recorded, and never
        # cancels a later one. (May name rows gone since: add() resets an entry.)
        self._pending: set[tuple[str, str]] = set()
        # Waiting cancellations (Storage.add's track_wait): (scope, key) -> the waiters'
        # [reason, claimed] entries, and their number by scope (they count against the
        # quota). Every request tracked while one waits claims it.
        self._waiting: dict[tuple[str, str], dict[int, list[object]]] = {}
        self._waiting_by_scope: dict[str, int] = {}
        self._waiters = itertools.count()
        self._tasks = MemoryTaskTable(clock)

    @property
    def task_table(self) -> MemoryTaskTable:
        """This process's tasks."""
        return self._tasks

    @property
    def identity(self) -> str:
        """This process's table: ``memory://<host>/<pid>``, with ``/<n>`` for the n-th
        memory storage of the process after the first."""
        base = super().identity
        return base if self._number == 1 else f"{base}/{self._number}"

    # -- cancellation rows -------------------------------------------------------------

    async def add(
        self,
        scope: str,
        key: str,
        reason: str | None,
        *,
        limits: Limits,
        require_in_flight: bool = False,
        operator: bool = False,
        track_wait: float = 0.0,
    ) -> AddResult:
        request = (scope, key)
        waiter: tuple[int, bool] | AddResult | None = None
        with self._lock:
            if require_in_flight and request not in self._in_flight:
                waiter = self._wait(request, reason, limits)
            else:
                outcome, tokens = self._record(request, reason, limits)
                if not operator:
                    for token in tokens:
                        token._cancel(reason)
                    return outcome
        if waiter is None:  # an operator's: its flip reports itself, outside the lock
            for token in tokens:
                token._cancel(reason, OPERATOR)
            return outcome
        if isinstance(waiter, AddResult):
            return waiter
        return await self._await_track(request, waiter, track_wait)

    def _record(
        self, request: tuple[str, str], reason: str | None, limits: Limits
    ) -> tuple[AddResult, Collection[RequestToken]]:
        """Under the lock: record the row (the quota, then the cap); the result and the
        tokens of the owners in flight it is bound to (none: a pending row)."""
        scope, key = request
        # Most cancelled ids are not in flight here: one lookup, no list, for those.
        tokens: Collection[RequestToken]
        if request in self._in_flight:
            tokens = self._in_flight.tokens(scope, key)
            self._pending.discard(request)
        else:
            tokens = _NO_TOKENS
            self._pending.add(request)
        rows = self._table.rows.get(scope)
        if rows is not None and key in rows:
            rows[key] = (rows[key][0], reason)
            return UPDATED, tokens
        quota = limits.max_rows_per_scope
        over = quota is not None and self._held(scope, rows) >= quota
        if over and not limits.shadow_quota:
            return _QUOTA, _NO_TOKENS
        evicted: tuple[tuple[str, int], ...] = ()
        evicted_kinds: dict[str, int] | None = None
        if limits.max_rows is not None and self._table.total >= limits.max_rows:
            evicted_kinds = {}
            evicted = self._table.evict(limits.eviction_batch, evicted_kinds)
            rows = self._table.rows.get(scope)
        self._table.insert(scope, key, reason, rows)
        if evicted or over:
            return AddResult("recorded", evicted, over, evicted_kinds), tokens
        return RECORDED, tokens

    def _held(self, scope: str, rows: Mapping[str, object] | None) -> int:
        """What counts against *scope*'s quota: its rows and its waiting cancellations."""
        waiting = self._waiting_by_scope.get(scope, 0) if self._waiting_by_scope else 0
        return (0 if rows is None else len(rows)) + waiting

    def _wait(
        self, request: tuple[str, str], reason: str | None, limits: Limits
    ) -> tuple[int, bool] | AddResult:
        """Under the lock: file a waiting cancellation of *request* (its waiter's number,
        and whether it is past the quota, in shadow mode), or refuse it at the quota."""
        scope = request[0]
        quota = limits.max_rows_per_scope
        over = quota is not None and self._held(scope, self._table.rows.get(scope)) >= quota
        if over and not limits.shadow_quota:
            return _QUOTA
        waiter = next(self._waiters)
        self._waiting.setdefault(request, {})[waiter] = [reason, False]
        self._waiting_by_scope[scope] = self._waiting_by_scope.get(scope, 0) + 1
        return waiter, over

    async def _await_track(
        self, request: tuple[str, str], waiter: tuple[int, bool], wait: float
    ) -> AddResult:
        """Let the waiting cancellation wait, then withdraw it (a cancelled wait too)."""
        try:
            if wait > 0:
                await asyncio.sleep(wait)
        finally:
            with self._lock:
                waits = self._waiting.get(request, {})
                entry = waits.pop(waiter[0], None)
                if not waits:
                    self._waiting.pop(request, None)
                scope = request[0]
                left = self._waiting_by_scope.get(scope, 1) - 1
                if left > 0:
                    self._waiting_by_scope[scope] = left
                else:
                    self._waiting_by_scope.pop(scope, None)
        claimed = entry is not None and bool(entry[1])
        if waiter[1]:
            return AddResult("recorded" if claimed else "not_in_flight", (), True)
        return RECORDED if claimed else _NOT_IN_FLIGHT

    async def get(self, scope: str, key: str) -> tuple[bool, str | None]:
        with self._lock:
            row = self._table.rows.get(scope, {}).get(key)
        return (False, None) if row is None else (True, row[1])

    async def remove(self, scope: str, key: str) -> bool:
        with self._lock:
            rows = self._table.rows.get(scope)
            return rows is not None and self._table.remove_row(scope, key, rows)

    async def track(self, scope: str, key: str, owner: str, token: RequestToken) -> None:
        pair = (owner, token)
        with self._lock:
            in_flight = self._in_flight
            # The one-owner case is one setdefault; a second owner goes through add().
            if in_flight.setdefault((scope, key), pair) is not pair:
                in_flight.add(scope, key, owner, token)
            if self._pending:
                rows = self._table.rows.get(scope)
                if rows is not None and key in rows and (scope, key) in self._pending:
                    self._pending.discard((scope, key))  # claimed: bound to this request
                    token._cancel(rows[key][1])
            if self._waiting:
                waits = self._waiting.get((scope, key))
                if waits:  # tracked while a cancellation waits for it: claimed
                    entries = list(waits.values())
                    for entry in entries:
                        entry[1] = True
                    first = entries[0][0]
                    token._cancel(first if isinstance(first, str) else None)

    async def untrack(self, scope: str, key: str, owner: str) -> None:
        with self._lock:
            self._in_flight.discard(scope, key, owner)

    async def finish(self, scope: str, key: str, owner: str) -> None:
        """Untrack and clear under one acquisition of the lock."""
        request = (scope, key)
        with self._lock:
            in_flight = self._in_flight
            entry = in_flight.get(request)
            if type(entry) is tuple and entry[0] == owner:
                del in_flight[request]
            elif entry is not None:
                in_flight.discard(scope, key, owner)
            rows = self._table.rows.get(scope)
            if rows is not None and key in rows:
                self._table.remove_row(scope, key, rows)
                self._pending.discard(request)

    async def in_flight_requests(self) -> list[InFlightRequest]:
        with self._lock:
            rows = list(self._in_flight.rows())
        shift = time.time() - time.monotonic()  # monotonic -> Unix seconds
        return [
            InFlightRequest(
                scope=scope,
                request_id=key,
                worker=owner.partition(":")[0],
                tool=token.tool,
                started=token.started + shift,
                cancelled=token.cancelled,
                reason=token.reason,
            )
            for scope, key, owner, token in rows
        ]

    async def is_tracked(self, scope: str, key: str) -> bool:
        return self._in_flight.count(scope, key) > 0

    # -- maintenance -------------------------------------------------------------------

    async def cleanup(self, ttl: float | None, dead_owners: Collection[str]) -> tuple[int, int]:
        """The rows older than *ttl* expire in steps of about :data:`_EXPIRE_STEP` rows,
        each under the lock; between two, an asyncio event loop runs its other
        work (the pass then also expires nothing recorded after it began)."""
        with self._lock:
            swept = self._in_flight.sweep(set(dead_owners))
            in_flight_removed = len(swept)
            # A dead owner's cancellation rows go with it, unless another owner of the
            # request is still in flight (or the row is pending, bound to none).
            for scope, key, _ in swept:
                rows = self._table.rows.get(scope)
                if (
                    rows is not None
                    and key in rows
                    and (scope, key) not in self._in_flight
                    and (scope, key) not in self._pending
                ):
                    self._table.remove_row(scope, key, rows)
            if len(self._pending) > 2 * self._table.total + 1024:
                # Entries of rows gone since (evicted, expired) are harmless, as every add()
                # sets or clears its own: drop them only once they outnumber the rows, so
                # that a pass over a large table stays independent of its size.
                rows_of = self._table.rows
                self._pending = {(s, k) for s, k in self._pending if k in rows_of.get(s, ())}
            deadline = None if ttl is None else self._clock() - ttl
        removed = 0
        while deadline is not None:
            with self._lock:
                expired, more = self._table.expire(deadline, _EXPIRE_STEP)
            removed += expired
            if not more:
                break
            await _let_others_run()
        return removed, in_flight_removed

    async def stats(self) -> StorageStats:
        return self.stats_from_thread(0)

    def stats_from_thread(self, timeout: float) -> StorageStats:
        """:meth:`stats`, at once (from any thread)."""
        with self._lock:
            rows = {scope: len(r) for scope, r in self._table.rows.items()}
            in_flight = self._in_flight.counts()
        return StorageStats(rows=rows, in_flight=in_flight)

    async def summary(self, top_k: int, at_least: int | None = None) -> TableSummary:
        """O(top_k log n) from the index, plus the in-flight rows (the requests running
        now)."""
        return self.summary_from_thread(top_k, 0, at_least)

    def summary_from_thread(
        self, top_k: int, timeout: float, at_least: int | None = None
    ) -> TableSummary:
        """:meth:`summary`, at once (from any thread)."""
        with self._lock:
            self._table.refile()
            largest = tuple((scope, -neg) for neg, _, scope, _ in islice(self._table.index, top_k))
            # Entries are (-rows, first, scope, kind): rows >= at_least sort before this probe.
            probe = (1 - (at_least or 0), -math.inf, "", "")
            near = 0 if at_least is None else self._table.index.bisect_left(probe)
            rows = {kind: n for kind, n in self._table.kind_rows.items() if n}
            flights = self._in_flight.counts()
        in_flight: dict[str, int] = {}
        for scope, n in flights.items():
            kind = scope_kind(scope)
            in_flight[kind] = in_flight.get(kind, 0) + n
        return TableSummary(
            rows=rows,
            in_flight=in_flight,
            largest=largest,
            at_least=near,
            tasks_running=self._tasks.running(),
        )

    def check_index(self) -> None:
        """Assert that the scope-size index and the kind totals agree with the rows (for
        tests: a full scan)."""
        with self._lock:
            self._table.check()
