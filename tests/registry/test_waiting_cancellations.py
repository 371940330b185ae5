"""A cancellation that finds its request not in flight waits, ``track_wait`` seconds, for
that request's track, on every backend: a request tracked meanwhile is cancelled (its
track was still on its way); nothing of the cancellation outlives its answer, so a request
of the id tracked after it never is; and what waits counts against the scope's quota."""

from __future__ import annotations

import asyncio

import pytest

from mcp_cancellation import CancellationLimitReached, ConfigurationError

from ..support import HeldRequest, MakeRegistry

WAIT = 0.4


async def test_a_request_tracked_while_its_cancellation_waits_is_cancelled(
    make_registry: MakeRegistry,
) -> None:
    registry = make_registry(track_wait=WAIT)
    cancel = asyncio.create_task(registry.cancel_in_flight(7, "late track", scope="s"))
    await asyncio.sleep(WAIT / 4)
    held = HeldRequest(registry, 7, "s")
    token = await held.started()
    assert await cancel  # recorded: it stopped a request
    assert token.cancelled
    assert token.reason == "late track"
    await held.finish()


async def test_a_request_tracked_after_the_answer_is_not_cancelled(
    make_registry: MakeRegistry,
) -> None:
    registry = make_registry(track_wait=WAIT)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert not await registry.cancel_in_flight(8, "stale", scope="s")
    assert loop.time() - started >= WAIT * 0.9  # it did wait
    async with registry.request(8, scope="s") as token:
        assert not token.cancelled
    assert not await registry.is_cancelled(8, scope="s")


async def test_a_waiting_cancellation_counts_against_the_quota(
    make_registry: MakeRegistry,
) -> None:
    registry = make_registry(track_wait=WAIT, max_rows_per_scope=2)
    waiting = [asyncio.create_task(registry.cancel_in_flight(n, scope="s")) for n in (1, 2)]
    await asyncio.sleep(WAIT / 4)
    with pytest.raises(CancellationLimitReached):
        await registry.cancel_in_flight(3, scope="s")
    assert await registry.cancel_in_flight(1, scope="other") is False  # other scopes: free
    assert await asyncio.gather(*waiting) == [False, False]
    assert not await registry.cancel_in_flight(3, scope="s")  # withdrawn: room again


async def test_a_cancelled_wait_is_withdrawn(make_registry: MakeRegistry) -> None:
    registry = make_registry(track_wait=30.0, max_rows_per_scope=1)
    cancel = asyncio.create_task(registry.cancel_in_flight(9, scope="s"))
    await asyncio.sleep(0.1)
    cancel.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancel
    async with registry.request(9, scope="s") as token:
        assert not token.cancelled
    # And it no longer counts against the quota (of one): another may wait.
    task = asyncio.create_task(registry.cancel_in_flight(10, scope="s"))
    await asyncio.sleep(0.1)
    assert not task.done()  # waiting, not refused
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_track_wait_is_a_number_of_seconds(make_registry: MakeRegistry) -> None:
    assert make_registry(track_wait=0.25).track_wait == 0.25
    with pytest.raises(ConfigurationError):
        make_registry(track_wait=None)
    with pytest.raises(ConfigurationError):
        make_registry(track_wait=-1)
