"""The janitor: an asyncio task running cleanup every janitor_interval, stopped cleanly."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection

import pytest

from mcp_cancellation import CancellationRegistry, MemoryStorage, StorageUnavailable
from mcp_cancellation.signals import cancellation_cleanup

from ..support import MakeRegistry, async_wait_until
from ._util import receiving, rows

INTERVAL = 0.05


async def test_janitor_runs_cleanup_periodically(make_registry: MakeRegistry) -> None:
    registry = make_registry(janitor_interval=INTERVAL)
    with receiving(cancellation_cleanup) as passes:
        registry.start_janitor()
        assert registry.janitor_running
        # Several passes happen without anyone calling cleanup().
        await async_wait_until(lambda: len(passes.calls) >= 3, within=10)
        await registry.stop_janitor()
    assert all(sender is registry for sender, _ in passes.calls)
    assert not registry.janitor_running


async def test_janitor_sweeps_expired_rows(make_registry: MakeRegistry) -> None:
    registry = make_registry(janitor_interval=INTERVAL, ttl=INTERVAL)
    registry.start_janitor()
    await registry.cancel(1, scope="s")
    await registry.cancel(2, scope="t")

    async def empty() -> bool:
        return await rows(registry) == {}

    await async_wait_until(empty, within=10)
    await registry.stop_janitor()


async def test_janitor_sweeps_dead_owners(make_registry: MakeRegistry) -> None:
    registry = make_registry(janitor_interval=INTERVAL)

    async def abandon() -> None:
        await registry.track(1, scope="s")

    await asyncio.create_task(abandon())
    assert await registry.in_flight(1, scope="s")
    registry.start_janitor()

    async def swept() -> bool:
        return not await registry.in_flight(1, scope="s")

    await async_wait_until(swept, within=10)
    await registry.stop_janitor()


async def test_stop_janitor_stops_the_task_and_no_pass_follows(
    make_registry: MakeRegistry,
) -> None:
    registry = make_registry(janitor_interval=INTERVAL)
    with receiving(cancellation_cleanup) as passes:
        registry.start_janitor()
        task = registry._janitor._task
        assert task is not None
        await async_wait_until(lambda: len(passes.calls) >= 1, within=10)
        await registry.stop_janitor()
        assert task.done()
        assert task.cancelled()
        assert not registry.janitor_running
        seen = len(passes.calls)
        await asyncio.sleep(INTERVAL * 4)
        assert len(passes.calls) == seen
    await registry.stop_janitor()  # idempotent


async def test_start_janitor_is_idempotent(make_registry: MakeRegistry) -> None:
    registry = make_registry(janitor_interval=INTERVAL)
    registry.start_janitor()
    first = registry._janitor._task
    registry.start_janitor()
    assert registry._janitor._task is first
    await registry.stop_janitor()
    registry.start_janitor()  # and restartable
    assert registry.janitor_running
    assert registry._janitor._task is not first
    await registry.aclose()
    assert not registry.janitor_running


async def test_no_janitor_when_the_interval_is_none(make_registry: MakeRegistry) -> None:
    registry = make_registry(janitor_interval=None)
    assert registry.janitor_interval is None
    registry.start_janitor()
    assert not registry.janitor_running
    await registry.stop_janitor()  # nothing to stop


async def test_async_with_starts_and_stops_the_janitor() -> None:
    registry = CancellationRegistry(MemoryStorage(), janitor_interval=INTERVAL)
    async with registry as entered:
        assert entered is registry
        assert registry.janitor_running
    assert not registry.janitor_running


async def test_default_janitor_interval() -> None:
    registry = CancellationRegistry(MemoryStorage())
    assert registry.janitor_interval == 60.0
    assert not registry.janitor_running  # only started on request


class _FailingStorage(MemoryStorage):
    """A real memory storage whose first cleanups fail, as a flaky backend's would."""

    def __init__(self, failures: list[Exception]) -> None:
        super().__init__()
        self.failures = failures
        self.calls = 0

    async def cleanup(self, ttl: float | None, dead_owners: Collection[str]) -> tuple[int, int]:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return await super().cleanup(ttl, dead_owners)


async def test_janitor_survives_failing_passes(caplog: pytest.LogCaptureFixture) -> None:
    storage = _FailingStorage([StorageUnavailable("down"), RuntimeError("bug")])
    registry = CancellationRegistry(storage, janitor_interval=INTERVAL, ttl=INTERVAL)
    await registry.cancel(1, scope="s")
    with caplog.at_level(logging.WARNING, logger="mcp_cancellation"):
        registry.start_janitor()

        async def swept() -> bool:
            return not await registry.is_cancelled(1, scope="s")

        await async_wait_until(swept, within=10)
        assert registry.janitor_running
        await registry.stop_janitor()
    assert storage.calls >= 3
    messages = [record.getMessage() for record in caplog.records]
    assert any("skipped" in m and "down" in m for m in messages)
    assert any("failed" in m for m in messages)


async def test_stop_janitor_during_a_slow_pass() -> None:
    entered = asyncio.Event()

    class SlowStorage(MemoryStorage):
        async def cleanup(self, ttl: float | None, dead_owners: Collection[str]) -> tuple[int, int]:
            entered.set()
            await asyncio.sleep(3600)
            return (0, 0)

    registry = CancellationRegistry(SlowStorage(), janitor_interval=0.01)
    registry.start_janitor()
    await entered.wait()
    await registry.stop_janitor()
    assert not registry.janitor_running
