"""``scope_rejections`` under floods: only certain heavy hitters, sticky, and at most
``2 * top_k`` distinct scopes in any window (the :class:`StableTop` selection)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_cancellation.telemetry._heavy_hitters import SpaceSaving
from mcp_cancellation.telemetry._stable_top import StableTop


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def distinct_in_windows(scrapes: list[tuple[float, set[str]]], window: float) -> int:
    """The most distinct items exported in any *window* seconds of scrapes."""
    worst = 0
    for i, (start, _) in enumerate(scrapes):
        seen: set[str] = set()
        for t, items in scrapes[i:]:
            if t >= start + window:
                break
            seen |= items
        worst = max(worst, len(seen))
    return worst


def test_a_rotating_flood_exports_only_the_persistent_offender() -> None:
    k = 5
    clock = Clock()
    hitters, top = SpaceSaving(10 * k), StableTop(k, 120, clock)
    exported: list[tuple[float, set[str]]] = []
    for i in range(20_000):
        hitters.add(f"ip:10.0.{i >> 8 & 255}.{i & 255}")
        if i % 10 == 0:
            hitters.add("ip:203.0.113.66")
        if i % 100 == 0:  # a scrape every 100 rejections, one second apart
            clock.now += 1
            exported.append((clock.now, {e.item for e in top.select(*hitters.summary())}))
    final = {item for _, items in exported[-10:] for item in items}
    assert final == {"ip:203.0.113.66"}
    assert distinct_in_windows(exported, 120) <= 2 * k


def test_a_small_table_exports_its_exact_counts() -> None:
    """Before the summary is full every count is exact, so every entry is certain."""
    hitters, top = SpaceSaving(50), StableTop(3, 120, Clock())
    for item, n in (("a", 5), ("b", 3), ("c", 2), ("d", 1)):
        hitters.add(item, n)
    assert [(e.item, e.estimate) for e in top.select(*hitters.summary())] == [
        ("a", 5),
        ("b", 3),
        ("c", 2),
    ]


def test_ties_are_never_certain_even_before_the_summary_fills() -> None:
    """The first items of a flood, each seen once, are exact counts but tie: none of them
    is certainly among the top k, so none takes the admission budget; an offender seen
    more often than the k-th of the others is admitted at once."""
    clock = Clock()
    hitters, top = SpaceSaving(50), StableTop(2, 120, clock)
    for i in range(10):
        hitters.add(f"flood{i}")
    assert top.select(*hitters.summary()) == []
    hitters.add("offender", 3)
    assert [e.item for e in top.select(*hitters.summary())] == ["offender"]


def test_an_incumbent_gives_way_only_to_a_certainly_larger_entry() -> None:
    clock = Clock()
    hitters, top = SpaceSaving(50), StableTop(2, 120, clock)
    hitters.add("a", 10)
    hitters.add("b", 5)
    assert {e.item for e in top.select(*hitters.summary())} == {"a", "b"}
    hitters.add("c", 5)  # equal to b: b stays
    assert {e.item for e in top.select(*hitters.summary())} == {"a", "b"}
    hitters.add("c", 1)  # now certainly larger than b, but the budget (2 per 120 s) is spent
    assert {e.item for e in top.select(*hitters.summary())} == {"a", "b"}
    clock.now += 121  # a new window
    assert {e.item for e in top.select(*hitters.summary())} == {"a", "c"}


@settings(max_examples=60, deadline=None)
@given(
    k=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
    scrape_every=st.floats(0.2, 30),
)
def test_distinct_exported_in_any_window_is_at_most_twice_k(
    k: int, seed: int, scrape_every: float
) -> None:
    """Whatever the stream (bursts of new heavy items, floods, re-rankings), any 120 s
    of scrapes export at most 2*k distinct items."""
    rng = random.Random(seed)
    clock = Clock()
    hitters, top = SpaceSaving(4 * k), StableTop(k, 120, clock)
    exported: list[tuple[float, set[str]]] = []
    fresh = 0
    for _ in range(300):
        for _ in range(rng.randint(0, 30)):
            if rng.random() < 0.3:  # an attacker's new address, heavier than the last
                fresh += 1
                hitters.add(f"new{fresh}", rng.randint(1, 5 * fresh))
            else:
                hitters.add(f"old{rng.randint(0, 3 * k)}")
        clock.now += scrape_every
        selected = top.select(*hitters.summary())
        assert len(selected) <= k
        exported.append((clock.now, {e.item for e in selected}))
    assert distinct_in_windows(exported, 120) <= 2 * k


def test_state_round_trips_and_tolerates_garbage() -> None:
    clock = Clock()
    hitters, top = SpaceSaving(50), StableTop(2, 120, clock)
    hitters.add("a", 3)
    top.select(*hitters.summary())
    other = StableTop(2, 120, clock)
    other.load(top.state())
    assert other.state() == top.state()
    other.load({"shown": "nonsense", "admitted": None})
    assert other.state() == top.state()
