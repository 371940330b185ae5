"""The memory storage under evictions: a read or a clear racing an eviction sees the
surviving rows, and evicted rows are freed even when every insert evicts."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from mcp_cancellation import CancellationRegistry, MemoryStorage


@contextmanager
def _interleave(
    function: Callable[..., Any], marker: str, action: Callable[[], None]
) -> Iterator[None]:
    """Run *action* once, as another thread could, when *function* reaches the source line
    containing *marker* (after its lock-free read, before it uses what it read)."""
    lines, first = inspect.getsourcelines(function)
    target = first + next(i for i, line in enumerate(lines) if marker in line)
    code = function.__code__
    done = False

    def local(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal done
        if event == "line" and frame.f_lineno == target and not done:
            done = True
            action()
        return local

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        return local if frame.f_code is code else None

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield
    finally:
        sys.settrace(previous)
    assert done, "the interleaving point was never reached"


async def _survivor_setup() -> tuple[CancellationRegistry, Callable[[], None]]:
    """A memory registry at its cap whose next two inserts evict two of the three rows of
    scope ``a`` (leaving ``a2``) and then free the evicted rows; returns it and those
    inserts, to be run by "another thread" at the interleaving point."""
    storage = MemoryStorage()
    registry = CancellationRegistry(
        storage, max_rows=40, max_rows_per_scope=None, janitor_interval=None
    )  # an eviction batch of 2
    for n in range(3):
        await registry.cancel(f"a{n}", scope="a")
    for n in range(37):
        await registry.cancel(1, scope=f"other-{n}")

    def insert_elsewhere() -> None:
        storage.add_nowait("z", "1", None, registry.limits)  # evicts a0, a1
        storage.add_nowait("z", "2", None, registry.limits)  # frees them

    return registry, insert_elsewhere


async def test_memory_clear_racing_an_eviction_still_removes_a_surviving_row() -> None:
    # clear() reads without the lock first; an eviction in another thread that keeps this
    # row (moving the scope's survivors to a new dict) and frees the old dict must not make
    # that read miss the row, which would then stay and cancel the id's next request.
    registry, insert_elsewhere = await _survivor_setup()
    with _interleave(MemoryStorage.remove_nowait, "key not in rows", insert_elsewhere):
        await registry.clear("a2", scope="a")
    assert not await registry.is_cancelled("a2", scope="a")
    assert (await registry.stats()).rows.get("a") is None


async def test_memory_read_racing_an_eviction_still_sees_a_surviving_row() -> None:
    registry, insert_elsewhere = await _survivor_setup()
    with _interleave(MemoryStorage.get, "row = rows.get(key)", insert_elsewhere):
        assert await registry.is_cancelled("a2", scope="a")


async def test_memory_evicted_rows_are_freed_when_every_insert_evicts() -> None:
    # Below a cap of 40 the eviction batch is one row, so at the cap every insert evicts;
    # the rows it evicted must still be freed (not kept until the next cleanup, which may
    # be a janitor interval away or never), or the cap no longer bounds memory.
    storage = MemoryStorage()
    registry = CancellationRegistry(
        storage, max_rows=10, max_rows_per_scope=None, janitor_interval=None
    )
    for n in range(1000):
        await registry.cancel(n, "r", scope=f"s{n % 3}")
    assert (await registry.stats()).total_rows == 10
    waiting = sum(len(dead) for dead in storage._graveyard)
    assert waiting <= 1, f"{waiting} evicted rows still held"
