"""Storages for the cancellation registry: in-process memory, or Redis shared by workers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._extras import lazy
from .base import AddResult, Limits, Storage, StorageStats, TableSummary
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
    "TableSummary",
]


# RedisStorage needs the optional ``redis`` extra; import it only when asked for.
__getattr__ = lazy(__name__, {"RedisStorage": ".redis"})
