"""Space-Saving: bounded memory, never underestimates, keeps every frequent item."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_cancellation.telemetry._heavy_hitters import SpaceSaving


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(min_value=1, max_value=12),
    stream=st.lists(st.integers(min_value=0, max_value=40).map(str), max_size=400),
)
def test_space_saving_guarantees(capacity: int, stream: list[str]) -> None:
    hitters = SpaceSaving(capacity)
    for item in stream:
        hitters.add(item)
    truth = Counter(stream)
    assert len(hitters) <= capacity
    assert hitters.total == len(stream)
    top = hitters.top(capacity)
    assert sum(h.estimate for h in top) == len(stream)  # counters always sum to the total
    tracked = {h.item: h for h in top}
    for h in top:
        assert h.estimate - h.error <= truth[h.item] <= h.estimate
    for item, count in truth.items():
        if count * capacity > len(stream):  # more than total/capacity: always kept
            assert item in tracked


def test_persistent_offender_survives_a_flood_of_distinct_items() -> None:
    hitters = SpaceSaving(50)
    for i in range(100_000):
        hitters.add(f"ip:10.{i >> 16}.{(i >> 8) & 255}.{i & 255}")
        if i % 10 == 0:
            hitters.add("ip:203.0.113.66")
    assert len(hitters) == 50
    first = hitters.top(1)[0]
    assert first.item == "ip:203.0.113.66"
    assert first.estimate >= 10_000


def test_top_orders_by_estimate_then_item_and_counts_weights() -> None:
    hitters = SpaceSaving(10)
    hitters.add("b", 3)
    hitters.add("a", 3)
    hitters.add("c", 5)
    hitters.add("d", 0)  # ignored
    assert [(h.item, h.estimate) for h in hitters.top(2)] == [("c", 5), ("a", 3)]
    hitters.clear()
    assert hitters.top(5) == []
    assert hitters.total == 0


@pytest.mark.parametrize("capacity", [0, -1, True, 1.5])
def test_capacity_must_be_positive(capacity: object) -> None:
    with pytest.raises(ValueError, match="capacity"):
        SpaceSaving(capacity)  # type: ignore[arg-type]
