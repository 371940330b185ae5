"""In-flight rows: one per request owner; cancel_in_flight only reaches a request in flight
in the caller's own scope."""

from __future__ import annotations

import logging

import pytest

from mcp_cancellation import (
    CancellationRegistry,
    MemoryStorage,
    RequestToken,
    StorageUnavailable,
)

from ..support import HeldRequest
from ._util import in_flight, rows


class _Tracked(HeldRequest):
    """The same, with ``track()`` and ``untrack()`` instead of ``request()``."""

    async def _serve(self, registry: CancellationRegistry, request_id: object, scope: str) -> None:
        self.token = await registry.track(request_id, scope=scope)
        self.entered.set()
        await self.release.wait()
        await registry.untrack(request_id, scope=scope)


async def test_track_untrack_in_flight(registry: CancellationRegistry) -> None:
    assert not await registry.in_flight(1, scope="s")
    token = await registry.track(1, scope="s")
    assert isinstance(token, RequestToken)
    assert not token.cancelled
    assert await registry.in_flight(1, scope="s")
    assert not await registry.in_flight(1, scope="t")
    assert not await registry.in_flight(2, scope="s")
    assert await in_flight(registry) == {"s": 1}
    await registry.untrack(1, scope="s")
    assert not await registry.in_flight(1, scope="s")
    assert await in_flight(registry) == {}


async def test_tracking_twice_in_one_task_keeps_one_row(registry: CancellationRegistry) -> None:
    await registry.track(1, scope="s")
    await registry.track(1, scope="s")
    assert await in_flight(registry) == {"s": 1}
    await registry.untrack(1, scope="s")
    assert not await registry.in_flight(1, scope="s")


async def test_two_requests_reusing_an_id_each_hold_a_row(registry: CancellationRegistry) -> None:
    first, second = HeldRequest(registry, 1, "s"), HeldRequest(registry, 1, "s")
    first_token, second_token = await first.started(), await second.started()
    assert await in_flight(registry) == {"s": 2}

    await first.finish()
    # The other request is still in flight, and still cancellable.
    assert await registry.in_flight(1, scope="s")
    assert await in_flight(registry) == {"s": 1}
    assert await registry.cancel_in_flight(1, "stop the second", scope="s")
    assert second_token.cancelled
    assert second_token.reason == "stop the second"
    assert not first_token.cancelled

    await second.finish()
    assert await in_flight(registry) == {}
    assert await rows(registry) == {}


async def test_a_cancellation_names_every_request_with_its_id_in_the_scope(
    registry: CancellationRegistry,
) -> None:
    """Rows are keyed by scope and id: two clients sharing an address (one ``ip:`` scope)
    with the same id in flight are both cancelled by a notification for that id, as
    docs/guide.md warns; a request in another scope is not."""
    first, second = (
        HeldRequest(registry, 2, "ip:192.0.2.7"),
        HeldRequest(registry, 2, "ip:192.0.2.7"),
    )
    elsewhere = HeldRequest(registry, 2, "ip:192.0.2.8")
    tokens = [await first.started(), await second.started(), await elsewhere.started()]
    assert await registry.cancel_in_flight(2, "one of them", scope="ip:192.0.2.7")
    assert [token.cancelled for token in tokens] == [True, True, False]
    for request in (first, second, elsewhere):
        await request.finish()
    assert await in_flight(registry) == {}
    assert await rows(registry) == {}


async def test_untrack_removes_only_the_callers_own_row(registry: CancellationRegistry) -> None:
    first, second = _Tracked(registry, 1, "s"), _Tracked(registry, 1, "s")
    await first.started()
    second_token = await second.started()
    # The test's own task never tracked id 1: its untrack touches nobody's row.
    await registry.untrack(1, scope="s")
    assert await in_flight(registry) == {"s": 2}

    await first.finish()
    assert await in_flight(registry) == {"s": 1}
    assert await registry.cancel_in_flight(1, scope="s")
    assert second_token.cancelled
    await second.finish()
    assert await in_flight(registry) == {}


async def test_a_cancellation_reaches_every_owner_of_the_id(registry: CancellationRegistry) -> None:
    held = [HeldRequest(registry, "job", "s") for _ in range(3)]
    tokens = [await h.started() for h in held]
    assert await registry.cancel_in_flight("job", "all of them", scope="s")
    assert all(token.cancelled and token.reason == "all of them" for token in tokens)
    for h in held:
        await h.finish()
    assert await rows(registry) == {}


async def test_cancel_in_flight_ignores_unknown_ids(registry: CancellationRegistry) -> None:
    assert not await registry.cancel_in_flight(404, "nobody", scope="s")
    assert not await registry.is_cancelled(404, scope="s")
    assert await rows(registry) == {}


async def test_cancel_in_flight_ignores_other_scopes(registry: CancellationRegistry) -> None:
    victim = HeldRequest(registry, 1, "ip:192.0.2.1")
    token = await victim.started()
    assert not await registry.cancel_in_flight(1, "not yours", scope="ip:192.0.2.2")
    assert not await registry.cancel_in_flight(1, "not yours", scope="global")
    assert not token.cancelled
    assert await rows(registry) == {}
    await victim.finish()


async def test_cancel_in_flight_ignores_finished_requests(registry: CancellationRegistry) -> None:
    done = HeldRequest(registry, 1, "s")
    await done.started()
    await done.finish()
    assert not await registry.cancel_in_flight(1, scope="s")
    assert await rows(registry) == {}


async def test_cancel_in_flight_records_a_row(registry: CancellationRegistry) -> None:
    held = HeldRequest(registry, 1, "s")
    await held.started()
    assert await registry.cancel_in_flight(1, "why", scope="s")
    assert await registry.is_cancelled(1, scope="s")
    assert await registry.reason(1, scope="s") == "why"
    assert await rows(registry) == {"s": 1}
    await held.finish()
    assert await rows(registry) == {}


async def test_a_request_reusing_an_id_never_inherits_a_cancellation_of_the_one_before(
    registry: CancellationRegistry,
) -> None:
    # A cancellation reaches the requests in flight when it was recorded: a second
    # request with the same id, started while the cancelled one is still finishing (a
    # client behind the same address, counting ids from 1), starts uncancelled.
    first = HeldRequest(registry, 1, "s")
    first_token = await first.started()
    await registry.cancel_in_flight(1, "stop the first", scope="s")
    assert first_token.cancelled
    second = HeldRequest(registry, 1, "s")
    second_token = await second.started()
    assert not second_token.cancelled
    await first.finish()
    assert not second_token.cancelled
    # ... and a cancellation recorded now reaches it.
    assert await registry.cancel_in_flight(1, "stop the second", scope="s")
    assert second_token.reason == "stop the second"
    await second.finish()
    assert await rows(registry) == {}


async def test_a_storage_that_cannot_track_leaves_the_request_running(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A storage that reports itself unavailable while tracking: one warning, the block
    runs, its exit releases."""

    class Unavailable(MemoryStorage):
        async def track(self, scope: str, key: str, owner: str, token: RequestToken) -> None:
            raise StorageUnavailable("down for the test")

    registry = CancellationRegistry(Unavailable(), janitor_interval=None)
    ran = False
    with caplog.at_level(logging.WARNING, logger="mcp_cancellation"):
        async with registry.request(1, "s") as token:
            ran = True
            assert not token.cancelled
    assert ran
    assert "tracking request without the storage" in caplog.text
    assert len(registry.owners) == 0
    assert not await registry.in_flight(1, scope="s")
