"""Signals: sent by the registry (the sender) with the documented keyword arguments, and
not sent at all when nobody listens."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from blinker import Signal

from mcp_cancellation import (
    CancellationLimitReached,
    CancellationRegistry,
    InvalidRequestId,
    signals,
)
from mcp_cancellation.signals import (
    cancellation_cleanup,
    cancellation_evicted,
    cancellation_evicted_batch,
    cancellation_rejected,
    request_cancelled,
)

from ..support import MakeRegistry, one_table
from ._util import receiving

ALL = [
    request_cancelled,
    cancellation_cleanup,
    cancellation_evicted,
    cancellation_evicted_batch,
    cancellation_rejected,
]


def test_signal_names() -> None:
    assert request_cancelled.name == "request.cancelled"
    assert cancellation_cleanup.name == "cancellation.cleanup"
    assert cancellation_evicted.name == "cancellation.evicted"
    assert cancellation_evicted_batch.name == "cancellation.evicted_batch"
    assert cancellation_rejected.name == "cancellation.rejected"
    assert all(signals.namespace[s.name] is s for s in ALL)


async def test_request_cancelled(registry: CancellationRegistry) -> None:
    with receiving(request_cancelled) as got:
        await registry.cancel(42, "stop\x00 now", scope="ip:192.0.2.1")
        await registry.cancel("x", scope="s", method="notifications/cancelled")
    assert [sender for sender, _ in got.calls] == [registry, registry]
    assert got.kwargs == [
        {"request_id": "42", "scope": "ip:192.0.2.1", "reason": "stop now", "method": None},
        {"request_id": "x", "scope": "s", "reason": None, "method": "notifications/cancelled"},
    ]
    assert type(got.kwargs[0]["request_id"]) is str


async def test_request_cancelled_only_when_recorded(make_registry: MakeRegistry) -> None:
    registry = make_registry(max_rows_per_scope=1)
    with receiving(request_cancelled) as got:
        assert not await registry.cancel_in_flight(1, scope="s")  # not in flight
        await registry.track(2, scope="s")
        assert await registry.cancel_in_flight(2, "r", scope="s", method="disconnect")
        with pytest.raises(CancellationLimitReached):
            await registry.cancel(3, scope="s")
        with pytest.raises(InvalidRequestId):
            await registry.cancel(True, scope="s")
    assert got.kwargs == [{"request_id": "2", "scope": "s", "reason": "r", "method": "disconnect"}]
    await registry.untrack(2, scope="s")


async def test_cancellation_rejected(make_registry: MakeRegistry) -> None:
    registry = make_registry(max_rows_per_scope=1)
    await registry.cancel(1, scope="s")
    with receiving(cancellation_rejected) as got:
        with pytest.raises(CancellationLimitReached):
            await registry.cancel(2, scope="s")
        with pytest.raises(InvalidRequestId):
            await registry.cancel(1.5, scope="t")
        with pytest.raises(InvalidRequestId):
            await registry.cancel_in_flight("x" * 300, scope="u")
        await registry.cancel(1, "update, not a rejection", scope="s")
    assert [sender for sender, _ in got.calls] == [registry] * 3
    assert got.kwargs == [
        {"scope": "s", "request_id": "2", "reason": "quota", "mode": "enforce"},
        {"scope": "t", "request_id": None, "reason": "invalid_request_id", "mode": "enforce"},
        {"scope": "u", "request_id": None, "reason": "invalid_request_id", "mode": "enforce"},
    ]


@one_table
async def test_cancellation_evicted(make_registry: MakeRegistry) -> None:
    registry = make_registry(max_rows=20, max_rows_per_scope=None)
    for n in range(20):
        await registry.cancel(n, scope="big")
    with receiving(cancellation_evicted) as got:
        await registry.cancel(0, scope="small")
    assert got.calls == [(registry, {"scope": "big", "count": 1})]


@one_table
async def test_cancellation_evicted_batch(make_registry: MakeRegistry) -> None:
    """One batch signal per evicting insert: the pairs of its per-scope signals, in their
    order (largest scope first, equal sizes oldest row first), sent before them, with the
    rows by scope kind, for scopes evicted whole, in part, and in bulk."""
    registry = make_registry(max_rows=200, max_rows_per_scope=None)  # a batch of 10 rows
    for n in range(6):
        await registry.cancel(n, scope="principal:big")
    for n in range(6):
        await registry.cancel(n, scope="session:mid")
    for n in range(188):
        await registry.cancel(1, scope=f"ip:10.0.0.{n}" if n % 2 == 0 else f"tenant-{n}")
    order: list[str] = []

    def batch(sender: object, **kwargs: Any) -> None:
        order.append("batch")

    def each(sender: object, **kwargs: Any) -> None:
        order.append("each")

    with (
        cancellation_evicted_batch.connected_to(batch),
        cancellation_evicted.connected_to(each),
        receiving(cancellation_evicted_batch) as batches,
        receiving(cancellation_evicted) as scopes,
    ):
        await registry.cancel(1, scope="ip:203.0.113.1")  # at the cap: evicts 10 rows
        await registry.cancel(2, scope="ip:203.0.113.1")  # room left: evicts nothing
    # The two six-row scopes tie: the older goes whole, the other loses its 4 oldest.
    expected: tuple[tuple[str, int], ...] = (("principal:big", 6), ("session:mid", 4))
    assert batches.calls == [
        (registry, {"evicted": expected, "rows": 10, "kinds": {"principal": 6, "session": 4}})
    ]
    assert [(kwargs["scope"], kwargs["count"]) for kwargs in scopes.kwargs] == list(expected)
    assert order == ["batch", "each", "each"]
    # A batch receiver alone: the batch still comes, whole, with no per-scope receiver.
    for n in range(8):
        await registry.cancel(1, scope=f"ip:10.1.0.{n}")  # back at the cap
    assert not cancellation_evicted.receivers
    with receiving(cancellation_evicted_batch) as batches:
        await registry.cancel(1, scope="ip:203.0.113.2")
    # Two two-row scopes (the older first), then six one-row scopes, oldest first.
    expected = (
        ("session:mid", 2),
        ("ip:203.0.113.1", 2),
        ("ip:10.0.0.0", 1),
        ("tenant-1", 1),
        ("ip:10.0.0.2", 1),
        ("tenant-3", 1),
        ("ip:10.0.0.4", 1),
        ("tenant-5", 1),
    )
    assert batches.kwargs == [
        {"evicted": expected, "rows": 10, "kinds": {"session": 2, "ip": 5, "other": 3}}
    ]


async def test_cancellation_cleanup(
    registry: CancellationRegistry, age_rows: Callable[[float], Awaitable[None]]
) -> None:
    async def abandon() -> None:
        await registry.track(1, scope="s")

    await asyncio.create_task(abandon())
    await registry.cancel(2, scope="s")
    with receiving(cancellation_cleanup) as got:
        await registry.cleanup(ttl=3600)
        await age_rows(60)
        await registry.cleanup(ttl=30)
    assert [sender for sender, _ in got.calls] == [registry, registry]
    first, second = got.kwargs
    assert set(first) == {"removed", "in_flight_removed", "duration", "start_time_ns"}
    assert (first["removed"], first["in_flight_removed"]) == (0, 1)
    assert (second["removed"], second["in_flight_removed"]) == (1, 0)
    for kwargs in got.kwargs:
        assert isinstance(kwargs["duration"], float)
        assert kwargs["duration"] >= 0
        assert isinstance(kwargs["start_time_ns"], int)
    assert first["start_time_ns"] <= second["start_time_ns"]


async def test_receivers_can_filter_by_sender(make_registry: MakeRegistry) -> None:
    mine, other = make_registry(), make_registry()
    seen: list[str] = []

    def receiver(sender: object, **kwargs: Any) -> None:
        seen.append(kwargs["request_id"])

    with request_cancelled.connected_to(receiver, sender=mine):
        await mine.cancel(1, scope="s")
        await other.cancel(2, scope="s")
    assert seen == ["1"]


@one_table
async def test_nothing_is_sent_when_nobody_listens(
    make_registry: MakeRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[str] = []
    for signal in ALL:
        # Hide receivers other tests may have connected, and catch any send at all.
        monkeypatch.setattr(signal, "receivers", {})

        def send(*args: Any, _name: str = signal.name, **kwargs: Any) -> list[Any]:
            sent.append(_name)
            return []

        monkeypatch.setattr(signal, "send", send)

    registry = make_registry(max_rows=40, max_rows_per_scope=20)
    for n in range(20):
        await registry.cancel(n, "r", scope="s")
        await registry.cancel(n, "r", scope="t")
    await registry.cancel(0, scope="u")  # at the cap: evicts
    assert sum((await registry.stats()).rows.values()) == 39
    with pytest.raises(CancellationLimitReached):
        await registry.cancel(999, scope="t")
    with pytest.raises(InvalidRequestId):
        await registry.cancel(1.0, scope="s")
    await registry.track(5, scope="s")
    assert await registry.cancel_in_flight(5, scope="s")
    await registry.untrack(5, scope="s")
    await registry.cleanup()
    assert sent == []

    # The same calls with a listener do reach send(): the check above can see sends.
    listener: Signal = request_cancelled
    monkeypatch.setattr(listener, "receivers", {1: object()})
    await registry.cancel(7, scope="u")
    assert sent == ["request.cancelled"]
