"""In-process storage: the embedded default.

All state sits behind one :class:`threading.Lock`, so the storage is safe from several
threads each running its own event loop; no method ever awaits while holding it.

Cancellation rows are kept per scope in insertion-ordered dicts (oldest first), with a
running total, so that the quota check is O(1). A scope-size index orders the scopes as the
cap evicts them (largest first, equal sizes oldest row first): an evicting insert costs
O(batch log scopes) and touches only the rows it evicts, and a scrape reads the largest
scopes and the totals by scope kind without a scan of the table. The index is brought up to
date lazily: a new scope is filed at once, but a row added to a scope that has some, or a
row removed, only notes its scope as changed; the changed scopes are re-filed, once each
however many rows they gained or lost, before the index is read (an eviction, a scrape, an
expiry) or when more than :data:`_CHANGED_LIMIT` of them have piled up. A few busy scopes
then cost a set insert per row instead of two sorted-list updates.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection
from itertools import islice, repeat
from operator import itemgetter
from typing import TYPE_CHECKING

from sortedcontainers import SortedList

from ..scope import scope_kind
from ._in_flight import InFlightTokens
from .base import (
    RECORDED,
    UPDATED,
    AddResult,
    InFlightRequest,
    Limits,
    Storage,
    StorageStats,
    TableSummary,
)

if TYPE_CHECKING:
    from ..token import RequestToken

__all__ = ["MemoryStorage"]

# A row is (created, reason); created is time.monotonic() when first recorded.
_Row = tuple[float, str | None]
# A scope in the size index: (-row count, age of its oldest row, scope, scope kind).
# Sorted ascending (scopes are distinct, so the kind never decides), the first entry is the
# scope the cap evicts from next. The kind rides along so that a batch of entries leaving
# the index can be counted by kind without working each one out again.
_Entry = tuple[int, float, str, str]


def _entry(scope: str, rows: dict[str, _Row], kind: str) -> _Entry:
    """The index entry of *scope* (of *kind*) holding *rows* (non-empty)."""
    return (-len(rows), next(iter(rows.values()))[0], scope, kind)


_SCOPE = itemgetter(2)
_KIND = itemgetter(3)


# Results without evictions are shared, as base's RECORDED and UPDATED are: the hot path
# allocates nothing for them.
_QUOTA = AddResult("quota")
_NOT_IN_FLIGHT = AddResult("not_in_flight")
_NO_TOKENS: tuple[RequestToken, ...] = ()

# Scopes whose rows changed since they were filed in the index, at most: past this many
# they are re-filed at once. Re-filing a scope costs what one eager index update did (1-3
# us), so whatever reads the index next (an evicting insert, a scrape, the janitor) pays
# at most about 0.2 ms for the inserts before it, at any number of scopes.
_CHANGED_LIMIT = 64

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
        # Per scope, rows in insertion order (= age order). Plain dicts: the first row is a
        # C-level skip over deleted slots, which evictions keep few by rebuilding a scope
        # that loses most of its rows (OrderedDict measured slower here: its iteration
        # re-looks-up every key, and churn makes those lookups long).
        self._rows: dict[str, dict[str, _Row]] = {}
        self._total = 0
        # The scope-size index (see _Entry): the entry filed for each scope, and the
        # scopes changed since (see _refile). The row totals by scope kind are those of
        # the filed entries: kept by evictions and expiries, and by re-filing.
        self._index: SortedList[_Entry] = SortedList()
        self._filed: dict[str, _Entry] = {}
        self._changed: set[str] = set()
        self._kind_rows: dict[str, int] = {}
        self._in_flight = InFlightTokens()
        # Rows recorded while nothing of theirs was in flight (a library's cancel() of a
        # request yet to start): the next request tracked claims such a row. Every other
        # row is bound to the requests in flight when it was recorded, and never
        # cancels a later one. (May name rows gone since: add() resets an entry.)
        self._pending: set[tuple[str, str]] = set()

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
    ) -> AddResult:
        with self._lock:
            # Most cancelled ids are not in flight here: one lookup, no list, for those.
            tokens: Collection[RequestToken]
            request = (scope, key)
            if request in self._in_flight:
                tokens = self._in_flight.tokens(scope, key)
                self._pending.discard(request)
            elif require_in_flight:
                return _NOT_IN_FLIGHT
            else:
                tokens = _NO_TOKENS
                self._pending.add(request)
            rows = self._rows.get(scope)
            if rows is not None and key in rows:
                rows[key] = (rows[key][0], reason)
                outcome = UPDATED
            else:
                quota = limits.max_rows_per_scope
                over = quota is not None and rows is not None and len(rows) >= quota
                if over and not limits.shadow_quota:
                    return _QUOTA
                evicted: tuple[tuple[str, int], ...] = ()
                evicted_kinds: dict[str, int] | None = None
                if limits.max_rows is not None and self._total >= limits.max_rows:
                    evicted_kinds = {}
                    evicted = self._evict(limits.eviction_batch, evicted_kinds)
                    rows = self._rows.get(scope)
                self._total += 1
                if rows is None and scope not in self._filed:
                    # A new scope is filed at once: deferring it saves nothing (nothing
                    # coalesces with its first row), and a flood of new scopes then
                    # leaves no work behind for whatever reads the index next.
                    self._rows[scope] = {key: (created := self._clock(), reason)}
                    kind = scope_kind(scope)
                    self._filed[scope] = entry = (-1, created, scope, kind)
                    self._index.add(entry)
                    self._kind_rows[kind] = self._kind_rows.get(kind, 0) + 1
                else:
                    if rows is None:
                        self._rows[scope] = {key: (self._clock(), reason)}
                    else:
                        rows[key] = (self._clock(), reason)
                    changed = self._changed
                    changed.add(scope)
                    if len(changed) > _CHANGED_LIMIT:
                        self._refile()
                if evicted or over:
                    outcome = AddResult("recorded", evicted, over, evicted_kinds)
                else:
                    outcome = RECORDED
            for token in tokens:
                token._cancel(reason)
            return outcome

    def _refile(self) -> None:
        """Bring the index up to date: re-file each changed scope once (or drop it if it
        has no rows left), and the kind totals with it. Called under the lock, before
        anything reads the index. When a quarter or more of the filed scopes changed (a few
        busy scopes), sorting every entry afresh is cheaper than moving each one."""
        changed = self._changed
        filed = self._filed
        all_rows = self._rows
        kind_rows = self._kind_rows
        index = self._index
        resort = 4 * len(changed) >= len(filed)
        for scope in changed:
            old = filed.pop(scope, None)
            size = 0
            if old is not None:
                if not resort:
                    index.remove(old)
                size = old[0]  # -rows
                kind = old[3]
            else:
                kind = scope_kind(scope)
            rows = all_rows.get(scope)
            if rows:
                filed[scope] = entry = _entry(scope, rows, kind)
                if not resort:
                    index.add(entry)
                size -= entry[0]
            if size:
                kind_rows[kind] = kind_rows.get(kind, 0) + size
        changed.clear()
        if resort:
            index.clear()
            index.update(filed.values())

    def _evict(self, batch: int, kinds: dict[str, int]) -> tuple[tuple[str, int], ...]:
        """Evict *batch* rows (or all there are): largest scope first, oldest row first
        within it, spilling into the next largest; equal sizes go oldest-row first, so when
        every scope ties the batch is simply the oldest rows; *kinds* gains the evicted
        rows by scope kind. Called under the lock."""
        if self._changed:
            self._refile()
        index = self._index
        evicted: list[tuple[str, int]] = []
        remaining = min(batch, self._total)
        while remaining > 0 and index:
            neg = index[0][0]
            size = -neg
            if size <= remaining:
                # Scopes evicted whole: as many of this size as the batch takes, off the
                # front of the index at once (entries (neg, ...) sort before (neg + 1,)).
                count = min(remaining // size, index.bisect_left((neg + 1, -math.inf, "", "")))
                entries = list(index.islice(0, count))
                del index[:count]
                self._bury(entries, size, kinds)
                evicted.extend(zip(map(_SCOPE, entries), repeat(size)))
                remaining -= count * size
                continue
            # The last scope of the batch loses only its oldest rows.
            _, _, scope, kind = index.pop(0)
            rows = self._rows[scope]
            take = remaining
            for key in list(islice(rows, take)):
                del rows[key]
            self._keep(scope, rows, kind, take)
            evicted.append((scope, take))
            kinds[kind] = kinds.get(kind, 0) + take
            break
        return tuple(evicted)

    def _keep(self, scope: str, rest: dict[str, _Row], kind: str, lost: int) -> None:
        """*scope* (of *kind*, already out of the index) lost its *lost* oldest rows and
        keeps *rest* (non-empty): hold and file it again, and move the totals. Called
        under the lock."""
        self._rows[scope] = rest
        self._filed[scope] = entry = _entry(scope, rest, kind)
        self._index.add(entry)
        self._kind_rows[kind] -= lost
        self._total -= lost

    def _bury(self, entries: list[_Entry], size: int, kinds: dict[str, int] | None = None) -> None:
        """Unlink the scopes of *entries*, of *size* rows each and already taken out of the
        index: their filed entries, kind totals and row total go with them (and into
        *kinds*, by kind, if given). Called under the lock.

        A flood of rotating addresses leaves thousands of one-row scopes to evict or
        expire at once. Scope by scope in Python, as a scope that loses only some of its
        rows must be, each cost about 2 us; here the work per scope is C-level (two maps,
        a loop of deletes, a count of their kinds)."""
        scopes = list(map(_SCOPE, entries))
        all_rows, filed = self._rows, self._filed
        for scope in scopes:
            del all_rows[scope], filed[scope]
        kind_rows = self._kind_rows
        for kind, count in Counter(map(_KIND, entries)).items():
            lost = count * size
            kind_rows[kind] -= lost
            if kinds is not None:
                kinds[kind] = kinds.get(kind, 0) + lost
        self._total -= len(scopes) * size

    async def get(self, scope: str, key: str) -> tuple[bool, str | None]:
        with self._lock:
            row = self._rows.get(scope, {}).get(key)
        return (False, None) if row is None else (True, row[1])

    async def remove(self, scope: str, key: str) -> bool:
        with self._lock:
            rows = self._rows.get(scope)
            return rows is not None and self._remove_row(scope, key, rows)

    def _remove_row(self, scope: str, key: str, rows: dict[str, _Row]) -> bool:
        """Delete *key* from *scope*'s *rows*, keeping the total in step and noting the
        scope for the index (see :meth:`_refile`); whether it was there. Called under the
        lock."""
        if rows.pop(key, None) is None:
            return False
        if not rows:
            del self._rows[scope]
        self._total -= 1
        changed = self._changed
        changed.add(scope)
        if len(changed) > _CHANGED_LIMIT:
            self._refile()
        return True

    # -- in-flight rows ----------------------------------------------------------------

    async def track(self, scope: str, key: str, owner: str, token: RequestToken) -> None:
        pair = (owner, token)
        with self._lock:
            in_flight = self._in_flight
            # The one-owner case is one setdefault; a second owner goes through add().
            if in_flight.setdefault((scope, key), pair) is not pair:
                in_flight.add(scope, key, owner, token)
            if self._pending:
                rows = self._rows.get(scope)
                if rows is not None and key in rows and (scope, key) in self._pending:
                    self._pending.discard((scope, key))  # claimed: bound to this request
                    token._cancel(rows[key][1])

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
            rows = self._rows.get(scope)
            if rows is not None and key in rows:
                self._remove_row(scope, key, rows)
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
                rows = self._rows.get(scope)
                if (
                    rows is not None
                    and key in rows
                    and (scope, key) not in self._in_flight
                    and (scope, key) not in self._pending
                ):
                    self._remove_row(scope, key, rows)
            self._pending = {(s, k) for s, k in self._pending if k in self._rows.get(s, ())}
            deadline = None if ttl is None else self._clock() - ttl
        removed = 0
        while deadline is not None:
            with self._lock:
                expired, more = self._expire(deadline, _EXPIRE_STEP)
            removed += expired
            if not more:
                break
            await _let_others_run()
        return removed, in_flight_removed

    def _expire(self, deadline: float, limit: int) -> tuple[int, bool]:
        """Remove the rows created before *deadline*, from scopes holding about *limit*
        rows (at least one scope); how many, and whether the limit cut the step short.
        Called under the lock.

        Found from the scope-size index, not by visiting every scope: within one size, the
        index orders scopes by their oldest row, so the scopes holding an expired row are
        one range of each size's run, found by bisection and taken out of the index at
        once. The cost is O(sizes log n + expired scopes), and a table has few distinct
        sizes (at most the quota, and at most about sqrt(2 x rows))."""
        if self._changed:
            self._refile()
        index = self._index
        removed = 0
        first = index[0] if index else None
        while first is not None:
            neg = first[0]
            if first[1] < deadline:  # the oldest of this size expired: maybe more did
                # (neg, deadline, "") sorts after exactly the entries of this size whose
                # oldest row is older than the deadline.
                size = -neg
                start = index.bisect_left(first)
                stop = min(
                    index.bisect_left((neg, deadline, "", "")), start + max(1, limit // size)
                )
                run = list(index.islice(start, stop))
                del index[start:stop]
                removed += self._expire_run(run, size, deadline)
                limit -= len(run) * size
                if limit <= 0:
                    return removed, True
            # Scopes the run left smaller were filed again, later in the index: each is
            # seen again with its new size, and its oldest row has not expired.
            at = index.bisect_left((neg + 1, -math.inf, "", ""))
            first = index[at] if at < len(index) else None
        return removed, False

    def _expire_run(self, run: list[_Entry], size: int, deadline: float) -> int:
        """Remove the expired rows of *run*, scopes of *size* rows each holding at least
        one expired row, already out of the index; how many. Scopes that expire whole go
        in bulk (:meth:`_bury`), the others lose their expired prefix and are filed again.
        Called under the lock."""
        removed = 0
        if size == 1:
            whole = run
        else:
            whole = []
            all_rows = self._rows
            for entry in run:
                _, _, scope, kind = entry
                rows = all_rows[scope]
                # Rows keep their first age and insertion order: the expired ones are a
                # prefix, all of them when the newest has expired.
                if next(reversed(rows.values()))[0] < deadline:
                    whole.append(entry)
                    continue
                expired = 0
                for created, _ in rows.values():
                    if created >= deadline:
                        break
                    expired += 1
                self._keep(scope, dict(islice(rows.items(), expired, None)), kind, expired)
                removed += expired
        self._bury(whole, size)
        return removed + len(whole) * size

    async def stats(self) -> StorageStats:
        return self.stats_from_thread(0)

    def stats_from_thread(self, timeout: float) -> StorageStats:
        """:meth:`stats`, at once (from any thread)."""
        with self._lock:
            rows = {scope: len(r) for scope, r in self._rows.items()}
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
            if self._changed:
                self._refile()
            largest = tuple((scope, -neg) for neg, _, scope, _ in islice(self._index, top_k))
            # Entries are (-rows, first, scope, kind): rows >= at_least sort before this probe.
            probe = (1 - (at_least or 0), -math.inf, "", "")
            near = 0 if at_least is None else self._index.bisect_left(probe)
            rows = {kind: n for kind, n in self._kind_rows.items() if n}
            flights = self._in_flight.counts()
        in_flight: dict[str, int] = {}
        for scope, n in flights.items():
            kind = scope_kind(scope)
            in_flight[kind] = in_flight.get(kind, 0) + n
        return TableSummary(rows=rows, in_flight=in_flight, largest=largest, at_least=near)

    def check_index(self) -> None:
        """Assert that the scope-size index and the kind totals agree with the rows (for
        tests: a full scan)."""
        with self._lock:
            self._refile()
            expected = sorted(
                _entry(scope, rows, scope_kind(scope)) for scope, rows in self._rows.items()
            )
            assert list(self._index) == expected, "scope-size index out of step"
            assert sorted(self._filed.values()) == expected, "filed entries out of step"
            kinds: dict[str, int] = {}
            for scope, rows in self._rows.items():
                kinds[scope_kind(scope)] = kinds.get(scope_kind(scope), 0) + len(rows)
            actual = {kind: n for kind, n in self._kind_rows.items() if n}
            assert actual == kinds, f"kind totals {actual} != {kinds}"
            assert self._total == sum(kinds.values()), "row total out of step"
