"""Storages for the cancellation registry: in-process memory, or Redis shared by workers."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .._config import UNSET, int_limit, seconds
from .._extras import lazy
from ._base import AddResult, InFlightRequest, Limits, Storage, StorageStats, TableSummary
from ._memory import MemoryStorage

if TYPE_CHECKING:
    from .redis import RedisStorage

__all__ = [
    "AddResult",
    "InFlightRequest",
    "Limits",
    "MemoryStorage",
    "RedisStorage",
    "Storage",
    "StorageStats",
    "TableSummary",
]


def storage_from_environment() -> Storage:
    """``RedisStorage`` when ``MCP_CANCELLATION_REDIS_URL`` is set (partitioned when
    ``MCP_CANCELLATION_REDIS_PARTITIONS`` is above 1; its ``track_delay`` from
    ``MCP_CANCELLATION_REDIS_TRACK_DELAY`` when set), else a :class:`MemoryStorage`: the
    storage of a registry built without one."""
    url = os.environ.get("MCP_CANCELLATION_REDIS_URL", "").strip()
    if not url:
        return MemoryStorage()
    from .redis import PartitionedRedisStorage, RedisStorage

    partitions = int_limit("partitions", UNSET, "MCP_CANCELLATION_REDIS_PARTITIONS", 1)
    options = {}
    delay = seconds("track_delay", UNSET, "MCP_CANCELLATION_REDIS_TRACK_DELAY", None, zero=True)
    if delay is not None:
        options["track_delay"] = delay
    if partitions is not None and partitions > 1:
        return PartitionedRedisStorage.from_url(url, partitions=partitions, **options)
    return RedisStorage.from_url(url, **options)


# RedisStorage needs the optional ``redis`` extra; import it only when asked for.
__getattr__ = lazy(__name__, {"RedisStorage": ".redis"})
