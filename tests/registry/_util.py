"""Helpers shared by the registry tests (private to tests/registry)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from blinker import Signal

from mcp_cancellation import CancellationRegistry


async def rows(registry: CancellationRegistry) -> dict[str, int]:
    """Cancellation rows per scope, as the storage reports them (empty scopes dropped)."""
    stats = await registry.stats()
    return {scope: n for scope, n in stats.rows.items() if n}


async def in_flight(registry: CancellationRegistry) -> dict[str, int]:
    """In-flight rows per scope (empty scopes dropped)."""
    stats = await registry.stats()
    return {scope: n for scope, n in stats.in_flight.items() if n}


class Received:
    """Calls of one blinker signal: ``(sender, kwargs)`` in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, dict[str, Any]]] = []

    def __call__(self, sender: object, **kwargs: Any) -> None:
        self.calls.append((sender, kwargs))

    @property
    def kwargs(self) -> list[dict[str, Any]]:
        return [kwargs for _, kwargs in self.calls]


@contextlib.contextmanager
def receiving(signal: Signal) -> Iterator[Received]:
    """Connect a recording receiver to *signal* for the block."""
    received = Received()
    with signal.connected_to(received):
        yield received
