"""Storages for the cancellation registry: in-process memory, or Redis shared by workers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import AddResult, Limits, Storage, StorageStats, SynchronousStorage, TableSummary
from .memory import MemoryStorage

if TYPE_CHECKING:
    from .redis import RedisStorage

__all__ = [
    "AddResult",
    "Limits",
    "MemoryStorage",
    "RedisStorage",
    "Storage",
    "StorageStats",
    "SynchronousStorage",
    "TableSummary",
]


def __getattr__(name: str) -> Any:
    # RedisStorage needs the optional ``redis`` extra; import it only when asked for.
    if name == "RedisStorage":
        from .redis import RedisStorage

        return RedisStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
