"""Space-Saving heavy hitters: the top offenders of an unbounded stream in bounded memory.

Metwally, Agrawal and El Abbadi, "Efficient computation of frequent and top-k elements in
data streams" (2005). The structure keeps at most *capacity* counters. A new item takes
over the smallest counter and inherits its count (recorded as the item's ``error``), so a
count is an upper bound that exceeds the true count by at most ``error <= total/capacity``,
and any item seen more than ``total/capacity`` times is guaranteed to be tracked. A flood of
distinct items therefore churns the smallest counters while persistent offenders keep
theirs.

The minimum is found with a lazily pruned heap (stale entries are skipped on pop and the
heap is rebuilt when it grows past a few times the capacity): O(log capacity) amortised per
update, instead of a scan of every counter.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from typing import NamedTuple

__all__ = ["HeavyHitter", "SpaceSaving"]


class HeavyHitter(NamedTuple):
    """One tracked item: its ``estimate`` (an upper bound on its count) and maximum
    ``error`` (the estimate minus the error is a lower bound)."""

    item: str
    estimate: int
    error: int


class SpaceSaving:
    """Bounded top-k counter over a stream of string items; thread-safe."""

    __slots__ = ("_capacity", "_counts", "_errors", "_heap", "_lock", "_seq", "_total")

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive integer, not {capacity!r}")
        self._capacity = capacity
        self._counts: dict[str, int] = {}
        self._errors: dict[str, int] = {}
        # (count, seq, item); entries whose count no longer matches are stale.
        self._heap: list[tuple[int, int, str]] = []
        self._seq = itertools.count()
        self._total = 0
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def total(self) -> int:
        """How many occurrences were added in all."""
        return self._total

    def __len__(self) -> int:
        return len(self._counts)

    def add(self, item: str, count: int = 1) -> None:
        """Count *count* more occurrences of *item*."""
        if count <= 0:
            return
        with self._lock:
            self._total += count
            counts = self._counts
            current = counts.get(item)
            if current is not None:
                current += count
                counts[item] = current
            elif len(counts) < self._capacity:
                current = counts[item] = count
                self._errors[item] = 0
            else:
                floor, victim = self._pop_min()
                del counts[victim]
                del self._errors[victim]
                current = counts[item] = floor + count
                self._errors[item] = floor
            heapq.heappush(self._heap, (current, next(self._seq), item))
            if len(self._heap) > 4 * self._capacity + 64:
                self._rebuild()

    def _pop_min(self) -> tuple[int, str]:
        heap, counts = self._heap, self._counts
        while True:
            count, _, item = heapq.heappop(heap)
            if counts.get(item) == count:
                return count, item

    def _rebuild(self) -> None:
        self._heap = [(c, next(self._seq), item) for item, c in self._counts.items()]
        heapq.heapify(self._heap)

    def top(self, k: int) -> list[HeavyHitter]:
        """The *k* items with the largest counts, largest first (ties by item)."""
        with self._lock:
            entries = [HeavyHitter(i, c, self._errors[i]) for i, c in self._counts.items()]
        return heapq.nsmallest(k, entries, key=lambda h: (-h.estimate, h.item))

    def snapshot(self) -> dict[str, int]:
        """Every tracked item and its count."""
        with self._lock:
            return dict(self._counts)

    def summary(self) -> tuple[list[HeavyHitter], int]:
        """Every tracked item, and the *floor*: a bound on the count of any item not
        tracked (the smallest count once the structure is full, else 0)."""
        with self._lock:
            entries = [HeavyHitter(i, c, self._errors[i]) for i, c in self._counts.items()]
            full = len(self._counts) >= self._capacity
        floor = min((e.estimate for e in entries), default=0) if full else 0
        return entries, floor

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()
            self._errors.clear()
            self._heap.clear()
            self._total = 0
