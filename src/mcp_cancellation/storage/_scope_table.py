"""The memory storage's cancellation rows and their scope-size index (private).

Rows are kept per scope in insertion-ordered dicts (oldest first), with a running total, so
that the quota check is O(1). A scope-size index orders the scopes as the cap evicts them
(largest first, equal sizes oldest row first): an evicting insert costs O(batch log scopes)
and touches only the rows it evicts, and a scrape reads the largest scopes and the totals by
scope kind without a scan of the table. The index is brought up to date lazily: a new scope
is filed at once, but a row added to a scope that has some, or a row removed, only notes its
scope as changed; the changed scopes are re-filed, once each however many rows they gained
or lost, before the index is read (an eviction, a scrape, an expiry) or when more than
:data:`CHANGED_LIMIT` of them have piled up.

Nothing here locks: the storage calls every method under its lock.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from itertools import islice, repeat
from operator import itemgetter

from sortedcontainers import SortedList

from ..scope import scope_kind

__all__ = ["Entry", "Row", "ScopeTable"]

#: A row is (created, reason); created is the storage's clock when first recorded.
Row = tuple[float, str | None]
#: A scope in the size index: (-row count, age of its oldest row, scope, scope kind).
#: Sorted ascending (scopes are distinct, so the kind never decides), the first entry is
#: the scope the cap evicts from next. The kind rides along so that a batch of entries
#: leaving the index can be counted by kind without working each one out again.
Entry = tuple[int, float, str, str]

#: Scopes whose rows changed since they were filed, at most: past this many they are
#: re-filed at once, so whatever reads the index next pays a bounded amount.
CHANGED_LIMIT = 64

_SCOPE = itemgetter(2)
_KIND = itemgetter(3)


def _entry(scope: str, rows: dict[str, Row], kind: str) -> Entry:
    """The index entry of *scope* (of *kind*) holding *rows* (non-empty)."""
    return (-len(rows), next(iter(rows.values()))[0], scope, kind)


class ScopeTable:
    """The cancellation rows by scope, their total, and the scope-size index."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.rows: dict[str, dict[str, Row]] = {}
        self.total = 0
        # The entry filed for each scope, and the scopes changed since (see refile). The
        # row totals by scope kind are those of the filed entries.
        self.index: SortedList[Entry] = SortedList()
        self.filed: dict[str, Entry] = {}
        self.changed: set[str] = set()
        self.kind_rows: dict[str, int] = {}

    def insert(self, scope: str, key: str, reason: str | None, rows: dict[str, Row] | None) -> None:
        """Add the new row *key* to *scope*, whose rows are *rows* (``None``: none yet)."""
        self.total += 1
        if rows is None and scope not in self.filed:
            # A new scope is filed at once: deferring it saves nothing, and a flood of new
            # scopes then leaves no work behind for whatever reads the index next.
            self.rows[scope] = {key: (created := self.clock(), reason)}
            kind = scope_kind(scope)
            self.filed[scope] = entry = (-1, created, scope, kind)
            self.index.add(entry)
            self.kind_rows[kind] = self.kind_rows.get(kind, 0) + 1
            return
        if rows is None:
            self.rows[scope] = {key: (self.clock(), reason)}
        else:
            rows[key] = (self.clock(), reason)
        self.changed.add(scope)
        if len(self.changed) > CHANGED_LIMIT:
            self.refile()

    def refile(self) -> None:
        """Bring the index up to date: re-file each changed scope once (or drop it if it
        has no rows left), and the kind totals with it. Called under the storage's lock, before
        anything reads the index. When a quarter or more of the filed scopes changed (a few
        busy scopes), sorting every entry afresh is cheaper than moving each one."""
        changed = self.changed
        filed = self.filed
        all_rows = self.rows
        kind_rows = self.kind_rows
        index = self.index
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

    def evict(self, batch: int, kinds: dict[str, int]) -> tuple[tuple[str, int], ...]:
        """Evict *batch* rows (or all there are): largest scope first, oldest row first
        within it, spilling into the next largest; equal sizes go oldest-row first, so when
        every scope ties the batch is simply the oldest rows; *kinds* gains the evicted
        rows by scope kind. Called under the storage's lock."""
        if self.changed:
            self.refile()
        index = self.index
        evicted: list[tuple[str, int]] = []
        remaining = min(batch, self.total)
        while remaining > 0 and index:
            neg = index[0][0]
            size = -neg
            if size <= remaining:
                # Scopes evicted whole: as many of this size as the batch takes, off the
                # front of the index at once (entries (neg, ...) sort before (neg + 1,)).
                count = min(remaining // size, index.bisect_left((neg + 1, -math.inf, "", "")))
                entries = list(index.islice(0, count))
                del index[:count]
                self.bury(entries, size, kinds)
                evicted.extend(zip(map(_SCOPE, entries), repeat(size)))
                remaining -= count * size
                continue
            # The last scope of the batch loses only its oldest rows.
            _, _, scope, kind = index.pop(0)
            rows = self.rows[scope]
            take = remaining
            for key in list(islice(rows, take)):
                del rows[key]
            self.keep(scope, rows, kind, take)
            evicted.append((scope, take))
            kinds[kind] = kinds.get(kind, 0) + take
            break
        return tuple(evicted)

    def keep(self, scope: str, rest: dict[str, Row], kind: str, lost: int) -> None:
        """*scope* (of *kind*, already out of the index) lost its *lost* oldest rows and
        keeps *rest* (non-empty): hold and file it again, and move the totals. Called
        under the lock."""
        self.rows[scope] = rest
        self.filed[scope] = entry = _entry(scope, rest, kind)
        self.index.add(entry)
        self.kind_rows[kind] -= lost
        self.total -= lost

    def bury(self, entries: list[Entry], size: int, kinds: dict[str, int] | None = None) -> None:
        """Unlink the scopes of *entries*, of *size* rows each and already taken out of the
        index: their filed entries, kind totals and row total go with them (and into
        *kinds*, by kind, if given). Called under the storage's lock.

        A flood of rotating addresses leaves thousands of one-row scopes to evict or
        expire at once. Scope by scope in Python, as a scope that loses only some of its
        rows must be, each cost about 2 us; here the work per scope is C-level (two maps,
        a loop of deletes, a count of their kinds)."""
        scopes = list(map(_SCOPE, entries))
        all_rows, filed = self.rows, self.filed
        for scope in scopes:
            del all_rows[scope], filed[scope]
        kind_rows = self.kind_rows
        for kind, count in Counter(map(_KIND, entries)).items():
            lost = count * size
            kind_rows[kind] -= lost
            if kinds is not None:
                kinds[kind] = kinds.get(kind, 0) + lost
        self.total -= len(scopes) * size

    def remove_row(self, scope: str, key: str, rows: dict[str, Row]) -> bool:
        """Delete *key* from *scope*'s *rows*, keeping the total in step and noting the
        scope for the index (see :meth:`_refile`); whether it was there. Called under the
        lock."""
        if rows.pop(key, None) is None:
            return False
        if not rows:
            del self.rows[scope]
        self.total -= 1
        changed = self.changed
        changed.add(scope)
        if len(changed) > CHANGED_LIMIT:
            self.refile()
        return True

    # -- in-flight rows ----------------------------------------------------------------

    def expire(self, deadline: float, limit: int) -> tuple[int, bool]:
        """Remove the rows created before *deadline*, from scopes holding about *limit*
        rows (at least one scope); how many, and whether the limit cut the step short.
        Called under the storage's lock.

        Found from the scope-size index, not by visiting every scope: within one size, the
        index orders scopes by their oldest row, so the scopes holding an expired row are
        one range of each size's run, found by bisection and taken out of the index at
        once. The cost is O(sizes log n + expired scopes), and a table has few distinct
        sizes (at most the quota, and at most about sqrt(2 x rows))."""
        if self.changed:
            self.refile()
        index = self.index
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
                removed += self.expire_run(run, size, deadline)
                limit -= len(run) * size
                if limit <= 0:
                    return removed, True
            # Scopes the run left smaller were filed again, later in the index: each is
            # seen again with its new size, and its oldest row has not expired.
            at = index.bisect_left((neg + 1, -math.inf, "", ""))
            first = index[at] if at < len(index) else None
        return removed, False

    def expire_run(self, run: list[Entry], size: int, deadline: float) -> int:
        """Remove the expired rows of *run*, scopes of *size* rows each holding at least
        one expired row, already out of the index; how many. Scopes that expire whole go
        in bulk (:meth:`_bury`), the others lose their expired prefix and are filed again.
        Called under the storage's lock."""
        removed = 0
        if size == 1:
            whole = run
        else:
            whole = []
            all_rows = self.rows
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
                self.keep(scope, dict(islice(rows.items(), expired, None)), kind, expired)
                removed += expired
        self.bury(whole, size)
        return removed + len(whole) * size

    def check(self) -> None:
        """Assert that the index and the kind totals agree with the rows (a full scan)."""
        self.refile()
        expected = sorted(
            _entry(scope, rows, scope_kind(scope)) for scope, rows in self.rows.items()
        )
        assert list(self.index) == expected, "scope-size index out of step"
        assert sorted(self.filed.values()) == expected, "filed entries out of step"
        kinds: dict[str, int] = {}
        for scope, rows in self.rows.items():
            kinds[scope_kind(scope)] = kinds.get(scope_kind(scope), 0) + len(rows)
        actual = {kind: n for kind, n in self.kind_rows.items() if n}
        assert actual == kinds, f"kind totals {actual} != {kinds}"
        assert self.total == sum(kinds.values()), "row total out of step"
