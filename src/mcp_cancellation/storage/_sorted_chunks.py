"""A sorted list kept in sorted chunks, that gives up a key range at once (private).

The memory storage's scope-size index. ``sortedcontainers.SortedList`` served before: it
removes entries one at a time (about 0.4 µs each in pure Python), and a flood of rotating
addresses leaves thousands of one-row scopes that an eviction or an expiry takes out of the
index together. Here a range of entries leaves in O(removed + chunks) C-level work: the
chunks it covers are dropped whole and the two at its edges sliced. The rest is what a
sorted list of chunks always does (as ``sortedcontainers`` does): an insert or a removal
bisects the chunks' maxima, then its chunk, and moves at most about ``2 * load`` pointers.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Iterator
from itertools import chain, islice, pairwise
from typing import Any, Generic, TypeVar

__all__ = ["SortedChunks"]

T = TypeVar("T", bound=tuple[Any, ...])

#: Entries per chunk when built; a chunk splits past twice as many, and merges with its
#: neighbour below half as many. sortedcontainers' default.
LOAD = 1_000


class SortedChunks(Generic[T]):
    """Distinct tuples in ascending order, in sorted chunks of about *load* entries."""

    __slots__ = ("_len", "_lists", "_load", "_maxes")

    def __init__(self, entries: Iterable[T] = (), *, load: int = LOAD) -> None:
        self._load = load
        self._lists: list[list[T]] = []
        self._maxes: list[T] = []  # the last entry of each chunk
        self._len = 0
        self.replace(entries)

    def replace(self, entries: Iterable[T]) -> None:
        """Hold exactly *entries* (in any order)."""
        values = sorted(entries)
        load = self._load
        self._lists = [values[i : i + load] for i in range(0, len(values), load)]
        self._maxes = [chunk[-1] for chunk in self._lists]
        self._len = len(values)

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[T]:
        return chain.from_iterable(self._lists)

    def first(self) -> T:
        """The smallest entry (``IndexError`` when empty)."""
        return self._lists[0][0]

    def add(self, entry: T) -> None:
        """Insert *entry* (not already held)."""
        lists, maxes = self._lists, self._maxes
        if not lists:
            lists.append([entry])
            maxes.append(entry)
        else:
            pos = bisect_right(maxes, entry)
            if pos == len(maxes):  # past every entry: the common case of a new scope
                pos -= 1
                lists[pos].append(entry)
                maxes[pos] = entry
            else:
                insort(lists[pos], entry)
            if len(lists[pos]) > 2 * self._load:
                self._split(pos)
        self._len += 1

    def remove(self, entry: T) -> None:
        """Remove *entry* (``ValueError`` if it is not held)."""
        lists, maxes = self._lists, self._maxes
        pos = bisect_left(maxes, entry)
        if pos < len(maxes):
            chunk = lists[pos]
            idx = bisect_left(chunk, entry)
            if chunk[idx] == entry:
                del chunk[idx]
                self._len -= 1
                self._settle(pos)
                return
        raise ValueError(f"{entry!r} is not in the list")

    def pop_front(self, count: int) -> list[T]:
        """Remove and return the *count* smallest entries (all, if there are fewer)."""
        lists = self._lists
        taken: list[T] = []
        whole = 0
        for chunk in lists:
            if count >= len(chunk):
                taken += chunk
                count -= len(chunk)
                whole += 1
                if not count:
                    break
            else:
                taken += chunk[:count]
                del chunk[:count]
                break
        del lists[:whole]
        del self._maxes[:whole]
        self._len -= len(taken)
        if lists:
            self._settle(0)
        return taken

    def pop_range(
        self, low: tuple[Any, ...], high: tuple[Any, ...], limit: int | None = None
    ) -> list[T]:
        """Remove and return the entries ``e`` with ``low <= e < high``, in order: the
        first *limit* of them when a limit is given."""
        lists, maxes = self._lists, self._maxes
        start = bisect_left(maxes, low)
        if start == len(lists) or not low < high:
            return []
        if limit is not None:
            # Move high down to the entry just past the first *limit* (a walk over chunks).
            pos, idx, need = start, bisect_left(lists[start], low), limit
            while pos < len(lists):
                left = len(lists[pos]) - idx
                if need < left:
                    high = min(high, lists[pos][idx + need])
                    break
                need -= left
                pos, idx = pos + 1, 0
            if not low < high:
                return []
        stop = bisect_left(maxes, high)  # the chunk holding high, or len(lists)
        chunk = lists[start]
        first = bisect_left(chunk, low)
        if stop == start:  # within one chunk
            last = bisect_left(chunk, high)
            taken = chunk[first:last]
            del chunk[first:last]
        else:
            taken = chunk[first:]
            del chunk[first:]
            for middle in islice(lists, start + 1, stop):
                taken += middle
            if stop < len(lists):
                end = lists[stop]
                last = bisect_left(end, high)
                taken += end[:last]
                del end[:last]
            del lists[start + 1 : stop]
            del maxes[start + 1 : stop]
            if start + 1 < len(lists):
                self._settle(start + 1)
        self._len -= len(taken)
        if taken:
            self._settle(start)
        return taken

    def count_below(self, key: tuple[Any, ...]) -> int:
        """How many entries are ``< key``: O(chunks), in C."""
        maxes = self._maxes
        pos = bisect_left(maxes, key)
        if pos == len(maxes):
            return self._len
        return sum(map(len, islice(self._lists, pos))) + bisect_left(self._lists[pos], key)

    def first_from(self, key: tuple[Any, ...]) -> T | None:
        """The smallest entry ``>= key``, or ``None``."""
        maxes = self._maxes
        pos = bisect_left(maxes, key)
        if pos == len(maxes):
            return None
        chunk = self._lists[pos]
        return chunk[bisect_left(chunk, key)]

    def check(self) -> None:
        """Assert the structure's invariants (for tests): non-empty chunks of at most twice
        the load, in order within and across chunks, their maxima and the length kept."""
        lists = self._lists
        assert all(lists), "an empty chunk"
        assert all(len(chunk) <= 2 * self._load for chunk in lists), "a chunk too large"
        assert self._maxes == [chunk[-1] for chunk in lists], "maxima out of step"
        flat = list(self)
        assert all(a < b for a, b in pairwise(flat)), "out of order"
        assert self._len == len(flat), "length out of step"

    def _split(self, pos: int) -> None:
        chunk = self._lists[pos]
        half = len(chunk) // 2
        self._lists[pos : pos + 1] = [chunk[:half], chunk[half:]]
        self._maxes[pos : pos + 1] = [chunk[half - 1], chunk[-1]]

    def _settle(self, pos: int) -> None:
        """After removals from chunk *pos* (an existing position): drop it if empty, else
        keep its maximum, and merge it into a neighbour once it is small."""
        lists, maxes = self._lists, self._maxes
        chunk = lists[pos]
        if not chunk:
            del lists[pos]
            del maxes[pos]
            return
        maxes[pos] = chunk[-1]
        if len(chunk) < self._load // 2 and len(lists) > 1:
            if pos == len(lists) - 1:
                pos -= 1  # the last chunk merges into the one before it
            lists[pos] += lists[pos + 1]
            maxes[pos] = lists[pos][-1]
            del lists[pos + 1]
            del maxes[pos + 1]
            if len(lists[pos]) > 2 * self._load:
                self._split(pos)
