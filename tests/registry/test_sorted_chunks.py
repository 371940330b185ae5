"""The memory storage's sorted chunks (its scope-size index) hold exactly what a plain
sorted list would, through every operation, with chunks small enough that inserts split
them, removals merge them and ranges span several."""

from __future__ import annotations

import bisect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_cancellation.storage._sorted_chunks import SortedChunks

Entry = tuple[int, int]

keys = st.tuples(st.integers(-4, 0), st.integers(0, 40))
# (operation, a number, two keys): "remove" takes the held entry the number picks (or the
# first key, sometimes absent), "pop_front" that many entries, "pop_range" the keys' range
# (up to a limit the number picks, or all of it).
operations = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "remove", "remove", "pop_front", "pop_range", "replace"]),
        st.integers(0, 1_000),
        keys,
        keys,
    ),
    max_size=150,
)


def _check(chunks: SortedChunks[Entry], model: list[Entry]) -> None:
    chunks.check()
    assert list(chunks) == model
    assert len(chunks) == len(model)
    assert bool(chunks) == bool(model)
    if model:
        assert chunks.first() == model[0]
    for probe in [(-5, 0), *model[:3], (-2, 20), (0, 41), (1, 0)]:
        assert chunks.count_below(probe) == bisect.bisect_left(model, probe)
        at = bisect.bisect_left(model, probe)
        assert chunks.first_from(probe) == (model[at] if at < len(model) else None)


@pytest.mark.parametrize("load", [2, 4, 8])
@settings(max_examples=200, deadline=None)
@given(initial=st.sets(keys, max_size=100), ops=operations)
def test_sorted_chunks_agree_with_a_sorted_list(
    load: int, initial: set[Entry], ops: list[tuple[str, int, Entry, Entry]]
) -> None:
    chunks = SortedChunks(initial, load=load)
    model = sorted(initial)
    _check(chunks, model)
    for op, n, a, b in ops:
        if op == "add":
            if a not in model:
                chunks.add(a)
                bisect.insort(model, a)
        elif op == "remove":
            if model and n % 4:
                entry = model[n % len(model)]
                chunks.remove(entry)
                model.remove(entry)
            elif a in model:
                chunks.remove(a)
                model.remove(a)
            else:
                with pytest.raises(ValueError, match="not in the list"):
                    chunks.remove(a)
        elif op == "pop_front":
            count = n % 40
            assert chunks.pop_front(count) == model[:count]
            del model[:count]
        elif op == "pop_range":
            low, high = a, b
            limit = None if n % 3 == 0 else n % 7
            expected = [e for e in model if low <= e < high][:limit]
            assert chunks.pop_range(low, high, limit) == expected
            model = [e for e in model if e not in expected]
        else:
            entries = {a, b, *model[::2]}
            chunks.replace(entries)
            model = sorted(entries)
        _check(chunks, model)


def test_an_empty_list_gives_up_nothing() -> None:
    chunks: SortedChunks[Entry] = SortedChunks()
    assert chunks.pop_front(5) == []
    assert chunks.pop_range((-9, 0), (9, 0)) == []
    assert chunks.count_below((0, 0)) == 0
    assert chunks.first_from((0, 0)) is None
    with pytest.raises(IndexError):
        chunks.first()
    with pytest.raises(ValueError, match="not in the list"):
        chunks.remove((0, 0))
