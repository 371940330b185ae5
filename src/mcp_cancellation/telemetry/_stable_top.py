"""Which heavy hitters a scrape exports, so that a flood cannot churn label values.

The Space-Saving summary (:mod:`._heavy_hitters`) under a flood of distinct items keeps
replacing its smallest counters: exporting its top K as they stand would mint a new
``scope`` series for every few flood addresses. :class:`StableTop` exports a subset that
changes only for a reason, with a hard bound:

* **certain only**: an entry is admitted only if it is certainly among the top k: its
  guaranteed count (estimate minus error) exceeds both the summary's *floor* (the most any
  untracked item can have) and the k-th largest estimate among the other entries. Items
  that tie, such as a flood of addresses seen once or twice each, never are, even before
  the summary fills up;
* **sticky**: an admitted entry stays exported while the summary still tracks it, and is
  displaced only by an entry certainly larger than it;
* **bounded**: at most *k* entries at a time, and at most *k* admissions in any *window*
  seconds. So the distinct entries exported in any window are at most ``2 * k``.

The state (what is shown, when each admission happened) can be saved and loaded, so that
the workers of ``PROMETHEUS_MULTIPROC_DIR`` mode share one selection.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._heavy_hitters import HeavyHitter

__all__ = ["StableTop"]


def _rank(entry: HeavyHitter) -> tuple[int, str]:
    return (-entry.estimate, entry.item)


class StableTop:
    """At most *k* exported entries, at most *k* admissions per *window* seconds."""

    def __init__(
        self, k: int, window: float = 120.0, clock: Callable[[], float] = time.time
    ) -> None:
        self.k = k
        self.window = window
        self._clock = clock
        self._shown: list[str] = []
        self._admitted: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()

    def select(self, entries: Iterable[HeavyHitter], floor: int) -> list[HeavyHitter]:
        """The entries to export now (largest first), from the summary's *entries* and
        *floor*; updates the selection."""
        with self._lock:
            now = self._clock()
            admitted = self._admitted
            while admitted and admitted[0] <= now - self.window:
                admitted.popleft()
            by_item = {e.item: e for e in entries}
            kept = [by_item[item] for item in self._shown if item in by_item]
            shown = {e.item for e in kept}
            ranked = sorted(by_item.values(), key=_rank)
            candidates = [
                e
                for rank, e in enumerate(ranked)
                if e.item not in shown and e.estimate - e.error > self._bar(ranked, rank, floor)
            ]
            for candidate in candidates:
                if len(admitted) >= self.k:
                    break
                if len(kept) >= self.k:
                    weakest = min(kept, key=lambda e: (e.estimate, e.item))
                    if candidate.estimate - candidate.error <= weakest.estimate:
                        continue  # not certainly larger: the incumbent stays
                    kept.remove(weakest)
                kept.append(candidate)
                admitted.append(now)
            kept.sort(key=_rank)
            self._shown = [e.item for e in kept]
            return kept

    def _bar(self, ranked: list[HeavyHitter], rank: int, floor: int) -> int:
        """What the entry at *rank* (of *ranked*, largest first) must certainly exceed to be
        among the top k: the k-th largest estimate among the others (an upper bound of
        their counts), and the floor (an upper bound of any untracked item's)."""
        index = self.k if rank < self.k else self.k - 1
        kth_other = ranked[index].estimate if index < len(ranked) else 0
        return max(floor, kth_other)

    def state(self) -> dict[str, Any]:
        """What :meth:`load` restores (JSON-serialisable)."""
        with self._lock:
            return {"shown": list(self._shown), "admitted": list(self._admitted)}

    def load(self, state: Mapping[str, Any]) -> None:
        """Restore a :meth:`state`; anything malformed is ignored."""
        shown = state.get("shown")
        admitted = state.get("admitted")
        if not isinstance(shown, list) or not isinstance(admitted, list):
            return
        with self._lock:
            self._shown = [s for s in shown if isinstance(s, str)][: self.k]
            self._admitted = collections.deque(
                sorted(float(t) for t in admitted if isinstance(t, int | float))[-self.k :]
            )
